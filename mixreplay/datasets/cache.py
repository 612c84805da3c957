"""Convert a foreign dataset once into the memmap format, then reopen the cached copy.

The first ``load_dataset("minari:...")`` or ``"d4rl:..."`` streams the source,
chunk by chunk and episode by episode, through
:func:`~mixreplay.datasets.memmap.write_memmap_dataset` into a directory under
the cache root; later loads only ``stat`` the source files and map the cache.

- Cache root: ``$MIXREPLAY_DATA_DIR``, default ``~/.cache/mixreplay``; a loader's
  ``cache_dir=`` overrides it.
- Cache directory: ``<root>/datasets/<prefix>/<name>-<key>``, where ``<key>``
  hashes the source's identity and every option that changes the rows
  (``keys``, ``rename``, ``dtype``, ``keep_infos``): each variant has its own copy.
- Fingerprint: the sizes and modification times of the source files, the same
  options and the converter version. It is stored in the cache's metadata; a
  mismatch (the source changed) converts again.

A converting process holds a lock file beside the cache directory (on POSIX),
so two processes that load the same new dataset convert it once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from tensordict import TensorDictBase

from mixreplay.buffers.offline import OfflineDataset
from mixreplay.datasets.memmap import load_memmap, read_metadata, write_memmap_dataset
from mixreplay.errors import DatasetError

__all__ = [
    "CONVERTER_VERSION",
    "Source",
    "cache_path",
    "convert",
    "data_root",
    "files_fingerprint",
    "load_cached",
]

log = logging.getLogger(__name__)

#: Bumped whenever a loader would produce different rows from the same source:
#: every cache written by an older converter is then converted again.
CONVERTER_VERSION = 1

Progress = Callable[[int], None]


def data_root() -> Path:
    """The cache root: ``$MIXREPLAY_DATA_DIR``, else ``~/.cache/mixreplay``."""
    root = os.environ.get("MIXREPLAY_DATA_DIR")
    return Path(root).expanduser() if root else Path("~/.cache/mixreplay").expanduser()


def _digest(obj) -> str:
    return hashlib.blake2b(json.dumps(obj, sort_keys=True).encode(), digest_size=8).hexdigest()


def files_fingerprint(paths: Iterable[Path], options: dict) -> str:
    """A cheap fingerprint: relative path, size and mtime (ns) of each file, plus ``options``."""
    entries = []
    for p in sorted(Path(p) for p in paths):
        st = p.stat()
        entries.append([str(p), st.st_size, st.st_mtime_ns])
    return _digest({"files": entries, "options": options, "converter": CONVERTER_VERSION})


class Source:
    """A dataset that can be converted: what a loader hands to :func:`load_cached`.

    Subclasses set :attr:`prefix`, :attr:`name` and :attr:`options` and implement
    :meth:`files`, :meth:`rows_hint` and :meth:`read`.
    """

    #: the registry prefix, e.g. ``"minari"``
    prefix: str
    #: the rest of the ID (``"test/pendulum-v0"``) or the resolved file
    name: str
    #: every option that changes the rows, JSON-able (part of the cache key)
    options: dict

    @property
    def source_id(self) -> str:
        return f"{self.prefix}:{self.name}"

    def files(self) -> Sequence[Path]:
        """The files whose sizes and mtimes fingerprint the source."""
        raise NotImplementedError

    def rows_hint(self) -> int | None:
        """Rows in the source (for a progress bar), if cheap to know."""
        return None

    def read(self) -> tuple[Iterator[TensorDictBase], list[int], dict]:
        """``(chunks, episode_starts, info)``: ``[n]`` TED chunks in order, the first
        converted row of each episode, and JSON-able facts kept in the metadata."""
        raise NotImplementedError

    def fingerprint(self) -> str:
        return files_fingerprint(self.files(), self.options)


def cache_path(source: Source, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where ``source``, converted under its options, lives in the cache."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else data_root()
    # d4rl names are resolved file paths: the file's stem is name enough (the key hashes the path)
    slug = re.sub(
        r"[^A-Za-z0-9_.-]+", "_", Path(source.name).stem if source.prefix == "d4rl" else source.name
    )
    key = _digest({"source": source.source_id, "options": source.options})
    return root / "datasets" / source.prefix / f"{slug.strip('_.') or 'dataset'}-{key}"


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no cross-process lock
        yield
        return
    with open(path.parent / f".{path.name}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def convert(
    source: Source,
    dest: str | os.PathLike,
    *,
    overwrite: bool = False,
    progress: Progress | None = None,
    fingerprint: str | None = None,
) -> Path:
    """Stream ``source`` into a memmap dataset directory ``dest``.

    Args:
        source: what to convert.
        dest: the directory to write (created atomically).

    Keyword Args:
        overwrite: replace ``dest`` if it exists.
        progress: called with the row count of each chunk written; if it also has a
            ``set_total(n)`` method, that is called first with the source's row count.
        fingerprint: the source fingerprint to record (computed when omitted).

    Returns:
        ``dest``.
    """
    fingerprint = fingerprint or source.fingerprint()
    total = source.rows_hint()
    if (
        progress is not None
        and total is not None
        and callable(getattr(progress, "set_total", None))
    ):
        progress.set_total(total)
    chunks, starts, info = source.read()
    t0 = time.perf_counter()
    log.info(
        "converting %s (%s source rows) into %s",
        source.source_id,
        total if total is not None else "?",
        dest,
    )
    report = _ProgressLog(source.source_id, total, progress)
    path = write_memmap_dataset(
        dest,
        chunks,
        episode_starts=starts,
        source_id=source.source_id,
        source_fingerprint=fingerprint,
        info={
            "loader": source.prefix,
            "options": source.options,
            "converter": CONVERTER_VERSION,
            **info,
        },
        overwrite=overwrite,
        progress=report,
    )
    meta = read_metadata(path)
    log.info(
        "converted %s: %d rows in %d episodes in %.2f s",
        source.source_id,
        meta["rows"],
        meta["episodes"],
        time.perf_counter() - t0,
    )
    return path


class _ProgressLog:
    """Logs conversion progress (every 10 % of the source, or every ~1M rows) and calls ``progress``."""

    def __init__(self, source_id: str, total: int | None, progress: Progress | None):
        self.source_id, self.total, self.progress = source_id, total, progress
        self.rows = 0
        self.step = max(1, total // 10) if total else 1 << 20
        self.next = self.step

    def __call__(self, rows: int) -> None:
        self.rows += rows
        if self.rows >= self.next:
            of = f" of {self.total:,}" if self.total else ""
            log.info("%s: %s%s rows converted", self.source_id, f"{self.rows:,}", of)
            self.next = (self.rows // self.step + 1) * self.step
        if self.progress is not None:
            self.progress(rows)


def _is_current(path: Path, fingerprint: str) -> bool:
    try:
        meta = read_metadata(path)
    except DatasetError as err:
        if path.exists():
            log.warning("cached dataset at %s is unreadable (%s); converting again", path, err)
        return False
    if meta.get("source_fingerprint") != fingerprint:
        log.info(
            "source of %s changed since it was cached at %s; converting again",
            meta.get("source_id"),
            path,
        )
        return False
    return True


def load_cached(
    source: Source,
    *,
    cache_dir: str | os.PathLike | None = None,
    refresh: bool = False,
    progress: Progress | None = None,
    **dataset_kwargs,
) -> OfflineDataset:
    """Open ``source`` from the cache, converting it first if absent or stale.

    Keyword Args:
        cache_dir: cache root (default :func:`data_root`).
        refresh: convert again even if the cache is current.
        progress: see :func:`convert`.
        **dataset_kwargs: ``batch_size``, ``generator``, ``sampler``, ``transform``,
            forwarded to :func:`~mixreplay.datasets.memmap.load_memmap`.
    """
    path = cache_path(source, cache_dir)
    fingerprint = source.fingerprint()
    with _locked(path):
        if not refresh and _is_current(path, fingerprint):
            try:
                ds = load_memmap(path, **dataset_kwargs)
            except DatasetError as err:
                log.warning("cached dataset at %s is damaged (%s); converting again", path, err)
            else:
                log.debug("opened %s from the cache at %s", source.source_id, path)
                return ds
        convert(source, path, overwrite=True, progress=progress, fingerprint=fingerprint)
    return load_memmap(path, **dataset_kwargs)

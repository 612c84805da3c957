"""Convert a foreign dataset once into the memmap format, then reopen the cached copy.

The first ``load_dataset("minari:...")`` or ``"d4rl:..."`` (any prefix registered
with a :class:`~mixreplay.datasets.source.Source`) streams the source, chunk by
chunk and episode by episode, through
:func:`~mixreplay.datasets.memmap.write_memmap_dataset` into a directory under
the cache root; later loads only ``stat`` the source files and map the cache.

- Cache root: ``$MIXREPLAY_DATA_DIR``, default ``~/.cache/mixreplay``; a loader's
  ``cache_dir=`` (TorchRL's ``root=``) overrides it.
- Cache entry: ``<root>/datasets/<prefix>/<slug>-<key>``, where ``<key>``
  hashes the source's identity and every option that changes the rows
  (``keys``, ``rename``, ``dtype``, ``keep_infos``) or their layout on disk
  (``dedup_next``: each next value stored once): each variant has its own copy.
- Fingerprint: the sizes and modification times of the source files, the same
  options and the converter version. It is stored in the entry's metadata; a
  mismatch (the source changed) converts again. A damaged entry (unreadable
  metadata, a missing or truncated file, bad episode starts, bytes whose CRC-32
  changed) is logged and converted again.
- Bytes: the mapped files are read in full and CRC-checked when their size, mtime,
  ctime or inode differ from the verification record kept beside the entry, and
  only then (see :mod:`~mixreplay.datasets.integrity`); :func:`verify_cache`
  (``mixreplay cache verify``) reads every file whatever the record says.
- Links: the cache writes, replaces and deletes only inside its own directory and
  never through a symbolic link. An entry that is a link is served when current and
  sound; when it must be converted, loading raises a ``DatasetError``.

A cache hit writes nothing but the entry's "last used" time and its verification
record (best effort), so a cache on a read-only filesystem serves its current
entries. A converting process holds a lock file beside the entry (on POSIX), so
two processes that load the same new dataset convert it once. :func:`list_cache`,
:func:`clean_cache` and :func:`verify_cache` (``mixreplay cache list|clean|verify``)
show, free and check the cache, entry by entry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mixreplay.buffers.offline import OfflineDataset
from mixreplay.datasets import integrity
from mixreplay.datasets.integrity import record_path  # noqa: F401  (re-exported)
from mixreplay.datasets.memmap import (
    EPISODES,
    FORMAT,
    NEXT_ROWS,
    NEXT_SLOTS,
    ROWS,
    open_dataset,
    read_metadata,
    write_memmap_dataset,
)
from mixreplay.datasets.source import CONVERTER_VERSION, Source, digest
from mixreplay.errors import DatasetError, DatasetNotFoundError
from mixreplay.persist.atomic import destination

__all__ = [
    "CacheEntry",
    "cache_path",
    "clean_cache",
    "convert",
    "data_root",
    "list_cache",
    "load_cached",
    "older_than",
    "record_path",
    "verify_cache",
]

log = logging.getLogger(__name__)

Progress = Callable[[int], None]

#: the files a cache entry holds (a damaged entry holds a subset of them)
_ENTRY_FILES = frozenset({"metadata.json", ROWS, EPISODES, NEXT_SLOTS, NEXT_ROWS})
_ENTRY_NAME = re.compile(r".+-[0-9a-f]{16}")


def data_root() -> Path:
    """The cache root: ``$MIXREPLAY_DATA_DIR``, else ``~/.cache/mixreplay``."""
    root = os.environ.get("MIXREPLAY_DATA_DIR")
    return Path(root).expanduser() if root else Path("~/.cache/mixreplay").expanduser()


def cache_path(source: Source, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where ``source``, converted under its options, lives in the cache."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else data_root()
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", source.slug())
    key = digest({"source": source.source_id, "options": source.options})
    return root / "datasets" / source.prefix / f"{slug.strip('_.') or 'dataset'}-{key}"


def _lock_file(path: Path) -> Path:
    return path.parent / f".{path.name}.lock"


def _in_the_way(directory: Path) -> Path | None:
    """The first component of ``directory`` that exists and is not a directory, if any."""
    for p in [*reversed(directory.parents), directory]:
        try:
            if p.exists() and not p.is_dir():
                return p
        except OSError:  # a name too long, a directory that cannot be searched
            return None
    return None


def _cache_error(where: Path, err: OSError, doing: str) -> DatasetError:
    """A filesystem error of the cache as one line naming the path and what to do."""
    fix = "set MIXREPLAY_DATA_DIR or pass cache_dir= to a writable directory"
    if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return DatasetError(
            f"cannot {doing} the dataset cache at {where}: {err.strerror} "
            f"(the cache is read-only); {fix}"
        )
    blocker = _in_the_way(where)
    if err.errno in (errno.ENOTDIR, errno.EEXIST) and blocker is not None:
        return DatasetError(
            f"cannot {doing} the dataset cache at {where}: {blocker} is a file, not a "
            f"directory; remove it, or {fix}"
        )
    return DatasetError(f"cannot {doing} the dataset cache at {where}: {err.strerror or err}")


@contextlib.contextmanager
def _locked(path: Path, *, required: bool = True) -> Iterator[None]:
    """Hold the entry's lock (POSIX ``flock``): one converting process per entry.

    The lock file is opened without following a link (the cache writes nothing through
    one). With ``required=False`` (a check that writes nothing), a lock that cannot be
    taken (a read-only cache) is done without.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no cross-process lock
        yield
        return
    lock = _lock_file(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(lock, flags | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as err:
        if not required:
            yield
            return
        if lock.is_symlink() or err.errno == errno.ELOOP:
            raise DatasetError(
                f"the cache's lock file {lock} is a symbolic link; the cache writes nothing "
                "through a link: remove it (what it points to is left as it is)"
            ) from None
        if lock.is_dir():
            raise DatasetError(
                f"the cache's lock file {lock} is a directory; remove it, or set "
                "MIXREPLAY_DATA_DIR or pass cache_dir= to another directory"
            ) from None
        raise _cache_error(path.parent, err, "convert into") from None
    with os.fdopen(fd, "a") as f:
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
    set_total = getattr(progress, "set_total", None)
    if total is not None and callable(set_total):
        set_total(total)
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
        # the episode starts let every row but each episode's last step read its next
        # values from the following row (Minari's T + 1 observations per episode)
        episode_starts=starts,
        dedup_next=source.dedup_next,
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


def _identity(path: Path) -> tuple[int, int] | None:
    """What tells whether the entry at ``path`` was replaced (its metadata file's inode and mtime)."""
    try:
        st = (destination(path) / "metadata.json").stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _open_current(
    path: Path, fingerprint: str, dataset_kwargs: dict[str, Any]
) -> tuple[OfflineDataset | None, str]:
    """``(the cached dataset, "")`` if ``path`` holds a sound entry of this fingerprint,
    else ``(None, why not)``.

    Writes nothing but the entry's "last used" time and its verification record, both
    best effort (a cache on a read-only filesystem serves its current entries), and
    nothing at all through a link. A damaged entry is logged, to be converted again.
    """
    link = path.is_symlink()
    try:
        meta = read_metadata(path, recover_swap=not link)
    except DatasetNotFoundError:
        return None, "it points to nothing" if link else "absent"
    except DatasetError as err:
        if not link:
            log.warning("cached dataset at %s is damaged (%s); converting it again", path, err)
        return None, f"damaged: {err}"
    if meta.get("source_fingerprint") != fingerprint:
        log.info(
            "source of %s changed since it was cached at %s; converting again",
            meta.get("source_id"),
            path,
        )
        return None, "its source changed"
    where = destination(path)
    try:
        ds = open_dataset(where, meta, **dataset_kwargs)
        integrity.check_entry(path, where, meta)
    except DatasetError as err:
        if not link:
            log.warning("cached dataset at %s is damaged (%s); converting it again", path, err)
        return None, f"damaged: {err}"
    with contextlib.suppress(OSError):  # "last used", for mixreplay cache list|clean
        if not link:
            os.utime(path)
        elif os.utime in os.supports_follow_symlinks:  # the link's own time, not its target's
            os.utime(path, follow_symlinks=False)
    return ds, ""


def _refuse_link(path: Path, reason: str) -> None:
    """Raise if the entry at ``path`` is a link: the cache never writes through one."""
    if path.is_symlink():
        raise DatasetError(
            f"the cache entry {path} is a symbolic link (to {os.readlink(path)}) and would "
            f"have to be converted again ({reason}); the cache never writes, replaces or "
            "deletes anything through a link: remove the link (what it points to is left as "
            "it is) and load again"
        )


def _clear_damaged(path: Path) -> None:
    """Remove a damaged entry that the dataset writer would refuse to replace.

    The writer replaces only directories that hold a readable mixreplay dataset; an
    entry whose metadata is unreadable is removed here, but only if it holds nothing
    but the files of an entry (anything else at a cache path is left alone).
    """
    if path.is_symlink() or not path.is_dir() or FORMAT.owns(path):
        return
    children = list(path.iterdir())
    if not children:
        return
    if all(c.is_file() and not c.is_symlink() and c.name in _ENTRY_FILES for c in children):
        log.warning("removing the damaged cache entry %s", path)
        shutil.rmtree(path)
        return
    raise DatasetError(
        f"{path} holds files that are not a mixreplay cache entry "
        f"({', '.join(sorted(c.name for c in children))}); remove it or point "
        "MIXREPLAY_DATA_DIR elsewhere"
    )


def load_cached(
    source: Source,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    refresh: bool = False,
    progress: Progress | None = None,
    **dataset_kwargs: Any,
) -> OfflineDataset:
    """Open ``source`` from the cache, converting it first if absent, stale or damaged.

    Keyword Args:
        cache_dir: cache root (default :func:`data_root`).
        refresh: convert again even if the cache is current.
        progress: see :func:`convert`.
        **dataset_kwargs: ``batch_size``, ``generator``, ``sampler``, ``transform``,
            forwarded to :func:`~mixreplay.datasets.memmap.load_memmap`.

    Raises:
        DatasetError: the entry must be (re)converted and the cache is read-only, or
            the entry is a symbolic link, or the source cannot be read.
    """
    path = cache_path(source, cache_dir)
    fingerprint = source.fingerprint()
    reason = "refresh=True"
    seen = None
    if not refresh:
        try:
            seen = _identity(path)
            ds, reason = _open_current(path, fingerprint, dataset_kwargs)
        except OSError as err:  # a path the filesystem refuses (too long, not searchable)
            raise _cache_error(path.parent, err, "read") from None
        if ds is not None:
            log.debug("opened %s from the cache at %s", source.source_id, path)
            return ds
    with _locked(path):
        # another process may have converted it while we waited: look again if so
        if not refresh and _identity(path) != seen:
            ds, reason = _open_current(path, fingerprint, dataset_kwargs)
            if ds is not None:
                return ds
        _refuse_link(path, reason)
        try:
            _clear_damaged(path)
        except OSError as err:
            raise _cache_error(path, err, "clear the damaged entry of") from None
        integrity.forget(path)
        started = time.time_ns()
        convert(source, path, overwrite=True, progress=progress, fingerprint=fingerprint)
        meta = read_metadata(path)
        integrity.record_written(path, meta, started)  # CRC-32s computed as the rows were written
        return open_dataset(path, meta, **dataset_kwargs)


# -- seeing and freeing the cache ------------------------------------------------------------


@dataclass(frozen=True)
class CacheEntry:
    """One converted dataset in the cache.

    Attributes:
        path: the entry's directory.
        source_id: what was converted (``"minari:..."``; None if damaged).
        requested: the ID as the user wrote it, when it differs (a D4RL name).
        variant: the row and layout options it was converted under (``"float32"``,
            ``"float64, keep_infos"``, ``"float32, dedup_next"``, ...).
        rows: rows stored (None if damaged).
        size: bytes on disk.
        last_used: when it was last opened (seconds since the epoch).
        damaged: why the entry cannot be read, or None.
    """

    path: Path
    source_id: str | None
    requested: str | None
    variant: str
    rows: int | None
    size: int
    last_used: float
    damaged: str | None = None

    def matches(self, selector: str) -> bool:
        """Whether ``selector`` names this entry: its source ID, the ID as requested,
        its directory name, or a prefix (``"minari:"``)."""
        names = {self.path.name, self.source_id, self.requested}
        if selector in names:
            return True
        prefix = self.path.parent.name
        return selector.rstrip(":").lower() == prefix and selector.endswith(":")


def _variant(options: Any) -> str:
    if not isinstance(options, dict):
        return "?"
    parts = []
    dtype = options.get("dtype")
    if isinstance(dtype, dict):
        parts.append("dtype={" + ", ".join(f"{k}: {v}" for k, v in sorted(dtype.items())) + "}")
    else:
        parts.append("stored dtypes" if dtype is None else str(dtype))
    if options.get("keep_infos"):
        parts.append("keep_infos")
    if options.get("dedup_next"):
        parts.append("dedup_next")
    if options.get("keys"):
        parts.append("keys=" + ",".join(".".join(k) for k in options["keys"]))
    if options.get("rename"):
        parts.append(
            "rename=" + ",".join(f"{'.'.join(o)}={'.'.join(n)}" for o, n in options["rename"])
        )
    return ", ".join(parts)


def _entry(path: Path) -> CacheEntry | None:
    """The entry at ``path``, or None if ``path`` is not a mixreplay cache entry."""
    if path.is_symlink() or not path.is_dir() or not _ENTRY_NAME.fullmatch(path.name):
        return None
    children = list(path.iterdir())
    files = [c for c in children if c.is_file() and not c.is_symlink()]
    size = sum(c.stat().st_size for c in files)
    last_used = path.stat().st_mtime
    try:
        meta = read_metadata(path)
    except DatasetError as err:
        # a damaged entry: recognised by its files alone, never by anything else
        if children and len(files) == len(children) and {c.name for c in files} <= _ENTRY_FILES:
            return CacheEntry(path, None, None, "?", None, size, last_used, str(err))
        return None
    info = meta.get("info")
    if not isinstance(info, dict) or "converter" not in info:
        return None  # a dataset, but not one the cache wrote
    requested = info.get("requested")
    prefix = path.parent.name
    return CacheEntry(
        path,
        meta.get("source_id"),
        f"{prefix}:{requested}" if isinstance(requested, str) else None,
        _variant(info.get("options")),
        meta.get("rows"),
        size,
        last_used,
    )


def list_cache(root: str | os.PathLike[str] | None = None) -> list[CacheEntry]:
    """Every entry of the cache at ``root`` (default :func:`data_root`), by prefix and name.

    Only mixreplay's entries are listed: directories under ``<root>/datasets/<prefix>/``
    that hold a dataset the cache converted (or, damaged, only an entry's files).
    """
    base = (Path(root).expanduser() if root is not None else data_root()) / "datasets"
    out: list[CacheEntry] = []
    if not base.is_dir():
        return out
    for prefix_dir in sorted(base.iterdir()):
        if prefix_dir.is_symlink() or not prefix_dir.is_dir():
            continue
        for path in sorted(prefix_dir.iterdir()):
            entry = _entry(path)
            if entry is not None:
                out.append(entry)
    return out


def clean_cache(
    root: str | os.PathLike[str] | None = None,
    *,
    select: Callable[[CacheEntry], bool] | None = None,
    dry_run: bool = False,
) -> list[CacheEntry]:
    """Remove the cache entries ``select`` picks (all when None); return them.

    Each entry's lock file goes with it. Nothing that :func:`list_cache` does not
    list is touched. An entry is removed under its lock, so a process converting it
    finishes first.

    Keyword Args:
        select: picks the entries to remove.
        dry_run: only return what would be removed.
    """
    removed = []
    for entry in list_cache(root):
        if select is not None and not select(entry):
            continue
        removed.append(entry)
        if dry_run:
            continue
        with _locked(entry.path):
            shutil.rmtree(entry.path, ignore_errors=True)
            integrity.forget(entry.path)
        _lock_file(entry.path).unlink(missing_ok=True)
        log.info("removed the cache entry %s (%s)", entry.path, entry.source_id)
    return removed


def verify_cache(
    root: str | os.PathLike[str] | None = None,
    *,
    select: Callable[[CacheEntry], bool] | None = None,
) -> list[CacheEntry]:
    """Read every file of the entries ``select`` picks (all when None) and check it.

    Unlike an open, which trusts a mapped file whose size, mtime, ctime and inode are
    those recorded when its CRC-32 was last checked, this reads every byte: it finds
    damage that leaves a file's stat as it was (bits rotting on the disk). A sound
    entry's record is renewed; a damaged one's is dropped, so that the next load
    converts it again.

    Returns:
        The entries checked, each with ``damaged`` set to what is wrong, or None.
    """
    out = []
    for entry in list_cache(root):
        if select is not None and not select(entry):
            continue
        if entry.damaged is None:
            entry = dataclasses.replace(entry, damaged=_verify(entry.path))
        if entry.damaged is not None:
            log.info("the cache entry %s is damaged: %s", entry.path, entry.damaged)
        out.append(entry)
    return out


def _verify(path: Path) -> str | None:
    with _locked(path, required=False):  # not while a conversion replaces it
        try:
            meta = read_metadata(path)
            open_dataset(path, meta)  # sizes, episode starts, the small files' CRC-32
            integrity.verify_entry(path, path, meta)
        except DatasetError as err:
            return str(err)
    return None


def older_than(days: float, now: float | None = None) -> Callable[[CacheEntry], bool]:
    """A selector of entries last used more than ``days`` days ago."""
    limit = (time.time() if now is None else now) - days * 86400
    return lambda entry: entry.last_used < limit

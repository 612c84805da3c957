"""mixreplay's own dataset format: packed rows in a memory-mapped file.

A dataset directory holds::

    metadata.json      format version, schema, row count, episodes, source ID, fingerprints
    rows.bin           the packed rows, int64 [rows, W], little-endian (see RowLayout)
    episodes.bin       int64 [episodes]: the first row of each episode

Opening maps ``rows.bin`` copy-on-write: no row is read until sampled, and
nothing written through the mapping ever reaches the file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import torch
from tensordict import TensorDictBase

from mixreplay._version import __version__
from mixreplay.buffer import ReplayBuffer
from mixreplay.errors import DatasetError, DatasetNotFoundError
from mixreplay.samplers import Sampler
from mixreplay.schema import RowLayout, Schema
from mixreplay.storage import FrozenStorage

__all__ = ["FORMAT_VERSION", "OfflineDataset", "load_memmap", "write_memmap_dataset"]

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
METADATA = "metadata.json"
ROWS = "rows.bin"
EPISODES = "episodes.bin"

if sys.byteorder != "little":  # pragma: no cover
    raise ImportError(
        "mixreplay's memmap format is little-endian; big-endian hosts are not supported"
    )


class OfflineDataset(ReplayBuffer):
    """A read-only offline dataset: packed rows, their schema and episode boundaries.

    Built by the loaders (``load_dataset("minari:...")``, ``"d4rl:..."``,
    ``"memmap:..."``) or from a TensorDict with :meth:`from_tensordict`. Usable
    wherever a buffer is: as ``offline_dataset`` of a mixing buffer, by
    :func:`~mixreplay.prefill_replay_buffer`, or on its own with :meth:`sample`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import OfflineDataset
        >>> ds = OfflineDataset.from_tensordict(
        ...     TensorDict({"obs": torch.arange(6.0).unsqueeze(-1)}, [6]), episode_starts=[0, 4])
        >>> len(ds), ds.num_episodes, ds[5]["obs"]
        (6, 2, tensor([5.]))
    """

    def __init__(
        self,
        storage: FrozenStorage,
        *,
        episode_starts: torch.Tensor | None = None,
        metadata: Mapping | None = None,
        path: str | os.PathLike | None = None,
        sampler: Sampler | None = None,
        batch_size: int | None = None,
        generator: torch.Generator | int | None = None,
        transform: Callable | None = None,
    ):
        if not isinstance(storage, FrozenStorage):
            raise TypeError(
                f"an OfflineDataset reads a FrozenStorage, got {type(storage).__name__}"
            )
        super().__init__(
            storage=storage,
            sampler=sampler,
            batch_size=batch_size,
            generator=generator,
            transform=transform,
        )
        if episode_starts is None:
            episode_starts = torch.zeros(1 if len(storage) else 0, dtype=torch.int64)
        self._episode_starts = torch.as_tensor(episode_starts, dtype=torch.int64)
        self.metadata = dict(metadata or {})
        self.path = None if path is None else Path(path)

    @classmethod
    def from_tensordict(
        cls, td: TensorDictBase, *, episode_starts=None, **kwargs
    ) -> OfflineDataset:
        """Pack a ``[n]`` TensorDict (copied) into an in-memory dataset."""
        storage = FrozenStorage.from_tensordict(td)
        meta = {"fingerprint": _fingerprint_rows(storage.rows), "rows": len(storage)}
        return cls(storage, episode_starts=episode_starts, metadata=meta, **kwargs)

    @property
    def episode_starts(self) -> torch.Tensor:
        """First row of each episode (int64, ascending)."""
        return self._episode_starts

    @property
    def num_episodes(self) -> int:
        return int(self._episode_starts.numel())

    @property
    def episode_ids(self) -> torch.Tensor:
        """The episode number of every row (int64 ``[len]``)."""
        ids = torch.zeros(len(self), dtype=torch.int64)
        if self.num_episodes > 1:
            ids[self._episode_starts[1:]] = 1
            ids = ids.cumsum(0)
        return ids

    @property
    def fingerprint(self) -> str | None:
        """A hash of the packed rows, written with the dataset (checkpoints check it)."""
        return self.metadata.get("fingerprint")

    @property
    def source_id(self) -> str | None:
        return self.metadata.get("source_id")

    def extend(self, data):
        return self.storage.extend(data)  # raises ReadOnlyError

    def add(self, row):
        return self.storage.extend(row)

    def __repr__(self) -> str:
        where = f", path={str(self.path)!r}" if self.path else ""
        return (
            f"OfflineDataset(rows={len(self)}, episodes={self.num_episodes}, "
            f"schema={self.schema!r}{where})"
        )


def _fingerprint_rows(rows: torch.Tensor, chunk: int = 1 << 16) -> str:
    h = hashlib.blake2b(digest_size=16)
    for i in range(0, rows.shape[0], chunk):
        h.update(rows[i : i + chunk].contiguous().numpy().tobytes())
    return h.hexdigest()


def write_memmap_dataset(
    path: str | os.PathLike,
    data: TensorDictBase | Iterable[TensorDictBase],
    *,
    episode_starts: Iterable[int] | torch.Tensor | None = None,
    source_id: str | None = None,
    source_fingerprint: str | None = None,
    info: Mapping | None = None,
    overwrite: bool = False,
    progress: Callable[[int], None] | None = None,
) -> Path:
    """Write rows to a dataset directory, chunk by chunk (bounded memory).

    The directory appears atomically: rows are written to a temporary sibling
    that is renamed into place when complete.

    Args:
        path: the dataset directory to create.
        data: a ``[n]`` TensorDict, or an iterable of them (all with one schema).

    Keyword Args:
        episode_starts: first row of each episode (default: one episode).
        source_id: where the rows came from (e.g. ``"minari:..."``), kept in metadata.
        source_fingerprint: a fingerprint of the source, to tell when a cache is stale.
        info: extra JSON-able metadata.
        overwrite: replace an existing directory.
        progress: called with the number of rows of each chunk written.

    Returns:
        The directory.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    chunks = [data] if isinstance(data, TensorDictBase) else data
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        layout = None
        n = 0
        h = hashlib.blake2b(digest_size=16)
        with open(tmp / ROWS, "wb") as f:
            for chunk in chunks:
                if layout is None:
                    layout = RowLayout(Schema.from_tensordict(chunk))
                words = layout.pack(chunk).cpu()
                raw = words.numpy().tobytes()
                f.write(raw)
                h.update(raw)
                n += words.shape[0]
                if progress is not None:
                    progress(words.shape[0])
            f.flush()
            os.fsync(f.fileno())
        if layout is None or n == 0:
            raise DatasetError(f"no rows to write to {path}: the data was empty")
        starts = (
            torch.zeros(1, dtype=torch.int64)
            if episode_starts is None
            else torch.as_tensor(
                list(episode_starts)
                if not isinstance(episode_starts, torch.Tensor)
                else episode_starts,
                dtype=torch.int64,
            )
        )
        if starts.numel() and (
            starts[0] != 0 or bool((starts[1:] <= starts[:-1]).any()) or int(starts[-1]) >= n
        ):
            raise DatasetError(
                f"episode_starts must start at 0, increase strictly and stay below {n} rows; "
                f"got {starts[:8].tolist()}..."
            )
        with open(tmp / EPISODES, "wb") as f:
            f.write(starts.numpy().tobytes())
        meta = {
            "format": "mixreplay-memmap",
            "format_version": FORMAT_VERSION,
            "mixreplay_version": __version__,
            "rows": n,
            "row_words": layout.row_words,
            "episodes": int(starts.numel()),
            "schema": layout.schema.to_json(),
            "fingerprint": h.hexdigest(),
            "source_id": source_id,
            "source_fingerprint": source_fingerprint,
            "info": dict(info or {}),
        }
        with open(tmp / METADATA, "w") as f:
            json.dump(meta, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        _make_readable(tmp)
        aside = None
        if path.exists():  # move the old dataset aside, so there is never a moment with none
            aside = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
            os.replace(path, aside / path.name)
        os.replace(tmp, path)
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("wrote %d rows (%d bytes each) to %s", n, layout.row_bytes, path)
    return path


def _make_readable(directory: Path) -> None:
    """Give a finished dataset directory the permissions of a plain ``mkdir`` (mkdtemp uses 0700)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(directory, 0o777 & ~umask)
    for child in directory.iterdir():
        os.chmod(child, 0o666 & ~umask)


def _map_rows(rows_file: Path, n: int, words: int) -> torch.Tensor:
    """Map packed rows copy-on-write: writes through the tensor never reach the file.

    Sampling reads rows at random, so the kernel is told not to read ahead
    (``MADV_RANDOM``): a cold dataset then costs page cache for the rows drawn,
    not for their neighbourhoods.
    """
    if n == 0:
        return torch.empty(0, words, dtype=torch.int64)
    with open(rows_file, "rb") as f:
        mapped = mmap.mmap(f.fileno(), n * words * 8, access=mmap.ACCESS_COPY)
    if hasattr(mapped, "madvise") and hasattr(mmap, "MADV_RANDOM"):
        mapped.madvise(mmap.MADV_RANDOM)
    return torch.frombuffer(mapped, dtype=torch.int64).view(n, words)


def read_metadata(path: str | os.PathLike) -> dict:
    path = Path(path)
    meta_file = path / METADATA
    if not meta_file.is_file():
        if not path.exists():
            raise DatasetNotFoundError(f"no dataset directory at {path}")
        raise DatasetError(f"{path} is not a mixreplay dataset: {METADATA} is missing")
    try:
        meta = json.loads(meta_file.read_text())
    except json.JSONDecodeError as err:
        raise DatasetError(f"{meta_file} is not valid JSON ({err}); rewrite the dataset") from err
    if meta.get("format") != "mixreplay-memmap":
        raise DatasetError(f"{meta_file} does not describe a mixreplay memmap dataset")
    if meta.get("format_version") != FORMAT_VERSION:
        raise DatasetError(
            f"{path} has format version {meta.get('format_version')!r}; this mixreplay "
            f"({__version__}) reads version {FORMAT_VERSION}: convert it again"
        )
    return meta


def load_memmap(path: str | os.PathLike, **kwargs) -> OfflineDataset:
    """Open a dataset directory written by :func:`write_memmap_dataset` (no row is read).

    Keyword Args:
        batch_size, generator, sampler, transform: as for :class:`OfflineDataset`.
    """
    path = Path(path).expanduser()
    meta = read_metadata(path)
    schema = Schema.from_json(meta["schema"])
    layout = RowLayout(schema)
    n, words = int(meta["rows"]), layout.row_words
    if words != meta["row_words"]:
        raise DatasetError(
            f"{path}: metadata says {meta['row_words']} words per row, schema gives {words}"
        )
    rows_file = path / ROWS
    expected = n * words * 8
    actual = rows_file.stat().st_size if rows_file.exists() else -1
    if actual != expected:
        raise DatasetError(
            f"{rows_file} holds {actual} bytes, expected {expected} ({n} rows × {words * 8} bytes); "
            "the file is truncated or missing: convert the dataset again"
        )
    rows = _map_rows(rows_file, n, words)
    ep_file = path / EPISODES
    starts = torch.from_file(
        str(ep_file), shared=False, size=int(meta["episodes"]), dtype=torch.int64
    ).clone()
    return OfflineDataset(
        FrozenStorage(rows, layout), episode_starts=starts, metadata=meta, path=path, **kwargs
    )

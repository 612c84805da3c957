"""mixreplay's own dataset format: packed rows in a memory-mapped file.

A dataset directory is a container of the persistence layer
(:mod:`mixreplay.persist`)::

    metadata.json      format and version, schema, row and episode counts, source ID,
                       fingerprints, and each file's dtype, shape, size and CRC-32
    rows.bin           the packed rows, int64 [rows, W], little-endian (see RowLayout)
    episodes.bin       int64 [episodes]: the first row of each episode

Written with ``dedup_next=True`` (observations stored once, see
:mod:`mixreplay.storages.dedup`), ``rows.bin`` holds each row *without* the next
values kept once (``int64 [rows, Ws]``), and two more files hold the rows that keep
their own (each episode's last step, a row whose next values differ from the
following row's, the last row)::

    next_slots.bin     int64 [E]: the rows that keep their own next values (increasing)
    next_rows.bin      int64 [E, Xw]: those next values

``metadata.json`` then lists the next keys kept once under ``dedup_next`` (absent
or ``null``: a plain dataset). Reads, batches and the fingerprint are the plain
format's, bit for bit.

It appears atomically (written into a temporary sibling, fsynced, swapped in).
Opening maps ``rows.bin`` copy-on-write: no row is read until sampled, and nothing
written through the mapping ever reaches the file. Everything read from disk is
checked (metadata, schema, sizes, episode starts); a damaged dataset raises
:class:`~mixreplay.errors.DatasetError` naming the file and the problem.

Format versions: 2 (this one); 1 (before the shared persistence layer: no
checksums) is read through a migration.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase

from mixreplay._validate import check_bool
from mixreplay.buffers.offline import OfflineDataset, check_episode_starts
from mixreplay.datasets.options import dataset_options
from mixreplay.errors import DatasetError, DatasetNotFoundError, SchemaMismatchError
from mixreplay.layout import RowLayout
from mixreplay.persist import (
    Format,
    TensorStream,
    atomic_directory,
    map_tensor,
    read_container,
    read_tensor,
    recover,
    write_metadata,
)
from mixreplay.persist.atomic import destination
from mixreplay.samplers import Sampler
from mixreplay.schema import Schema
from mixreplay.storages.dedup import DedupEncoder, DedupFrozenStorage, DedupLayout
from mixreplay.storages.frozen import FrozenStorage
from mixreplay.transforms import Transform

__all__ = ["FORMAT", "load_memmap", "open_dataset", "read_metadata", "write_memmap_dataset"]

log = logging.getLogger(__name__)

ROWS = "rows.bin"
EPISODES = "episodes.bin"
NEXT_SLOTS = "next_slots.bin"
NEXT_ROWS = "next_rows.bin"


def _from_v1(meta: dict[str, Any]) -> dict[str, Any]:
    """Format 1 named its two files implicitly and had no checksums."""
    rows, words, episodes = meta["rows"], meta["row_words"], meta["episodes"]
    meta["files"] = {
        "rows": {
            "file": ROWS,
            "dtype": "int64",
            "shape": [rows, words],
            "nbytes": rows * words * 8,
        },
        "episode_starts": {
            "file": EPISODES,
            "dtype": "int64",
            "shape": [episodes],
            "nbytes": episodes * 8,
        },
    }
    return meta


FORMAT = Format(
    name="mixreplay-memmap",
    version=2,
    error=DatasetError,
    what="dataset",
    migrations={1: _from_v1},
    checksum_since=2,
)


class _Pull:
    """Iterates the caller's chunks, remembering whether an error came from them."""

    def __init__(self, chunks: Iterable[TensorDictBase]):
        self._it = iter(chunks)
        self.reading = False

    def __iter__(self) -> Iterator[TensorDictBase]:
        while True:
            self.reading = True
            try:
                chunk = next(self._it)
            except StopIteration:
                self.reading = False
                return
            self.reading = False
            yield chunk


def write_memmap_dataset(
    path: str | os.PathLike[str],
    data: TensorDictBase | Iterable[TensorDictBase],
    *,
    episode_starts: Iterable[int] | torch.Tensor | None = None,
    source_id: str | None = None,
    source_fingerprint: str | None = None,
    info: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    progress: Callable[[int], None] | None = None,
    dedup_next: bool = False,
) -> Path:
    """Write rows to a dataset directory, chunk by chunk (bounded memory).

    The directory appears atomically: rows are written to a temporary sibling,
    fsynced, and swapped into place when complete (see :mod:`mixreplay.persist.atomic`).

    Args:
        path: the dataset directory to create.
        data: a ``[n]`` TensorDict, or an iterable of them (all with one schema).

    Keyword Args:
        episode_starts: first row of each episode (default: one episode).
        source_id: where the rows came from (e.g. ``"minari:..."``), kept in metadata.
        source_fingerprint: a fingerprint of the source, to tell when a cache is stale.
        info: extra JSON-able metadata.
        overwrite: replace an existing *dataset* at ``path`` (anything else there is refused).
        progress: called with the number of rows of each chunk written.
        dedup_next: store each next value once (read from the following row of the
            same episode; see :mod:`mixreplay.storages.dedup`): pixel datasets take
            about half the disk and page cache, and read back identically.

    Returns:
        The directory.

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is false.
        DatasetError: no rows, bad episode starts, rows of different schemas,
            ``path`` holds something that is not a mixreplay dataset, or the files
            cannot be written (a full disk: nothing is left half written).
    """
    dedup_next = check_bool(dedup_next, "dedup_next")
    final = destination(path)
    if final.exists() and not overwrite:
        raise FileExistsError(f"{final} exists; pass overwrite=True to replace it")
    chunks = [data] if isinstance(data, TensorDictBase) else data
    if dedup_next and episode_starts is not None and not isinstance(episode_starts, torch.Tensor):
        episode_starts = list(episode_starts)  # read twice: by the encoder, then checked
    pull = _Pull(chunks)
    try:
        with atomic_directory(
            final, replaceable=FORMAT.owns, error=DatasetError, what="dataset"
        ) as tmp:
            layout: RowLayout | None = None
            stream: TensorStream | None = None
            encoder: DedupEncoder | None = None
            next_streams: tuple[TensorStream, TensorStream] | None = None
            digest = hashlib.blake2b(
                digest_size=16
            )  # the fingerprint, as fingerprint_rows computes it
            try:
                for chunk in pull:
                    if not isinstance(chunk, TensorDictBase) or chunk.batch_dims != 1:
                        raise DatasetError(
                            f"dataset rows come as [n] TensorDicts, got {type(chunk).__name__}"
                            + (
                                f" with batch_size={list(chunk.batch_size)}"
                                if isinstance(chunk, TensorDictBase)
                                else ""
                            )
                        )
                    if chunk.batch_size[0] == 0:
                        continue
                    try:
                        if layout is None:
                            layout = RowLayout(Schema.from_tensordict(chunk))
                            stored_words = layout.row_words
                            if dedup_next:
                                encoder = DedupEncoder(layout, episode_starts=episode_starts)
                                stored_words = encoder.layout.stored.row_words
                                next_streams = (
                                    TensorStream(tmp, NEXT_SLOTS, torch.int64, ()),
                                    TensorStream(
                                        tmp, NEXT_ROWS, torch.int64, (encoder.layout.x_words,)
                                    ),
                                )
                            stream = TensorStream(tmp, ROWS, torch.int64, (stored_words,))
                        words = layout.pack(chunk, device=torch.device("cpu"))
                    except SchemaMismatchError as err:
                        raise DatasetError(f"cannot write the rows to {final}: {err}") from None
                    assert stream is not None
                    if encoder is not None and next_streams is not None:
                        stored, slots, x = encoder.push(words)
                        stream.write(stored)
                        next_streams[0].write(slots)
                        next_streams[1].write(x)
                    else:
                        stream.write(words)
                    # the full rows, as a plain dataset hashes them
                    digest.update(memoryview(words.numpy()))  # type: ignore[arg-type]
                    if progress is not None:
                        progress(words.shape[0])
            except BaseException:
                for s in (stream, *(next_streams or ())):
                    if s is not None:
                        s.abort()
                raise
            if layout is None or stream is None:
                raise DatasetError(f"no rows to write to {final}: the data was empty")
            files: dict[str, Any] = {}
            next_keys = None
            if encoder is not None and next_streams is not None:
                last_slot, last_x = encoder.finish()
                next_streams[0].write(last_slot)
                next_streams[1].write(last_x)
                files["next_slots"] = next_streams[0].close()
                files["next_rows"] = next_streams[1].close()
                next_keys = [list(k) for k in encoder.layout.next_keys]
            rows_entry = stream.close()
            n = stream.rows
            starts = torch.zeros(1, dtype=torch.int64)
            if episode_starts is not None:
                starts = check_episode_starts(episode_starts, n)
            with TensorStream(tmp, EPISODES, torch.int64, ()) as ep:
                ep.write(starts)
            fingerprint = digest.hexdigest()
            write_metadata(
                tmp,
                FORMAT,
                {
                    "rows": n,
                    "row_words": layout.row_words,
                    "episodes": int(starts.numel()),
                    "schema": layout.schema.to_json(),
                    "fingerprint": fingerprint,
                    "source_id": source_id,
                    "source_fingerprint": source_fingerprint,
                    "info": dict(info or {}),
                    "dedup_next": next_keys,
                    "files": {"rows": rows_entry, "episode_starts": ep.close(), **files},
                },
            )
    except OSError as err:
        if pull.reading:  # the source's own error: it says what it is
            raise
        where = f" ({err.filename})" if err.filename else ""
        raise DatasetError(
            f"cannot write the dataset {final}: {err.strerror or err}{where}; nothing was "
            "written there: free space, or write it elsewhere (the cache: set "
            "MIXREPLAY_DATA_DIR or pass cache_dir=)"
        ) from err
    log.info("wrote %d rows (%d bytes each) to %s", n, layout.row_bytes, final)
    return final


def read_metadata(path: str | os.PathLike[str], *, recover_swap: bool = True) -> dict[str, Any]:
    """The checked metadata of the dataset at ``path`` (as the current format version).

    Keyword Args:
        recover_swap: first finish a swap a killed writer left half done (when the
            parent directory is writable). The cache passes ``False`` for an entry that
            is a symbolic link: it never writes through a link.

    Raises:
        DatasetNotFoundError: nothing at ``path``.
        DatasetError: the metadata is missing, unreadable, edited, of an unknown
            version, or inconsistent (counts, schema, file entries).
    """
    where = destination(path)
    if recover_swap and os.access(where.parent, os.W_OK):  # a read-only location is read as it is
        recover(where)
    if not where.exists():
        raise DatasetNotFoundError(f"no dataset directory at {where}")
    if not where.is_dir():
        raise DatasetError(f"{where} is a file, not a mixreplay dataset directory")
    meta = read_container(where, FORMAT)
    for key in ("rows", "row_words", "episodes"):
        value = meta.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise DatasetError(f"{where}/metadata.json: {key} must be an int >= 0, got {value!r}")
    try:
        layout = RowLayout(Schema.from_json(meta["schema"]))
    except (KeyError, TypeError, ValueError, SchemaMismatchError) as err:
        raise DatasetError(
            f"{where}/metadata.json: the schema is invalid ({type(err).__name__}: {err})"
        ) from None
    if layout.row_words != meta["row_words"]:
        raise DatasetError(
            f"{where}/metadata.json says {meta['row_words']} words per row, its schema gives "
            f"{layout.row_words}; the dataset is corrupt: convert it again"
        )
    files = meta.get("files")
    if not isinstance(files, dict) or not {"rows", "episode_starts"} <= set(files):
        raise DatasetError(
            f"{where}/metadata.json lists no rows and episode files; the dataset is corrupt"
        )
    expected = {"rows": [meta["rows"], meta["row_words"]], "episode_starts": [meta["episodes"]]}
    keys = meta.get("dedup_next")
    if keys is not None:
        dl = _dedup_layout(where, layout, keys, files)
        entry = files["next_slots"]
        e = entry.get("shape", [None])[0] if isinstance(entry, dict) else None
        if isinstance(e, bool) or not isinstance(e, int) or e < 0:
            raise DatasetError(
                f"{where}/metadata.json: the next_slots file entry {entry!r} is not an "
                "int64 [E] tensor; the dataset is corrupt: convert it again"
            )
        expected.update(
            rows=[meta["rows"], dl.stored.row_words], next_slots=[e], next_rows=[e, dl.x_words]
        )
        meta["dedup_layout"] = dl
    for name, shape in expected.items():
        entry = files[name]
        if (
            not isinstance(entry, dict)
            or entry.get("shape") != shape
            or entry.get("dtype") != "int64"
        ):
            raise DatasetError(
                f"{where}/metadata.json: the {name} file entry {entry!r} does not match "
                f"int64{shape}; the dataset is corrupt: convert it again"
            )
    meta["layout"] = layout
    return meta


def _dedup_layout(where: Path, layout: RowLayout, keys: Any, files: dict[str, Any]) -> DedupLayout:
    """The stored-once layout that ``metadata.json``'s ``dedup_next`` names (checked)."""
    if not isinstance(keys, list) or not all(
        isinstance(k, list) and k and all(isinstance(p, str) for p in k) for k in keys
    ):
        raise DatasetError(
            f"{where}/metadata.json: dedup_next must be a list of keys (lists of str), got "
            f"{keys!r}; the dataset is corrupt: convert it again"
        )
    try:
        dl = DedupLayout(layout, [tuple(k) for k in keys])
    except (KeyError, ValueError) as err:
        raise DatasetError(
            f"{where}/metadata.json: dedup_next does not fit the schema ({err}); "
            "the dataset is corrupt: convert it again"
        ) from None
    if not {"next_slots", "next_rows"} <= set(files):
        raise DatasetError(
            f"{where}/metadata.json lists no next_slots and next_rows files for its "
            "dedup_next keys; the dataset is corrupt: convert it again"
        )
    return dl


def load_memmap(
    path: str | os.PathLike[str],
    *,
    batch_size: int | None = None,
    generator: torch.Generator | int | None = None,
    sampler: Sampler | None = None,
    transform: Transform | None = None,
    split_trajs: bool = False,
    writer: None = None,
    collate_fn: None = None,
    prefetch: int | None = None,
    pin_memory: bool = False,
) -> OfflineDataset:
    """Open a dataset directory written by :func:`write_memmap_dataset` (no row is read).

    The rows are served as written: to select keys, rename them or change dtypes,
    convert the source again with those options (``mixreplay convert ... --keys``),
    or add a ``transform``.

    Keyword Args:
        batch_size, generator, sampler, transform: as for :class:`~mixreplay.OfflineDataset`.
        split_trajs, writer, collate_fn, prefetch, pin_memory: TorchRL's keywords, with
            the meaning of :mod:`mixreplay.datasets.loader`.

    Raises:
        DatasetNotFoundError: nothing at ``path``.
        DatasetError: any damage, naming the file and the problem: unreadable or edited
            metadata, a bad schema or dtype, a missing or truncated file, episode starts
            that are negative, unsorted or out of range.
    """
    options: dict[str, Any] = {
        "batch_size": batch_size,
        "generator": generator,
        "sampler": sampler,
        "transform": transform,
        "split_trajs": split_trajs,
        "writer": writer,
        "collate_fn": collate_fn,
        "prefetch": prefetch,
        "pin_memory": pin_memory,
    }
    kwargs = dataset_options(options, "load_dataset('memmap:...')")
    where = destination(Path(path).expanduser())
    return open_dataset(where, read_metadata(where), **kwargs)


def open_dataset(where: Path, meta: dict[str, Any], **kwargs: Any) -> OfflineDataset:
    """The dataset at ``where`` from its metadata as :func:`read_metadata` returned it.

    Maps the rows (sizes checked), reads the small files in full (CRC-32 checked) and
    checks the episode starts. ``kwargs`` go to :class:`~mixreplay.OfflineDataset`.

    Raises:
        DatasetError: any damage, naming the file and the problem.
    """
    meta = dict(meta)
    layout = meta.pop("layout")
    dl = meta.pop("dedup_layout", None)
    files = meta["files"]
    rows = map_tensor(where, files["rows"], where="rows", error=DatasetError)
    starts = read_tensor(where, files["episode_starts"], where="episode starts", error=DatasetError)
    try:
        starts = check_episode_starts(starts, meta["rows"], where=f"{where / EPISODES}")
    except DatasetError as err:
        raise DatasetError(f"{err}; the dataset is corrupt: convert it again") from None
    fingerprint = meta.get("fingerprint")
    fingerprint = fingerprint if isinstance(fingerprint, str) else None
    storage: FrozenStorage | DedupFrozenStorage
    if dl is not None:
        slots = read_tensor(where, files["next_slots"], where="next slots", error=DatasetError)
        next_rows = map_tensor(where, files["next_rows"], where="next rows", error=DatasetError)
        try:
            storage = DedupFrozenStorage(
                layout, dl.next_keys, rows, slots, next_rows, fingerprint=fingerprint
            )
        except ValueError as err:
            raise DatasetError(
                f"{where / NEXT_SLOTS}: {err}; the dataset is corrupt: convert it again"
            ) from None
    else:
        storage = FrozenStorage(rows, layout, fingerprint=fingerprint)
    return OfflineDataset(storage, episode_starts=starts, metadata=meta, path=where, **kwargs)

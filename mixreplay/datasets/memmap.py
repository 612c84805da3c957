"""mixreplay's own dataset format: packed rows in a memory-mapped file.

A dataset directory is a container of the persistence layer
(:mod:`mixreplay.persist`)::

    metadata.json      format and version, schema, row and episode counts, source ID,
                       fingerprints, and each file's dtype, shape, size and CRC-32
    rows.bin           the packed rows, int64 [rows, W], little-endian (see RowLayout)
    episodes.bin       int64 [episodes]: the first row of each episode

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
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase

from mixreplay.buffers.offline import OfflineDataset, check_episode_starts
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
from mixreplay.schema import Schema
from mixreplay.storages.frozen import FrozenStorage

__all__ = ["FORMAT", "load_memmap", "read_metadata", "write_memmap_dataset"]

log = logging.getLogger(__name__)

ROWS = "rows.bin"
EPISODES = "episodes.bin"


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
)


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

    Returns:
        The directory.

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is false.
        DatasetError: no rows, bad episode starts, rows of different schemas, or
            ``path`` holds something that is not a mixreplay dataset.
    """
    final = destination(path)
    if final.exists() and not overwrite:
        raise FileExistsError(f"{final} exists; pass overwrite=True to replace it")
    chunks = [data] if isinstance(data, TensorDictBase) else data
    with atomic_directory(
        final, replaceable=FORMAT.owns, error=DatasetError, what="dataset"
    ) as tmp:
        layout: RowLayout | None = None
        stream: TensorStream | None = None
        digest = hashlib.blake2b(digest_size=16)  # the fingerprint, as fingerprint_rows computes it
        try:
            for chunk in chunks:
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
                        stream = TensorStream(tmp, ROWS, torch.int64, (layout.row_words,))
                    words = layout.pack(chunk, device=torch.device("cpu"))
                except SchemaMismatchError as err:
                    raise DatasetError(f"cannot write the rows to {final}: {err}") from None
                assert stream is not None
                stream.write(words)
                digest.update(memoryview(words.numpy()))
                if progress is not None:
                    progress(words.shape[0])
        except BaseException:
            if stream is not None:
                stream.abort()
            raise
        if layout is None or stream is None:
            raise DatasetError(f"no rows to write to {final}: the data was empty")
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
                "files": {"rows": rows_entry, "episode_starts": ep.close()},
            },
        )
    log.info("wrote %d rows (%d bytes each) to %s", n, layout.row_bytes, final)
    return final


def read_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The checked metadata of the dataset at ``path`` (as the current format version).

    Raises:
        DatasetNotFoundError: nothing at ``path``.
        DatasetError: the metadata is missing, unreadable, edited, of an unknown
            version, or inconsistent (counts, schema, file entries).
    """
    where = destination(path)
    if os.access(where.parent, os.W_OK):  # a read-only location is read as it is
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


def load_memmap(path: str | os.PathLike[str], **kwargs: Any) -> OfflineDataset:
    """Open a dataset directory written by :func:`write_memmap_dataset` (no row is read).

    Keyword Args:
        batch_size, generator, sampler, transform: as for :class:`~mixreplay.OfflineDataset`.

    Raises:
        DatasetNotFoundError: nothing at ``path``.
        DatasetError: any damage: metadata, schema, a missing or truncated file,
            episode starts that are negative, unsorted or out of range.
    """
    where = destination(Path(path).expanduser())
    meta = read_metadata(where)
    layout = meta.pop("layout")
    files = meta["files"]
    rows = map_tensor(where, files["rows"], where="rows", error=DatasetError)
    starts = read_tensor(where, files["episode_starts"], where="episode starts", error=DatasetError)
    try:
        starts = check_episode_starts(starts, meta["rows"], where=f"{where / EPISODES}")
    except DatasetError as err:
        raise DatasetError(f"{err}; the dataset is corrupt: convert it again") from None
    fingerprint = meta.get("fingerprint")
    storage = FrozenStorage(
        rows, layout, fingerprint=fingerprint if isinstance(fingerprint, str) else None
    )
    return OfflineDataset(storage, episode_starts=starts, metadata=meta, path=where, **kwargs)

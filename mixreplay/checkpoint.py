"""Checkpoints: any object's ``state_dict()`` in a directory, written atomically, read back exactly.

This module only moves state to and from disk; what a state holds is decided
by its owner (each buffer, storage, sampler and schedule implements
``state_dict()`` / ``load_state_dict()``). A checkpoint is a container of the
persistence layer (:mod:`mixreplay.persist`)::

    metadata.json   format, version, mixreplay version, the state as JSON (every tensor
                    replaced by its file, dtype, shape, bytes and CRC-32), a checksum
    <name>.bin      one raw little-endian file per tensor: the *filled* rows of every
                    online ring (slot order), generator states, priorities

Only filled rows are stored (``len × row_bytes``, never the capacity), and offline
data is referenced by fingerprint, never copied. Nothing is pickled. A rows file
is a storage's packed ``int64 [len, row_words]`` words (see
:class:`~mixreplay.layout.RowLayout`), so it can be memory-mapped.

What a buffer's checkpoint restores: every online row, each ring's cursor, fill
and write count, every generator, each sampler's state (priorities), the
schedules, the step and the fractions. A buffer built with the same arguments that
then :meth:`loads` a checkpoint draws exactly the batches the saved buffer would
have drawn next. Not restored: ``batch_size``, transforms and prefetching (the
constructor's), and the random state of a *foreign* offline source (a TorchRL
buffer samples with its own RNG).

Crash safety (see :mod:`mixreplay.persist.atomic`): a process killed at any
instant of a save leaves the previous checkpoint or the new one, never a mix.
Readers and writers of one path in several processes or threads do not disturb
each other: every save succeeds (the last one wins) and every read returns a whole
checkpoint, the one before a concurrent save or the one it writes.

Versions: format 3 (this one) holds each owner's ``state_dict()``, samplers and
storages under their registered names (``config_name``, never a module path, so
moving a class breaks no checkpoint); format 2 (the same, with samplers named by
module path) and format 1 (mixreplay before the state redesign) are migrated
when read. Every failure to
load raises :class:`~mixreplay.errors.CheckpointError` before the buffer is
touched (a missing checkpoint is a :class:`~mixreplay.errors.CheckpointNotFoundError`,
also a ``FileNotFoundError``).

Examples:
    >>> import tempfile, torch
    >>> from tensordict import TensorDict
    >>> from mixreplay import LazyTensorStorage, ReplayBuffer
    >>> def make():
    ...     return ReplayBuffer(storage=LazyTensorStorage(1000), batch_size=4, generator=0)
    >>> rb = make()
    >>> _ = rb.extend(TensorDict({"obs": torch.arange(10.0)}, [10]))
    >>> tmp = tempfile.TemporaryDirectory()
    >>> path = tmp.name + "/ckpt"
    >>> rb.dumps(path)
    >>> twin = make()
    >>> twin.loads(path)
    >>> torch.equal(rb.sample()["obs"], twin.sample()["obs"])
    True
    >>> tmp.cleanup()
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from mixreplay._state import saved_name
from mixreplay.errors import CheckpointError, CheckpointNotFoundError
from mixreplay.persist import (
    Format,
    atomic_directory,
    decode_tensors,
    encode_tensors,
    read_container,
    read_directory,
    write_metadata,
)
from mixreplay.persist.atomic import destination

__all__ = ["FORMAT", "load_into", "load_state", "save_state"]

log = logging.getLogger(__name__)


class _Loadable(Protocol):
    def load_state_dict(self, state: Any, *, allow_offline_mismatch: bool = ...) -> None: ...


# -- format 1 (before each part owned its state) -------------------------------------------


def _v1_generator(meta: dict[str, Any], name: str | None) -> Any:
    if name is None:
        return None
    return meta["generators"][name]


def _v1_storage(saved: dict[str, Any]) -> dict[str, Any]:
    if saved["role"] == "ring":
        ring = dict(saved["storage"])
        ring.pop("row_words", None)
        return ring
    ref = saved["reference"]
    return {
        "reference": True,
        "type": ref.get("type"),
        "rows": ref.get("rows"),
        "schema": ref.get("schema"),
        "fingerprint": ref.get("fingerprint"),
    }


def _v1_source(meta: dict[str, Any], saved: dict[str, Any]) -> dict[str, Any]:
    if saved.get("sampler") is None:  # a foreign source: referenced by type and size only
        return {
            "kind": "foreign",
            "type": saved["reference"].get("type"),
            "rows": saved["reference"].get("rows"),
        }
    ref = saved.get("reference") or {}
    kind = ref.get("type") or "ReplayBuffer"
    return {
        "kind": kind,
        "storage": _v1_storage(saved),
        "sampler": saved["sampler"],
        "generator": _v1_generator(meta, saved.get("generator")),
    }


def _from_v1(meta: dict[str, Any]) -> dict[str, Any]:
    """Format 1 kept every part's state in one tree keyed by role; format 2 nests owners' states."""
    kind = meta["buffer"]
    sources = meta["sources"]
    if kind == "ReplayBuffer":
        state = _v1_source(meta, sources["buffer"])
        state["kind"] = "ReplayBuffer"
        state["generator"] = meta["generators"]["main"]
    elif kind == "OfflineToOnlineReplayBuffer":
        mixing = meta["mixing"]
        schedule = mixing["schedule"]
        if schedule is None:  # a float, maybe annealed: what it is now is what resumes
            schedule = {"type": "Constant", "value": mixing["offline_fraction"]}
        state = {
            "kind": kind,
            "generator": meta["generators"]["main"],
            "sources": {name: _v1_source(meta, sources[name]) for name in ("offline", "online")},
            "fraction": {
                "schedule": schedule,
                "step": mixing["step"],
                "base_offline_fraction": mixing["base_offline_fraction"],
            },
        }
    elif kind == "MixtureReplayBuffer":
        mixing = meta["mixing"]
        state = {
            "kind": kind,
            "generator": meta["generators"]["main"],
            "sources": {
                name: _v1_source(meta, sources[name]) for name in meta["config"]["sources"]
            },
            "fractions": mixing["fractions"],
            "step": mixing["step"],
            "carry": None,
        }
    else:
        raise ValueError(f"unknown buffer kind {kind!r}")
    return {key: meta[key] for key in ("format", "format_version", "mixreplay_version")} | {
        "state": state
    }


# -- format 2 (samplers named by module path) ------------------------------------------------


def _renamed_samplers(state: Any) -> Any:
    if isinstance(state, dict):
        out = {key: _renamed_samplers(value) for key, value in state.items()}
        sampler = out.get("sampler")
        if isinstance(sampler, dict) and isinstance(sampler.get("type"), str):
            out["sampler"] = sampler | {"type": saved_name(sampler["type"])}
        return out
    return state


def _from_v2(meta: dict[str, Any]) -> dict[str, Any]:
    """Format 2 saved samplers under their module path; format 3 under their registered name
    (``mixreplay.samplers.prioritized.PrioritizedSampler`` is ``PrioritizedSampler``)."""
    return meta | {"state": _renamed_samplers(meta["state"])}


FORMAT = Format(
    name="mixreplay-checkpoint",
    version=3,
    error=CheckpointError,
    what="checkpoint",
    migrations={1: _from_v1, 2: _from_v2},
)


# -- files ---------------------------------------------------------------------------------


def save_state(path: str | os.PathLike[str], state: Mapping[str, Any]) -> Path:
    """Write ``state`` (nested dicts and lists of tensors and JSON values) to the directory ``path``.

    Atomic: the directory is replaced whole or not at all (see :mod:`mixreplay.persist.atomic`);
    an existing directory that is not a checkpoint is refused. A symbolic link at
    ``path`` is followed. Returns the checkpoint directory.

    Raises:
        CheckpointError: ``path`` holds something else, or the state holds a value a
            checkpoint cannot store.
        OSError: the filesystem refused (read-only, full, permissions), naming the
            checkpoint; the previous checkpoint, if any, is intact.
    """
    final = destination(path)
    try:
        with atomic_directory(
            path, replaceable=FORMAT.owns, error=CheckpointError, what="checkpoint"
        ) as tmp:
            fields = {"state": encode_tensors(state, tmp, CheckpointError)}
            write_metadata(tmp, FORMAT, fields)
    except OSError as err:  # a read-only or full filesystem, a missing permission
        if isinstance(err, CheckpointError):
            raise
        where = f" ({err.filename})" if err.filename else ""
        raise OSError(
            err.errno, f"cannot save a checkpoint at {final}: {err.strerror or err}{where}"
        ) from err
    log.info("saved a checkpoint to %s", final)
    return final


def load_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read the state saved at ``path`` (format 1 is migrated), checking every file.

    Reading changes nothing on disk, and a save of the same path in another process
    or thread at the same time does not disturb it (nor does it disturb the save): the
    state read is the checkpoint before that save or the one it writes, whole (see
    :func:`~mixreplay.persist.atomic.read_directory`). A save killed between its two
    renames leaves the previous checkpoint aside, and that is what is read.

    Raises:
        CheckpointNotFoundError: nothing at ``path``.
        CheckpointError: the metadata or a tensor file is missing, truncated, corrupt
            or edited, or the format version is unknown.
    """
    where = destination(path)

    def read(directory: Path, dir_fd: int) -> dict[str, Any]:
        meta = read_container(directory, FORMAT, dir_fd=dir_fd)
        if "state" not in meta:
            raise CheckpointError(
                f"{directory}/metadata.json holds no state; the checkpoint is corrupt"
            )
        state = decode_tensors(
            meta["state"], directory, CheckpointError, where=f"{directory}: state", dir_fd=dir_fd
        )
        if not isinstance(state, dict):
            raise CheckpointError(
                f"{directory}: the saved state is a {type(state).__name__}, not a dict"
            )
        return state

    try:
        return read_directory(where, read)
    except FileNotFoundError:
        raise CheckpointNotFoundError(
            f"no checkpoint at {where}: the directory does not exist; save one with rb.dumps(path)"
        ) from None
    except NotADirectoryError:
        raise CheckpointError(f"{where} is a file, not a checkpoint directory") from None
    except PermissionError as err:
        raise CheckpointError(f"cannot read the checkpoint at {where}: {err}") from None


def load_into(
    obj: _Loadable, path: str | os.PathLike[str], *, allow_offline_mismatch: bool = False
) -> None:
    """Read the checkpoint at ``path`` and ``obj.load_state_dict(state, ...)`` it.

    ``obj`` is unchanged when anything does not fit (its ``load_state_dict`` checks
    the whole state before applying it); the error names the checkpoint.

    Every failure is a :class:`~mixreplay.errors.CheckpointError`. The owners' checks
    turn whatever a damaged or crafted state holds into one that says what is wrong;
    any other exception raised while loading (a check that is missing) is converted
    too, with the original chained, so that callers can rely on the one type.
    """
    state = load_state(path)
    try:
        obj.load_state_dict(state, allow_offline_mismatch=allow_offline_mismatch)
    except CheckpointError as err:
        raise CheckpointError(f"cannot load {destination(path)}: {err}") from err
    except Exception as err:  # noqa: BLE001 - the last guard: one error type for every failure
        log.warning("a saved state got past the checks of %r", obj, exc_info=True)
        raise CheckpointError(
            f"cannot load {destination(path)}: the saved state does not fit "
            f"({type(err).__name__}: {err}); the checkpoint is damaged or was not written "
            "by mixreplay"
        ) from err

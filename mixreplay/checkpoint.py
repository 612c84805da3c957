"""Checkpoints: a buffer's state in a directory, written atomically, read back exactly.

A checkpoint is a directory::

    metadata.json   format and versions, the buffer's kind and configuration, each ring's
                    cursor, fill and write count, schedules and step, base and current
                    fractions, sampler state, each offline source by ID, path and
                    fingerprint, and for every tensor: file, dtype, shape, bytes, CRC-32;
                    the whole file carries a checksum, so an edit is detected
    <name>.bin      one raw little-endian file per tensor: the *filled* rows of every
                    online ring (``storage.rows``, slot order), generator states, priorities

Only filled rows are stored (``len × row_bytes``, never the capacity), and offline data
is referenced, never copied. Nothing is pickled: tensors are raw bytes whose dtype and
shape live in the JSON, everything else is JSON. A rows file is the storage's packed
``int64 [len, row_words]`` words (see :class:`~mixreplay.schema.RowLayout`), so it can
be memory-mapped with ``torch.from_file`` or ``numpy.memmap``.

What a checkpoint restores: every online row, each ring's cursor, fill and write
count, every generator, each sampler's state (priorities), the schedules, the step
and the fractions. A buffer built with the same arguments that then
:func:`loads` a checkpoint draws exactly the batches the saved buffer would have
drawn next. Not restored: ``batch_size`` and ``transform`` (the constructor's),
and the random state of a *foreign* offline source (a TorchRL buffer samples with
its own RNG; with one, offline draws after a resume are not reproduced).

Crash safety. :func:`dumps` writes into a temporary sibling ``.<name>.tmp-<pid>-*``,
fsyncs every file and that directory, then swaps it in: the previous checkpoint is
renamed to ``.<name>.old``, the new one renamed to ``<name>``, the parent directory
fsynced after each rename, and only then ``.<name>.old`` removed. A process killed
at any instant therefore leaves a complete checkpoint: ``<name>``, or, when killed
between the two renames, ``.<name>.old``, which :func:`loads` (and the next
:func:`dumps`) renames back. Temporary directories left by a killed writer are
never read and are removed by the next :func:`dumps`. One writer per path at a time.

Every failure to load raises :class:`~mixreplay.errors.CheckpointError` before the
buffer is touched: an unknown format version, a schema, capacity or sampler that
does not match the buffer, an offline dataset whose fingerprint differs from the
saved one (unless ``allow_offline_mismatch=True``), a missing, truncated or
corrupt file, or edited metadata.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import math
import os
import re
import shutil
import sys
import tempfile
import weakref
import zlib
from pathlib import Path

import torch

from mixreplay._foreign import ForeignSource
from mixreplay._validate import check_type
from mixreplay._version import __version__
from mixreplay.buffer import ReplayBuffer
from mixreplay.errors import CheckpointError, SchemaMismatchError
from mixreplay.schema import RowLayout, Schema
from mixreplay.storage import FrozenStorage, TensorStorage

__all__ = [
    "FORMAT_VERSION",
    "dumps",
    "load_state",
    "load_state_dict",
    "loads",
    "read_state",
    "save_state",
    "state_dict",
]

log = logging.getLogger(__name__)

FORMAT = "mixreplay-checkpoint"
FORMAT_VERSION = 1
METADATA = "metadata.json"
_TENSOR = "__tensor__"

if sys.byteorder != "little":  # pragma: no cover
    raise ImportError("mixreplay checkpoints are little-endian; big-endian hosts are not supported")


# -- what a buffer is made of ------------------------------------------------------------------


def _anatomy(buffer) -> tuple[str, list[tuple[str, object, str]], torch.Generator]:
    """The buffer's kind, its sources as ``(name, source, role)`` and its main generator.

    ``role`` is ``"ring"`` (rows saved) or ``"reference"`` (read-only rows, referenced).
    """
    from mixreplay.mixing import MixtureReplayBuffer, OfflineToOnlineReplayBuffer

    if isinstance(buffer, OfflineToOnlineReplayBuffer):
        offline, online = buffer._sources
        return (
            type(buffer).__name__,
            [("offline", offline, "reference"), ("online", online, "ring")],
            buffer._generator,
        )
    if isinstance(buffer, MixtureReplayBuffer):
        parts = []
        for name, src in zip(buffer._names, buffer._sources):
            frozen = isinstance(src, ForeignSource) or isinstance(src.storage, FrozenStorage)
            parts.append((name, src, "reference" if frozen else "ring"))
        return type(buffer).__name__, parts, buffer._generator
    if isinstance(buffer, ReplayBuffer):
        role = "reference" if isinstance(buffer.storage, FrozenStorage) else "ring"
        return type(buffer).__name__, [("buffer", buffer, role)], buffer._generator
    raise TypeError(
        f"checkpoints save a mixreplay ReplayBuffer, OfflineToOnlineReplayBuffer or "
        f"MixtureReplayBuffer, got {type(buffer).__name__}"
    )


def _generators(buffer) -> dict[str, torch.Generator]:
    """Every distinct generator of the buffer, by name: ``"main"``, then ``"source:<name>"``."""
    _, sources, main = _anatomy(buffer)
    named = {"main": main}
    seen = {id(main)}
    for name, src, _ in sources:
        g = getattr(src, "_generator", None) if isinstance(src, ReplayBuffer) else None
        if g is not None and id(g) not in seen:
            seen.add(id(g))
            named[f"source:{name}"] = g
    return named


@contextlib.contextmanager
def _locked(buffer):
    """Hold the lock of every native source, in source order (sample and extend take one at a time)."""
    _, sources, _ = _anatomy(buffer)
    with contextlib.ExitStack() as stack:
        for _, src, _ in sources:
            lock = (
                getattr(getattr(src, "storage", None), "lock", None)
                if isinstance(src, ReplayBuffer)
                else None
            )
            if lock is not None:
                stack.enter_context(lock)
        yield


# -- collecting the state ---------------------------------------------------------------------


def _sampler_state(sampler) -> dict:
    return {
        "type": f"{type(sampler).__module__}.{type(sampler).__qualname__}",
        "config": _jsonable(sampler.config()),
        "state": sampler.state_dict(),
    }


def _jsonable(value):
    """``value`` as JSON would give it back (tuples become lists), for comparisons."""
    return json.loads(json.dumps(value))


# storage -> ((write_count, len, cursor), fingerprint): hashing a large offline buffer once, not per save
_FINGERPRINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _fingerprint(src) -> str | None:
    """The offline source's fingerprint: the dataset's own, or a hash of its packed rows."""
    if isinstance(src, ForeignSource):
        return None
    fp = getattr(src, "fingerprint", None)
    if fp:
        return str(fp)
    from mixreplay.datasets.memmap import _fingerprint_rows

    storage = src.storage
    key = (storage.write_count, len(storage), storage.cursor)
    hit = _FINGERPRINTS.get(storage)
    if hit is not None and hit[0] == key:
        return hit[1]
    fp = _fingerprint_rows(storage.rows.cpu())
    _FINGERPRINTS[storage] = (key, fp)
    return fp


def _reference(src) -> dict:
    if isinstance(src, ForeignSource):
        return {
            "type": type(src.obj).__name__,
            "rows": len(src),
            "schema": None,
            "fingerprint": None,
            "source_id": None,
            "path": None,
        }
    schema = src.storage.schema
    path = getattr(src, "path", None)
    return {
        "type": type(src).__name__,
        "rows": len(src),
        "schema": None if schema is None else schema.to_json(),
        "fingerprint": _fingerprint(src),
        "source_id": getattr(src, "source_id", None),
        "path": None if path is None else str(path),
    }


def _ring_state(name: str, src, copy_rows: bool) -> dict:
    storage = src.storage
    if not isinstance(storage, TensorStorage):
        raise CheckpointError(
            f"source {name!r} keeps its rows in {storage!r}; checkpoints save mixreplay storages "
            "only: use online_capacity=N, LazyTensorStorage or LazyMemmapStorage (a TorchRL "
            "storage has its own rb.dumps)"
        )
    layout = storage.layout
    rows = None
    if layout is not None:
        rows = storage.rows
        if copy_rows:
            rows = rows.clone()
    return {
        "type": type(storage).__name__,
        "max_size": storage.max_size,
        "schema": None if layout is None else layout.schema.to_json(),
        "row_words": 0 if layout is None else layout.row_words,
        "cursor": storage.cursor,
        "len": len(storage),
        "write_count": storage.write_count,
        "rows": rows,
    }


def _schedule_config(schedule):
    if schedule is None:
        return None
    try:
        return _jsonable(schedule.to_config())
    except TypeError:  # a plain function: the buffer keeps its own on load
        return {"type": None, "repr": repr(schedule)}


def _mixing_state(buffer) -> dict | None:
    from mixreplay.mixing import MixtureReplayBuffer, OfflineToOnlineReplayBuffer

    if isinstance(buffer, OfflineToOnlineReplayBuffer):
        return {
            "offline_fraction": buffer._offline_fraction,
            "base_offline_fraction": buffer._base_offline_fraction,
            "schedule": _schedule_config(buffer._schedule),
            "step": getattr(buffer, "_step", 0),
        }
    if isinstance(buffer, MixtureReplayBuffer):
        fractions = {}
        for name in buffer._names:
            if name in buffer._fixed:
                fractions[name] = {"fixed": buffer._fixed[name]}
            else:
                fractions[name] = {"schedule": _schedule_config(buffer._schedules[name])}
        return {"fractions": fractions, "current": list(buffer._current), "step": buffer._step}
    return None


def _collect(buffer, *, copy_rows: bool) -> dict:
    kind, sources, _ = _anatomy(buffer)
    gens = _generators(buffer)
    gen_names = {id(g): n for n, g in gens.items()}
    out_sources = {}
    for name, src, role in sources:
        entry: dict = {"role": role}
        if role == "ring":
            entry["storage"] = _ring_state(name, src, copy_rows)
        else:
            entry["reference"] = _reference(src)
        native = isinstance(src, ReplayBuffer)
        entry["sampler"] = _sampler_state(src.sampler) if native else None
        entry["generator"] = gen_names.get(id(src._generator)) if native else None
        out_sources[name] = entry
    batch_size = getattr(buffer, "_batch_size", None)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "mixreplay_version": __version__,
        "buffer": kind,
        "config": {"batch_size": batch_size, "sources": [n for n, _, _ in sources]},
        "generators": {
            n: {"device": str(g.device), "state": g.get_state()} for n, g in gens.items()
        },
        "sources": out_sources,
        "mixing": _mixing_state(buffer),
    }


def state_dict(buffer) -> dict:
    """The buffer's state as a dict of JSON values and tensors (a snapshot: rows are copied).

    See the module docstring for what it holds; :func:`load_state_dict` restores it.
    """
    with _locked(buffer):
        return _collect(buffer, copy_rows=True)


# -- restoring the state ----------------------------------------------------------------------


def _int(value, what: str, lo: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise CheckpointError(f"{what} must be an int >= {lo}, got {value!r}")
    return value


def _fraction(value, what: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 <= value <= 1
    ):
        raise CheckpointError(f"{what} must be a finite number in [0, 1], got {value!r}")
    return float(value)


def _restore_schedule(saved, current, what: str):
    """The schedule to use: rebuilt from the saved config, or the buffer's own plain function."""
    if saved is None:
        return None
    if saved.get("type") is None:  # a plain function was saved by repr only
        if current is None or _schedule_config(current).get("type") is not None:
            raise CheckpointError(
                f"{what} was a plain function ({saved.get('repr')}), which a checkpoint cannot "
                f"store; build the buffer with that same function, got {current!r}"
            )
        return current
    from mixreplay.schedules import Schedule

    try:
        schedule = Schedule.from_config(saved)
    except ValueError as err:
        raise CheckpointError(f"{what}: {err}") from None
    return current if current is not None and current == schedule else schedule


def _check_tensor(t, what: str, dtype: torch.dtype, shape: tuple | None = None) -> torch.Tensor:
    if (
        not isinstance(t, torch.Tensor)
        or t.dtype != dtype
        or (shape is not None and tuple(t.shape) != shape)
    ):
        got = f"{t.dtype}{list(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
        want = f"{dtype}{list(shape) if shape is not None else ''}"
        raise CheckpointError(f"{what} must be a {want} tensor, got {got}")
    return t


def _plan_ring(buffer, index: int, name: str, src, saved: dict, actions: list) -> None:
    storage = src.storage
    if not isinstance(storage, TensorStorage):
        raise CheckpointError(
            f"source {name!r} is {storage!r}, which cannot load saved rows; use a mixreplay storage"
        )
    max_size = _int(saved["max_size"], f"source {name!r} max_size", 1)
    if max_size != storage.max_size:
        raise CheckpointError(
            f"source {name!r}: the checkpoint holds a ring of max_size {max_size}, this buffer's "
            f"holds {storage.max_size}; build the buffer with the same capacity "
            f"(e.g. online_capacity={max_size})"
        )
    length = _int(saved["len"], f"source {name!r} len")
    cursor = _int(saved["cursor"], f"source {name!r} cursor")
    write_count = _int(saved["write_count"], f"source {name!r} write_count")
    if (
        length > max_size
        or cursor >= max_size
        or write_count < length
        or (length < max_size and cursor != length)
    ):
        raise CheckpointError(
            f"source {name!r}: inconsistent ring (len={length}, cursor={cursor}, "
            f"write_count={write_count}, max_size={max_size}); the checkpoint is corrupt"
        )
    if saved["schema"] is None:
        if length:
            raise CheckpointError(
                f"source {name!r}: {length} rows saved without a schema; the checkpoint is corrupt"
            )

        def restore_empty() -> None:
            with storage.lock:
                storage._cursor = storage._len = storage._write_count = 0

        actions.append(restore_empty)
        return
    try:
        schema = Schema.from_json(saved["schema"])
        layout = RowLayout(schema)
    except (SchemaMismatchError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"source {name!r}: the saved schema is invalid ({err})") from None
    if storage.schema is not None and storage.schema != schema:
        lines = storage.schema.differences(schema, names=("buffer", "checkpoint"))
        raise CheckpointError(
            f"source {name!r}: the checkpoint's rows do not match this buffer's "
            f"({'; '.join(lines)}); load it into a buffer whose rows have the saved keys, "
            "dtypes and shapes"
        )
    if hasattr(buffer, "_check_schemas"):
        try:
            buffer._check_schemas(schema, target=index)
        except SchemaMismatchError as err:
            raise CheckpointError(
                f"source {name!r}: the saved rows do not mix with this buffer's other sources: {err}"
            ) from None
    rows = _check_tensor(
        saved["rows"], f"source {name!r} rows", torch.int64, (length, layout.row_words)
    )
    actions.append(lambda: storage._restore(rows, layout, cursor, length, write_count))


def _plan_reference(name: str, src, saved: dict, allow_offline_mismatch: bool) -> bool:
    """Check an offline source against the saved reference; True when it is the same data."""
    given = _reference(src)
    problems = []
    if saved.get("fingerprint") != given["fingerprint"]:
        problems.append(
            f"fingerprint {saved.get('fingerprint')} saved, {given['fingerprint']} given"
        )
    if saved.get("rows") != given["rows"]:
        problems.append(f"{saved.get('rows')} rows saved, {given['rows']} given")
    if (
        saved.get("schema") is not None
        and given["schema"] is not None
        and saved["schema"] != given["schema"]
    ):
        lines = Schema.from_json(saved["schema"]).differences(
            Schema.from_json(given["schema"]), names=("saved", "given")
        )
        problems.append("schema " + "; ".join(lines))
    if not problems:
        return True
    where = ", ".join(
        f"{k}={saved.get(k)!r}" for k in ("type", "source_id", "path") if saved.get(k)
    )
    msg = (
        f"offline source {name!r} is not the dataset this checkpoint was saved with "
        f"({where}): {'; '.join(problems)}"
    )
    if not allow_offline_mismatch:
        raise CheckpointError(
            f"{msg}. Pass the dataset the run used, or loads(path, allow_offline_mismatch=True) "
            "to resume with this one anyway"
        )
    log.warning("%s; resuming anyway (allow_offline_mismatch=True)", msg)
    return False


def _plan_sampler(name: str, src, saved, actions: list) -> None:
    if saved is None:
        if isinstance(src, ReplayBuffer):
            raise CheckpointError(f"source {name!r}: the checkpoint holds no sampler state for it")
        return
    sampler = src.sampler
    kind = f"{type(sampler).__module__}.{type(sampler).__qualname__}"
    if saved["type"] != kind:
        raise CheckpointError(
            f"source {name!r}: the checkpoint was saved with a {saved['type']}, this buffer samples "
            f"with a {kind}; build the buffer with the same sampler"
        )
    state = saved["state"]
    config, mine = saved["config"], _jsonable(sampler.config())
    differ = sorted(
        k for k in set(config) | set(mine) if config.get(k) != mine.get(k) and k not in state
    )
    if differ:
        raise CheckpointError(
            f"source {name!r}: the sampler's settings differ ({', '.join(f'{k}: saved {config.get(k)!r}, buffer {mine.get(k)!r}' for k in differ)}); "
            "build the buffer with the saved sampler settings"
        )
    try:
        trial = copy.deepcopy(sampler)
    except Exception:  # noqa: BLE001 - a sampler that cannot be copied is loaded without a dry run
        trial = None
    if trial is not None:
        try:
            trial.load_state_dict(state)
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as err:
            raise CheckpointError(
                f"source {name!r}: the saved sampler state does not load ({err})"
            ) from None
    actions.append(lambda: sampler.load_state_dict(state))


def _plan_mixing(buffer, saved, actions: list) -> None:
    from mixreplay.mixing import MixtureReplayBuffer, OfflineToOnlineReplayBuffer

    if isinstance(buffer, OfflineToOnlineReplayBuffer):
        f = _fraction(saved["offline_fraction"], "offline_fraction")
        base = _fraction(saved["base_offline_fraction"], "base_offline_fraction")
        step = _int(saved["step"], "step")
        schedule = _restore_schedule(
            saved["schedule"], buffer._schedule, "the offline-fraction schedule"
        )

        def apply() -> None:
            buffer._schedule, buffer._step = schedule, step
            buffer._offline_fraction, buffer._base_offline_fraction = f, base

        actions.append(apply)
    elif isinstance(buffer, MixtureReplayBuffer):
        step = _int(saved["step"], "step")
        current = saved["current"]
        if len(current) != len(buffer._names) or any(
            isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0
            for v in current
        ):
            raise CheckpointError(
                f"current fractions must be {len(buffer._names)} finite numbers >= 0, got {current!r}"
            )
        fixed, schedules = {}, {}
        for name in buffer._names:
            entry = saved["fractions"][name]
            if "fixed" in entry:
                v = entry["fixed"]
                if (
                    isinstance(v, bool)
                    or not isinstance(v, (int, float))
                    or not math.isfinite(v)
                    or v < 0
                ):
                    raise CheckpointError(
                        f"fractions[{name!r}] must be a finite number >= 0, got {v!r}"
                    )
                fixed[name] = float(v)
            else:
                schedules[name] = _restore_schedule(
                    entry["schedule"], buffer._schedules.get(name), f"fractions[{name!r}]"
                )

        def apply() -> None:
            buffer._fixed, buffer._schedules = fixed, schedules
            buffer._step, buffer._current = step, [float(v) for v in current]

        actions.append(apply)


def load_state_dict(buffer, state: dict, *, allow_offline_mismatch: bool = False) -> None:
    """Restore ``state`` (from :func:`state_dict` or :func:`read_state`) into ``buffer``.

    Everything is checked before anything is changed: on :class:`CheckpointError`
    the buffer is as it was.

    Keyword Args:
        allow_offline_mismatch: resume even when an offline source is not the one
            the state was saved with (different fingerprint, rows or schema); its
            saved sampler state is then restored only if its row count matches.
    """
    if not isinstance(state, dict):
        raise CheckpointError(f"a checkpoint state is a dict, got {type(state).__name__}")
    _check_format(state.get("format"), state.get("format_version"), "the state")
    try:
        actions = _plan(buffer, state, allow_offline_mismatch)
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
        raise CheckpointError(
            f"the checkpoint state is malformed ({type(err).__name__}: {err}); it was not written by "
            "rb.state_dict()/rb.dumps() of this mixreplay version, or it was edited"
        ) from err
    with _locked(buffer):
        for action in actions:
            action()
    if hasattr(buffer, "_refresh_layout"):
        buffer._unit_size = None
        buffer._refresh_layout()


def _check_format(fmt, version, where: str) -> None:
    if fmt != FORMAT:
        raise CheckpointError(
            f"{where} is not a mixreplay checkpoint (format {fmt!r}, expected {FORMAT!r})"
        )
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{where} has checkpoint format version {version!r}; this mixreplay ({__version__}) "
            f"reads version {FORMAT_VERSION}: load it with the mixreplay version that wrote it"
        )


def _plan(buffer, state: dict, allow_offline_mismatch: bool) -> list:
    kind, sources, _ = _anatomy(buffer)
    if state["buffer"] != kind:
        raise CheckpointError(
            f"the checkpoint holds a {state['buffer']}, not a {kind}; load it into a {state['buffer']}"
        )
    saved_sources = state["sources"]
    names = [n for n, _, _ in sources]
    if list(saved_sources) != names:
        raise CheckpointError(
            f"the checkpoint's sources are {list(saved_sources)}, this buffer's are {names}; "
            "build the buffer with the same sources, in the same order"
        )
    actions: list = []
    for i, (name, src, role) in enumerate(sources):
        saved = saved_sources[name]
        if saved["role"] != role:
            raise CheckpointError(
                f"source {name!r} was saved as {'an online ring' if saved['role'] == 'ring' else 'read-only data'}, "
                f"but is {'an online ring' if role == 'ring' else 'read-only data'} in this buffer"
            )
        same = True
        if role == "ring":
            _plan_ring(buffer, i, name, src, saved["storage"], actions)
        else:
            same = _plan_reference(name, src, saved["reference"], allow_offline_mismatch)
        if role == "ring" or same or saved["reference"].get("rows") == len(src):
            _plan_sampler(name, src, saved["sampler"], actions)
    gens = _generators(buffer)
    saved_gens = state["generators"]
    if set(saved_gens) != set(gens):
        raise CheckpointError(
            f"the checkpoint holds generators {sorted(saved_gens)}, this buffer has {sorted(gens)}; "
            "build the buffer with the same arguments (sources sharing the buffer's generator or not)"
        )
    for gname, g in gens.items():
        gstate = _check_tensor(
            saved_gens[gname]["state"], f"generator {gname!r} state", torch.uint8
        )
        try:
            torch.Generator(device=g.device).set_state(gstate)
        except (RuntimeError, TypeError, ValueError) as err:
            raise CheckpointError(
                f"generator {gname!r}: the saved state does not fit a {g.device} generator ({err})"
            ) from None
        actions.append(lambda g=g, s=gstate: g.set_state(s))
    _plan_mixing(buffer, state["mixing"], actions)
    return actions


# -- files ------------------------------------------------------------------------------------


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _file_name(parts: tuple, used: set) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", ".".join(str(p) for p in parts))[:100] or "tensor"
    name, k = f"{stem}.bin", 1
    while name in used:
        name, k = f"{stem}.{k}.bin", k + 1
    used.add(name)
    return name


def _write_tensor(t: torch.Tensor, directory: Path, name: str) -> dict:
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    raw = memoryview(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else memoryview(b"")
    with open(directory / name, "wb") as f:
        f.write(raw)
    return {
        "file": name,
        "dtype": _dtype_name(t.dtype),
        "shape": list(t.shape),
        "nbytes": raw.nbytes,
        "crc32": zlib.crc32(raw),
    }


def _encode(obj, directory: Path, parts: tuple, used: set):
    """The JSON tree of ``obj``; every tensor is written to its own file."""
    if isinstance(obj, torch.Tensor):
        return {_TENSOR: _write_tensor(obj, directory, _file_name(parts, used))}
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise CheckpointError(
                    f"cannot store the key {k!r} at {'.'.join(map(str, parts))}: keys must be strings"
                )
            out[k] = _encode(v, directory, (*parts, k), used)
        return out
    if isinstance(obj, (list, tuple)):
        return [_encode(v, directory, (*parts, i), used) for i, v in enumerate(obj)]
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise CheckpointError(
                f"cannot store {obj!r} at {'.'.join(map(str, parts))}: values must be finite"
            )
        return obj
    raise CheckpointError(
        f"cannot store a {type(obj).__name__} at {'.'.join(map(str, parts))}: checkpoints hold tensors "
        "and JSON values only (nothing is pickled)"
    )


def _read_tensor(directory: Path, entry, where: str) -> torch.Tensor:
    if not isinstance(entry, dict):
        raise CheckpointError(f"{where}: a tensor entry must be a dict, got {entry!r}")
    name = entry["file"]
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.startswith("."):
        raise CheckpointError(f"{where}: invalid tensor file name {name!r}")
    try:
        dtype = getattr(torch, entry["dtype"])
        assert isinstance(dtype, torch.dtype)
    except (AttributeError, TypeError, AssertionError):
        raise CheckpointError(f"{where}: unknown dtype {entry['dtype']!r}") from None
    shape = entry["shape"]
    if not isinstance(shape, list) or any(
        isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in shape
    ):
        raise CheckpointError(f"{where}: invalid shape {shape!r}")
    nbytes = math.prod(shape) * dtype.itemsize
    if entry["nbytes"] != nbytes:
        raise CheckpointError(
            f"{where}: nbytes {entry['nbytes']!r} does not match {entry['dtype']}{shape}"
        )
    path = directory / name
    if not path.is_file():
        raise CheckpointError(f"{path} is missing; the checkpoint is incomplete: save it again")
    size = path.stat().st_size
    if size != nbytes:
        raise CheckpointError(
            f"{path} holds {size} bytes, expected {nbytes} ({entry['dtype']}{shape}); the file is "
            "truncated or was replaced: save the checkpoint again"
        )
    buf = torch.empty(nbytes, dtype=torch.uint8)
    view = memoryview(buf.numpy())
    with open(path, "rb") as f:
        got = 0
        while got < nbytes:
            n = f.readinto(view[got:])
            if not n:
                raise CheckpointError(
                    f"{path} ended after {got} of {nbytes} bytes; the file is truncated"
                )
            got += n
    if zlib.crc32(view) != entry["crc32"]:
        raise CheckpointError(
            f"{path} is corrupt: its CRC-32 is {zlib.crc32(view):08x}, the metadata says "
            f"{entry['crc32']:08x}; save the checkpoint again"
        )
    return buf.view(dtype).reshape(shape) if nbytes else torch.empty(shape, dtype=dtype)


def _decode(obj, directory: Path, where: str):
    if isinstance(obj, dict):
        if set(obj) == {_TENSOR}:
            return _read_tensor(directory, obj[_TENSOR], where)
        return {k: _decode(v, directory, f"{where}.{k}") for k, v in obj.items()}
    if isinstance(obj, list):
        return [_decode(v, directory, f"{where}[{i}]") for i, v in enumerate(obj)]
    return obj


def _canonical(meta: dict) -> bytes:
    return json.dumps(meta, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def _checksum(meta: dict) -> str:
    return "sha256:" + hashlib.sha256(_canonical(meta)).hexdigest()


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _aside(path: Path) -> Path:
    return path.with_name(f".{path.name}.old")


def _is_checkpoint(path: Path) -> bool:
    try:
        meta = json.loads((path / METADATA).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("format") == FORMAT


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _recover(path: Path, *, cleanup: bool) -> None:
    """Finish a swap a killed writer left half done; with ``cleanup``, drop dead writers' temp dirs."""
    aside = _aside(path)
    if aside.is_dir():
        if path.exists():  # the new checkpoint is in place: the old copy is garbage
            shutil.rmtree(aside, ignore_errors=True)
        else:  # killed between the two renames: the old copy is the last complete checkpoint
            try:
                os.replace(aside, path)
                _fsync_path(path.parent)
                log.warning("recovered checkpoint %s from %s (a save was interrupted)", path, aside)
            except OSError:
                if not path.exists():
                    raise
    if cleanup:
        for tmp in path.parent.glob(f".{path.name}.tmp-*"):
            m = re.match(rf"\.{re.escape(path.name)}\.tmp-(\d+)-", tmp.name)
            if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
                shutil.rmtree(tmp, ignore_errors=True)


def _write_atomically(path: Path, encode) -> None:
    """Write ``encode(tmp_dir, used_names)``'s JSON tree as the directory ``path``, atomically.

    ``encode`` writes the tensor files into ``tmp_dir`` and returns the metadata tree;
    see the module docstring for the swap and what a crash at any instant leaves.
    """
    if path.exists() and not (path.is_dir() and (not any(path.iterdir()) or _is_checkpoint(path))):
        raise CheckpointError(
            f"{path} exists and is not a mixreplay checkpoint; refusing to replace it: "
            "choose another path or remove it"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    _recover(path, cleanup=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-{os.getpid()}-", dir=path.parent))
    try:
        used: set[str] = set()
        tree = encode(tmp, used)
        for name in used:
            _fsync_path(tmp / name)
        meta = {**tree, "byteorder": "little"}
        meta["checksum"] = _checksum(meta)
        with open(tmp / METADATA, "w") as f:
            json.dump(meta, f, indent=1, allow_nan=False)
            f.flush()
            os.fsync(f.fileno())
        _fsync_path(tmp)
        # The swap: old aside, new in, old removed; the parent is synced after each rename.
        _recover(path, cleanup=False)
        aside = _aside(path)
        if path.exists():
            os.replace(path, aside)
            _fsync_path(path.parent)
        os.replace(tmp, path)
        _fsync_path(path.parent)
        shutil.rmtree(aside, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def dumps(buffer, path: str | os.PathLike) -> Path:
    """Save ``buffer`` to the directory ``path``, atomically (see the module docstring).

    The rows are written while each storage's lock is held, so a collector thread
    extending meanwhile waits, and the checkpoint is one consistent snapshot.

    Returns:
        The checkpoint directory.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage, ReplayBuffer
        >>> def make():
        ...     return ReplayBuffer(storage=LazyTensorStorage(1000), batch_size=4, generator=0)
        >>> rb = make()
        >>> _ = rb.extend(TensorDict({"obs": torch.arange(10.0)}, [10]))
        >>> path = tempfile.mkdtemp() + "/ckpt"
        >>> rb.dumps(path)
        >>> twin = make()
        >>> twin.loads(path)
        >>> torch.equal(rb.sample()["obs"], twin.sample()["obs"])
        True
    """
    path = Path(path).expanduser().absolute()

    def encode(directory: Path, used: set) -> dict:
        with _locked(buffer):
            return _encode(_collect(buffer, copy_rows=False), directory, (), used)

    _write_atomically(path, encode)
    log.info("saved %s to %s", type(buffer).__name__, path)
    return path


def _resolve(path: Path) -> Path:
    if (path / METADATA).is_file():
        return path
    _recover(path, cleanup=False)
    if (path / METADATA).is_file():
        return path
    if not path.exists():
        raise CheckpointError(
            f"no checkpoint at {path}: the directory does not exist; save one with rb.dumps(path)"
        )
    if not path.is_dir():
        raise CheckpointError(f"{path} is a file, not a checkpoint directory")
    raise CheckpointError(
        f"{path} is not a mixreplay checkpoint: {METADATA} is missing; save one with rb.dumps(path)"
    )


def read_state(path: str | os.PathLike) -> dict:
    """Read a checkpoint directory into a state dict (tensors loaded), checking every file.

    Raises:
        CheckpointError: the directory, its metadata or a tensor file is missing,
            truncated, corrupt or edited, or its format version is unknown.
    """
    path = _resolve(Path(path).expanduser().absolute())
    return _decode_meta(path, _read_meta(path))


def _read_meta(path: Path) -> dict:
    """The verified metadata of the checkpoint directory ``path`` (format, version, checksum)."""
    meta_file = path / METADATA
    try:
        meta = json.loads(meta_file.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(
            f"{meta_file} is not valid JSON ({err}); the checkpoint is corrupt: save it again"
        ) from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{meta_file} does not hold a JSON object; the checkpoint is corrupt")
    _check_format(meta.get("format"), meta.get("format_version"), str(path))
    checksum = meta.pop("checksum", None)
    try:
        expected = _checksum(meta)
    except ValueError:
        expected = None
    if checksum != expected:
        raise CheckpointError(
            f"{meta_file} was edited or corrupted (checksum {checksum!r}, content hashes to "
            f"{expected!r}); restore the original file or save the checkpoint again"
        )
    meta.pop("byteorder", None)
    return meta


def _decode_meta(path: Path, meta) -> dict:
    try:
        return _decode(meta, path, "state")
    except KeyError as err:
        raise CheckpointError(
            f"{path / METADATA}: a tensor entry lacks {err}; the checkpoint is corrupt"
        ) from None


def save_state(path: str | os.PathLike, state: dict) -> Path:
    """Save ``state``, any nested dict of tensors and JSON values, as the directory ``path``.

    Atomic like :func:`dumps` (a crash at any instant leaves the previous or the new
    state) and checked like it when read back by :func:`load_state`. Nothing is
    pickled: keys must be strings, values tensors, dicts, lists or JSON scalars.

    Returns:
        The directory written.

    Examples:
        >>> import tempfile, torch
        >>> path = save_state(tempfile.mkdtemp() + "/state", {"step": 3, "w": torch.ones(2)})
        >>> load_state(path)
        {'step': 3, 'w': tensor([1., 1.])}
    """
    check_type(state, "state", dict, hint="save_state writes a dict of tensors and JSON values")
    path = Path(path).expanduser().absolute()

    def encode(directory: Path, used: set) -> dict:
        body = _encode(state, directory, ("state",), used)
        return {"format": FORMAT, "format_version": FORMAT_VERSION, "state": body}

    _write_atomically(path, encode)
    return path


def load_state(path: str | os.PathLike) -> dict:
    """The state saved by :func:`save_state` at ``path``, every file checked.

    A directory written by :func:`dumps` reads as that buffer's state dict (the
    one :meth:`~mixreplay.ReplayBuffer.load_state_dict` takes).

    Raises:
        CheckpointError: missing, truncated, corrupt or edited files, or an unknown format version.
    """
    path = _resolve(Path(path).expanduser().absolute())
    meta = _read_meta(path)
    return _decode_meta(path, meta["state"] if "state" in meta else meta)


def loads(buffer, path: str | os.PathLike, *, allow_offline_mismatch: bool = False) -> None:
    """Restore ``buffer`` from the checkpoint directory ``path`` (see :func:`load_state_dict`).

    If ``path`` is missing but a save into it was interrupted between its two
    renames, the previous checkpoint (``.<name>.old``) is renamed back and loaded.
    """
    path = Path(path).expanduser().absolute()
    state = read_state(path)
    try:
        load_state_dict(buffer, state, allow_offline_mismatch=allow_offline_mismatch)
    except CheckpointError as err:
        raise CheckpointError(f"cannot load {path}: {err}") from err

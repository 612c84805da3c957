"""The container format: ``metadata.json`` plus one raw file per tensor.

``metadata.json`` is one JSON object::

    {"format": "<name>", "format_version": N, "mixreplay_version": "...",
     "byteorder": "little", ...the caller's fields..., "checksum": "sha256:..."}

A tensor anywhere in the caller's fields is stored as
``{"__tensor__": {"file", "dtype", "shape", "nbytes", "crc32"}}`` and its bytes in
``<file>``: raw, little-endian, C order, so a file can be memory-mapped with
``torch.from_file`` or ``numpy.memmap``. Nothing is pickled. The checksum covers
the whole JSON (canonical form), so an edit is detected; each tensor file carries
its CRC-32 (checked when read; :func:`map_tensor` checks sizes only, since
mapping must not read the file).

Versions: a :class:`Format` names the current version and one migration per older
version (``v -> v + 1``, applied in turn), so a container written by an older
mixreplay is read as the current version, and one written by a newer mixreplay is
refused with a message that says so.

Every problem raises the caller's error class (``CheckpointError``,
``DatasetError``) naming the file and what is wrong with it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import mmap
import os
import re
import stat
import sys
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mixreplay._version import __version__

__all__ = [
    "METADATA",
    "Format",
    "TensorStream",
    "decode_tensors",
    "encode_tensors",
    "map_tensor",
    "check_container",
    "parse_strict_json",
    "read_container",
    "read_tensor",
    "write_metadata",
]

if sys.byteorder != "little":  # pragma: no cover
    raise ImportError("mixreplay's files are little-endian; big-endian hosts are not supported")

METADATA = "metadata.json"
TENSOR = "__tensor__"
_MAX_DEPTH = 64  # JSON nesting mixreplay writes stays far below this

ErrorType = Callable[[str], Exception]


@dataclass(frozen=True)
class Format:
    """A container format: its name, current version and migrations from older ones.

    Args:
        name: stored under ``"format"`` (``"mixreplay-checkpoint"``).
        version: the version written now.
        migrations: ``{v: fn}``, where ``fn(meta)`` turns version ``v``'s metadata
            (tensor entries unresolved) into version ``v + 1``'s.
        error: the exception class raised for every problem.
        what: what a container of this format is, for messages.
        checksum_since: the first version whose files all carry a checksum; from it on,
            a file without one is refused (an edit cannot skip the check by deleting it).
    """

    name: str
    version: int
    error: ErrorType
    what: str
    migrations: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]] = field(
        default_factory=dict
    )
    checksum_since: int = 1

    @property
    def oldest(self) -> int:
        v = self.version
        while v - 1 in self.migrations:
            v -= 1
        return v

    def header(self) -> dict[str, Any]:
        return {
            "format": self.name,
            "format_version": self.version,
            "mixreplay_version": __version__,
            "byteorder": "little",
        }

    def owns(self, directory: Path) -> bool:
        """Whether ``directory`` holds a container of this format (read loosely)."""
        try:
            meta = json.loads((directory / METADATA).read_bytes())
        except (OSError, ValueError, RecursionError):
            return False
        return isinstance(meta, dict) and meta.get("format") == self.name


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype(name: Any, where: str, error: ErrorType) -> torch.dtype:
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise error(f"{where}: unknown dtype {name!r}")
    return dtype


# -- writing -------------------------------------------------------------------------------


def _file_name(parts: tuple[Any, ...], used: set[str]) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", ".".join(str(p) for p in parts))[:100] or "tensor"
    stem = stem.lstrip(".") or "tensor"
    name, k = f"{stem}.bin", 1
    while name in used or name == METADATA:
        name, k = f"{stem}.{k}.bin", k + 1
    used.add(name)
    return name


class TensorStream:
    """Write one tensor file in chunks (bounded memory), e.g. a dataset's rows.

    Chunks are concatenated along dim 0; every chunk must have the dtype and
    trailing shape given here.

    Examples:
        >>> import tempfile, torch
        >>> from pathlib import Path
        >>> from mixreplay.persist import TensorStream, read_tensor
        >>> tmp = tempfile.TemporaryDirectory()
        >>> d = Path(tmp.name)
        >>> with TensorStream(d, "rows.bin", torch.int64, (2,)) as s:
        ...     s.write(torch.zeros(3, 2, dtype=torch.int64))
        ...     s.write(torch.ones(1, 2, dtype=torch.int64))
        >>> read_tensor(d, s.entry, where="rows", error=ValueError).tolist()
        [[0, 0], [0, 0], [0, 0], [1, 1]]
        >>> tmp.cleanup()
    """

    def __init__(self, directory: Path, name: str, dtype: torch.dtype, row_shape: tuple[int, ...]):
        self.name = name
        self.dtype = dtype
        self.row_shape = tuple(row_shape)
        self.rows = 0
        self._crc = 0
        self._file = open(directory / name, "wb")  # noqa: SIM115 - closed by close()
        self.entry: dict[str, Any] | None = None

    def write(self, chunk: torch.Tensor) -> None:
        if chunk.dtype != self.dtype or tuple(chunk.shape[1:]) != self.row_shape:
            raise ValueError(
                f"{self.name}: a chunk of {_dtype_name(chunk.dtype)}{list(chunk.shape)} does not "
                f"continue {_dtype_name(self.dtype)}[n, {', '.join(map(str, self.row_shape))}]"
            )
        t = chunk.detach().cpu().contiguous()
        raw: bytes | memoryview = (
            memoryview(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else b""  # type: ignore[arg-type]
        )
        self._file.write(raw)
        self._crc = zlib.crc32(raw, self._crc)
        self.rows += chunk.shape[0]

    def close(self) -> dict[str, Any]:
        """Flush and close the file; return its entry for the metadata."""
        if self.entry is None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            shape = [self.rows, *self.row_shape]
            self.entry = {
                "file": self.name,
                "dtype": _dtype_name(self.dtype),
                "shape": shape,
                "nbytes": math.prod(shape) * self.dtype.itemsize,
                "crc32": self._crc,
            }
        return self.entry

    def abort(self) -> None:
        self._file.close()

    def __enter__(self) -> TensorStream:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _write_tensor(t: torch.Tensor, directory: Path, name: str) -> dict[str, Any]:
    t = t.detach()
    rows = t.reshape(1, -1) if t.dim() == 0 else t
    with TensorStream(directory, name, t.dtype, tuple(rows.shape[1:])) as stream:
        stream.write(rows)
    entry = stream.close()
    entry["shape"] = list(t.shape)
    return entry


def encode_tensors(
    obj: Any,
    directory: Path,
    error: ErrorType,
    *,
    _parts: tuple[Any, ...] = (),
    _used: set[str] | None = None,
) -> Any:
    """``obj`` (dicts, lists, JSON values, tensors) as JSON; each tensor goes to its own file.

    Raises the caller's ``error`` for anything else (no pickling) and for non-finite floats.
    """
    used = set() if _used is None else _used
    where = ".".join(map(str, _parts)) or "the state"
    if isinstance(obj, torch.Tensor):
        return {TENSOR: _write_tensor(obj, directory, _file_name(_parts, used))}
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise error(f"cannot store the key {k!r} at {where}: keys must be strings")
            out[k] = encode_tensors(v, directory, error, _parts=(*_parts, k), _used=used)
        return out
    if isinstance(obj, (list, tuple)):
        return [
            encode_tensors(v, directory, error, _parts=(*_parts, i), _used=used)
            for i, v in enumerate(obj)
        ]
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise error(f"cannot store {obj!r} at {where}: values must be finite")
        return obj
    raise error(
        f"cannot store a {type(obj).__name__} at {where}: containers hold tensors and JSON "
        "values only (nothing is pickled)"
    )


def _canonical(meta: Mapping[str, Any]) -> bytes:
    return json.dumps(meta, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def _checksum(meta: Mapping[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(_canonical(meta)).hexdigest()


def write_metadata(directory: Path, fmt: Format, fields: Mapping[str, Any]) -> None:
    """Write ``metadata.json``: the format header, ``fields`` (already encoded) and a checksum."""
    meta = {**fmt.header(), **fields}
    meta["checksum"] = _checksum(meta)
    with open(directory / METADATA, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, allow_nan=False)
        f.flush()
        os.fsync(f.fileno())


# -- reading -------------------------------------------------------------------------------


def _depth(obj: Any, limit: int) -> int:
    stack = [(obj, 1)]
    deepest = 0
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            return deepest
        if isinstance(node, dict):
            stack.extend((v, d + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, d + 1) for v in node)
    return deepest


class _NotStrictJSON(ValueError):
    """JSON that Python reads but the standard does not allow (NaN, duplicate keys)."""


def _no_constant(name: str) -> Any:
    raise _NotStrictJSON(f"{name} is not a JSON value (mixreplay never writes it)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotStrictJSON(f"the number {text[:40]} overflows a float")
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _NotStrictJSON(f"the key {key!r} appears twice in one object")
    return out


def parse_strict_json(text: str) -> Any:
    """``json.loads`` as the JSON standard has it: NaN, Infinity and repeated keys are errors.

    Python's reader accepts all three (and reads ``1e999`` as infinity), though no
    conforming writer produces them, and a checksum cannot be computed over them.
    """
    return json.loads(
        text,
        parse_constant=_no_constant,
        parse_float=_finite_float,
        object_pairs_hook=_no_duplicates,
    )


def read_container(directory: Path, fmt: Format, *, dir_fd: int | None = None) -> dict[str, Any]:
    """Read and check ``metadata.json``; return it as the *current* version (tensors unresolved).

    Raises ``fmt.error`` naming the file for: a missing or unreadable file, text
    that is not strict UTF-8 JSON holding an object (NaN, Infinity and repeated keys
    are refused), nesting deeper than mixreplay writes, another format, a version
    newer than this mixreplay reads (or older than any migration), a missing checksum
    (from ``fmt.checksum_since`` on) and a checksum that does not match (an edited file).

    With ``dir_fd`` (the directory opened, see
    :func:`~mixreplay.persist.atomic.read_directory`), the file is opened relative to
    it; ``directory`` then only names it in messages.
    """
    error = fmt.error
    meta_file = directory / METADATA
    try:
        raw = _read_regular(meta_file, dir_fd)
    except FileNotFoundError:
        raise error(f"{meta_file} is missing: {directory} is not a complete {fmt.what}") from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise error(
                f"{meta_file} is a symbolic link; a {fmt.what} holds regular files only: "
                f"write the {fmt.what} again"
            ) from None
        if err.errno in (errno.EINVAL, errno.EISDIR):
            raise error(
                f"{meta_file} is not a regular file; the {fmt.what} is corrupt: write it again"
            ) from None
        raise error(f"cannot read {meta_file}: {err}") from None
    return check_container(raw, meta_file, fmt)


def check_container(raw: bytes, meta_file: Path, fmt: Format) -> dict[str, Any]:
    """The checks of :func:`read_container` on the bytes ``raw`` of ``meta_file``."""
    error = fmt.error
    directory = meta_file.parent
    try:
        meta = parse_strict_json(raw.decode("utf-8"))
    except _NotStrictJSON as err:
        raise error(
            f"{meta_file} is not strict JSON: {err}; the {fmt.what} was edited or is corrupt"
        ) from None
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        kind = type(err).__name__
        raise error(
            f"{meta_file} is not valid UTF-8 JSON ({kind}: {err}); the {fmt.what} is corrupt"
        ) from None
    if not isinstance(meta, dict):
        raise error(
            f"{meta_file} holds a JSON {type(meta).__name__}, not an object; the {fmt.what} is corrupt"
        )
    if _depth(meta, _MAX_DEPTH) > _MAX_DEPTH:
        raise error(
            f"{meta_file} is nested deeper than {_MAX_DEPTH} levels; the {fmt.what} is corrupt"
        )
    if meta.get("format") != fmt.name:
        raise error(
            f"{meta_file} is not a mixreplay {fmt.what} (format {meta.get('format')!r}, expected {fmt.name!r})"
        )
    version = meta.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise error(
            f"{meta_file}: format_version must be an int, got {version!r}; the {fmt.what} is corrupt"
        )
    if version > fmt.version:
        raise error(
            f"{directory} was written by mixreplay {meta.get('mixreplay_version')!r} in {fmt.what} "
            f"format version {version}; this mixreplay ({__version__}) reads versions "
            f"{fmt.oldest} to {fmt.version}: upgrade mixreplay to read it"
        )
    if version < fmt.oldest:
        raise error(
            f"{directory} has {fmt.what} format version {version}; this mixreplay ({__version__}) "
            f"reads versions {fmt.oldest} to {fmt.version}: write it again with this version"
        )
    # Every file from fmt.checksum_since on carries a checksum; older versions had none.
    if "checksum" not in meta and version >= fmt.checksum_since:
        raise error(
            f"{meta_file} has no checksum, which every {fmt.what} of format version {version} "
            f"carries; the file was edited or is corrupt: restore it or write the {fmt.what} again"
        )
    if "checksum" in meta:
        checksum = meta.pop("checksum")
        expected = _checksum(meta)  # strict JSON: every value parsed can be written back
        if checksum != expected:
            raise error(
                f"{meta_file} was edited or corrupted (checksum {checksum!r}, content hashes to "
                f"{expected!r}); restore the original file or write the {fmt.what} again"
            )
    while version < fmt.version:
        try:
            meta = fmt.migrations[version](meta)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
            raise error(
                f"{directory}: cannot migrate the {fmt.what} from format version {version} "
                f"({type(err).__name__}: {err}); it is corrupt"
            ) from None
        version += 1
        meta["format_version"] = version
    return meta


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _open(path: Path, dir_fd: int | None) -> int:
    """Open ``path`` for reading (by its name within ``dir_fd`` when given), never through a
    link, and without waiting on a FIFO (the caller checks the file is regular)."""
    flags = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0)
    if dir_fd is None:
        return os.open(path, flags)
    return os.open(path.name, flags, dir_fd=dir_fd)


def _read_regular(path: Path, dir_fd: int | None = None) -> bytes:
    """The bytes of ``path``, refusing a symbolic link or anything but a regular file."""
    fd = _open(path, dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _check_entry(
    entry: Any, where: str, error: ErrorType
) -> tuple[str, torch.dtype, list[int], int]:
    if not isinstance(entry, dict):
        raise error(f"{where}: a tensor entry must be an object, got {entry!r}")
    name = entry.get("file")
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.startswith("."):
        raise error(f"{where}: invalid tensor file name {name!r}")
    dtype = _dtype(entry.get("dtype"), where, error)
    shape = entry.get("shape")
    if not isinstance(shape, list) or any(
        isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in shape
    ):
        raise error(f"{where}: invalid shape {shape!r}")
    nbytes = math.prod(shape) * dtype.itemsize
    if entry.get("nbytes") != nbytes:
        raise error(
            f"{where}: nbytes {entry.get('nbytes')!r} does not match {entry['dtype']}{shape}"
        )
    crc = entry.get("crc32")
    if crc is not None and (
        isinstance(crc, bool) or not isinstance(crc, int) or not 0 <= crc < 2**32
    ):
        raise error(f"{where}: crc32 must be an int in [0, 2**32), got {crc!r}")
    return name, dtype, shape, nbytes


def _tensor_file(
    directory: Path, entry: Any, where: str, error: ErrorType, dir_fd: int | None
) -> tuple[Path, int, torch.dtype, list[int], int]:
    """Check a tensor entry and open its file: ``(path, fd, dtype, shape, nbytes)``.

    The file is opened once and checked through its descriptor, so what is checked
    is what is read. The caller closes ``fd``.
    """
    name, dtype, shape, nbytes = _check_entry(entry, where, error)
    path = directory / name
    try:
        fd = _open(path, dir_fd)
    except FileNotFoundError:
        raise error(f"{path} is missing; the files are incomplete: write them again") from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise error(
                f"{path} is a symbolic link; a {where} file must be a regular file inside "
                f"{directory}"
            ) from None
        raise error(f"cannot read {path}: {err}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{path} is not a regular file; the files are incomplete: write them again")
        if st.st_size != nbytes:
            raise error(
                f"{path} holds {st.st_size} bytes, expected {nbytes} ({entry['dtype']}{shape}); "
                "the file is truncated or was replaced: write it again"
            )
    except BaseException:
        os.close(fd)
        raise
    return path, fd, dtype, shape, nbytes


def read_tensor(
    directory: Path, entry: Any, *, where: str, error: ErrorType, dir_fd: int | None = None
) -> torch.Tensor:
    """Read one tensor file into memory, checking its size and CRC-32 (``dir_fd``: as :func:`read_container`)."""
    path, fd, dtype, shape, nbytes = _tensor_file(directory, entry, where, error, dir_fd)
    with os.fdopen(fd, "rb") as f:
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        buf = torch.empty(nbytes, dtype=torch.uint8)
        view = memoryview(buf.numpy())  # type: ignore[arg-type]
        got = 0
        while got < nbytes:
            n = f.readinto(view[got:])
            if not n:
                raise error(f"{path} ended after {got} of {nbytes} bytes; the file is truncated")
            got += n
    crc = entry.get("crc32")
    if crc is not None and zlib.crc32(view) != crc:
        raise error(
            f"{path} is corrupt: its CRC-32 is {zlib.crc32(view):08x}, the metadata says "
            f"{crc:08x}; write it again"
        )
    return buf.view(dtype).reshape(shape)


def map_tensor(
    directory: Path, entry: Any, *, where: str, error: ErrorType, dir_fd: int | None = None
) -> torch.Tensor:
    """Map one tensor file copy-on-write (sizes checked, no byte read; ``dir_fd``: as :func:`read_container`).

    Writes through the tensor never reach the file. The kernel is told not to read
    ahead (``MADV_RANDOM``): sampling reads rows at random, so a cold file costs page
    cache for the rows drawn, not for their neighbourhoods.
    """
    _, fd, dtype, shape, nbytes = _tensor_file(directory, entry, where, error, dir_fd)
    try:
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        mapped = mmap.mmap(fd, nbytes, access=mmap.ACCESS_COPY)
    finally:
        os.close(fd)
    if hasattr(mapped, "madvise") and hasattr(mmap, "MADV_RANDOM"):
        mapped.madvise(mmap.MADV_RANDOM)
    return torch.frombuffer(mapped, dtype=dtype).view(shape)


def decode_tensors(
    obj: Any,
    directory: Path,
    error: ErrorType,
    *,
    where: str = "state",
    dir_fd: int | None = None,
) -> Any:
    """The tree of :func:`encode_tensors` with every tensor read back (sizes and CRCs checked).

    ``dir_fd``: as :func:`read_container`.
    """
    if isinstance(obj, dict):
        if set(obj) == {TENSOR}:
            return read_tensor(directory, obj[TENSOR], where=where, error=error, dir_fd=dir_fd)
        return {
            k: decode_tensors(v, directory, error, where=f"{where}.{k}", dir_fd=dir_fd)
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [
            decode_tensors(v, directory, error, where=f"{where}[{i}]", dir_fd=dir_fd)
            for i, v in enumerate(obj)
        ]
    return obj

"""Whether a cache entry's bytes are still the ones written: a stat record and CRC-32 reads.

An entry's small files (``episodes.bin``, ``next_slots.bin``) are read in full and
CRC-checked on every open. Its large files (``rows.bin``, ``next_rows.bin``) are
memory-mapped, and reading them in full at every open would cost seconds per GiB.
So the cache keeps, beside the entry, a *verification record*
(``.<entry>.verified.json``): for each mapped file whose CRC-32 was checked, the
CRC-32 and the file's size, mtime, ctime and inode at that moment.

- :func:`check_entry` (every open): each mapped file whose size, mtime, ctime and
  inode match its record is mapped without being read; any other (no record, a
  changed stat, a record of another CRC) is read in full once and its CRC-32
  checked, and the record updated. Any write to a file moves its ctime (which no
  program can set back), so a change through the filesystem is seen at the next open.
- :func:`verify_entry` (on demand, ``mixreplay cache verify``): every file read in
  full and checked, whatever the record says: damage that leaves a file's stat as
  it was (bits rotting on the disk, a write to the raw device) is found only so.

A conversion records the files it wrote at once (their CRC-32s were computed
from the bytes as written) after setting their mtime to just before it began, so
that any later write, even in the same clock tick, leaves another mtime. A file
found changed and checked at an open is recorded only once it is a few seconds old
(:data:`RACY_NS`): a write in the same clock tick as the one recorded would leave
the same times behind.

A record that cannot be written (a read-only cache) or read costs only a check; it
is never trusted beyond the stat it holds. It lives in the cache's own directory,
never in an entry reached through a link.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import zlib
from pathlib import Path
from typing import Any

from mixreplay.errors import DatasetError

__all__ = [
    "MAPPED",
    "RACY_NS",
    "check_entry",
    "crc_file",
    "forget",
    "record_path",
    "record_written",
    "verify_entry",
]

log = logging.getLogger(__name__)

#: the metadata's file entries that are mapped at open (the others are read in full)
MAPPED = ("rows", "next_rows")
#: a file whose mtime or ctime is less than this old (ns) is not recorded yet
RACY_NS = 2 * 10**9
#: bytes read per call while checking a CRC-32
READ_BYTES = 16 << 20
RECORD_VERSION = 1


def record_path(entry: Path) -> Path:
    """Where the verification record of the cache entry ``entry`` lives (beside it)."""
    return entry.with_name(f".{entry.name}.verified.json")


def _stat(path: Path) -> list[int]:
    st = os.stat(path, follow_symlinks=False)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def crc_file(path: Path, entry: Any) -> None:
    """Read ``path`` in full (bounded memory) and check it against its metadata ``entry``.

    Raises:
        DatasetError: no CRC-32 to check against, a size that differs, or another CRC-32.
    """
    crc = entry.get("crc32") if isinstance(entry, dict) else None
    nbytes = entry.get("nbytes") if isinstance(entry, dict) else None
    if not isinstance(crc, int) or isinstance(crc, bool) or not isinstance(nbytes, int):
        raise DatasetError(
            f"{path}: the metadata holds no CRC-32 for it (a dataset of format 1), so its "
            "bytes cannot be checked; convert it again"
        )
    value, got = 0, 0
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb", buffering=0) as f:
        while True:
            block = f.read(READ_BYTES)
            if not block:
                break
            value = zlib.crc32(block, value)
            got += len(block)
    if got != nbytes:
        raise DatasetError(
            f"{path} holds {got} bytes, expected {nbytes}; the file is truncated or was replaced"
        )
    if value != crc:
        raise DatasetError(
            f"{path} is corrupt: its CRC-32 is {value:08x}, the metadata says {crc:08x}; "
            "its bytes changed since it was written"
        )


def _read_record(entry: Path) -> dict[str, Any]:
    try:
        record = json.loads(record_path(entry).read_bytes())
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(record, dict) or record.get("version") != RECORD_VERSION:
        return {}
    files = record.get("files")
    return files if isinstance(files, dict) else {}


def _write_record(entry: Path, files: dict[str, Any]) -> None:
    """Write the record (best effort: a cache that cannot take it checks again next time)."""
    target = record_path(entry)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    data = json.dumps({"version": RECORD_VERSION, "files": files}).encode()
    try:
        tmp.unlink(missing_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(tmp, flags, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, target)
    except OSError as err:
        log.debug("cannot record the check of %s (%s); the next open checks again", entry, err)
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def record_written(entry: Path, meta: dict[str, Any], started_ns: int) -> None:
    """Record the mapped files of an entry this process just wrote (best effort).

    Their CRC-32s are the ones computed from the bytes as they were written, so they
    need no reading back. Each file's mtime is set to just before the conversion began
    (``started_ns``): any later write moves it to the time of that write, which differs,
    even in the same clock tick as this record (which the ctime alone could not tell).
    """
    files: dict[str, Any] = {}
    mtime = started_ns - 10**9
    try:
        for name, file_entry in _files(meta, MAPPED):
            path = entry / name
            os.utime(path, ns=(os.stat(path).st_atime_ns, mtime), follow_symlinks=False)
            files[name] = {"crc32": file_entry.get("crc32"), "stat": _stat(path)}
    except OSError as err:
        log.debug("cannot record %s as written (%s); its first open checks it", entry, err)
        return
    _write_record(entry, files)


def forget(entry: Path) -> None:
    """Drop the record of ``entry`` (best effort): its next open reads every mapped file."""
    with contextlib.suppress(OSError):
        record_path(entry).unlink(missing_ok=True)


def _settled(stat: list[int]) -> bool:
    return max(stat[1], stat[2]) <= time.time_ns() - RACY_NS


def _files(meta: dict[str, Any], keys: tuple[str, ...] | None) -> list[tuple[str, Any]]:
    files = meta["files"]
    names = MAPPED if keys is None else keys
    return [(files[k]["file"], files[k]) for k in names if isinstance(files.get(k), dict)]


def check_entry(entry: Path, where: Path, meta: dict[str, Any]) -> None:
    """Check the mapped files of the entry at ``entry`` (its directory: ``where``).

    Each file whose stat matches the record is trusted; any other is read in full and
    its CRC-32 checked, then recorded (when settled).

    Raises:
        DatasetError: a file's bytes are not the ones written (the record is dropped).
    """
    _check(entry, where, meta, keys=MAPPED, trust_record=True)


def verify_entry(entry: Path, where: Path, meta: dict[str, Any]) -> None:
    """Read every file of the entry in full and check its CRC-32, whatever the record says.

    Raises:
        DatasetError: a file's bytes are not the ones written (the record is dropped).
    """
    _check(entry, where, meta, keys=tuple(meta["files"]), trust_record=False)


def _check(
    entry: Path, where: Path, meta: dict[str, Any], *, keys: tuple[str, ...], trust_record: bool
) -> None:
    old = _read_record(entry)
    mapped = {name for name, _ in _files(meta, MAPPED)}
    new: dict[str, Any] = {}
    changed = False
    for name, file_entry in _files(meta, keys):
        path = where / name
        try:
            before = _stat(path)
        except OSError as err:
            forget(entry)
            raise DatasetError(f"cannot read {path}: {err.strerror or err}") from None
        crc = file_entry.get("crc32")
        seen = old.get(name)
        unchanged = False
        if (
            trust_record
            and isinstance(seen, dict)
            and seen.get("crc32") == crc
            and seen.get("stat") == before
        ):
            new[name] = seen
            continue
        log.debug("checking the CRC-32 of %s (%s bytes)", path, f"{before[0]:,}")
        try:
            crc_file(path, file_entry)
        except (DatasetError, OSError) as err:
            forget(entry)
            if isinstance(err, DatasetError):
                raise
            raise DatasetError(f"cannot read {path}: {err.strerror or err}") from None
        changed = True
        with contextlib.suppress(OSError):
            unchanged = _stat(path) == before
        if name in mapped and unchanged and _settled(before):
            new[name] = {"crc32": crc, "stat": before}
    if changed and new:
        _write_record(entry, new)

"""Download one file over HTTP(S): resumable, size- and digest-checked, never half in place.

:func:`download` writes into ``.<name>.part`` beside the destination and renames
it into place only when the file is complete and checked, so a reader never sees
a partial file under the real name. What it checks:

- **size**: the length the server announces (``Content-Length``, or the total of
  ``Content-Range``) must be what arrived;
- **digest**: a SHA-256 given by the caller, and the server's own ``Repr-Digest``
  or ``Digest`` header when it sends one (RFC 9530 / RFC 3230);
- **content**: the caller's ``check(path)`` (for D4RL: the file opens as HDF5 and
  holds the D4RL arrays). A file that fails a check is deleted.

A connection that drops mid-file is resumed (``Range: bytes=<have>-``, with
``If-Range`` so that a file that changed on the server meanwhile restarts from
zero); a resumed response must also announce the total size the first one did
(``Content-Range``) and, when the server sends one, the same validator (``ETag``,
else ``Last-Modified``); otherwise (a server that ignores ``If-Range``, or sends no
validator) the partial file is dropped and the download starts over, so two
versions of a file are never spliced. With neither a validator nor a change of
size a resume cannot tell; the digests above are what catch that.

An attempt fails when the response head (connecting, the status line and the headers,
redirects included) is not complete within ``timeout`` seconds, however it trickles in;
then, in the body, when no byte arrives for ``timeout`` seconds, or fewer than
:data:`STALL_BYTES` do (a connection that drips a byte at a time). So a server that
stops sending, or drips, costs a call at most about ``retries`` × 3 × ``timeout``
seconds plus the pauses between attempts. The body is
streamed to disk as it arrives (bounded memory); a file larger than the free space
is refused before a byte is written, and a write that fails (a full disk) ends the
download at once, keeping what was written. After ``retries`` attempts the partial
file is kept and the next call resumes where this one stopped. The partial and
state files are never followed through a link. A lock file serializes processes
that download the same file. Progress is logged at INFO (every 10 %) and reported
to an optional callback: ``progress(nbytes)`` per chunk, plus
``progress.set_total(n)`` when the callback has it (the command line shows a tqdm
bar this way).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import http.client
import io
import json
import logging
import os
import re
import shutil
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mixreplay.errors import DatasetError

__all__ = ["download"]

log = logging.getLogger(__name__)

#: bytes read per chunk
CHUNK_BYTES = 1 << 20
#: seconds to wait before retrying an attempt that made no progress (doubles each time)
RETRY_DELAY_S = 1.0
#: an attempt that receives fewer bytes than this in ``timeout`` seconds has stalled
STALL_BYTES = 1024

_CONTENT_RANGE = re.compile(r"bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)")


class _Slow(TimeoutError):
    """An attempt that took too long, in words (the head's deadline, a stalled body)."""


class _Deadline:
    """When the response head must be complete; lifted once it is (the body has its own rule)."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.at: float | None = time.monotonic() + timeout

    def left(self) -> float:
        """The longest the next connect or read may wait (raises once the deadline passed)."""
        if self.at is None:
            return self.timeout
        left = self.at - time.monotonic()
        if left <= 0:
            raise self.expired()
        return min(left, self.timeout)

    def expired(self) -> _Slow:
        return _Slow(
            f"no complete response head (status line and headers) within {self.timeout:g} s "
            f"(timeout={self.timeout:g})"
        )

    def lift(self) -> None:
        self.at = None


class _DeadlineReader(io.RawIOBase):
    """A socket's reads, each waiting at most until the deadline (a socket's own timeout
    is per read: a server dripping a byte at a time would never hit it)."""

    def __init__(self, sock: socket.socket, deadline: _Deadline):
        super().__init__()
        self._sock, self._deadline = sock, deadline
        self._raw = sock.makefile("rb", buffering=0)  # counted as a user of the socket

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        self._sock.settimeout(self._deadline.left())
        try:
            return self._raw.readinto(buffer)
        except TimeoutError:
            if self._deadline.at is not None:  # a read waits at most until the deadline
                raise self._deadline.expired() from None
            raise

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


class _DeadlineSocket:
    """What ``HTTPResponse`` reads a socket through: :class:`_DeadlineReader`."""

    def __init__(self, sock: socket.socket, deadline: _Deadline):
        self._sock, self._deadline = sock, deadline

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))


class _HeadDeadline:
    """A connection whose connect and response head share one deadline."""

    _deadline: _Deadline
    timeout: float | None

    def connect(self) -> None:
        self.timeout = self._deadline.left()
        try:
            super().connect()  # type: ignore[misc]
        except TimeoutError:
            raise self._deadline.expired() from None

    def response_class(self, sock: socket.socket, *args: Any, **kwargs: Any) -> Any:
        return http.client.HTTPResponse(
            _DeadlineSocket(sock, self._deadline),  # type: ignore[arg-type]
            *args,
            **kwargs,
        )


def _opener(deadline: _Deadline) -> urllib.request.OpenerDirector:
    """urllib's opener (redirects, proxies) with connections bound by ``deadline``."""

    def bound(base: Any) -> Any:
        return type(f"Deadline{base.__name__}", (_HeadDeadline, base), {"_deadline": deadline})

    class HTTP(urllib.request.HTTPHandler):
        def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
            return super().do_open(bound(http_class), req, **kwargs)

    handlers: list[Any] = [HTTP()]
    if hasattr(urllib.request, "HTTPSHandler"):  # Python built with ssl

        class HTTPS(urllib.request.HTTPSHandler):
            def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> Any:
                return super().do_open(bound(http_class), req, **kwargs)

        handlers.append(HTTPS())
    return urllib.request.build_opener(*handlers)


def _part(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}.part")


def _state_file(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}.part.json")


@contextlib.contextmanager
def _lock(dest: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no cross-process lock
        yield
        return
    lock = dest.with_name(f".{dest.name}.lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0))
    except OSError as err:
        raise DatasetError(
            f"cannot take the download lock {lock}: {err.strerror}"
            + (" (it is a symbolic link: remove it)" if lock.is_symlink() else "")
        ) from None
    with os.fdopen(fd, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _load_state(dest: Path, url: str) -> dict[str, Any]:
    """What the previous attempt knew of the file (its validator, its size), if for ``url``."""
    try:
        state = json.loads(_state_file(dest).read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) and state.get("url") == url else {}


def _save_state(dest: Path, state: dict[str, Any]) -> None:
    _state_file(dest).write_text(json.dumps(state))


def _digests(headers: http.client.HTTPMessage) -> dict[str, str]:
    """SHA-256 digests the server announces, as hex: ``Repr-Digest`` (RFC 9530) or ``Digest``."""
    found = {}
    for name, pattern in (
        ("Repr-Digest", r"sha-256=:([A-Za-z0-9+/=]+):"),
        ("Digest", r"(?i)sha-256=([A-Za-z0-9+/=]+)"),
    ):
        value = headers.get(name)
        m = re.search(pattern, value) if value else None
        if m:
            with contextlib.suppress(ValueError):
                found[name] = base64.b64decode(m.group(1), validate=True).hex()
    return found


class _Report:
    """Logs every 10 % and forwards byte counts to the caller's callback."""

    def __init__(self, url: str, progress: Callable[[int], None] | None):
        self.url, self.progress = url, progress
        self.total: int | None = None
        self.done = 0
        self.next_log = 0

    def start(self, have: int, total: int | None) -> None:
        if total is not None and total != self.total:
            self.total = total
            setter = getattr(self.progress, "set_total", None)
            if callable(setter):
                setter(total)
        if have > self.done:  # resumed bytes count as done
            self(have - self.done)
        step = max(1, (self.total or 0) // 10) or CHUNK_BYTES * 64
        self.next_log = (self.done // step + 1) * step

    def restart(self) -> None:
        """The server sent the whole file again: count from zero."""
        if self.done and self.progress is not None:
            reset = getattr(self.progress, "reset", None)
            if callable(reset):
                reset()
        self.done = 0

    def __call__(self, n: int) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(n)
        if self.done >= self.next_log:
            step = max(1, (self.total or 0) // 10) or CHUNK_BYTES * 64
            of = f" of {self.total:,}" if self.total else ""
            log.info("downloading %s: %s%s bytes", self.url, f"{self.done:,}", of)
            self.next_log = (self.done // step + 1) * step


def download(
    url: str,
    dest: str | os.PathLike[str],
    *,
    sha256: str | None = None,
    check: Callable[[Path], None] | None = None,
    progress: Callable[[int], None] | None = None,
    retries: int = 3,
    timeout: float = 60.0,
) -> Path:
    """Download ``url`` to ``dest`` (see the module docstring); return ``dest``.

    Args:
        url: ``http://`` or ``https://``.
        dest: the file to create (its directory is created); an existing file is replaced.

    Keyword Args:
        sha256: the expected SHA-256 of the whole file, as hex.
        check: called with the complete temporary file; raises to reject it.
        progress: called with the byte count of each chunk received.
        retries: attempts before giving up (a resumed attempt counts as one; starting
            over because the file changed on the server does not).
        timeout: seconds without data (or with fewer than :data:`STALL_BYTES`) before
            an attempt fails.

    Raises:
        DatasetError: the server refused (HTTP 4xx), or the download failed after
            ``retries`` attempts or could not be written (the partial file is kept:
            call again to resume), or it cannot fit in the free space, or the file is
            not the one expected (wrong size, digest or content; it is deleted).
    """
    if not url.startswith(("http://", "https://")):
        raise DatasetError(f"cannot download {url!r}: only http:// and https:// URLs are fetched")
    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DatasetError(f"cannot create {dest.parent} to download {url} into: {err}") from None
    with _lock(dest):
        return _download(url, dest, sha256, check, _Report(url, progress), retries, timeout)


class _Changed(Exception):
    """The file on the server is not the one the partial download holds a part of."""


def _unlink_if_link(path: Path) -> None:
    """A link where a download keeps its own files is removed, never followed."""
    if path.is_symlink():
        log.warning("%s is a symbolic link; removing it (its target is left as it is)", path)
        path.unlink()


def _download(
    url: str,
    dest: Path,
    sha256: str | None,
    check: Callable[[Path], None] | None,
    report: _Report,
    retries: int,
    timeout: float,
) -> Path:
    part = _part(dest)
    for own in (part, _state_file(dest)):
        _unlink_if_link(own)
    state = _load_state(dest, url)
    if not state and part.exists():  # a partial file of another URL, or of unknown origin
        part.unlink()
    last_error = ""
    delay = RETRY_DELAY_S
    announced: dict[str, str] = {}
    attempt = 0
    while attempt < retries:
        attempt += 1
        have = part.stat().st_size if part.exists() else 0
        before = have
        headers = {"User-Agent": "mixreplay", "Accept-Encoding": "identity"}
        if have:
            headers["Range"] = f"bytes={have}-"
            validator = state.get("validator")
            if validator and not validator.startswith("W/"):  # If-Range takes strong ones only
                headers["If-Range"] = validator
        deadline = _Deadline(timeout)
        try:
            with _opener(deadline).open(  # the scheme is checked above
                urllib.request.Request(url, headers=headers), timeout=timeout
            ) as resp:
                deadline.lift()  # the head is in: the body's own stall rule applies
                total, have = _start(resp, url, part, have, state, report)
                if have == 0:  # the whole file: digests announced for another copy are void
                    announced.clear()
                announced.update(_digests(resp.headers))
                # kept in memory too: a resume within this call compares against it
                state.update(url=url, size=total)
                _save_state(dest, state)
                _check_space(url, part, have, total)
                _receive(resp, url, part, report, timeout)
        except _Changed as err:
            log.warning("%s changed on the server since %s: starting over from byte 0", url, err)
            _discard(dest)
            state = {}
            announced.clear()
            report.restart()
            attempt -= 1  # not a failure; the next request asks for the whole file
            continue
        except urllib.error.HTTPError as err:
            if err.code == 416:  # nothing left to send: complete, or our partial file is wrong
                total = _range_total(err.headers.get("Content-Range"))
                size = part.stat().st_size if part.exists() else 0
                if total is not None and size == total and state.get("size") in (None, total):
                    return _finish(url, dest, part, total, sha256, announced, check)
                _discard(dest)
                state = {}
                last_error = "the server refused the range of the partial file; restarting"
                continue
            if 400 <= err.code < 500:
                raise DatasetError(
                    f"cannot download {url}: HTTP {err.code} {err.reason}; check the dataset "
                    "name, or pass the path of a local file"
                ) from None
            last_error = f"HTTP {err.code} {err.reason}"
        except (OSError, http.client.HTTPException) as err:  # refused, reset, timed out, cut
            last_error = _describe(err, timeout)
        else:
            size = part.stat().st_size
            if total is None or size == total:
                return _finish(url, dest, part, size, sha256, announced, check)
            if size > total:
                _discard(dest)
                state = {}
                last_error = f"received {size:,} bytes, more than the {total:,} announced"
                continue
            last_error = f"the connection closed after {size:,} of {total:,} bytes"
        got = (part.stat().st_size if part.exists() else 0) - before
        log.warning(
            "download of %s interrupted (attempt %d of %d): %s", url, attempt, retries, last_error
        )
        if got <= 0 and attempt < retries:  # no progress: back off before the next attempt
            time.sleep(delay)
            delay *= 2
    have = part.stat().st_size if part.exists() else 0
    known = _load_state(dest, url).get("size")
    of = f" of {known:,}" if isinstance(known, int) else ""
    raise DatasetError(
        f"download of {url} failed after {retries} attempts ({last_error}); {have:,}{of} bytes "
        f"are kept in {part}: run again to resume"
    )


def _describe(err: BaseException, timeout: float) -> str:
    """What went wrong with an attempt, in words (a timeout says how long it waited)."""
    reason = err.reason if isinstance(err, urllib.error.URLError) else err
    if isinstance(reason, _Slow):
        return str(reason)
    if isinstance(reason, TimeoutError):
        return f"no data for {timeout:g} s (timeout)"
    return f"{type(err).__name__}: {err}"


def _check_space(url: str, part: Path, have: int, total: int | None) -> None:
    """Refuse at once a file that cannot fit, rather than fail when the disk is full."""
    if total is None:
        return
    try:
        free = shutil.disk_usage(part.parent).free
    except OSError:
        return
    if total - have > free:
        raise DatasetError(
            f"cannot download {url}: it needs {total - have:,} more bytes and {part.parent} has "
            f"{free:,} free; free some space (or set D4RL_DATASET_DIR to another disk) and run "
            "again"
        )


def _receive(
    resp: http.client.HTTPResponse, url: str, part: Path, report: _Report, timeout: float
) -> None:
    """Append the response body to ``part`` as it arrives (bounded memory).

    Raises ``TimeoutError`` when fewer than :data:`STALL_BYTES` arrive in ``timeout``
    seconds (a connection that drips a byte at a time never hits the socket's own
    timeout), and :class:`DatasetError` when the file cannot be written (a full disk:
    retrying would not help).
    """
    window_start, window_bytes = time.monotonic(), 0
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "ab") as f:
        try:
            while True:
                chunk = resp.read1(CHUNK_BYTES)  # what has arrived, at most CHUNK_BYTES
                if not chunk:
                    break
                f.write(chunk)
                report(len(chunk))
                window_bytes += len(chunk)
                now = time.monotonic()
                if now - window_start >= timeout:
                    if window_bytes < STALL_BYTES:
                        raise _Slow(
                            f"stalled: {window_bytes:,} bytes in the last {now - window_start:.1f} "
                            f"s, fewer than {STALL_BYTES:,} per {timeout:g} s (timeout={timeout:g})"
                        )
                    window_start, window_bytes = now, 0
            f.flush()
            os.fsync(f.fileno())
        except OSError as err:
            if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO):
                with contextlib.suppress(OSError):
                    f.close()
                have = part.stat().st_size if part.exists() else 0
                raise DatasetError(
                    f"cannot download {url}: writing {part} failed ({err.strerror}); {have:,} "
                    "bytes are kept there: free space (or set D4RL_DATASET_DIR elsewhere) and "
                    "run again to resume"
                ) from None
            raise


def _range_total(value: str | None) -> int | None:
    m = _CONTENT_RANGE.fullmatch(value.strip()) if value else None
    return int(m.group(3)) if m and m.group(3) != "*" else None


def _start(
    resp: http.client.HTTPResponse,
    url: str,
    part: Path,
    have: int,
    state: dict[str, Any],
    report: _Report,
) -> tuple[int | None, int]:
    """Check the response against the partial file; return ``(total size, bytes kept)``."""
    validator = resp.headers.get("ETag") or resp.headers.get("Last-Modified")
    if resp.status == 206:
        m = _CONTENT_RANGE.fullmatch((resp.headers.get("Content-Range") or "").strip())
        if not m or m.group(1) is None or int(m.group(1)) != have:
            raise http.client.HTTPException(
                f"the server answered the range {have}- with Content-Range "
                f"{resp.headers.get('Content-Range')!r}"
            )
        total = None if m.group(3) == "*" else int(m.group(3))
        if have:
            _same_file(state, total, validator)
        log.info("resuming the download of %s at byte %s", url, f"{have:,}")
    else:  # 200: the whole file (no range support, or the file changed: If-Range)
        if have:
            log.info("%s: the server sent the whole file again; restarting from byte 0", url)
            report.restart()
        part.write_bytes(b"")
        have = 0
        length = resp.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
    state["validator"] = validator
    report.start(have, total)
    return total, have


def _same_file(state: dict[str, Any], total: int | None, validator: str | None) -> None:
    """Raise :class:`_Changed` unless a resumed response continues the file the part began.

    The total size (``Content-Range``) must be the one announced before, and a validator
    (``ETag``, else ``Last-Modified``) the server sends must be the one it sent before:
    a server that ignores ``If-Range`` would otherwise splice two versions of the file.
    """
    size = state.get("size")
    if isinstance(size, int) and total != size:
        got = "an unknown size" if total is None else f"{total:,} bytes"
        raise _Changed(f"the partial download: it was {size:,} bytes, it is {got} now")
    old = state.get("validator")
    if old and validator and validator != old:
        raise _Changed(f"the partial download: its validator was {old}, it is {validator} now")


def _finish(
    url: str,
    dest: Path,
    part: Path,
    size: int,
    sha256: str | None,
    announced: dict[str, str],
    check: Callable[[Path], None] | None,
) -> Path:
    """Check the complete partial file and move it into place (or delete it and raise)."""
    expected = {"the sha256 given": sha256.lower()} if sha256 else {}
    expected.update({f"the server's {k} header": v for k, v in announced.items()})
    if expected:
        h = hashlib.sha256()
        with open(part, "rb") as f:
            for block in iter(lambda: f.read(CHUNK_BYTES), b""):
                h.update(block)
        actual = h.hexdigest()
        for what, value in expected.items():
            if value != actual:
                _discard(dest)
                raise DatasetError(
                    f"the file downloaded from {url} is corrupt: its SHA-256 is {actual}, "
                    f"{what} says {value}; it was deleted: run again to download it anew"
                )
    if check is not None:
        try:
            check(part)
        except Exception as err:  # noqa: BLE001 - any exception rejects the file
            _discard(dest)
            what = str(err) if isinstance(err, DatasetError) else f"{type(err).__name__}: {err}"
            raise DatasetError(
                f"the file downloaded from {url} was rejected ({what}); it was deleted: run "
                "again to download it anew, or check the URL"
            ) from err
    try:
        os.replace(part, dest)
    except OSError as err:
        raise DatasetError(
            f"cannot move the file downloaded from {url} to {dest}: {err.strerror}; it is kept "
            f"in {part}: remove what is at {dest} and run again"
        ) from None
    _state_file(dest).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        fd = os.open(dest.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    log.info("downloaded %s to %s (%s bytes)", url, dest, f"{size:,}")
    return dest


def _discard(dest: Path) -> None:
    _part(dest).unlink(missing_ok=True)
    _state_file(dest).unlink(missing_ok=True)

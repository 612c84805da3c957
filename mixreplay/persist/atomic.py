"""Atomic directory writes: a directory at ``path`` is replaced whole, or not at all.

Writers. :func:`atomic_directory` yields a temporary sibling ``.<name>.tmp-<pid>-<random>``
to write into. When the block ends without an error it fsyncs every file and the
directory, then swaps: the previous directory (if any) is renamed to ``.<name>.old``,
the new one renamed to ``<name>``, the parent fsynced after each rename, and the old
copy renamed to a temporary name and removed. A process killed at any instant therefore
leaves a complete directory: ``<name>``, or, when killed between the two renames,
``.<name>.old``, which the next writer renames back (:func:`recover`). Temporary
siblings whose writer process is dead are removed by the next write; those of live
writers are left alone. Writers swap one at a time: each holds an exclusive
``flock`` on the parent directory while it recovers and swaps (never while it writes),
so several processes or threads may save to one path at once; the last to swap wins.

Readers never change anything (:func:`read_directory`). They open the directory once
and read every file relative to it, so a swap during the read does not mix two
versions; a reader that finds ``<name>`` missing while a swap is between its renames
reads ``.<name>.old`` (the previous complete directory); and a read whose directory a
writer removed meanwhile starts again on the new one. Readers take no lock, so a
stopped or slow reader never holds up a save.

A destination that is a symbolic link is followed: the directory it points to is
replaced, and the link keeps pointing at the new one.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

try:
    import fcntl
except ImportError:  # pragma: no cover - not a POSIX system: writers are not serialized
    fcntl = None  # type: ignore[assignment]

__all__ = ["atomic_directory", "fsync_path", "read_directory", "recover"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: how many times a reader starts again when writers keep replacing the directory it reads
READ_ATTEMPTS = 8


def fsync_path(path: Path) -> None:
    """Flush a file or directory to disk (its data and its entry)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _aside(path: Path) -> Path:
    return path.with_name(f".{path.name}.old")


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-old{secrets.token_hex(4)}")


def _temp_pattern(path: Path) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(path.name)}\.tmp-(\d+)-")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def destination(path: str | os.PathLike[str]) -> Path:
    """The directory a write to ``path`` replaces: absolute, with a final symlink followed."""
    out = Path(path).expanduser().absolute()
    if out.is_symlink():
        out = out.resolve()
    return out


@contextlib.contextmanager
def _writers_lock(parent: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``parent``: one writer recovers or swaps at a time."""
    fd = os.open(parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as err:  # a filesystem without flock: writers are not serialized
                log.debug("cannot lock %s (%s); concurrent writers are not serialized", parent, err)
        yield
    finally:
        os.close(fd)  # releases the lock


def _remove(path: Path) -> None:
    """Remove ``path``: a directory tree, or a file or link itself (a link is never followed)."""
    try:
        if path.is_symlink() or not path.is_dir():
            path.unlink()
        else:
            shutil.rmtree(path, ignore_errors=True)
    except FileNotFoundError:
        pass
    except OSError as err:
        log.warning("cannot remove %s: %s", path, err)


def _is_real_directory(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _discard(directory: Path) -> None:
    """Remove what is at a name nobody reads any more (renamed away first, then removed)."""
    trash = _temp_name(directory)
    try:
        os.replace(directory, trash)
    except FileNotFoundError:
        return
    _remove(trash)


def _recover_locked(path: Path) -> None:
    aside = _aside(path)
    if not os.path.lexists(aside):
        return
    if path.exists() or not _is_real_directory(aside):
        # the new directory is in place (the old copy is garbage), or the name holds
        # something no swap leaves there (a file, a link): neither is recovered
        _discard(aside)
    else:  # killed between the two renames: the old copy is the last complete one
        os.replace(aside, path)
        fsync_path(path.parent)
        log.warning("recovered %s from %s (a write was interrupted)", path, aside)


def _remove_dead_writers_temp(path: Path) -> None:
    pattern = _temp_pattern(path)
    for tmp in path.parent.glob(f".{path.name}.tmp-*"):
        m = pattern.match(tmp.name)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            log.info("removing %s, left by a writer that died", tmp)
            _remove(tmp)


def recover(path: Path, *, cleanup: bool = False) -> None:
    """Finish a swap a killed writer left half done; with ``cleanup``, drop dead writers' temp dirs.

    Takes the writers' lock, so it never mistakes a swap in progress for an
    interrupted one. Readers need not call it (see :func:`read_directory`).
    """
    if not path.parent.is_dir():
        return
    with _writers_lock(path.parent):
        _recover_locked(path)
    if cleanup:
        _remove_dead_writers_temp(path)


def _sync_tree(root: Path) -> None:
    for dirpath, _, files in os.walk(root):
        for name in files:
            fsync_path(Path(dirpath) / name)
        fsync_path(Path(dirpath))


def _default_permissions(directory: Path) -> None:
    """Give the finished directory the mode of a plain ``mkdir`` (``mkdtemp`` makes it 0700)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(directory, 0o777 & ~umask)


@contextlib.contextmanager
def atomic_directory(
    path: str | os.PathLike[str],
    *,
    replaceable: Callable[[Path], bool],
    error: Callable[[str], Exception],
    what: str,
) -> Iterator[Path]:
    """Write a directory that replaces ``path`` atomically (see the module docstring).

    Args:
        path: the directory to create or replace.

    Keyword Args:
        replaceable: tells whether an existing directory at ``path`` may be replaced
            (one of ours); an empty directory always may. Anything else is refused.
        error: builds the exception raised when ``path`` is not replaceable.
        what: what is written, for messages (``"checkpoint"``, ``"dataset"``).

    Yields:
        The temporary directory to write into. If the block raises, it is removed
        and ``path`` is left as it was.
    """
    final = destination(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    with _writers_lock(final.parent):  # no other writer is between its renames
        _recover_locked(final)
        if final.exists() and not (
            final.is_dir() and (not any(final.iterdir()) or replaceable(final))
        ):
            raise error(
                f"{final} exists and is not a mixreplay {what}; refusing to replace it: "
                "choose another path or remove it"
            )
    _remove_dead_writers_temp(final)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-{os.getpid()}-", dir=final.parent))
    try:
        yield tmp
        _sync_tree(tmp)
        _default_permissions(tmp)
        aside = _aside(final)
        with _writers_lock(final.parent):
            _recover_locked(final)
            if final.exists():
                os.replace(final, aside)
                fsync_path(final.parent)
            os.replace(tmp, final)
            fsync_path(final.parent)
            old = _temp_name(final)
            with contextlib.suppress(FileNotFoundError):
                os.replace(aside, old)
        _remove(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# -- reading -------------------------------------------------------------------------------


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _open_directory(final: Path) -> tuple[Path, int] | None:
    """Open ``final``, or the previous directory a swap in progress left aside; ``None``: neither.

    A swap renames ``final`` aside, the new directory to ``final``, then the aside copy
    away: a reader can find both names missing for an instant, so it looks again.
    """
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    aside = _aside(final)
    for _ in range(READ_ATTEMPTS):
        try:
            return final, os.open(final, flags)
        except FileNotFoundError:
            pass
        try:  # only a real directory: a swap never leaves a file or a link there
            return aside, os.open(aside, flags | getattr(os, "O_NOFOLLOW", 0))
        except (FileNotFoundError, NotADirectoryError):
            pass
        except OSError as err:
            if err.errno != errno.ELOOP:
                raise
    return None


def _still_there(final: Path, fd: int) -> bool:
    """Whether the directory open as ``fd`` is still ``final`` or its aside copy (not replaced)."""
    mine = os.fstat(fd)
    if mine.st_nlink == 0:
        return False
    for candidate in (final, _aside(final)):
        try:
            if _identity(os.stat(candidate)) == _identity(mine):
                return True
        except OSError:
            continue
    return False


def read_directory(path: Path, read: Callable[[Path, int], T]) -> T:
    """``read(directory, dir_fd)`` on the directory at ``path``, changing nothing on disk.

    ``read`` must open every file relative to ``dir_fd`` (see
    :func:`~mixreplay.persist.container.read_container`), so that what it reads is one
    version of the directory whatever writers do meanwhile; ``directory`` is the path
    to name in messages (``path``, or its aside copy when a save is between its renames
    or was killed there). When ``read`` raises because a writer removed the directory
    under it, it is called again on the directory now in place.

    Raises:
        FileNotFoundError: nothing at ``path`` (nor aside).
        NotADirectoryError: ``path`` is not a directory.
        Whatever ``read`` raises on a directory that stayed in place.
    """
    attempt = 0
    while True:
        attempt += 1
        opened = _open_directory(path)
        if opened is None:
            raise FileNotFoundError(2, "no such directory", str(path))
        directory, fd = opened
        try:
            if directory != path:
                log.info(
                    "reading %s: a save of %s is between its renames, or was killed there",
                    directory,
                    path,
                )
            return read(directory, fd)
        except Exception:
            if attempt < READ_ATTEMPTS and not _still_there(path, fd):
                log.debug("%s was replaced while being read; reading it again", path)
                continue
            raise
        finally:
            os.close(fd)

"""Atomic directory writes: a directory at ``path`` is replaced whole, or not at all.

:func:`atomic_directory` yields a temporary sibling ``.<name>.tmp-<pid>-<random>``
to write into. When the block ends without an error it fsyncs every file and the
directory, then swaps: the previous directory (if any) is renamed to
``.<name>.old``, the new one renamed to ``<name>``, the parent fsynced after each
rename, and only then ``.<name>.old`` is removed. A process killed at any instant
therefore leaves a complete directory: ``<name>``, or, when killed between the two
renames, ``.<name>.old``, which :func:`recover` (run by every later read and write)
renames back. Temporary siblings whose writer process is dead are removed by the
next write; those of live writers are left alone. One writer per path at a time.

A destination that is a symbolic link is followed: the directory it points to is
replaced, and the link keeps pointing at the new one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["atomic_directory", "fsync_path", "recover"]

log = logging.getLogger(__name__)


def fsync_path(path: Path) -> None:
    """Flush a file or directory to disk (its data and its entry)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _aside(path: Path) -> Path:
    return path.with_name(f".{path.name}.old")


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


def recover(path: Path, *, cleanup: bool = False) -> None:
    """Finish a swap a killed writer left half done; with ``cleanup``, drop dead writers' temp dirs."""
    aside = _aside(path)
    if aside.is_dir():
        if path.exists():  # the new directory is in place: the old copy is garbage
            shutil.rmtree(aside, ignore_errors=True)
        else:  # killed between the two renames: the old copy is the last complete one
            try:
                os.replace(aside, path)
                fsync_path(path.parent)
                log.warning("recovered %s from %s (a write was interrupted)", path, aside)
            except OSError:
                if not path.exists():
                    raise
    if cleanup and path.parent.is_dir():
        pattern = _temp_pattern(path)
        for tmp in path.parent.glob(f".{path.name}.tmp-*"):
            m = pattern.match(tmp.name)
            if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
                log.info("removing %s, left by a writer that died", tmp)
                shutil.rmtree(tmp, ignore_errors=True)


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
    if final.exists() and not (final.is_dir() and (not any(final.iterdir()) or replaceable(final))):
        raise error(
            f"{final} exists and is not a mixreplay {what}; refusing to replace it: "
            "choose another path or remove it"
        )
    final.parent.mkdir(parents=True, exist_ok=True)
    recover(final, cleanup=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-{os.getpid()}-", dir=final.parent))
    try:
        yield tmp
        _sync_tree(tmp)
        _default_permissions(tmp)
        recover(final)
        aside = _aside(final)
        if final.exists():
            os.replace(final, aside)
            fsync_path(final.parent)
        os.replace(tmp, final)
        fsync_path(final.parent)
        shutil.rmtree(aside, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

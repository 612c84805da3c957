"""The persistence layer against damaged, crafted and odd files.

Each case damages a saved checkpoint the way a disk, a crash or a person can, then loads it
(or saves over it): a load is a ``CheckpointError`` naming the file, never a hang or another
exception; a save succeeds without touching anything outside the checkpoint's own names.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from mixreplay import CheckpointError, CheckpointNotFoundError, LazyTensorStorage, ReplayBuffer
from mixreplay.checkpoint import load_state
from mixreplay.persist.container import _checksum

METADATA = "metadata.json"
ROWS = "storage.rows.bin"
GENERATOR = "_rng.state.bin"


def _buffer():
    return ReplayBuffer(storage=LazyTensorStorage(50), batch_size=4, generator=0)


def _rows(start, n):
    return TensorDict(
        {"id": torch.arange(start, start + n, dtype=torch.float32).unsqueeze(-1)}, [n]
    )


@pytest.fixture
def saved(tmp_path):
    rb = _buffer()
    rb.extend(_rows(0, 5))
    rb.dumps(tmp_path / "ck")
    return tmp_path / "ck"


@pytest.fixture
def no_hang():
    """Fail instead of blocking forever (a FIFO opened for reading waits for a writer)."""

    def alarm(*_):
        raise TimeoutError("the load blocked")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _replace(path: Path, make) -> None:
    path.unlink()
    make(path)


def _retype(name: str, dtype: str, shape_of):
    """Give a tensor entry another dtype over the same bytes (CRC and checksum still match)."""

    def edit(path):
        meta = json.loads((path / METADATA).read_text())
        del meta["checksum"]
        for node in _entries(meta["state"]):
            if node["file"] == name:
                node["dtype"], node["shape"] = dtype, shape_of(node["shape"])
        meta["checksum"] = _checksum(meta)
        (path / METADATA).write_text(json.dumps(meta))

    return edit


def _entries(obj):
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            yield obj["__tensor__"]
        for v in obj.values():
            yield from _entries(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _entries(v)


def _edit_raw(edit):
    def apply(path):
        meta = json.loads((path / METADATA).read_text())
        edit(meta)
        (path / METADATA).write_text(json.dumps(meta))

    return apply


DAMAGE = {
    "a FIFO in place of a tensor file": (
        lambda p: _replace(p / ROWS, os.mkfifo),
        rf"{ROWS} is not a regular file; the files are incomplete",
    ),
    "a directory in place of a tensor file": (
        lambda p: _replace(p / ROWS, Path.mkdir),
        rf"{ROWS} is not a regular file",
    ),
    "a FIFO in place of metadata.json": (
        lambda p: _replace(p / METADATA, os.mkfifo),
        r"metadata.json is not a regular file; the checkpoint is corrupt",
    ),
    "a directory in place of metadata.json": (
        lambda p: _replace(p / METADATA, Path.mkdir),
        r"metadata.json is not a regular file; the checkpoint is corrupt",
    ),
    "metadata.json a link to a copy outside": (
        lambda p: (
            shutil.move(p / METADATA, p.parent / "copy.json"),
            (p / METADATA).symlink_to(p.parent / "copy.json"),
        ),
        r"metadata.json is a symbolic link; a checkpoint holds regular files only",
    ),
    "metadata.json cut short": (
        lambda p: (p / METADATA).write_bytes((p / METADATA).read_bytes()[:100]),
        r"metadata.json is not valid UTF-8 JSON \(JSONDecodeError",
    ),
    "a tensor file grown by a few bytes": (
        lambda p: (p / ROWS).write_bytes((p / ROWS).read_bytes() + b"\0" * 8),
        rf"{ROWS} holds 48 bytes, expected 40 \(int64\[5, 1\]\); the file is truncated or was "
        "replaced",
    ),
    "the rows read as float64 (same bytes)": (
        _retype(ROWS, "float64", lambda s: s),
        r"storage: the saved rows must be an int64\[5, 1\] tensor, got torch.float64\[5, 1\]",
    ),
    "the generator state read as int8 (same bytes)": (
        _retype(GENERATOR, "int8", lambda s: s),
        r"_rng: a generator state must be a uint8 tensor, got torch.int8\[5056\]",
    ),
    "the generator state read as int64 (same bytes)": (
        _retype(GENERATOR, "int64", lambda s: [s[0] // 8]),
        r"_rng: a generator state must be a uint8 tensor, got torch.int64\[632\]",
    ),
    "a checksum that is a number": (
        _edit_raw(lambda m: m.update(checksum=12345)),
        r"metadata.json was edited or corrupted \(checksum 12345",
    ),
    "the checkpoint directory replaced by a file": (
        lambda p: (shutil.rmtree(p), p.write_text("not a directory")),
        r"ck is a file, not a checkpoint directory",
    ),
}


@pytest.mark.parametrize("what", sorted(DAMAGE))
def test_a_damaged_checkpoint_is_a_checkpoint_error(saved, no_hang, what):
    damage, match = DAMAGE[what]
    damage(saved)
    rb = _buffer()
    rb.extend(_rows(100, 2))
    before = rb.state_dict()
    with pytest.raises(CheckpointError, match=match):
        rb.loads(saved)
    assert rb.storage.column("id").squeeze(-1).tolist() == [100.0, 101.0]
    assert rb.state_dict()["storage"]["write_count"] == before["storage"]["write_count"]


# -- what a save may replace or remove: only its own names, never through a link ------------


def test_a_file_where_the_aside_copy_goes_does_not_stop_saves(saved):
    (saved.parent / ".ck.old").write_text("left by something else")
    rb = _buffer()
    rb.extend(_rows(0, 7))
    rb.dumps(saved)
    assert sorted(p.name for p in saved.parent.iterdir()) == ["ck"]
    twin = _buffer()
    twin.loads(saved)
    assert len(twin) == 7


def test_a_link_where_the_aside_copy_goes_is_neither_read_nor_followed(saved):
    outside = saved.parent / "outside"
    shutil.move(saved, outside)  # a checkpoint elsewhere, linked in place of an aside copy
    (saved.parent / ".ck.old").symlink_to(outside)
    with pytest.raises(CheckpointNotFoundError):
        load_state(saved)
    rb = _buffer()
    rb.extend(_rows(0, 7))
    rb.dumps(saved)
    assert sorted(p.name for p in saved.parent.iterdir()) == ["ck", "outside"]
    assert len(load_state(outside)["storage"]["rows"]) == 5  # untouched


def test_a_dead_writers_temporary_name_that_is_a_link_is_removed_not_followed(saved):
    victim = saved.parent / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    (saved.parent / ".ck.tmp-999999999-x").symlink_to(victim)  # pid 999999999 is not alive
    rb = _buffer()
    rb.extend(_rows(0, 7))
    rb.dumps(saved)
    assert sorted(p.name for p in saved.parent.iterdir()) == ["ck", "victim"]
    assert (victim / "keep.txt").read_text() == "mine"


# -- a read-only filesystem ------------------------------------------------------------------

_CHILD = """
import os, sys, torch
from tensordict import TensorDict
from mixreplay import LazyTensorStorage, ReplayBuffer
path = sys.argv[1]
rb = ReplayBuffer(storage=LazyTensorStorage(50), batch_size=4, generator=0)
for what in ("loads", "dumps"):
    try:
        getattr(rb, what)(path)
        print(what, "ok", len(rb))
    except Exception as err:
        print(what, f"{type(err).__name__}: {err}")
"""


@pytest.mark.heavy  # a subprocess in a private mount namespace (a read-only mount)
def test_a_checkpoint_on_a_read_only_filesystem_loads_and_a_save_there_says_why_not(saved):
    """Even with its save interrupted between the renames: reading needs no write."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) for a private read-only mount")
    root = saved.parent
    os.replace(saved, root / ".ck.old")
    before = sorted((p.name, p.stat().st_mtime_ns) for p in root.rglob("*"))
    script = f'mount --bind "{root}" "{root}" && mount -o remount,bind,ro "{root}" && exec "$@"'
    cmd = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
    out = subprocess.run(
        [*cmd, "sh", "-c", script, "sh", sys.executable, "-c", _CHILD, str(saved)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if out.returncode and "mount" in out.stderr:
        pytest.skip(f"cannot make a private read-only mount here: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "loads ok 5"
    assert lines[1].startswith(f"dumps OSError: [Errno 30] cannot save a checkpoint at {saved}: ")
    assert "Read-only file system" in lines[1]
    assert sorted((p.name, p.stat().st_mtime_ns) for p in root.rglob("*")) == before

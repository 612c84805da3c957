"""Writes are whole or not at all: refused writes, odd dtypes, full disks, concurrent first writes."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest
import torch
from tensordict import TensorDict

from mixreplay import LazyMemmapStorage, LazyTensorStorage, SchemaMismatchError
from tests.conftest import ted_rows


def _snapshot(s):
    return (
        None if s.schema is None else s.state_dict(),
        len(s),
        s.cursor,
        s.write_count,
        s.schema,
    )


def _same(a, b) -> None:
    assert a[1:] == b[1:]
    if a[0] is None:
        assert b[0] is None
    else:
        assert torch.equal(a[0]["rows"], b[0]["rows"])


@pytest.mark.parametrize("kind", ["memory", "memmap"])
def test_a_write_that_fails_midway_tears_no_row_in_a_full_ring(kind, tmp_path, monkeypatch):
    """Issue 11.1: a write that fails after some of its keys were copied leaves no trace.

    Whatever makes packing fail (a tensor that cannot be copied, an allocation), it
    fails after the first dtype group is written; the ring, schema and counters must
    be exactly as before, with no row holding the new row's first keys.
    """
    from mixreplay.layout import RowLayout

    s = LazyTensorStorage(4) if kind == "memory" else LazyMemmapStorage(4, scratch_dir=tmp_path)
    s.extend(ted_rows(6))  # full and wrapped: the next write overwrites slot 2
    before = _snapshot(s)
    original, original_leaves = RowLayout.write, RowLayout.write_leaves

    def fail_after_first_group(self, leaves, views, rows=None):
        original(self, leaves, views[:1], rows)
        raise RuntimeError("simulated failure half way through packing")

    def fail_after_first_leaf(self, leaves, views):  # small writes copy leaf by leaf
        original_leaves(self, leaves[:1], views[:1])
        raise RuntimeError("simulated failure half way through packing")

    monkeypatch.setattr(RowLayout, "write", fail_after_first_group)
    monkeypatch.setattr(RowLayout, "write_leaves", fail_after_first_leaf)
    with pytest.raises(RuntimeError, match="half way"):
        s.extend(ted_rows(1, tag=9.0))
    monkeypatch.undo()
    _same(before, _snapshot(s))
    assert float(s[:]["observation"].max()) < 9.0  # no slot holds a piece of the refused row


def test_a_tensor_that_requires_grad_is_stored_as_its_value():
    """A policy output not detached used to fail halfway through packing (torn row)."""
    s = LazyTensorStorage(4)
    s.extend(ted_rows(6))
    row = ted_rows(1, tag=5.0)
    action = torch.full((1, 2), 5.0, requires_grad=True) * 1.0  # part of a graph
    row["action"] = action
    (slot,) = s.extend(row).tolist()
    stored = s[slot]
    assert torch.equal(stored["action"], action.detach()[0])
    assert not stored["action"].requires_grad
    assert stored["next", "reward"].item() == 0.0  # the whole row is the new one


def test_a_refused_first_write_installs_no_schema():
    s = LazyTensorStorage(4)
    bad = ted_rows(2)
    bad["name"] = "a string"  # not a tensor: refused whole
    with pytest.raises(TypeError, match="key 'name' holds a NonTensorData, not a tensor"):
        s.extend(bad)
    assert s.schema is None and len(s) == 0 and s.write_count == 0
    s.extend(ted_rows(2, obs_dim=5))  # any schema may still come first
    assert s.schema["observation"].shape == (5,)


def test_non_tensor_values_are_refused_not_dropped():
    """Issue 11.7: strings in a row used to vanish from the stored rows without an error."""
    s = LazyTensorStorage(4)
    s.extend(ted_rows(2))
    bad = ted_rows(2)
    bad["note"] = "hello"
    with pytest.raises(TypeError, match="key 'note' holds a NonTensorData"):
        s.extend(bad)
    assert len(s) == 2


def test_complex128_rows_of_an_odd_number_of_words():
    """Issue 11.7: complex128 leaves with an odd word count used to break the storage for good."""
    td = TensorDict(
        {
            "z": torch.randn(5, 1, dtype=torch.complex128),
            "flag": torch.ones(5, 1, dtype=torch.bool),
        },
        [5],
    )
    s = LazyTensorStorage(8)
    s.extend(td)
    assert s.row_bytes % 16 == 0
    assert torch.equal(s[:]["z"], td["z"])
    s.extend(td)
    assert torch.equal(s[torch.tensor([7])]["z"], td["z"][2:3])


def test_two_threads_racing_the_first_write_cannot_both_install_a_schema():
    """Issue 11.7: the schema check of the first write sat outside the lock."""
    for _ in range(50):
        s = LazyTensorStorage(100)
        barrier = threading.Barrier(2)
        errors = []

        def write(td, s=s, barrier=barrier, errors=errors):
            barrier.wait()
            try:
                s.extend(td)
            except SchemaMismatchError as err:
                errors.append(err)

        threads = [
            threading.Thread(target=write, args=(ted_rows(3, obs_dim=3),)),
            threading.Thread(target=write, args=(ted_rows(3, obs_dim=4),)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(errors) == 1  # exactly one of the two schemas won
        assert len(s) == 3 and s.write_count == 3
        assert s[:]["observation"].shape[-1] == s.schema["observation"].shape[0]


# -- memory-mapped rings: the disk ---------------------------------------------------------------


DISK_FULL = textwrap.dedent(
    """
    import sys, torch
    from tensordict import TensorDict
    from mixreplay import LazyMemmapStorage
    s = LazyMemmapStorage(100_000, scratch_dir=sys.argv[1])
    try:
        s.extend(TensorDict({"obs": torch.zeros(4, 64)}, [4]))  # 100k x 256 B: 25.6 MB
    except OSError as err:
        print("OSError", err.errno, err)
        sys.exit(0)
    print("no error")
    """
)


@pytest.mark.heavy  # a subprocess in a private mount namespace (a small tmpfs)
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_a_full_disk_is_an_oserror_naming_path_and_bytes(tmp_path):
    """Issue 11.2: a sparse ring on a full filesystem died with SIGBUS; its blocks are reserved now.

    The ring lives on a 1 MiB tmpfs mounted in a private mount namespace.
    """
    mnt = tmp_path / "small"
    mnt.mkdir()
    script = tmp_path / "fill.py"
    script.write_text(DISK_FULL)
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces are not available here: {probe.stderr.decode().strip()}")
    cmd = f"mount -t tmpfs -o size=1M tmpfs {mnt} && {sys.executable} {script} {mnt}; echo exit=$?"
    out = subprocess.run(
        ["unshare", "-rm", "sh", "-c", cmd],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert "exit=0" in out.stdout, out.stdout + out.stderr
    assert "OSError 28" in out.stdout, out.stdout + out.stderr  # ENOSPC, not SIGBUS (exit 135)
    assert str(mnt) in out.stdout and "25,600,000 bytes" in out.stdout


def _private_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR


def test_default_scratch_files_are_unlinked_once_mapped(tmp_path, monkeypatch):
    """Issues 11.2 and 18.13: a default scratch file is never left in the temp dir."""
    _private_tmp(tmp_path, monkeypatch)
    s = LazyMemmapStorage(10, dedup_next=True)
    td = ted_rows(3)
    s.extend(td)
    assert list(tmp_path.iterdir()) == [] and s.filename is None  # rows and exception pool
    assert torch.equal(s[:]["observation"], td["observation"])
    s.close()
    assert len(s) == 0
    s.extend(ted_rows(2))  # a closed storage allocates again on its next write
    assert list(tmp_path.iterdir()) == [] and len(s) == 2


@pytest.mark.heavy  # processes that import torch, then are killed
def test_default_scratch_files_outlive_no_killed_process(tmp_path):
    """Issue 18.13: SIGKILL runs no cleanup, so the files must be gone before it."""
    code = (
        "import os, signal, torch\n"
        "from tensordict import TensorDict\n"
        "from mixreplay import LazyMemmapStorage\n"
        "s = LazyMemmapStorage(1000, dedup_next=True)\n"
        "obs = torch.arange(40.0).view(20, 2)\n"
        "s.extend(TensorDict({'observation': obs[:-1], 'next': {'observation': obs[1:] + 0.5}}, [19]))\n"
        "print(s.exceptions, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        timeout=300,
    )
    assert out.returncode == -9, out.stderr
    assert int(out.stdout) > 0  # the exception pool was made too
    assert list(tmp_path.iterdir()) == []


def test_default_scratch_files_kept_when_asked(tmp_path, monkeypatch):
    """TorchRL's auto_cleanup=False keeps the files (and says where they are)."""
    _private_tmp(tmp_path, monkeypatch)
    s = LazyMemmapStorage(10, auto_cleanup=False)
    s.extend(ted_rows(3))
    assert s.filename is not None and os.path.exists(s.filename)
    del s
    gc.collect()
    assert len(list(tmp_path.rglob("rows-*.bin"))) == 1


def test_a_given_scratch_dir_keeps_the_directory_and_loses_the_file(tmp_path):
    s = LazyMemmapStorage(10, scratch_dir=tmp_path / "mine")
    s.extend(ted_rows(2))
    assert len(list((tmp_path / "mine").iterdir())) == 1
    s.close()
    assert (tmp_path / "mine").is_dir() and list((tmp_path / "mine").iterdir()) == []

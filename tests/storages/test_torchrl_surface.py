"""TorchRL's storage surface on mixreplay's storages: set/get, dumps/loads, cleanup and arguments.

Issue 19: storages had no ``set``/``get``/``dumps``/``loads``/``cleanup``, refused
``compilable=False`` (TorchRL's default, passed explicitly), ``existsok``, ``auto_cleanup``.
"""

from __future__ import annotations

import copy
import io
import os
import pickle
import subprocess
import sys

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    CheckpointError,
    FrozenStorage,
    LazyMemmapStorage,
    LazyTensorStorage,
    ReplayBuffer,
    TensorStorage,
)


def rows(n: int, start: int = 0) -> TensorDict:
    return TensorDict({"x": torch.arange(start, start + n), ("n", "y"): torch.ones(n, 2)}, [n])


@pytest.fixture(params=["memory", "memmap"])
def ring(request, tmp_path):
    if request.param == "memory":
        return lambda n: LazyTensorStorage(n)
    return lambda n: LazyMemmapStorage(n, scratch_dir=tmp_path / "scratch")


def test_set_writes_rows_at_slots_and_counts_them(ring):
    s = ring(5)
    s.set(range(3), rows(3))  # TorchRL's first write: the rows count as written
    assert (len(s), s.write_count, s.cursor) == (3, 3, 3)
    s.set(4, rows(1, 40)[0])  # an int slot takes one row
    # as in TorchRL, the length counts the rows written and rows are read in [0, len):
    # slot 3 was never written, slot 4 holds the row but is not read yet
    assert len(s) == 4 and s.get(3)["x"].item() == 0
    s.set([0, 1], rows(2, 10), set_cursor=False)  # in place: no new rows
    assert (len(s), s.write_count) == (4, 4)
    assert s.get(range(4))["x"].tolist() == [10, 11, 2, 0]
    s.set(slice(0, 5), rows(5, 100))
    assert (len(s), s.write_count, s.cursor) == (5, 9, 0)  # full: the cursor follows the last slot
    assert s.get(-1)["x"].item() == 104


@pytest.mark.parametrize(
    "cursor, data, err, match",
    [
        (range(3), rows(2), ValueError, r"set\(\) got 2 rows for 3 slots"),
        ([0, 9], rows(2), IndexError, r"set\(\) slots must be in 0\.\.4"),
        (torch.tensor([0.5]), rows(1), IndexError, "set\\(\\) takes integer slots"),
    ],
)
def test_bad_set_changes_nothing(ring, cursor, data, err, match):
    s = ring(5)
    s.extend(rows(2))
    before = (len(s), s.write_count, s.get(range(2))["x"].tolist())
    with pytest.raises(err, match=match):
        s.set(cursor, data)
    assert (len(s), s.write_count, s.get(range(2))["x"].tolist()) == before


def test_set_is_refused_where_rows_cannot_be_rewritten(tmp_path):
    with pytest.raises(TypeError, match=r"set\(\) is not supported with dedup_next=True"):
        LazyTensorStorage(4, dedup_next=True).set(0, rows(1)[0])
    frozen = FrozenStorage.from_tensordict(rows(3))
    with pytest.raises(TypeError, match=r"FrozenStorage does not support set\(\)"):
        frozen.set(0, rows(1)[0])


def test_storage_dumps_and_loads_alone(ring, tmp_path):
    s = ring(6)
    s.extend(rows(8))
    s.dumps(tmp_path / "ckpt")
    s.dumps(tmp_path / "ckpt")  # again, over the first
    twin = ring(6) if not isinstance(s, LazyMemmapStorage) else LazyMemmapStorage(6)
    twin.loads(tmp_path / "ckpt")
    assert (len(twin), twin.cursor, twin.write_count) == (6, 2, 8)
    assert twin.get(range(6))["x"].tolist() == s.get(range(6))["x"].tolist()


def test_a_buffer_checkpoint_is_not_a_storage_checkpoint(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    rb.extend(rows(2))
    rb.dumps(tmp_path / "rb")
    s = LazyTensorStorage(4)
    with pytest.raises(CheckpointError, match="holds a ReplayBuffer checkpoint, not a storage's"):
        s.loads(tmp_path / "rb")
    assert len(s) == 0


def test_cleanup_removes_its_own_files_and_the_directory_once_empty(tmp_path):
    scratch = tmp_path / "scratch"
    s = LazyMemmapStorage(10, scratch_dir=scratch)
    s.extend(rows(3))
    assert s.filename is not None and os.path.exists(s.filename)
    assert s.cleanup() is True
    assert not scratch.exists()
    assert s.cleanup() is False and len(s) == 0


def test_cleanup_never_removes_other_files(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "mine.txt").write_text("keep me")
    s = LazyMemmapStorage(10, scratch_dir=scratch)
    s.extend(rows(3))
    assert s.cleanup() is True
    assert [p.name for p in scratch.iterdir()] == ["mine.txt"]


def test_two_storages_share_a_scratch_dir_without_touching_each_other(tmp_path):
    a = LazyMemmapStorage(4, scratch_dir=tmp_path, existsok=False)
    b = LazyMemmapStorage(4, scratch_dir=tmp_path, existsok=True)
    a.extend(rows(2))
    b.extend(rows(2, 50))
    assert a.filename != b.filename
    assert a.get(range(2))["x"].tolist() == [0, 1] and b.get(range(2))["x"].tolist() == [50, 51]


def _run(code: str, tmp_path) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.heavy  # each case a Python process that imports torch and exits
@pytest.mark.parametrize("auto_cleanup, left", [(None, True), (True, False), (False, True)])
def test_auto_cleanup_at_exit(tmp_path, auto_cleanup, left):
    """TorchRL's default: a file in a given scratch_dir stays after the process."""
    scratch = tmp_path / "scratch"
    code = (
        "import torch\n"
        "from tensordict import TensorDict\n"
        "from mixreplay import LazyMemmapStorage\n"
        f"s = LazyMemmapStorage(10, scratch_dir={str(scratch)!r}, auto_cleanup={auto_cleanup})\n"
        "s.extend(TensorDict({'x': torch.zeros(3)}, [3]))\n"
        "print(s.filename)\n"
    )
    filename = _run(code, tmp_path).strip()
    assert os.path.exists(filename) is left
    assert scratch.exists() is left


@pytest.mark.parametrize(
    "make",
    [
        lambda: LazyTensorStorage(4, compilable=False),
        lambda: LazyTensorStorage(4, compilable=False, consolidated=False, shared_init=False),
        lambda: LazyTensorStorage(4, consolidated=True, cleanup_memmap=True),
        lambda: LazyMemmapStorage(4, compilable=False, existsok=False, auto_cleanup=None),
        lambda: LazyMemmapStorage(4, existsok=True, shared_init=False),
        lambda: TensorStorage(rows(3), compilable=False, device="auto"),
        lambda: TensorStorage(None, 4, compilable=False),
    ],
)
def test_torchrl_defaults_and_honoured_arguments_are_accepted(make):
    s = make()
    s.extend(rows(2)) if len(s) == 0 else None
    assert len(s) >= 2


@pytest.mark.parametrize(
    "make, err, match",
    [
        (
            lambda: LazyTensorStorage(4, compilable=True),
            TypeError,
            r"LazyTensorStorage does not support TorchRL's compilable=True \(only None / False, "
            r"which is mixreplay's behaviour\); mixreplay's storages run eagerly",
        ),
        (
            lambda: LazyTensorStorage(4, device="meta", shared_init=True),
            TypeError,
            r"shared=True needs the rows in host memory, got LazyTensorStorage\(device='meta'\)",
        ),
        (
            lambda: TensorStorage(rows(3), compilable=True),
            TypeError,
            "TensorStorage does not support TorchRL's compilable=True",
        ),
        (
            lambda: LazyTensorStorage(4, device="auto"),
            ValueError,
            r"LazyTensorStorage\(device='auto'\) is only meaningful with existing data",
        ),
        (
            lambda: LazyTensorStorage(4, bogus=1),
            TypeError,
            r"LazyTensorStorage\(\) got an unexpected keyword argument 'bogus'",
        ),
        (
            lambda: LazyMemmapStorage(4, existsok="yes"),
            TypeError,
            "existsok must be True or False, got str .yes.",
        ),
    ],
)
def test_torchrl_arguments_mixreplay_cannot_honour_are_refused(make, err, match):
    with pytest.raises(err, match=match):
        make()


def test_torchrl_storage_attributes():
    s = LazyTensorStorage(4)
    s.extend(rows(3))
    assert s.ndim == 1 and s.shape == torch.Size([3])
    assert s.contains(2) and not s.contains(3) and s.contains(torch.tensor([0, 1]))
    with pytest.raises(
        AttributeError, match="LazyTensorStorage has no TorchRL 'register_save_hook'"
    ):
        s.register_save_hook(lambda *a: None)
    with pytest.raises(AttributeError, match="'LazyTensorStorage' object has no attribute 'nope'"):
        s.nope  # noqa: B018


def test_a_memmap_storage_shows_its_columns_as_views_of_its_file(tmp_path):
    """TorchRL's ``storage._storage`` of a LazyMemmapStorage: memory-mapped leaves that name
    the file holding them, and writing to one writes the stored row."""
    from tensordict import MemoryMappedTensor

    s = LazyMemmapStorage(4, scratch_dir=tmp_path)
    s.extend(
        TensorDict(
            a=torch.zeros(3), b=TensorDict(c=torch.ones(3, 2), batch_size=[3]), batch_size=[3]
        )
    )
    view = s._storage
    assert s.filename is not None and os.path.dirname(s.filename) == str(tmp_path)
    for key in ("a", ("b", "c")):
        assert isinstance(view[key], MemoryMappedTensor)
        assert view[key].filename == s.filename
    view["a"][1] = 7.0
    assert s.get(1)["a"] == 7.0 and s.get(0)["a"] == 0.0
    # the file holds packed rows, not one column: a copy is of the values, a plain tensor
    buf = io.BytesIO()
    torch.save(view["b", "c"], buf)
    buf.seek(0)
    for copied in (
        pickle.loads(pickle.dumps(view["a"])),
        copy.deepcopy(view["a"]),
        torch.load(buf),
    ):
        assert type(copied) is torch.Tensor
    assert pickle.loads(pickle.dumps(view["a"]))[:3].tolist() == [0.0, 7.0, 0.0]
    assert copy.deepcopy(view["b", "c"])[:3].tolist() == [[1.0, 1.0]] * 3
    in_memory = LazyTensorStorage(4)
    in_memory.extend(TensorDict(a=torch.zeros(3), batch_size=[3]))
    assert type(in_memory._storage["a"]) is torch.Tensor  # rows in memory: no file to name

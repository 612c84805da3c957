"""One contract, every storage: rings in memory, memory-mapped, on CUDA (when present),
read-only rows and a TorchRL storage driven as a ring."""

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    CheckpointError,
    FrozenStorage,
    LazyMemmapStorage,
    LazyTensorStorage,
    ReadOnlyError,
    Schema,
    SchemaMismatchError,
    Storage,
)
from mixreplay.storages import adapt_storage
from tests.conftest import ted_rows

VARIANTS = [
    "memory",
    "memmap",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
    ),
]


def make_storage(kind, max_size, tmp_path):
    if kind == "memory":
        return LazyTensorStorage(max_size)
    if kind == "memmap":
        return LazyMemmapStorage(max_size, scratch_dir=tmp_path)
    return LazyTensorStorage(max_size, device="cuda")


@pytest.fixture(params=VARIANTS)
def kind(request):
    return request.param


def test_allocates_from_first_write_exactly_capacity_rows(kind, tmp_path):
    s = make_storage(kind, 50, tmp_path)
    assert s.schema is None and s.nbytes == 0 and len(s) == 0
    s.extend(ted_rows(3))
    assert s.layout.row_bytes % 8 == 0
    assert s.nbytes == 50 * s.row_bytes
    assert s._rows.shape == (50, s.layout.row_words)
    assert s.schema == Schema.from_tensordict(ted_rows(1))


def test_round_trip_every_key_dtype_and_shape(kind, tmp_path):
    td = TensorDict(
        {
            "f64": torch.randn(6, 2, dtype=torch.float64),
            "i32": torch.arange(6, dtype=torch.int32),
            "u8": torch.arange(6 * 3 * 2, dtype=torch.uint8).reshape(6, 3, 2),
            "half": torch.randn(6, 5).half(),
            "nest": {"b": torch.tensor([True, False] * 3), "i64": torch.arange(6)[:, None] * 7},
        },
        [6],
    )
    s = make_storage(kind, 10, tmp_path)
    s.extend(td)
    back = s[torch.arange(6)]
    for key in td.keys(True, True):
        assert back[key].dtype == td[key].dtype
        assert back[key].shape == td[key].shape
        assert torch.equal(back[key].cpu(), td[key])


def test_ring_wraps_fifo_and_returns_slots(kind, tmp_path):
    s = make_storage(kind, 5, tmp_path)
    assert s.extend(ted_rows(3)).tolist() == [0, 1, 2]
    idx = s.extend(ted_rows(4, tag=1.0))
    assert idx.cpu().tolist() == [3, 4, 0, 1]
    assert len(s) == 5 and s.cursor == 2 and s.write_count == 7
    rewards = s[:]["next", "reward"].squeeze(-1).cpu().tolist()
    assert rewards == [2.0, 3.0, 2.0, 0.0, 1.0]  # slot 2 is the oldest surviving row


def test_extend_larger_than_capacity_keeps_the_last_rows(kind, tmp_path):
    s = make_storage(kind, 4, tmp_path)
    s.extend(ted_rows(1))
    idx = s.extend(ted_rows(10, tag=2.0))
    assert idx.cpu().tolist() == [(1 + i) % 4 for i in range(10)]
    got = sorted(s[:]["next", "reward"].squeeze(-1).cpu().tolist())
    assert got == [6.0, 7.0, 8.0, 9.0]


def test_rows_read_are_copies(kind, tmp_path):
    s = make_storage(kind, 4, tmp_path)
    s.extend(ted_rows(4))
    batch = s[torch.tensor([0, 1])]
    batch["observation"].add_(100)
    assert float(s[0]["observation"].max()) < 50


def test_indexing_forms(kind, tmp_path):
    s = make_storage(kind, 8, tmp_path)
    s.extend(ted_rows(6))
    assert s[2].batch_size == torch.Size([])
    assert s[-1]["next", "reward"].item() == 5.0
    assert s[1:4].batch_size == torch.Size([3])
    assert s[[0, 5]]["next", "reward"].squeeze(-1).tolist() == [0.0, 5.0]
    mask = torch.zeros(6, dtype=torch.bool)
    mask[3] = True
    assert s[mask]["next", "reward"].item() == 3.0
    with pytest.raises(IndexError, match="row index 6 is out of range for a storage with 6 rows"):
        s[6]
    with pytest.raises(IndexError, match="row indices must be integers"):
        s[torch.tensor([0.5])]


def test_column_is_a_view_of_filled_rows(kind, tmp_path):
    s = make_storage(kind, 8, tmp_path)
    s.extend(ted_rows(5))
    col = s.column(("next", "reward"))
    assert col.shape == (5, 1)
    assert col.squeeze(-1).cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    with pytest.raises(KeyError, match="key 'nope' not found in storage with keys"):
        s.column("nope")


def test_schema_is_fixed_by_first_write(kind, tmp_path):
    s = make_storage(kind, 8, tmp_path)
    s.extend(ted_rows(2))
    bad = ted_rows(2)
    bad["observation"] = bad["observation"].double()
    with pytest.raises(
        SchemaMismatchError,
        match=r"'observation': stored float32\[3\], written float64\[3\] \(dtype\)",
    ):
        s.extend(bad)
    extra = ted_rows(2)
    extra["info"] = torch.zeros(2, 1)
    with pytest.raises(
        SchemaMismatchError, match=r"'info': in written \(float32\[1\]\), missing in stored"
    ):
        s.extend(extra)
    missing = ted_rows(2).exclude(("next", "reward"))
    with pytest.raises(SchemaMismatchError, match=r"\('next', 'reward'\): in stored"):
        s.extend(missing)
    wrong_shape = ted_rows(2, obs_dim=4)
    with pytest.raises(SchemaMismatchError, match=r"shape"):
        s.extend(wrong_shape)
    assert len(s) == 2 and s.write_count == 2  # nothing was written by the failed calls


@pytest.mark.parametrize(
    "data, err, match",
    [
        (
            {"observation": torch.zeros(2, 3)},
            TypeError,
            r"extend expects a TensorDict of rows, got dict; wrap it: TensorDict\(data, batch_size=\[n\]\)",
        ),
        (torch.zeros(2, 3), TypeError, "extend expects a TensorDict of rows, got Tensor"),
        (
            TensorDict({"x": torch.zeros(2, 3)}, [2, 3]),
            ValueError,
            r"one batch dim .* got batch_size=\[2, 3\]",
        ),
        (TensorDict({"x": torch.zeros(0, 3)}, [0]), ValueError, "empty batch"),
    ],
)
def test_bad_writes(kind, tmp_path, data, err, match):
    s = make_storage(kind, 4, tmp_path)
    with pytest.raises(err, match=match):
        s.extend(data)
    assert len(s) == 0


def test_add_single_row(kind, tmp_path):
    s = make_storage(kind, 4, tmp_path)
    assert s.add(ted_rows(1)[0]) == 0
    with pytest.raises(ValueError, match=r"add expects one row \(batch_size=\[\]\)"):
        s.add(ted_rows(2))


@pytest.mark.parametrize(
    "bad, err, match",
    [
        (0, ValueError, "max_size must be a positive number of rows, got 0"),
        (2.5, TypeError, "max_size must be a positive number of rows, got float 2.5"),
        (True, TypeError, "max_size must be a positive number of rows"),
    ],
)
def test_bad_capacity(bad, err, match):
    with pytest.raises(err, match=match):
        LazyTensorStorage(bad)


def test_memmap_is_file_backed(tmp_path):
    s = LazyMemmapStorage(100, scratch_dir=tmp_path)
    s.extend(ted_rows(10))
    files = list(tmp_path.glob("rows-*.bin"))
    assert len(files) == 1 and files[0].stat().st_size == 100 * s.row_bytes
    with pytest.raises(ValueError, match="lives in host memory"):
        LazyMemmapStorage(10, device="meta")


def test_frozen_storage_is_read_only():
    f = FrozenStorage.from_tensordict(ted_rows(5))
    with pytest.raises(ReadOnlyError, match="read-only"):
        f.extend(ted_rows(1))
    assert len(f) == 5 and f[4]["next", "reward"].item() == 4.0


def test_storages_and_buffers_pickle(kind, tmp_path):
    import pickle

    from mixreplay import OfflineToOnlineReplayBuffer, ReplayBuffer

    s = make_storage(kind, 8, tmp_path)
    s.extend(ted_rows(5))
    copy = pickle.loads(pickle.dumps(s))
    assert len(copy) == 5 and torch.equal(
        copy[:]["next", "reward"].cpu(), s[:]["next", "reward"].cpu()
    )
    copy.extend(ted_rows(2))  # a working lock and layout after the round trip
    assert len(copy) == 7 and len(s) == 5
    rb = OfflineToOnlineReplayBuffer(
        ReplayBuffer(storage=FrozenStorage.from_tensordict(ted_rows(10))),
        online_storage=s,
        generator=0,
    )
    twin = pickle.loads(pickle.dumps(rb))
    assert torch.equal(twin.sample(6)["next", "reward"].cpu(), rb.sample(6)["next", "reward"].cpu())


# -- the contract every storage fulfils: rings, read-only rows, a TorchRL storage --------------

ALL_KINDS = [
    "memory",
    "memmap",
    "frozen",
    pytest.param("torchrl", marks=pytest.mark.torchrl),
]


def filled_storage(kind, tmp_path, n=6, capacity=8):
    """A storage of ``kind`` holding ``ted_rows(n)``."""
    rows = ted_rows(n)
    if kind == "frozen":
        return FrozenStorage.from_tensordict(rows)
    if kind == "torchrl":
        from torchrl.data import LazyTensorStorage as TorchRLStorage

        s = adapt_storage(TorchRLStorage(capacity))
    else:
        s = make_storage(kind, capacity, tmp_path)
    s.extend(rows)
    return s


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_every_storage_declares_the_contract(kind, tmp_path):
    s = filled_storage(kind, tmp_path)
    assert isinstance(s, Storage)
    assert len(s) == 6 and s.write_count == 6
    assert s.cursor == (0 if kind == "frozen" else 6)
    assert s.max_size == (6 if kind == "frozen" else 8)
    assert s.device == torch.device("cpu")
    assert s.schema == Schema.from_tensordict(ted_rows(1))
    assert s.writable == (kind != "frozen") and s.packed == (kind != "torchrl")
    assert isinstance(s.generation, int)
    with s.lock:  # re-entrant
        with s.lock:
            got = s.gather_unlocked(torch.tensor([5, 0]))
    assert got["next", "reward"].squeeze(-1).tolist() == [5.0, 0.0]
    assert s[1:3]["next", "reward"].squeeze(-1).tolist() == [1.0, 2.0]
    assert s.column(("next", "reward")).squeeze(-1).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_every_storage_round_trips_its_state(kind, tmp_path):
    s = filled_storage(kind, tmp_path)
    state = s.state_dict()
    if kind == "frozen":  # read-only rows are referenced, never copied
        assert state["reference"] and state["rows"] == 6 and "fingerprint" in state
        s.load_state_dict(state)
        other = FrozenStorage.from_tensordict(ted_rows(6, tag=1.0))
        with pytest.raises(CheckpointError, match="not the ones saved: fingerprint"):
            other.load_state_dict(state)
        return
    twin = filled_storage(kind, tmp_path / "twin", n=2)
    generation = twin.generation
    twin.load_state_dict(state)
    assert twin.generation != generation  # derived indices (slice starts) must be rebuilt
    assert (len(twin), twin.cursor, twin.write_count) == (6, 6, 6)
    assert torch.equal(twin[:]["next", "reward"], s[:]["next", "reward"])


@pytest.mark.parametrize("kind", ["memory", "memmap"])
def test_a_state_that_does_not_fit_changes_nothing(kind, tmp_path):
    s = filled_storage(kind, tmp_path)
    before = s.state_dict()
    bad = dict(before, max_size=9)
    with pytest.raises(CheckpointError, match="the saved ring has max_size 9, this storage 8"):
        s.load_state_dict(bad)
    bad = dict(before, cursor=3)
    with pytest.raises(CheckpointError, match=r"inconsistent ring \(len=6, cursor=3"):
        s.load_state_dict(bad)
    bad = dict(before, rows=before["rows"][:2])
    with pytest.raises(CheckpointError, match=r"the saved rows must be an int64\[6, \d+\] tensor"):
        s.load_state_dict(bad)
    after = s.state_dict()
    assert {k: v for k, v in after.items() if k != "rows"} == {
        k: v for k, v in before.items() if k != "rows"
    }
    assert torch.equal(after["rows"], before["rows"])

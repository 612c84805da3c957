"""A source's own transforms apply to the rows it contributes to a mixed batch (issue 10.1)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    LazyTensorStorage,
    MixtureReplayBuffer,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
    SchemaMismatchError,
)
from mixreplay.transforms import Compose
from tests.conftest import ted_rows


def ones(n: int) -> TensorDict:
    return TensorDict({"x": torch.ones(n, 1)}, [n])


def add(k: float):
    def f(td):
        td["x"] = td["x"] + k
        return td

    f.__name__ = f"add{k:g}"
    return f


def test_the_offline_buffers_transform_applies_in_the_mixed_batch():
    """The issue's example: +100 on the offline side gave [101, 101] alone but 1s mixed."""
    offline = ReplayBuffer(storage=LazyTensorStorage(10), transform=add(100), generator=0)
    offline.extend(ones(10))
    assert offline.sample(2)["x"].squeeze(-1).tolist() == [101.0, 101.0]
    rb = OfflineToOnlineReplayBuffer(offline, online_capacity=10, generator=0, source_key="src")
    rb.extend(ones(4))
    batch = rb.sample(4)
    assert batch["x"].squeeze(-1).tolist() == [101.0, 101.0, 1.0, 1.0]
    assert batch["src"].tolist() == [0, 0, 1, 1]


def test_a_datasets_transform_applies_too():
    ds = OfflineDataset.from_tensordict(ones(10), transform=add(100))
    rb = OfflineToOnlineReplayBuffer(ds, online_capacity=10, generator=0)
    rb.extend(ones(4))
    assert rb.sample(4)["x"].squeeze(-1).tolist() == [101.0, 101.0, 1.0, 1.0]
    # all offline while the online side is empty: still transformed
    empty = OfflineToOnlineReplayBuffer(ds, online_capacity=10, generator=0)
    assert empty.sample(3)["x"].squeeze(-1).tolist() == [101.0] * 3


def test_order_is_source_transforms_then_the_mixing_buffers():
    offline = ReplayBuffer(storage=LazyTensorStorage(10), generator=0)
    offline.extend(ones(10))
    offline.append_transform(add(10))
    offline.insert_transform(0, lambda td: td.set("x", td["x"] * 3))  # runs first
    rb = OfflineToOnlineReplayBuffer(
        offline, online_capacity=10, generator=0, transform=lambda td: td.set("x", -td["x"])
    )
    rb.online_buffer.append_transform(add(1))
    rb.extend(ones(4))
    assert rb.sample(4)["x"].squeeze(-1).tolist() == [-13.0, -13.0, -2.0, -2.0]
    rb.append_transform(add(0.5))  # the mixing buffer's own, after its first
    assert rb.sample(2)["x"].squeeze(-1).tolist() == [-12.5, -1.5]
    assert isinstance(rb.transform, Compose) and len(rb.transform) == 2


def test_mixture_sources_keep_their_transforms():
    a = ReplayBuffer(storage=LazyTensorStorage(10), transform=add(1), generator=0)
    a.extend(ones(5))
    mix = MixtureReplayBuffer(
        {"a": a, "b": LazyTensorStorage(10), "c": OfflineDataset.from_tensordict(ones(5))},
        {"a": 1, "b": 1, "c": 1},
        generator=0,
    )
    mix.source("b").append_transform(add(2))
    mix.extend(ones(5), source="b")
    assert mix.sample(3)["x"].squeeze(-1).tolist() == [2.0, 3.0, 1.0]


@pytest.mark.torchrl
def test_torchrl_double_to_float_makes_float64_data_mix():
    """TorchRL's sota script: offline.append_transform(DoubleToFloat()) on a float64 dataset."""
    from torchrl.envs.transforms import DoubleToFloat

    rows64 = ted_rows(50).apply(lambda t: t.double() if t.is_floating_point() else t)
    # without the transform: the clear error, nothing written
    plain = OfflineToOnlineReplayBuffer(OfflineDataset.from_tensordict(rows64), online_capacity=20)
    with pytest.raises(
        SchemaMismatchError,
        match=r"'observation': offline float64\[3\], online float32\[3\] \(dtype\)",
    ):
        plain.extend(ted_rows(5))
    assert len(plain.online_buffer) == 0
    # with it: the offline side produces float32, so the online rows mix
    offline = OfflineDataset.from_tensordict(rows64)
    offline.append_transform(DoubleToFloat())
    rb = OfflineToOnlineReplayBuffer(offline, online_capacity=20, generator=0, batch_size=16)
    rb.extend(ted_rows(5, tag=1.0))
    batch = rb.sample()
    assert batch["observation"].dtype == torch.float32
    assert batch["next", "reward"].dtype == torch.float32
    assert torch.equal(
        batch["observation"][:8],
        rows64["observation"][batch["next", "reward"][:8].squeeze(-1).long()].float(),
    )


def test_a_transform_that_changes_the_keys_is_checked_at_the_first_write():
    """The schema check compares what sources produce after their transforms."""
    offline = ReplayBuffer(storage=LazyTensorStorage(10), generator=0)
    offline.extend(TensorDict({"x": torch.ones(10, 1), "extra": torch.zeros(10, 1)}, [10]))
    offline.append_transform(lambda td: td.exclude("extra"))
    rb = OfflineToOnlineReplayBuffer(offline, online_capacity=10, generator=0)
    rb.extend(ones(3))  # mixes: the offline side no longer produces "extra"
    assert set(rb.sample(4).keys()) == {"x"}
    other = OfflineToOnlineReplayBuffer(offline, online_capacity=10)
    with pytest.raises(SchemaMismatchError, match=r"'y': in online"):
        other.extend(TensorDict({"x": torch.ones(2, 1), "y": torch.ones(2, 1)}, [2]))


def test_transforms_are_checked_and_must_return_a_tensordict():
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    with pytest.raises(TypeError, match="transform must be callable, got int 3"):
        rb.append_transform(3)
    rb.extend(ones(2))
    rb.append_transform(lambda td: None)
    with pytest.raises(TypeError, match="returned NoneType, not a TensorDict"):
        rb.sample(1)


def test_sources_without_transforms_draw_straight_into_the_packed_batch():
    """No source transform: one gather per source straight into the batch's packed rows; a
    source given a transform draws its rows (transformed) and packs them, the others still
    gather straight, and the batches are the ones drawn with every source packing its rows."""
    offline = OfflineDataset.from_tensordict(ones(10))
    rb = OfflineToOnlineReplayBuffer(offline, online_capacity=10, generator=0)
    rb.extend(ones(4))
    rb.sample(4)
    assert rb._drawing_plan().direct == (True, True)
    offline.append_transform(add(1))
    batch = rb.sample(4)
    assert rb._drawing_plan().direct == (False, True)
    assert batch["x"].squeeze(-1).tolist() == [2.0, 2.0, 1.0, 1.0]


# -- write-side transforms: the mixing check runs on the rows as stored ---------------------------


def write_side(fn):
    """``fn`` as a transform that runs on writes (``append_transform(..., invert=True)``)."""

    def inv(td):
        return fn(td)

    inv.__name__ = fn.__name__
    return inv


def _with_extra(td):
    td["extra"] = torch.zeros(td.batch_size[0], 2)
    return td


def _double(td):  # float32 leaves to float64
    return td.apply(lambda x: x.double() if x.dtype == torch.float32 else x)


def _float(td):  # float64 leaves to float32 (TorchRL's DoubleToFloat)
    return td.apply(lambda x: x.float() if x.dtype == torch.float64 else x)


@pytest.mark.parametrize(
    "transform, why",
    [(_double, "float64"), (_with_extra, "extra")],
)
@pytest.mark.parametrize("kind", ["offline-to-online", "mixture"])
def test_a_write_side_transform_that_makes_rows_unmixable_is_refused_at_extend(
    transform, why, kind
):
    """The rows are checked as they will be stored: refused by the extend that writes them,
    with nothing written (they used to be stored, and every later sample() raised)."""
    offline = OfflineDataset.from_tensordict(ted_rows(20, tag=-1.0))
    if kind == "mixture":
        online = ReplayBuffer(storage=LazyTensorStorage(10))
        online.append_transform(write_side(transform), invert=True)
        rb = MixtureReplayBuffer({"off": offline, "on": online}, {"off": 1, "on": 1}, generator=0)
        extend = lambda td: rb.extend(td, source="on")  # noqa: E731
    else:
        rb = OfflineToOnlineReplayBuffer(offline, online_capacity=10, generator=0)
        online = rb.online_buffer
        online.append_transform(write_side(transform), invert=True)
        extend = rb.extend
    with pytest.raises(SchemaMismatchError, match=why):
        extend(ted_rows(4))
    assert len(online) == 0 and rb.write_count == 0
    assert rb.sample(6).batch_size == (6,)  # still all offline, and sampling works


@pytest.mark.parametrize("kind", ["offline-to-online", "mixture"])
def test_a_write_side_transform_that_makes_float64_rows_mix_is_accepted(kind):
    """float64 input cast to float32 on the way in mixes with float32 offline data (it used to be
    checked before the cast, and refused)."""
    offline = OfflineDataset.from_tensordict(ted_rows(20, tag=-1.0))
    if kind == "mixture":
        online = ReplayBuffer(storage=LazyTensorStorage(10))
        online.append_transform(write_side(_float), invert=True)
        rb = MixtureReplayBuffer(
            {"off": offline, "on": online}, {"off": 1, "on": 1}, generator=0, source_key="src"
        )
        rb.extend(_double(ted_rows(4)), source="on")
    else:
        rb = OfflineToOnlineReplayBuffer(offline, online_capacity=10, generator=0, source_key="src")
        rb.online_buffer.append_transform(write_side(_float), invert=True)
        online = rb.online_buffer
        rb.extend(_double(ted_rows(4)))
    assert len(online) == 4
    batch = rb.sample(8)
    assert batch["observation"].dtype == torch.float32
    assert sorted(set(batch["src"].tolist())) == [0, 1]


def _corrupt_row_7(td):
    if bool((td["x"] == 7).any()):
        raise ValueError("row 7 is corrupt")
    return td


def _counted(n: int, start: int = 0) -> TensorDict:
    return TensorDict({"x": torch.arange(start, start + n, dtype=torch.float32)}, [n])


@pytest.mark.parametrize("kind", ["offline-to-online", "mixture"])
@pytest.mark.parametrize("prefetch", [None, 2])
def test_a_source_transform_failing_on_one_row_fails_only_the_batches_holding_it(kind, prefetch):
    """An error of the user's transform on the rows drawn moves on, as ReplayBuffer does: the
    next sample() draws other rows. (The draws used to be undone, so a data-dependent
    failure failed every later batch, for ever.)"""
    plain = ReplayBuffer(storage=LazyTensorStorage(60), transform=_corrupt_row_7, generator=0)
    offline = ReplayBuffer(storage=LazyTensorStorage(60), transform=_corrupt_row_7)
    offline.extend(_counted(60))
    plain.extend(_counted(60))
    if kind == "offline-to-online":
        rb = OfflineToOnlineReplayBuffer(
            offline, online_capacity=60, batch_size=4, generator=0, prefetch=prefetch
        )
        rb.extend(_counted(60, 100))
    else:
        rb = MixtureReplayBuffer(
            {"off": offline, "on": LazyTensorStorage(60)},
            {"off": 1, "on": 1},
            batch_size=4,
            generator=0,
            prefetch=prefetch,
        )
        rb.extend(_counted(60, 100), source="on")
    try:
        failed, run, longest = 0, 0, 0
        for _ in range(200):
            try:
                batch = rb.sample()
                assert not (batch["x"] == 7).any()
                run = 0
            except ValueError as err:
                assert str(err) == "row 7 is corrupt"  # the user's own error, as raised
                failed, run = failed + 1, run + 1
                longest = max(longest, run)
        # row 7 is one of 60 offline rows, 2 drawn per batch: ~7 of 200 batches hold it
        assert 1 <= failed <= 30 and longest <= 4, (failed, longest)
    finally:
        rb.close()


@pytest.mark.parametrize("kind", ["offline-to-online", "mixture"])
@pytest.mark.parametrize("first", [True, False])
def test_a_write_side_transform_that_adds_a_batch_dim_is_refused_at_extend(kind, first):
    """Rows [n, 1] are not rows [n]: refused by the extend that writes them, before or after the
    source holds rows, with nothing written (they used to be stored, and every later
    sample() raised SchemaMismatchError)."""
    offline = OfflineDataset.from_tensordict(ted_rows(20, tag=-1.0))
    if kind == "mixture":
        online = ReplayBuffer(storage=LazyTensorStorage(10))
        rb = MixtureReplayBuffer({"off": offline, "on": online}, {"off": 1, "on": 1}, generator=0)
        extend = lambda td: rb.extend(td, source="on")  # noqa: E731
    else:
        rb = OfflineToOnlineReplayBuffer(offline, online_capacity=10, generator=0)
        online = rb.online_buffer
        extend = rb.extend
    held = 0 if first else 3
    if held:
        extend(ted_rows(held))
    online.append_transform(write_side(lambda td: td.unsqueeze(-1)), invert=True)
    with pytest.raises(TypeError, match=r"batch_size \[4, 1\]; a mixing buffer stores TensorDict"):
        extend(ted_rows(4))
    assert len(online) == held and rb.write_count == held
    assert rb.sample(6).batch_size == (6,)

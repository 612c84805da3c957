"""mixreplay's own tests with TorchRL objects: writers, write- and read-side transforms.

TorchRL's writer is accepted, the write-side transforms run (inverse, last first) and
``rb[i]`` runs the transforms as ``sample`` does. Not part of the port's counts.
"""

from __future__ import annotations

import functools

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import RoundRobinWriter, TensorDictMaxValueWriter
from torchrl.envs.transforms import DoubleToFloat, PolicyAgeFilter

from mixreplay import LazyMemmapStorage, LazyTensorStorage, RandomSampler, ReplayBuffer


def versions(v) -> TensorDict:
    v = torch.as_tensor(v)
    return TensorDict({"obs": torch.arange(v.numel()).float(), "policy_version": v}, [v.numel()])


# -- the writer crash ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "writer",
    [RoundRobinWriter(), RoundRobinWriter, functools.partial(RoundRobinWriter), None],
    ids=["instance", "class", "factory", "none"],
)
def test_torchrl_default_writer_is_accepted(writer):
    rb = ReplayBuffer(storage=LazyTensorStorage(3), writer=writer, generator=0)
    assert rb.extend(torch.arange(5)).tolist() == [0, 1, 2, 0, 1]  # ring order
    assert rb[:].tolist() == [3, 4, 2]


def test_one_writer_shared_by_two_buffers_is_accepted():
    # TorchRL's test_shared_storage_prioritized_sampler passes one writer to two buffers
    writer, storage = RoundRobinWriter(), LazyMemmapStorage(10)
    a = ReplayBuffer(storage=storage, writer=writer)
    b = ReplayBuffer(storage=storage, writer=writer)
    a.extend(torch.arange(4))
    assert len(b) == 4


@pytest.mark.parametrize(
    "writer, match",
    [
        (
            TensorDictMaxValueWriter(),
            r"ReplayBuffer does not support TorchRL's writer=.*TensorDictMaxValueWriter.* "
            r"\(only TorchRL's default, which is mixreplay's behaviour\); rows are written in ring order",
        ),
        (
            RoundRobinWriter(compilable=True),
            r"ReplayBuffer does not support TorchRL's writer=.*RoundRobinWriter.*; rows are written",
        ),
        ("ring", r"does not support TorchRL's writer='ring'"),
    ],
)
def test_other_writers_are_refused_in_one_line(writer, match):
    with pytest.raises(TypeError, match=match) as info:
        ReplayBuffer(storage=LazyTensorStorage(3), writer=writer)
    assert "\n" not in str(info.value)


def test_torchrl_defaults_passed_explicitly_are_accepted():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(4, compilable=False),
        sampler=RandomSampler(),
        writer=RoundRobinWriter(compilable=False),
        collate_fn=None,
        compilable=False,
        delayed_init=False,
        shared=False,
        dim_extend=None,
        sample_unit=None,
        checkpointer=None,
        consume_after_n_samples=None,
        service_backend="direct",
        transport="auto",
        batch_size=2,
    )
    rb.extend(torch.arange(4))
    assert rb.sample().shape == (2,)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"compilable": True}, r"ReplayBuffer does not support TorchRL's compilable=True"),
        ({"collate_fn": 3}, r"collate_fn must be callable, got int 3"),
    ],
)
def test_torchrl_arguments_mixreplay_cannot_honour_are_refused(kwargs, match):
    with pytest.raises(TypeError, match=match):
        ReplayBuffer(storage=LazyTensorStorage(4), **kwargs)


# -- write-side transforms ----------------------------------------------------------------


def test_policy_age_filter_drops_stale_rows_on_extend():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=PolicyAgeFilter(3, max_policy_lag=1))
    index = rb.extend(versions([0, 2, 2, 3]))
    assert len(rb) == 3 and index.tolist() == [0, 1, 2]
    assert rb[:]["policy_version"].tolist() == [2, 2, 3]


def test_a_write_side_that_keeps_nothing_writes_nothing():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.append_transform(PolicyAgeFilter(9, max_policy_lag=0))
    assert rb.extend(versions([1, 2])).numel() == 0
    assert rb.add(versions([1])[0]).numel() == 0
    assert len(rb) == 0 and rb.write_count == 0
    assert rb.add(versions([9])[0]) == 0 and len(rb) == 1


def test_invert_runs_the_forward_pass_on_writes_last_transform_first():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
    data = TensorDict({"a": torch.zeros(4)}, [4])

    def plus_one(td):
        td["a"] = td["a"] + 1
        return td

    def times_ten(td):
        td["a"] = td["a"] * 10
        return td

    assert rb.append_transform(plus_one, invert=True) is rb
    rb.append_transform(times_ten, invert=True)
    rb.extend(data)
    assert rb[:]["a"].tolist() == [1.0] * 4  # times_ten first (0), then plus_one
    rb.add(TensorDict({"a": torch.tensor(1.0)}, []))
    assert rb[4]["a"].item() == 11.0


def test_in_place_write_transform_changes_the_callers_data_as_in_torchrl():
    rb = ReplayBuffer(storage=LazyMemmapStorage(10), batch_size=4)
    data = TensorDict({"a": torch.zeros(10)}, [10])

    def t(data):
        data += 1
        return data

    rb.append_transform(t, invert=True)
    rb.extend(data)
    assert (data == 1).all() and (rb[:]["a"] == 1).all()


def test_torchrl_transforms_run_their_inverse_on_writes_and_forward_on_reads():
    cast = DoubleToFloat(in_keys=["x"], in_keys_inv=["y"])
    rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=cast)
    rb.extend(TensorDict({"x": torch.zeros(3, dtype=torch.float64), "y": torch.zeros(3)}, [3]))
    assert rb.storage.schema["y"].dtype == torch.float64  # inverse: y stored as double
    batch = rb.sample(2)
    assert batch["x"].dtype == torch.float32  # forward: x read as float


# -- reads: rb[index] is what sample gives --------------------------------------------------


def test_getitem_runs_collate_fn_and_transforms_like_sample():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10),
        transform=lambda td: td.set("a", td["a"] * 2),
        collate_fn=lambda td: td.set("b", td["a"] + 100),
    )
    rb.extend(TensorDict({"a": torch.arange(4)}, [4]))
    assert rb[1:3]["a"].tolist() == [2, 4] and rb[1:3]["b"].tolist() == [101, 102]
    assert rb[1]["a"].item() == 2 and "b" not in rb[1].keys()  # an int index: no collate
    assert rb["a"].tolist() == [0, 2, 4, 6]  # a key: rb[:][key]


def test_insert_transform_out_of_range_is_refused():
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    with pytest.raises(
        ValueError, match=r"index 10 is out of range for 0 transforms: insert at -0\.\.0"
    ):
        rb.insert_transform(10, lambda td: td)


def test_torchrl_attributes():
    rb = ReplayBuffer(storage=functools.partial(LazyTensorStorage, 5), sampler=RandomSampler)
    assert rb.initialized and rb._rng is rb.generator and rb.storage.max_size == 5
    assert isinstance(rb.sampler, RandomSampler)


def test_transforms_are_put_in_eval_mode_as_in_torchrl():
    at_init, appended, inserted = DoubleToFloat(), DoubleToFloat(), DoubleToFloat()
    rb = ReplayBuffer(storage=LazyTensorStorage(4), transform=at_init)
    rb.append_transform(appended, invert=True)
    rb.insert_transform(0, inserted)
    assert not any(t.training for t in (at_init, appended, inserted))


def test_a_torchrl_storage_keeps_the_data_type_through_a_checkpoint(tmp_path):
    from torchrl.data import LazyTensorStorage as TorchRLStorage

    rb = ReplayBuffer(storage=TorchRLStorage(8), generator=0)
    rb.extend({"a": torch.arange(4), "b": (torch.zeros(4, 2),)})
    rb.dumps(tmp_path / "ckpt")
    twin = ReplayBuffer(storage=TorchRLStorage(8), generator=0)
    twin.loads(tmp_path / "ckpt")
    assert twin[:]["a"].tolist() == [0, 1, 2, 3] and isinstance(twin[:]["b"], tuple)

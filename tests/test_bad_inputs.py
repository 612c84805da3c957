"""The catalogue of bad inputs (docs/errors.md): each is refused with a message that names the
argument or key, shows the bad value and says how to fix it, and leaves the buffer unchanged.

Cases already pinned elsewhere are not repeated here: the OfflineToOnline constructor
(tests/test_mixing.py::test_construction_errors), the Mixture constructor
(tests/test_mixture.py), bad writes and schemas at the storage level
(tests/test_storage.py), corrupt checkpoints (tests/test_checkpoint.py).
"""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    DatasetError,
    EmptyBufferError,
    LazyMemmapStorage,
    LazyTensorStorage,
    MixtureReplayBuffer,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    SchemaMismatchError,
)
from mixreplay.datasets.memmap import write_memmap_dataset
from mixreplay.errors import DataStructureError
from tests.conftest import ted_rows
from tests.helpers import assert_state_equal

OFFLINE = OfflineDataset.from_tensordict(ted_rows(50, tag=7.0))


def replay():
    rb = ReplayBuffer(storage=LazyTensorStorage(20), batch_size=4, generator=0)
    rb.extend(ted_rows(5))
    return rb


def o2o():
    rb = OfflineToOnlineReplayBuffer(OFFLINE, online_capacity=20, batch_size=4, generator=0)
    rb.extend(ted_rows(5))
    return rb


def mixture():
    mix = MixtureReplayBuffer(
        {"off": OFFLINE, "on": LazyTensorStorage(20)},
        {"off": 1, "on": 1},
        batch_size=4,
        generator=0,
    )
    mix.extend(ted_rows(5), source="on")
    return mix


BUFFERS = {
    "ReplayBuffer": replay,
    "OfflineToOnlineReplayBuffer": o2o,
    "MixtureReplayBuffer": mixture,
}


def refused_unchanged(rb, call, err, match) -> None:
    """``call(rb)`` raises ``err`` matching ``match``; ``rb``'s state (rows, RNG, ...) is as before."""
    before = rb.state_dict()
    with pytest.raises(err, match=match):
        call(rb)
    assert_state_equal(before, rb.state_dict())


# -- constructors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (
            dict(storage=5),
            TypeError,
            r"storage must be a mixreplay storage \(LazyTensorStorage, LazyMemmapStorage\) or a TorchRL Storage, got int",
        ),
        (dict(storage="lazy"), TypeError, "storage must be a mixreplay storage .* got str"),
        (
            dict(sampler="uniform"),
            TypeError,
            r"sampler must be a mixreplay Sampler \(RandomSampler, PrioritizedSampler, SliceSampler, "
            r"SamplerWithoutReplacement\), got str 'uniform'",
        ),
        (dict(sampler=int), TypeError, "sampler must be a mixreplay Sampler .* got int 0"),
        (dict(batch_size=1.5), TypeError, "batch_size must be a positive int, got float 1.5"),
        (dict(batch_size=True), TypeError, "batch_size must be a positive int, got bool True"),
        (dict(batch_size=0), ValueError, "batch_size must be a positive int, got 0"),
        (
            dict(generator=1.5),
            TypeError,
            r"generator must be a torch.Generator or an int seed, got float 1.5; e.g. generator=0 or "
            r"generator=torch.Generator\(\).manual_seed\(0\)",
        ),
        (dict(transform="scale"), TypeError, "transform must be callable, got str"),
    ],
)
def test_replay_buffer_constructor(kwargs, err, match):
    kwargs = {"storage": LazyTensorStorage(4), **kwargs}
    with pytest.raises(err, match=match):
        ReplayBuffer(**kwargs)


@pytest.mark.parametrize(
    "make, err, match",
    [
        (
            lambda: LazyTensorStorage(4, device="gpu0"),
            ValueError,
            r"device must be a torch.device or a device string such as 'cpu' or 'cuda:0', got str 'gpu0'",
        ),
        (
            lambda: LazyTensorStorage(4, device=2.5),
            TypeError,
            "device must be a torch.device .* got float 2.5",
        ),
        (
            lambda: LazyMemmapStorage(4, scratch_dir=5),
            TypeError,
            r"scratch_dir must be a directory path \(str or os.PathLike\), got int 5",
        ),
        (
            lambda: LazyTensorStorage(-3),
            ValueError,
            "max_size must be a positive number of rows, got -3",
        ),
        (
            lambda: LazyTensorStorage("4"),
            TypeError,
            "max_size must be a positive number of rows, got str '4'",
        ),
        (
            lambda: RandomSampler(replacement="no"),
            TypeError,
            "RandomSampler replacement must be a bool, got str 'no'",
        ),
    ],
)
def test_storage_and_sampler_constructors(make, err, match):
    with pytest.raises(err, match=match):
        make()


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (
            dict(offline_dataset=None),
            TypeError,
            r"source 'offline' must be a mixreplay ReplayBuffer or dataset, .* got NoneType",
        ),
        (dict(offline_dataset=torch.zeros(3)), TypeError, "source 'offline' must be .* got Tensor"),
        (
            dict(offline_dataset=ted_rows(3)),
            TypeError,
            "source 'offline' must be .* got TensorDict",
        ),
        (
            dict(offline_fraction=None),
            TypeError,
            "offline_fraction must be a float, got NoneType None",
        ),
        (dict(offline_fraction=True), TypeError, "offline_fraction must be a float, got bool True"),
        (
            dict(offline_fraction=-0.1),
            ValueError,
            r"offline_fraction must be in \(0, 1\) \(exclusive\), got -0.1",
        ),
        (
            dict(offline_fraction=-math.inf),
            ValueError,
            "offline_fraction must be a finite number in \\(0, 1\\), got -inf",
        ),
        (
            dict(offline_fraction=lambda step: math.nan),
            ValueError,
            r"CallableSchedule\(.*\) returned nan at step 0; a schedule's values must lie in \[0, 1\]",
        ),
        (
            dict(online_capacity="100"),
            TypeError,
            "online_capacity must be a positive number of rows, got str '100'",
        ),
        (
            dict(online_capacity=-1),
            ValueError,
            "online_capacity must be a positive number of rows, got -1",
        ),
        (dict(batch_size="8"), TypeError, "batch_size must be a positive int, got str '8'"),
        (
            dict(generator=torch.Generator),
            TypeError,
            "generator must be a torch.Generator or an int seed",
        ),
        (
            dict(source_key=5),
            TypeError,
            r"source_key: a key must be a string or a non-empty tuple of strings, got 5; write nested keys as tuples",
        ),
        (
            dict(source_key=()),
            TypeError,
            r"source_key: a key must be a string or a non-empty tuple of strings, got \(\)",
        ),
    ],
)
def test_offline_to_online_constructor(kwargs, err, match):
    kwargs = {"offline_dataset": OFFLINE, "online_capacity": 10, **kwargs}
    with pytest.raises(err, match=match):
        OfflineToOnlineReplayBuffer(kwargs.pop("offline_dataset"), **kwargs)


@pytest.mark.parametrize(
    "args, kwargs, err, match",
    [
        (
            ({1: OFFLINE}, {1: 1.0}),
            {},
            TypeError,
            r"source names must be non-empty strings, got \[1\]; name each source",
        ),
        (
            ({"": OFFLINE}, {"": 1.0}),
            {},
            TypeError,
            r"source names must be non-empty strings, got \[''\]",
        ),
        (
            ({"a": LazyTensorStorage(4)}, {"a": 1}),
            dict(samplers=[RandomSampler()]),
            TypeError,
            r"samplers must be a mapping name -> Sampler, got list; e.g. samplers=\{'online': PrioritizedSampler\(\)\}",
        ),
        (
            ({"a": LazyTensorStorage(4)}, {"a": 1}),
            dict(samplers={"a": "uniform"}),
            TypeError,
            "sampler must be a mixreplay Sampler .* got str",
        ),
        (
            ({"a": LazyTensorStorage(4)}, {"a": "0.5"}),
            {},
            TypeError,
            r"fractions\['a'\] must be a number >= 0 \(a weight\), a Schedule or a function of the step, "
            r"got str '0.5'",
        ),
        (
            ({"a": LazyTensorStorage(4)}, {"a": math.inf}),
            {},
            ValueError,
            r"fractions\['a'\] must be a finite number >= 0, got inf",
        ),
        (
            ({"a": LazyTensorStorage(4)}, {"a": 1}),
            dict(source_key=3.0),
            TypeError,
            "source_key: a key must be a string",
        ),
        (
            ({"a": LazyTensorStorage(4)}, {"a": 1}),
            dict(batch_size=-2),
            ValueError,
            "batch_size must be a positive int, got -2",
        ),
        (
            ({"a": LazyTensorStorage(4)}, {"a": 1}),
            dict(generator="0"),
            TypeError,
            "generator must be a torch.Generator or an int seed, got str",
        ),
        (
            ({"a": LazyTensorStorage(4)}, {"a": 1}),
            dict(transform=1),
            TypeError,
            "transform must be callable, got int",
        ),
    ],
)
def test_mixture_constructor(args, kwargs, err, match):
    with pytest.raises(err, match=match):
        MixtureReplayBuffer(*args, **kwargs)


def test_an_offline_dataset_with_no_rows(tmp_path):
    empty = OfflineDataset.from_tensordict(ted_rows(0))
    with pytest.raises(
        ValueError,
        match=r"the offline dataset \(OfflineDataset\) holds no rows; fill it before mixing",
    ):
        OfflineToOnlineReplayBuffer(empty, online_capacity=10)
    with pytest.raises(
        ValueError,
        match=r"source 'off' \(OfflineDataset\) is read-only and holds no rows, so it could never contribute",
    ):
        MixtureReplayBuffer({"off": empty, "on": LazyTensorStorage(4)}, {"off": 1, "on": 1})
    with pytest.raises(DatasetError, match="no rows to write to .*: the data was empty"):
        write_memmap_dataset(tmp_path / "ds", ted_rows(0))


# -- writing ----------------------------------------------------------------------------------


def _extend(data):
    def call(rb):
        if isinstance(rb, MixtureReplayBuffer):
            return rb.extend(data, source="on")
        return rb.extend(data)

    return call


def _wrong(key, value):
    td = ted_rows(3)
    td[key] = value
    return td


BAD_WRITES = {
    "empty batch": (
        ted_rows(0),
        ValueError,
        r"extend got an empty batch \(batch_size=\[0\]\); pass at least one row",
    ),
    "two batch dims": (
        ted_rows(6).reshape(2, 3),
        ValueError,
        r"extend expects a TensorDict with one batch dim .* got batch_size=\[2, 3\]; use add\(\) for a single row or data.reshape\(-1\)",
    ),
    "a single row": (
        ted_rows(1)[0],
        ValueError,
        r"got batch_size=\[\]; use add\(\) for a single row",
    ),
    "a plain dict": (
        {"observation": torch.zeros(2, 3)},
        TypeError,
        r"extend expects a TensorDict of rows, got dict; wrap it: TensorDict\(data, batch_size=\[n\]\)",
    ),
    "a tensor": (
        torch.zeros(2, 3),
        TypeError,
        r"extend expects a TensorDict of rows, got Tensor; wrap it: TensorDict\(\{'observation': x, ...\}, batch_size=\[n\]\)",
    ),
    "None": (None, TypeError, "extend expects a TensorDict of rows, got NoneType"),
    "a list of rows": ([ted_rows(1)], TypeError, "extend expects a TensorDict of rows, got list"),
    "another dtype": (
        _wrong("action", torch.zeros(3, 2, dtype=torch.float64)),
        SchemaMismatchError,
        r"'action': \w+ float32\[2\], \w+ float64\[2\] \(dtype\)",
    ),
    "another shape": (
        _wrong(("next", "observation"), torch.zeros(3, 4)),
        SchemaMismatchError,
        r"\('next', 'observation'\): \w+ float32\[3\], \w+ float32\[4\] \(shape\)",
    ),
    "an extra key": (
        _wrong("info", torch.zeros(3, 1)),
        SchemaMismatchError,
        r"'info': in \w+ \(float32\[1\]\), missing in \w+",
    ),
    "a missing key": (
        ted_rows(3).exclude("action"),
        SchemaMismatchError,
        r"'action': in \w+ \(float32\[2\]\), missing in \w+",
    ),
}


@pytest.mark.parametrize("what", sorted(BAD_WRITES))
@pytest.mark.parametrize("kind", sorted(BUFFERS))
def test_bad_writes_change_nothing(kind, what):
    data, err, match = BAD_WRITES[what]
    if kind == "ReplayBuffer":  # it also takes other data types (issue 19), not after TensorDicts
        err, match = REPLAY_BAD_WRITES.get(what, (err, match))
    refused_unchanged(BUFFERS[kind](), _extend(data), err, match)


# A ReplayBuffer takes tensors, pytrees, lists of items and [n, ...] TensorDicts as a first
# write; after TensorDict rows [n] it refuses them, naming what it holds.
_HOLDS = r"this storage holds TensorDict rows \[n\] \(fixed by its first write\), got "
REPLAY_BAD_WRITES = {
    "two batch dims": (
        DataStructureError,
        _HOLDS + r"a TensorDict with batch_size=\[2, 3\]; flatten it with data.reshape\(-1\)",
    ),
    "a single row": (
        DataStructureError,
        _HOLDS + r"a TensorDict with batch_size=\[\]; use add\(\) for a single row",
    ),
    "a plain dict": (DataStructureError, _HOLDS + "a dict of 1 items; write data of the same type"),
    "a tensor": (DataStructureError, _HOLDS + r"a tensor \[2, 3\] of torch.float32"),
    "None": (DataStructureError, _HOLDS + "NoneType None"),
    "a list of rows": (DataStructureError, _HOLDS + r"a TensorDict with batch_size=\[1, 1\]"),
}


def test_the_first_online_write_must_match_the_offline_rows():
    rb = OfflineToOnlineReplayBuffer(OFFLINE, online_capacity=10, generator=0)
    before = rb.state_dict()
    with pytest.raises(
        SchemaMismatchError,
        match=r"offline and online rows differ in 2 key\(s\):\n  'observation': offline float32\[3\], online float32\[5\] \(shape\)",
    ):
        rb.extend(ted_rows(3, obs_dim=5))
    assert_state_equal(before, rb.state_dict())
    assert rb.online_buffer.schema is None  # the failed write did not fix the online schema


# -- sampling ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(BUFFERS))
@pytest.mark.parametrize(
    "batch_size, err, match",
    [
        (0, ValueError, "batch_size must be a positive int, got 0"),
        (-3, ValueError, "batch_size must be a positive int, got -3"),
        (2.0, TypeError, "batch_size must be a positive int, got float 2.0"),
        (True, TypeError, "batch_size must be a positive int, got bool True"),
        ("8", TypeError, "batch_size must be a positive int, got str '8'"),
    ],
)
def test_bad_batch_sizes_change_nothing(kind, batch_size, err, match):
    refused_unchanged(BUFFERS[kind](), lambda rb: rb.sample(batch_size), err, match)


def test_sampling_with_no_rows_anywhere():
    rb = ReplayBuffer(storage=LazyTensorStorage(4), batch_size=2, generator=0)
    refused_unchanged(
        rb,
        lambda rb: rb.sample(),
        EmptyBufferError,
        r"Cannot sample from an empty storage: extend the buffer with rows first",
    )
    mix = MixtureReplayBuffer(
        {"a": LazyTensorStorage(4), "b": LazyTensorStorage(4)}, {"a": 1, "b": 1}, generator=0
    )
    refused_unchanged(
        mix,
        lambda m: m.sample(2),
        EmptyBufferError,
        r"cannot sample: every source is empty \(a, b\); extend the buffer with rows first",
    )


def test_more_rows_than_held_without_replacement():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10),
        sampler=SamplerWithoutReplacement(drop_last=True),
        batch_size=2,
        generator=0,
    )
    rb.extend(ted_rows(5))
    refused_unchanged(
        rb,
        lambda rb: rb.sample(6),
        ValueError,
        r"The batch size 6 is greater than the storage capacity 5 \(the rows held\): with "
        r"drop_last=True no batch could be returned without repeating rows; ask for at most 5 "
        r"rows, or use SamplerWithoutReplacement\(drop_last=False\)",
    )
    assert sorted(rb.sample(5)["next", "reward"].squeeze(-1).tolist()) == [0.0, 1.0, 2.0, 3.0, 4.0]
    # without drop_last, TorchRL's meaning: the epoch's rows, a short batch
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10), sampler=RandomSampler(replacement=False), generator=0
    )
    rb.extend(ted_rows(5))
    assert sorted(rb.sample(6)["next", "reward"].squeeze(-1).tolist()) == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_mixed_batch_asking_a_source_for_more_distinct_rows_than_it_holds():
    def make():
        rb = OfflineToOnlineReplayBuffer(
            OFFLINE,
            online_capacity=10,
            online_sampler=RandomSampler(replacement=False),
            offline_fraction=0.5,
            generator=0,
        )
        rb.extend(ted_rows(4))
        return rb

    rb, twin = make(), make()
    refused_unchanged(
        rb,
        lambda rb: rb.sample(10),
        ValueError,
        r"batch_size 10 asks source 'online' for 5 distinct rows, but it holds 4 and samples without replacement; sample at most 4",
    )
    # nothing was drawn for the offline rows either: the next batch is the twin's
    a, b = rb.sample(8), twin.sample(8)
    assert torch.equal(a["next", "reward"], b["next", "reward"])
    assert sorted(a["next", "reward"][4:].squeeze(-1).tolist()) == [0.0, 1.0, 2.0, 3.0]


def test_schedules_that_return_nan_change_nothing():
    rb = OfflineToOnlineReplayBuffer(
        OFFLINE,
        online_capacity=10,
        offline_fraction=lambda s: 0.5 if s < 5 else math.nan,
        generator=0,
    )
    refused_unchanged(rb, lambda rb: rb.set_step(7), ValueError, "returned nan at step 7")
    mix = MixtureReplayBuffer(
        {"a": OFFLINE, "b": LazyTensorStorage(4)},
        {"a": lambda s: math.inf if s else 1.0, "b": 1.0},
        generator=0,
    )
    refused_unchanged(mix, lambda m: m.set_step(3), ValueError, "returned inf at step 3")


@pytest.mark.parametrize(
    "step, total, err, match",
    [
        (math.nan, 10, ValueError, "step must be a finite number >= 0, got nan"),
        (1, math.inf, ValueError, "total_steps must be a finite number > 0 .*got inf"),
    ],
)
def test_anneal_with_nan_or_inf(step, total, err, match):
    refused_unchanged(o2o(), lambda rb: rb.anneal(step, total), err, match)


def test_tensor_batch_dims_that_are_not_rows():
    rb = o2o()
    nested = TensorDict({"observation": torch.zeros(3, 3), "next": TensorDict({}, [3, 2])}, [3])
    with pytest.raises(SchemaMismatchError):
        rb.extend(nested)
    assert len(rb.online_buffer) == 5


@pytest.mark.parametrize("stored", [0, 4, 10], ids=["first write", "free slots", "full ring"])
def test_a_sparse_leaf_is_refused_by_name_and_nothing_changes(stored):
    def rows(sparse: bool) -> TensorDict:
        a = torch.eye(4) * 3
        return TensorDict(
            {"obs": torch.arange(8.0).reshape(4, 2), "a": a.to_sparse() if sparse else a},
            batch_size=[4],
        )

    rb = ReplayBuffer(storage=LazyTensorStorage(10), generator=0)
    for _ in range(stored // 4 + (stored == 10)):
        rb.extend(rows(sparse=False))
    before = rb.state_dict()
    with pytest.raises(TypeError, match=r"key 'a' holds a torch.sparse_coo tensor.*to_dense\(\)"):
        rb.extend(rows(sparse=True))
    after = rb.state_dict()
    assert len(rb) == min(stored, 10)
    assert after["storage"].keys() == before["storage"].keys()
    for key, value in before["storage"].items():  # the rows' bytes, cursor, length, schema
        got = after["storage"][key]
        assert torch.equal(got, value) if isinstance(value, torch.Tensor) else got == value, key

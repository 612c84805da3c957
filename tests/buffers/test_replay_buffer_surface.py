"""The replay-buffer surface TorchRL users touch: write_count, iter(rb), samplers, refused arguments."""

import pytest
import torch
from tensordict import TensorDict

import mixreplay
from mixreplay import (
    LazyMemmapStorage,
    LazyTensorStorage,
    MixtureReplayBuffer,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
    SamplerWithoutReplacement,
)
from mixreplay._torchrl_args import UNSUPPORTED
from tests.helpers import counted_rows as rows

pytestmark = pytest.mark.torchrl


def test_samplers_are_exported_at_the_top_level():
    from mixreplay.samplers.prioritized import PrioritizedSampler
    from mixreplay.samplers.slice import SliceSampler

    assert mixreplay.PrioritizedSampler is PrioritizedSampler
    assert mixreplay.SliceSampler is SliceSampler
    assert mixreplay.SamplerWithoutReplacement is mixreplay.samplers.SamplerWithoutReplacement


def test_write_count_matches_torchrl():
    from torchrl.data import LazyTensorStorage as TLazy
    from torchrl.data import ReplayBuffer as TRB

    ours = ReplayBuffer(storage=LazyTensorStorage(5))
    theirs = TRB(storage=TLazy(5))
    for n in (3, 4, 1, 7):
        ours.extend(rows(n))
        theirs.extend(rows(n))
        assert ours.write_count == theirs.write_count
    ours.add(rows(1)[0])
    theirs.add(rows(1)[0])
    assert ours.write_count == theirs.write_count == 16
    ours.empty(empty_write_count=False)
    theirs.empty(empty_write_count=False)
    assert ours.write_count == theirs.write_count == 16 and len(ours) == 0
    ours.empty()
    theirs.empty()
    assert ours.write_count == theirs.write_count == 0


def test_write_count_of_mixing_buffers_counts_online_rows():
    offline = ReplayBuffer(storage=LazyTensorStorage(10))
    offline.extend(rows(10))
    rb = OfflineToOnlineReplayBuffer(offline, online_capacity=4, batch_size=2)
    assert rb.write_count == 0
    rb.extend(rows(3))
    rb.extend(rows(3))
    assert rb.write_count == 6 == rb.online_buffer.write_count  # wrapped rows included
    mix = MixtureReplayBuffer(
        {"a": LazyTensorStorage(5), "b": LazyTensorStorage(5)}, {"a": 1, "b": 1}
    )
    mix.extend(rows(2), source="a")
    mix.extend(rows(7), source="b")
    assert mix.write_count == 9


def test_write_count_survives_a_checkpoint(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    rb.extend(rows(9))
    rb.dumps(tmp_path / "c")
    twin = ReplayBuffer(storage=LazyTensorStorage(4))
    twin.loads(tmp_path / "c")
    assert twin.write_count == 9


def test_iter_is_endless_with_replacement_and_needs_a_batch_size():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=3, generator=0)
    rb.extend(rows(10))
    it = iter(rb)
    batches = [next(it) for _ in range(50)]
    assert all(b.batch_size == torch.Size([3]) for b in batches)
    twin = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=3, generator=0)
    twin.extend(rows(10))
    assert [b["x"].tolist() for b in batches] == [twin.sample()["x"].tolist() for _ in range(50)]
    with pytest.raises(ValueError, match="Batch_size was not specified: iterating yields"):
        iter(ReplayBuffer(storage=LazyTensorStorage(10))).__next__()


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_sampler_without_replacement_epochs_match_torchrl_shapes(drop_last, shuffle):
    from torchrl.data import LazyTensorStorage as TLazy
    from torchrl.data import ReplayBuffer as TRB
    from torchrl.data.replay_buffers import SamplerWithoutReplacement as TSWR

    ours = ReplayBuffer(
        storage=LazyTensorStorage(100),
        batch_size=4,
        generator=1,
        sampler=SamplerWithoutReplacement(drop_last=drop_last, shuffle=shuffle),
    )
    theirs = TRB(
        storage=TLazy(100), batch_size=4, sampler=TSWR(drop_last=drop_last, shuffle=shuffle)
    )
    ours.extend(rows(10))
    theirs.extend(torch.arange(10))
    for _ in range(3):  # three epochs
        mine = [b["x"].tolist() for b in ours]
        ref = [b.tolist() for b in theirs]
        assert [len(b) for b in mine] == [len(b) for b in ref]
        flat = sum(mine, [])
        assert len(set(flat)) == len(flat)  # distinct rows within an epoch
        if not drop_last:
            assert sorted(flat) == list(range(10))
        if not shuffle:
            assert mine == ref


def test_sampler_without_replacement_reshuffles_when_rows_are_added():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(100),
        batch_size=4,
        generator=1,
        sampler=SamplerWithoutReplacement(shuffle=False),
    )
    rb.extend(rows(10))
    assert rb.sample()["x"].tolist() == [0, 1, 2, 3]
    rb.extend(rows(2, 10))
    assert [b["x"].tolist() for b in rb] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


def test_sampler_without_replacement_drop_last_refuses_a_batch_larger_than_the_rows():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(100),
        sampler=SamplerWithoutReplacement(drop_last=True),
        batch_size=2,
    )
    rb.extend(rows(3))
    before = rb.generator.get_state()
    with pytest.raises(ValueError, match="The batch size 4 is greater than the storage capacity 3"):
        rb.sample(4)
    assert torch.equal(before, rb.generator.get_state())
    with pytest.raises(TypeError, match="drop_last must be a bool"):
        SamplerWithoutReplacement(drop_last=1)


def test_sampler_without_replacement_state_round_trips(tmp_path):
    def make():
        rb = ReplayBuffer(
            storage=LazyTensorStorage(50),
            batch_size=6,
            generator=2,
            sampler=SamplerWithoutReplacement(),
        )
        rb.extend(rows(20))
        return rb

    rb = make()
    rb.sample()
    rb.dumps(tmp_path / "c")
    twin = make()
    twin.loads(tmp_path / "c")
    assert [b["x"].tolist() for b in twin] == [b["x"].tolist() for b in rb]


def test_mixing_source_with_sampler_without_replacement_gets_exact_counts():
    mix = MixtureReplayBuffer(
        {"a": LazyTensorStorage(10), "b": LazyTensorStorage(10)},
        {"a": 1, "b": 1},
        samplers={"a": SamplerWithoutReplacement()},
        batch_size=6,
        generator=0,
        source_key="s",
    )
    mix.extend(rows(5), source="a")
    mix.extend(rows(5, 100), source="b")
    seen = []
    for _ in range(5):
        batch = mix.sample()
        assert batch["s"].tolist() == [0, 0, 0, 1, 1, 1]
        seen += batch["x"][:3].tolist()
    assert sorted(seen[:5]) == list(range(5))  # the first epoch hands out every row once


# -- TorchRL arguments mixreplay does not support ------------------------------------------------


def test_a_drop_last_sampler_needs_a_batch_size_as_in_torchrl():
    sampler = SamplerWithoutReplacement(drop_last=True)
    with pytest.raises(
        ValueError,
        match=r"Samplers with drop_last=True must work with a "
        r"predictable batch-size: ReplayBuffer\(sampler=SamplerWithoutReplacement"
        r"\(drop_last=True, shuffle=True\)\) was given no batch_size; pass "
        r"batch_size=",
    ):
        ReplayBuffer(storage=LazyTensorStorage(10), sampler=sampler)
    rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=sampler, batch_size=3, generator=0)
    rb.extend(rows(10))
    assert [len(b) for b in rb] == [3, 3, 3]  # the short chunk dropped
    # a mixing buffer asks its sources for their shares: there the sampler needs none
    offline = ReplayBuffer(storage=LazyTensorStorage(10), generator=0)
    offline.extend(rows(10))
    mixed = OfflineToOnlineReplayBuffer(
        offline,
        online_capacity=10,
        online_sampler=SamplerWithoutReplacement(drop_last=True),
        batch_size=4,
        generator=0,
    )
    mixed.extend(rows(3))
    assert len(mixed.sample()) == 4


def test_every_torchrl_replay_buffer_argument_is_handled():
    import inspect

    from torchrl.data import ReplayBuffer as TRB
    from torchrl.data import TensorDictReplayBuffer

    ours = set(inspect.signature(ReplayBuffer.__init__).parameters) | set(UNSUPPORTED)
    theirs = set(inspect.signature(TRB.__init__).parameters) | {"priority_key"}
    assert TensorDictReplayBuffer  # priority_key is that class's argument
    assert theirs - {"self"} <= ours


@pytest.mark.parametrize(
    ("name", "value", "way"),
    [
        ("writer", object(), "ring order"),
        ("sample_unit", object(), "SliceSampler"),
        ("dim_extend", 1, r"data.reshape\(-1\)"),
        ("checkpointer", object(), r"rb.dumps\(path\)"),
        ("consume_after_n_samples", 1, "SamplerWithoutReplacement"),
        ("compilable", True, "torch.compile"),
        ("service_backend", "ray", "mixreplay.distributed"),
        ("transport", "ray", "mixreplay.distributed"),
        ("priority_key", "loss", r"TensorDictReplayBuffer\(priority_key=...\)"),
    ],
)
def test_unsupported_torchrl_argument_is_refused_with_the_mixreplay_way(name, value, way):
    with pytest.raises(TypeError, match=rf"does not support TorchRL's {name}=.*{way}"):
        ReplayBuffer(storage=LazyTensorStorage(10), **{name: value})


def test_torchrl_defaults_are_accepted_and_unknown_keywords_refused():
    # a value test (writer: TorchRL's RoundRobinWriter, or None) accepts None
    defaults = {
        name: accepted[0] if isinstance(accepted, tuple) else None
        for name, (accepted, _) in UNSUPPORTED.items()
    }
    rb = ReplayBuffer(storage=LazyTensorStorage(10), **defaults)
    rb.extend(rows(3))
    with pytest.raises(TypeError, match="unexpected keyword argument 'colate_fn'"):
        ReplayBuffer(storage=LazyTensorStorage(10), colate_fn=None)
    with pytest.raises(TypeError, match="shared must be True or False, got int 1"):
        ReplayBuffer(storage=LazyTensorStorage(10), shared=1)  # 1 is not a flag


def test_transform_factory():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10), batch_size=2, transform_factory=lambda: lambda td: td * 2
    )
    rb.extend(rows(3, 1))
    assert (rb.sample()["x"] % 2 == 0).all()
    with pytest.raises(TypeError, match="transform and transform_factory are exclusive"):
        ReplayBuffer(storage=LazyTensorStorage(10), transform=abs, transform_factory=lambda: abs)


@pytest.mark.parametrize("cls", [LazyTensorStorage, LazyMemmapStorage])
def test_ndim_above_2_is_refused_naming_the_way(cls, tmp_path):
    kwargs = {"scratch_dir": tmp_path} if cls is LazyMemmapStorage else {}
    with pytest.raises(ValueError, match=r"ndim=3 is not supported.*data.flatten\(1, -1\)"):
        cls(100, ndim=3, **kwargs)
    assert cls(100, ndim=2, **kwargs).ndim == 2
    assert cls(100, ndim=1, **kwargs).max_size == 100


def test_torchrl_ndim_2_storage_is_refused_naming_mixreplays():
    from torchrl.data import LazyTensorStorage as TLazy

    with pytest.raises(
        ValueError, match=r"ndim=2 cannot be wrapped.*LazyTensorStorage\(n, ndim=2\)"
    ):
        ReplayBuffer(storage=TLazy(100, ndim=2))


def test_n_by_t_batch_flattened_keeps_each_env_consecutive():
    # The mixreplay way for a [N, T] collector batch.
    data = TensorDict(
        {"env": torch.arange(3).unsqueeze(1).expand(3, 4), "t": torch.arange(4).expand(3, 4)},
        [3, 4],
    )
    rb = ReplayBuffer(storage=LazyTensorStorage(20))
    rb.extend(data.reshape(-1))
    assert rb[:4]["env"].tolist() == [0, 0, 0, 0] and rb[:4]["t"].tolist() == [0, 1, 2, 3]
    # unflattened, it is TorchRL's meaning for a one-dimensional storage: N rows of [T]
    rows = ReplayBuffer(storage=LazyTensorStorage(20))
    rows.extend(data)
    assert len(rows) == 3 and rows[1].batch_size == (4,) and rows[1]["env"].tolist() == [1] * 4


# -- TorchRL methods -----------------------------------------------------------------------------


def test_every_public_torchrl_method_is_supported_or_names_the_mixreplay_way():
    from torchrl.data import ReplayBuffer as TRB

    from mixreplay._torchrl_args import UNSUPPORTED_METHODS

    rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2)
    public = {n for n in dir(TRB) if not n.startswith("_")}
    missing = []
    for name in sorted(public):
        if name in UNSUPPORTED_METHODS:
            with pytest.raises(AttributeError, match=rf"ReplayBuffer has no TorchRL '{name}': "):
                getattr(rb, name)
        elif not hasattr(rb, name):
            missing.append(name)
    # append_transform / insert_transform are another session's (transforms on every source)
    assert set(missing) <= {"append_transform", "insert_transform"}, missing
    with pytest.raises(AttributeError, match="object has no attribute 'nope'"):
        rb.nope  # noqa: B018


def test_torchrl_aliases_and_small_methods(tmp_path):
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10),
        batch_size=4,
        generator=0,
        sampler=SamplerWithoutReplacement(shuffle=False),
    )
    rb.extend(rows(6))
    assert rb.stats() == {
        "size": 6,
        "write_count": 6,
        "prefetch_queue_size": 0,
        "initialized": True,
        "capacity": 10,
        "utilization": 0.6,
    }
    assert rb.dim_extend == 0
    assert rb.read_all_in_order()["x"].tolist() == list(range(6))
    assert rb.read_all_in_order(2)["x"].tolist() == [0, 1]
    assert rb.next()["x"].tolist() == [0, 1, 2, 3]
    assert rb.next()["x"].tolist() == [4, 5]
    assert rb.next() is None  # the epoch ended
    assert rb.next()["x"].tolist() == [0, 1, 2, 3]
    rb.save(tmp_path / "c")
    twin = ReplayBuffer(
        storage=LazyTensorStorage(10),
        batch_size=4,
        generator=0,
        sampler=SamplerWithoutReplacement(shuffle=False),
    )
    twin.load(tmp_path / "c")
    assert twin.sample()["x"].tolist() == rb.sample()["x"].tolist() == [4, 5]

"""The sampler contract, checked over every sampler and every storage.

Each sampler serves any :class:`~mixreplay.storages.base.Storage` through the attributes the
contract names (``len``, ``max_size``, ``cursor``, ``write_count``, ``generation``,
``device``, ``lock``, ``schema`` and ``column``), and notices every change of the rows: a
write it was not told about, a restore, an emptied ring.
"""

from __future__ import annotations

import ast
import pathlib

import pytest
import torch
from tensordict import TensorDict

import mixreplay.samplers
from mixreplay import (
    FrozenStorage,
    LazyMemmapStorage,
    LazyTensorStorage,
    MixtureReplayBuffer,
    ReplayBuffer,
)
from mixreplay.samplers import (
    PrioritizedSampler,
    RandomSampler,
    Sampler,
    SamplerWithoutReplacement,
    SliceSampler,
)
from tests.helpers import assert_state_equal


def episodes(n: int, length: int, start: int = 0) -> TensorDict:
    """Rows ``start ..`` in episodes of ``length`` steps; ``x`` is the row's id."""
    x = torch.arange(start, start + n)
    done = (x % length == length - 1).unsqueeze(-1)
    return TensorDict({"x": x, "next": {"done": done}}, [n])


SAMPLERS = {
    "random": lambda: RandomSampler(),
    "prioritized": lambda: PrioritizedSampler(alpha=1.0),
    "slices": lambda: SliceSampler(2),
    "without": lambda: SamplerWithoutReplacement(),
}


def storages(tmp_path):
    return {
        "tensor": lambda: LazyTensorStorage(12),
        "memmap": lambda: LazyMemmapStorage(12, scratch_dir=tmp_path),
    }


@pytest.mark.parametrize("storage_kind", ["tensor", "memmap"])
@pytest.mark.parametrize("kind", sorted(SAMPLERS))
def test_every_sampler_follows_writes_restores_and_emptying(kind, storage_kind, tmp_path):
    make = storages(tmp_path)[storage_kind]
    sampler = SAMPLERS[kind]()
    rb = ReplayBuffer(storage=make(), sampler=sampler, generator=0)
    g = torch.Generator().manual_seed(0)

    def drawn() -> set[int]:
        with rb.storage.lock:
            index = sampler.sample(rb.storage, 8, g)
        assert index.dtype == torch.int64 and int(index.max()) < len(rb.storage)
        return set(rb.storage[index]["x"].tolist())

    rb.extend(episodes(10, 5))
    assert drawn() <= set(range(10))
    rb.storage.extend(episodes(4, 5, start=10))  # behind the sampler's back, wrapping
    assert drawn() <= set(range(2, 14))
    twin = make()
    twin.extend(episodes(14, 7, start=100))  # same counters, other rows and episodes
    rb.storage.load_state_dict(twin.state_dict())
    assert drawn() <= set(range(102, 114))
    rb.storage.empty()
    rb.extend(episodes(4, 2, start=500))
    assert drawn() <= set(range(500, 504))


def test_every_sampler_serves_a_frozen_storage():
    storage = FrozenStorage.from_tensordict(episodes(20, 5))
    g = torch.Generator().manual_seed(0)
    for kind, make in SAMPLERS.items():
        sampler = make()
        sampler.attach(storage)
        index = sampler.sample(storage, 10, g)
        assert 0 <= int(index.min()) and int(index.max()) < 20, kind


@pytest.mark.torchrl
def test_every_sampler_serves_a_torchrl_storage():
    from torchrl.data import LazyTensorStorage as TorchRLStorage

    for kind, make in SAMPLERS.items():
        rb = ReplayBuffer(storage=TorchRLStorage(12), sampler=make(), generator=0)
        rb.extend(episodes(10, 5))
        assert set(rb.sample(8)["x"].tolist()) <= set(range(10)), kind


def test_the_contract_declares_what_mixreplay_uses():
    for name in ("unit", "replacement", "ran_out", "prioritized"):
        assert hasattr(Sampler, name), name
    for name in (
        "attach",
        "sample",
        "available",
        "on_extend",
        "weight",
        "check_priority",
        "apply_priority",
        "update_priority",
        "state_dict",
        "load_state_dict",
        "draw_state",
        "restore_draw_state",
        "config",
    ):
        assert callable(getattr(Sampler, name)), name
    declared = {name: getattr(Sampler, name) for name in ("unit", "replacement", "prioritized")}
    assert declared == {"unit": 1, "replacement": True, "prioritized": False}
    assert SamplerWithoutReplacement.replacement is False
    assert PrioritizedSampler.prioritized is True and SliceSampler(4).unit == 4
    with pytest.raises(TypeError, match=r"RandomSampler does not use priorities"):
        RandomSampler().check_priority(torch.tensor([0]), torch.tensor([1.0]))


def test_samplers_declare_rather_than_probe():
    """No getattr/hasattr on mixreplay's own objects inside samplers/: the contract says it all."""
    package = pathlib.Path(mixreplay.samplers.__file__).parent
    probes = [
        f"{path.name}:{node.lineno}"
        for path in sorted(package.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
    ]
    assert probes == []


def test_a_mixing_buffer_refuses_more_distinct_rows_than_a_source_without_replacement_holds():
    """SamplerWithoutReplacement declares replacement=False, so the guard applies to it."""
    mix = MixtureReplayBuffer(
        {"a": LazyTensorStorage(10), "b": LazyTensorStorage(10)},
        {"a": 1, "b": 1},
        samplers={"a": SamplerWithoutReplacement()},
        generator=0,
    )
    mix.extend(episodes(3, 5), source="a")
    mix.extend(episodes(5, 5, start=100), source="b")
    before = mix.state_dict()
    with pytest.raises(
        ValueError,
        match=r"asks source 'a' for 4 distinct rows, but it holds 3 and samples without replacement",
    ):
        mix.sample(8)
    assert_state_equal(before, mix.state_dict())  # refused before any draw
    assert mix.sample(6)["x"][:3].unique().numel() == 3  # a share it holds is drawn distinct


def test_an_epoch_ends_when_the_rows_are_restored_behind_the_sampler():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(6), sampler=SamplerWithoutReplacement(shuffle=False), generator=0
    )
    rb.extend(episodes(6, 3))
    assert rb.sample(4)["x"].tolist() == [0, 1, 2, 3]
    twin = LazyTensorStorage(6)
    twin.extend(episodes(6, 3, start=10))
    rb.storage.load_state_dict(twin.state_dict())  # same length: only the generation tells
    assert rb.sample(6)["x"].tolist() == [10, 11, 12, 13, 14, 15]  # a new epoch, whole
    saved = rb.state_dict()
    rb.sample(2)
    rb.load_state_dict(saved)  # a restore with the sampler's own state resumes its epoch
    assert rb.sample(3)["x"].tolist() == [10, 11, 12]


def test_a_sampler_written_for_torchrls_protocol_is_refused_when_defined():
    """TorchRL's ``sample(storage, batch_size) -> (index, info)`` is not mixreplay's contract."""
    with pytest.raises(
        TypeError,
        match=r"Mine.sample\(self, storage, batch_size\) follows TorchRL's sampler protocol "
        r"\(sample\(storage, batch_size\) -> \(index, info\)\); a mixreplay Sampler implements "
        r"sample\(self, storage, n, generator\) -> index",
    ):

        class Mine(Sampler):
            def sample(self, storage, batch_size):
                return torch.arange(batch_size), {}

    class Fine(Sampler):  # mixreplay's signature, or any that takes the generator
        def sample(self, storage, n, generator):
            return torch.zeros(n, dtype=torch.int64)

    assert Fine().sample(None, 2, None).tolist() == [0, 0]


@pytest.mark.parametrize(
    ("name", "way"),
    [
        ("extend", r"the buffer tells its sampler of writes \(ReplayBuffer.extend calls"),
        ("mark_update", r"the buffer tells its sampler of writes"),
        ("dumps", r"save the buffer that holds it: rb.dumps\(path\)"),
        ("loads", r"load the buffer that holds it: rb.loads\(path\)"),
        ("default_priority", r"only a PrioritizedSampler has priorities"),
    ],
)
def test_torchrl_sampler_methods_mixreplay_lacks_name_the_mixreplay_way(name, way):
    with pytest.raises(AttributeError, match=rf"RandomSampler has no TorchRL '{name}': {way}"):
        getattr(RandomSampler(), name)
    with pytest.raises(AttributeError, match=r"'RandomSampler' object has no attribute 'nope'"):
        RandomSampler().nope  # noqa: B018
    assert PrioritizedSampler(alpha=1.0).default_priority == 1.0  # TorchRL's: the raw priority

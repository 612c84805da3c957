"""The source contract (mixreplay.mixing.source): what a mixing buffer asks of a source."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    CheckpointError,
    LazyTensorStorage,
    MixtureReplayBuffer,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
)
from mixreplay.mixing import BufferSource, ForeignSource, MixSource, as_mix_source
from mixreplay.mixing.source import Drawn
from mixreplay.schedules import Linear, Schedule
from tests.helpers import filled_rows as rows


class Counter(MixSource):
    """A new kind of source: row ``i`` is ``i``, drawn with the mixing buffer's generator."""

    def __init__(self, n: int):
        self.n = n

    @property
    def obj(self) -> Any:
        return self

    def __len__(self) -> int:
        return self.n

    def schema(self):
        return None

    def draw(self, n: int, generator: torch.Generator) -> Drawn:
        index = torch.randint(self.n, (n,), generator=generator)
        return Drawn(TensorDict({"x": index.float().unsqueeze(-1)}, [n]), index)

    def state_dict(self, *, copy: bool = True, by_reference: bool = False) -> dict[str, Any]:
        return {"kind": "counter", "rows": self.n}

    def plan_load_state_dict(self, state, *, allow_offline_mismatch: bool = False):
        if state != self.state_dict():
            raise CheckpointError(f"a counter of {self.n} rows, saved {state!r}")
        return lambda: None


def test_the_kind_of_each_source():
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    assert isinstance(as_mix_source(rb, "a"), BufferSource)
    assert isinstance(
        as_mix_source(OfflineDataset.from_tensordict(rows(3, 0.0)), "a"), BufferSource
    )
    counter = Counter(3)
    assert as_mix_source(counter, "a") is counter  # a source of a new kind is used as is
    with pytest.raises(TypeError, match="source 'a' must be a mixreplay ReplayBuffer or dataset"):
        as_mix_source(3, "a")


class Sampled:
    """Anything with sample(n) and len(): a foreign source."""

    def __len__(self) -> int:
        return 10

    def sample(self, n: int) -> TensorDict:
        return rows(n, 7.0)


def test_a_foreign_source_is_given_back_as_it_was_given():
    foreign = Sampled()
    assert isinstance(as_mix_source(foreign, "a"), ForeignSource)
    mix = MixtureReplayBuffer({"a": foreign, "b": LazyTensorStorage(4)}, {"a": 1, "b": 1})
    assert mix.source("a") is foreign


def test_a_new_kind_of_source_mixes_labels_and_checkpoints(tmp_path):
    def make():
        return OfflineToOnlineReplayBuffer(
            Counter(100), online_capacity=10, generator=0, source_key="src"
        )

    rb = make()
    rb.extend(rows(4, -1.0))
    batch = rb.sample(8)
    assert batch["src"].tolist() == [0] * 4 + [1] * 4
    assert (batch["x"][:4] >= 0).all() and (batch["x"][4:] == -1).all()
    rb.dumps(tmp_path / "ck")
    twin = make()
    twin.loads(tmp_path / "ck")
    assert torch.equal(twin.sample(8)["x"], rb.sample(8)["x"])  # same generator: same draws
    other = OfflineToOnlineReplayBuffer(Counter(5), online_capacity=10)
    with pytest.raises(CheckpointError, match="source 'offline': a counter of 5 rows"):
        other.loads(tmp_path / "ck")


class Shifted(Counter):
    """A source with a transform of its own that can change: rows come out plus ``shift``."""

    def __init__(self, n: int):
        super().__init__(n)
        self.shift = 0

    @property
    def draw_version(self) -> int:
        return self.shift

    def draw(self, n: int, generator: torch.Generator) -> Drawn:
        drawn = super().draw(n, generator)
        return Drawn(drawn.rows.apply(lambda x: x + 1000 * self.shift), drawn.index)


def test_a_source_whose_transforms_change_is_heard_through_its_version():
    # the source overrides draw_version only (the contract); the buffer reads it before
    # every batch, so batches drawn ahead with the old transform are drawn again
    source = Shifted(100)
    rb = OfflineToOnlineReplayBuffer(
        source, online_capacity=10, batch_size=8, generator=0, prefetch=2
    )
    rb.extend(rows(4, -1.0))
    assert (rb.sample()["x"][:4] < 1000).all()  # the queue now holds batches shifted by 0
    source.shift = 1
    assert (rb.sample()["x"][:4] >= 1000).all()


# -- schedules say whether a checkpoint can store them -------------------------------------------


class Stepwise(Schedule):
    """A user's schedule that holds code (a function), so a checkpoint cannot store it."""

    storable = False

    def __init__(self, fn):
        self.fn = fn

    def value(self, step, sizes=None) -> float:
        return self.fn(step)

    def params(self) -> dict[str, Any]:
        return {"fn": self.fn}


def half(step):
    return 0.5


def test_a_schedule_a_checkpoint_cannot_store_is_saved_by_repr(tmp_path):
    assert Linear(0.5, 0.1, 10).storable and not Stepwise(half).storable

    def make(fraction):
        rb = OfflineToOnlineReplayBuffer(
            OfflineDataset.from_tensordict(rows(10, 0.0)),
            online_capacity=10,
            offline_fraction=fraction,
            generator=0,
        )
        rb.extend(rows(4, 1.0))
        return rb

    rb = make(Stepwise(half))
    state = rb.state_dict()
    assert state["fraction"]["schedule"] == {"type": None, "repr": repr(Stepwise(half))}
    rb.dumps(tmp_path / "ck")
    make(Stepwise(half)).loads(tmp_path / "ck")  # built with it again: resumes
    with pytest.raises(CheckpointError, match="which a checkpoint cannot store; build the buffer"):
        make(Linear(0.5, 0.1, 10)).loads(tmp_path / "ck")


def test_a_mixtures_numbers_are_constant_weights_saved_as_fixed():
    mix = MixtureReplayBuffer(
        {"a": LazyTensorStorage(4), "b": LazyTensorStorage(4)}, {"a": 3, "b": Linear(1.0, 0.0, 10)}
    )
    assert mix.fractions == {"a": 3.0, "b": 1.0}
    fractions = mix.state_dict()["fractions"]
    assert fractions["a"] == {"fixed": 3.0}
    assert fractions["b"] == {"schedule": Linear(1.0, 0.0, 10).to_config()}


# -- what every buffer shares (buffers/base.py) ----------------------------------------------


@pytest.mark.parametrize("kind", ["replay", "offline_to_online", "mixture"])
def test_every_buffer_resolves_a_missing_batch_size_the_same_way(kind):
    data = OfflineDataset.from_tensordict(rows(10, 0.0))
    rb = {
        "replay": lambda: data,
        "offline_to_online": lambda: OfflineToOnlineReplayBuffer(data, online_capacity=4),
        "mixture": lambda: MixtureReplayBuffer({"a": data}, {"a": 1}),
    }[kind]()
    with pytest.raises(
        ValueError,
        match=r"batch_size must be provided either in __init__ or sample\(\): pass "
        r"sample\(batch_size\) or set batch_size= at construction",
    ):
        rb.sample()
    with pytest.raises(ValueError, match="batch_size must be a positive int, got 0"):
        rb.sample(0)
    assert rb.sample(3).batch_size == (3,)


def test_a_buffer_of_plain_tensors_is_refused_as_a_source_by_name():
    tensors = ReplayBuffer(storage=LazyTensorStorage(10))
    tensors.extend(torch.arange(5.0))
    with pytest.raises(
        TypeError,
        match=r"source 'offline' holds tensors \[n, \.\.\.\] rows, and a mixing buffer mixes "
        r"TensorDict rows only: extend that buffer with TensorDicts",
    ):
        OfflineToOnlineReplayBuffer(tensors, online_capacity=10, offline_fraction=0.5)
    assert len(tensors) == 5 and torch.equal(tensors[:], torch.arange(5.0))

"""The mixing buffers' arguments: source keys that name data, a bad priority in a later
source, annealing and TorchRL's hooks fields."""

from __future__ import annotations

import pytest
import torch

from mixreplay import (
    LazyTensorStorage,
    MixtureReplayBuffer,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    PrioritizedSampler,
)
from mixreplay.schedules import Linear, Proportional
from tests.conftest import ted_rows
from tests.helpers import assert_state_equal


def offline(n=20):
    return OfflineDataset.from_tensordict(ted_rows(n))


# -- 11.5: a source_key that names data --------------------------------------------------------


@pytest.mark.parametrize("key", ["observation", ("next", "reward"), "next"])
def test_a_source_key_naming_data_is_refused_at_construction(key):
    with pytest.raises(
        ValueError,
        match="names data: the rows hold .* which the per-row source labels would overwrite",
    ):
        OfflineToOnlineReplayBuffer(offline(), online_capacity=10, source_key=key)
    with pytest.raises(ValueError, match="names data"):
        MixtureReplayBuffer(
            {"a": offline(), "b": LazyTensorStorage(4)}, {"a": 1, "b": 1}, source_key=key
        )


def test_a_source_key_naming_data_is_refused_when_the_first_rows_reveal_it():
    mix = MixtureReplayBuffer(
        {"a": LazyTensorStorage(4), "b": LazyTensorStorage(4)}, {"a": 1, "b": 1}, source_key="tag"
    )
    rows = ted_rows(3)
    rows["tag"] = torch.zeros(3, 1)
    with pytest.raises(ValueError, match="source_key='tag' names data"):
        mix.extend(rows, source="a")
    assert len(mix) == 0
    mix.extend(ted_rows(3), source="a")  # rows without the key are fine
    assert mix.sample(4)["tag"].tolist() == [0, 0, 0, 0]


# -- 11.6: priority updates are atomic ---------------------------------------------------------


def two_prioritized():
    mix = MixtureReplayBuffer(
        {"a": LazyTensorStorage(10), "b": LazyTensorStorage(10)},
        {"a": 1, "b": 1},
        samplers={"a": PrioritizedSampler(alpha=1.0), "b": PrioritizedSampler(alpha=1.0)},
        generator=0,
    )
    mix.extend(ted_rows(10), source="a")
    mix.extend(ted_rows(10, tag=1.0), source="b")
    return mix


def test_a_bad_priority_in_the_second_source_changes_nothing_and_names_its_batch_row():
    mix = two_prioritized()
    _, info = mix.sample(8, return_info=True)
    before = mix.state_dict()
    priority = torch.ones(8)
    priority[6] = float("nan")  # row 6 of the batch: the second source's third row
    with pytest.raises(ValueError, match=r"priority must be finite.*\(row 6 of the batch\)"):
        mix.update_priority(info, priority)
    assert_state_equal(before, mix.state_dict())  # the first source's priorities are untouched
    mix.update_priority(info, torch.ones(8))  # a good update still applies


# -- 12.1: one fraction, one schedule ----------------------------------------------------------


def test_anneal_replaces_any_schedule_and_set_step_moves_along_it():
    rb = OfflineToOnlineReplayBuffer(
        offline(), online_capacity=10, offline_fraction=Linear(0.8, 0.2, 10)
    )
    rb.anneal(5, 10)
    assert rb.offline_fraction == 0.8 * 0.5  # from the base fraction (Linear's value at step 0)
    rb.set_step(10)  # continues along the decay, it does not undo it
    assert rb.offline_fraction == 0.0
    rb.set_step(2)
    assert rb.offline_fraction == pytest.approx(0.8 * 0.8)


def test_anneal_applies_to_a_proportional_fraction_too():
    rb = OfflineToOnlineReplayBuffer(
        offline(30), online_capacity=10, offline_fraction=Proportional()
    )
    rb.extend(ted_rows(10))
    assert rb.offline_fraction == 0.75
    rb.anneal(90, 100)  # used to be ignored
    assert rb.offline_fraction == pytest.approx(1.0 * 0.1)  # base: all offline at construction


def test_torchrl_hooks_fields_map_onto_the_schedule():
    rb = OfflineToOnlineReplayBuffer(offline(), online_capacity=10, offline_fraction=0.4)
    assert rb._offline_fraction == 0.4 and rb._base_offline_fraction == 0.4
    rb._offline_fraction = 0.1  # what TorchRL's replay-buffer hook does on load
    assert rb.offline_fraction == 0.1
    rb._base_offline_fraction = 0.6
    rb.anneal(1, 2)
    assert rb.offline_fraction == 0.3

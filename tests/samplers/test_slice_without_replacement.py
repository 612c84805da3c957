"""``SliceSamplerWithoutReplacement``: slices of episodes, each episode once per epoch."""

from __future__ import annotations

from itertools import islice

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    LazyTensorStorage,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
)


def episodes(lengths: list[int]) -> TensorDict:
    ids = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    return TensorDict({"t": torch.arange(ids.numel()), "episode": ids}, [ids.numel()])


def buffer(sampler, lengths=(6, 6, 6, 6, 6), batch_size=4) -> ReplayBuffer:
    rb = ReplayBuffer(
        storage=LazyTensorStorage(100), sampler=sampler, batch_size=batch_size, generator=1
    )
    rb.extend(episodes(list(lengths)))
    return rb


def epoch(rb: ReplayBuffer) -> list[TensorDict]:
    """The batches of ``iter(rb)``, which ends with the epoch (at most 10: never endless)."""
    return list(islice(rb, 10))


def slices(batch: TensorDict, L: int = 2) -> torch.Tensor:
    return batch["episode"].view(-1, L)


def test_an_epoch_visits_each_episode_once_and_a_batch_never_twice():
    rb = buffer(SliceSamplerWithoutReplacement(2, traj_key="episode"))
    for _ in range(3):  # three epochs
        seen = []
        for batch in epoch(rb):  # iteration ends with the epoch
            s = slices(batch)
            assert (s == s[:, :1]).all()  # each slice inside one episode
            assert (batch["t"].view(-1, 2).diff(dim=1) == 1).all()  # consecutive steps
            seen += s[:, 0].tolist()
        assert sorted(seen) == [0, 1, 2, 3, 4]  # 2 + 2 + 1: the last batch is short
        assert rb.sampler.ran_out


def test_drop_last_drops_the_short_rest_of_an_epoch():
    rb = buffer(SliceSamplerWithoutReplacement(2, traj_key="episode", drop_last=True))
    assert [len(b) for b in epoch(rb)] == [4, 4]  # the fifth episode is dropped
    with pytest.raises(ValueError, match="asked for 6 slices, and 5 episodes are long enough"):
        rb.sample(12)


def test_a_write_starts_a_new_epoch():
    rb = buffer(SliceSamplerWithoutReplacement(2, traj_key="episode", shuffle=False))
    assert slices(rb.sample())[:, 0].tolist() == [0, 1]
    rb.extend(episodes([4]))  # rows written: the episodes may have changed
    assert slices(rb.sample())[:, 0].tolist() == [0, 1]


def test_only_episodes_long_enough_are_drawn_with_strict_length():
    rb = buffer(SliceSamplerWithoutReplacement(4, traj_key="episode"), lengths=(2, 5, 3, 4))
    seen = [slices(b, 4)[:, 0].tolist() for b in epoch(rb)]
    assert sorted(sum(seen, [])) == [1, 3]


def test_torchrls_dispatch_and_the_class_tree():
    s = SliceSampler(2, replacement=False, traj_key="episode", drop_last=True, shuffle=False)
    assert type(s) is SliceSamplerWithoutReplacement
    assert isinstance(s, SliceSampler) and isinstance(s, SamplerWithoutReplacement)
    assert (s.slice_len, s.drop_last, s.shuffle, s.strict_length) == (2, True, False, True)
    assert type(SliceSampler(2, replacement=True)) is SliceSampler
    with pytest.raises(TypeError, match="it always draws without replacement"):
        SliceSamplerWithoutReplacement(2, replacement=True)
    assert repr(s).startswith("SliceSamplerWithoutReplacement(slice_len=2")


def test_the_epoch_is_checkpointed_and_resumes(tmp_path):
    def make():
        return buffer(SliceSamplerWithoutReplacement(2, traj_key="episode"))

    rb = make()
    first = slices(rb.sample())[:, 0].tolist()
    rb.dumps(tmp_path / "ckpt")
    rest = [slices(b)[:, 0].tolist() for b in epoch(rb)]
    twin = make()
    twin.loads(tmp_path / "ckpt")
    assert [slices(b)[:, 0].tolist() for b in epoch(twin)] == rest
    assert sorted(first + sum(rest, [])) == [0, 1, 2, 3, 4]


def test_a_mixing_buffer_refuses_it_its_batches_may_be_short():
    offline = buffer(SliceSampler(2, traj_key="episode"))
    with pytest.raises(ValueError, match="pad_output=True"):
        OfflineToOnlineReplayBuffer(
            offline,
            online_capacity=10,
            online_sampler=SliceSamplerWithoutReplacement(2, traj_key="episode"),
            batch_size=4,
        )

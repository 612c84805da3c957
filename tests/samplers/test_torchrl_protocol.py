"""TorchRL's sampler call on its own: ``sampler.sample(storage, batch_size) -> (index, info)``.

Without a generator, every mixreplay sampler answers TorchRL's call with TorchRL's meaning:
it draws from torch's global generator (``torch.manual_seed`` repeats a draw) and returns the
slots with a dict of TorchRL's info entries. With a generator, the call is mixreplay's.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from mixreplay import EmptyBufferError, LazyMemmapStorage, LazyTensorStorage, ReplayBuffer
from mixreplay.errors import DataStructureError
from mixreplay.samplers import (
    PrioritizedSampler,
    RandomSampler,
    Sampler,
    SamplerWithoutReplacement,
    SliceSampler,
)


def filled(n: int = 40, length: int = 10, storage=None):
    """A storage holding ``n`` rows in episodes of ``length``, written with ``storage.set``."""
    x = torch.arange(n)
    done = (x % length == length - 1).unsqueeze(-1)
    storage = storage if storage is not None else LazyTensorStorage(n)
    storage.set(range(n), TensorDict({"x": x, "episode": x // length, ("next", "done"): done}, [n]))
    return storage


SAMPLERS = {
    "random": lambda: RandomSampler(),
    "without_replacement": lambda: SamplerWithoutReplacement(),
    "prioritized": lambda: PrioritizedSampler(40, alpha=0.7, beta=0.9),
    "slice": lambda: SliceSampler(num_slices=2),
}


@pytest.mark.parametrize("kind", sorted(SAMPLERS))
@pytest.mark.parametrize("keyword", [False, True])
def test_torchrls_call_draws_from_the_global_generator_and_returns_index_and_info(kind, keyword):
    storage = filled()
    draws = []
    for _ in range(2):
        sampler = SAMPLERS[kind]()
        torch.manual_seed(3)
        if keyword:
            index, info = sampler.sample(storage, batch_size=8)
        else:
            index, info = sampler.sample(storage, 8)
        assert isinstance(info, dict)
        assert index.dtype == torch.int64 and index.shape == (8,)
        assert 0 <= int(index.min()) and int(index.max()) < 40
        draws.append(index)
    assert torch.equal(draws[0], draws[1])  # torch.manual_seed repeats it, as in TorchRL
    torch.manual_seed(4)
    assert not torch.equal(SAMPLERS[kind]().sample(storage, 8)[0], draws[0])
    if kind == "prioritized":
        assert set(info) == {"priority_weight"}
        assert torch.allclose(info["priority_weight"], torch.ones(8))  # equal priorities
    elif kind == "slice":
        assert set(info) == {("next", "truncated"), ("next", "done"), ("next", "terminated")}
        steps = storage.get(index)["x"].view(2, 4)
        assert (steps[:, 1:] == steps[:, :-1] + 1).all()
        assert info[("next", "truncated")].view(2, 4)[:, -1].all()
    else:
        assert info == {}


def test_the_call_with_a_generator_is_mixreplays_and_does_not_touch_the_global_generator():
    storage = filled()
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    index = RandomSampler().sample(storage, 5, torch.Generator().manual_seed(1))
    assert isinstance(index, torch.Tensor) and index.shape == (5,)
    assert torch.equal(torch.random.get_rng_state(), before)
    again = RandomSampler().sample(storage, 5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(index, again)


def test_a_one_part_key_is_spelled_as_torchrl_spells_it():
    storage = LazyMemmapStorage(20)
    x = torch.arange(20)
    storage.set(range(20), TensorDict({"x": x, "done": (x % 5 == 4).unsqueeze(-1)}, [20]))
    sampler = SliceSampler(num_slices=2, end_key="done", truncated_key="truncated")
    torch.manual_seed(0)
    _, info = sampler.sample(storage, batch_size=10)
    assert set(info) == {"truncated", "done", "terminated"}
    storage.cleanup()


def test_a_slice_sampler_follows_writes_made_with_storage_set():
    storage = filled(n=40, length=10, storage=LazyTensorStorage(80))
    sampler = SliceSampler(slice_len=4)
    torch.manual_seed(0)
    index, _ = sampler.sample(storage, 8)
    assert int(index.max()) < 40
    x = torch.arange(40, 80)
    storage.set(
        range(40, 80),
        TensorDict(
            {"x": x, "episode": x // 10, ("next", "done"): (x % 10 == 9).unsqueeze(-1)}, [40]
        ),
    )
    seen = torch.cat([sampler.sample(storage, 8)[0] for _ in range(30)])
    assert int(seen.max()) >= 40


def test_a_prioritized_sampler_gives_rows_written_behind_its_back_the_largest_priority():
    storage = filled()
    sampler = PrioritizedSampler(40, alpha=1.0, beta=1.0)
    torch.manual_seed(0)
    index, _ = sampler.sample(storage, 4)  # every row at the default priority
    sampler.update_priority(torch.arange(40), torch.full((40,), 0.01))
    sampler.update_priority(torch.tensor([7]), torch.tensor([100.0]))
    index, info = sampler.sample(storage, 64)
    assert (index == 7).float().mean() > 0.5
    assert info["priority_weight"][index == 7].max() < 1e-3


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda s: SliceSampler(num_slices=2).sample(object(), 8),
            DataStructureError,
            r"^Could not get a tensordict out of the storage, which is required for SliceSampler "
            r"to compute the trajectories: SliceSampler.sample\(storage, batch_size\) reads a "
            r"mixreplay storage \(LazyTensorStorage, LazyMemmapStorage, TensorStorage\), got "
            r"builtins.object; store the rows in one of them",
        ),
        (
            lambda s: RandomSampler().sample([1, 2], 8),
            DataStructureError,
            r"^RandomSampler.sample\(storage, batch_size\) reads a mixreplay storage .*got "
            r"builtins.list",
        ),
        (
            lambda s: RandomSampler().sample(s, 4, batch_size=4),
            TypeError,
            r"RandomSampler.sample got the batch size twice \(n=4 and batch_size=4\); pass one",
        ),
        (
            lambda s: RandomSampler().sample(s, size=4),
            TypeError,
            r"sample\(\) got an unexpected keyword argument 'size'",
        ),
        (
            lambda s: RandomSampler().sample(s, 0),
            TypeError,
            r"RandomSampler.sample batch_size must be a positive int, got 0",
        ),
        (
            lambda s: RandomSampler().sample(s, True),
            TypeError,
            r"batch_size must be a positive int, got True",
        ),
        (
            lambda s: RandomSampler().sample(LazyTensorStorage(4), 2),
            EmptyBufferError,
            r"^Cannot sample from an empty storage: write rows first",
        ),
    ],
)
def test_bad_torchrl_calls_are_refused_and_draw_nothing(call, error, match):
    storage = filled()
    state = torch.random.get_rng_state()
    with pytest.raises(error, match=match):
        call(storage)
    assert torch.equal(torch.random.get_rng_state(), state)


def test_torchrls_exceptions_for_the_same_mistakes():
    """TorchRL's tests match these: a foreign storage, end flags that are not one per row."""
    with pytest.raises(RuntimeError, match="Could not get a tensordict out of the storage"):
        SliceSampler(num_slices=2).sample(object(), 8)
    storage = LazyTensorStorage(10)
    storage.set(
        range(10), TensorDict({("next", "done"): torch.zeros(10, 5, 1, dtype=torch.bool)}, [10])
    )
    with pytest.raises(
        RuntimeError, match="Expected the end-of-trajectory signal to be 1-dimensional"
    ):
        SliceSampler(num_slices=2).sample(storage, batch_size=4)


def test_a_mixreplay_subclass_answers_torchrls_call_too():
    class Newest(Sampler):
        def sample(self, storage, n, generator):
            return torch.full((n,), len(storage) - 1)

    index, info = Newest().sample(filled(), batch_size=3)
    assert index.tolist() == [39, 39, 39] and info == {}

    class Sub(Newest):  # a subclass calling its parent's draw, mixreplay's way
        def sample(self, storage, n, generator):
            return super().sample(storage, n, generator) - 1

    assert Sub().sample(filled(), 2)[0].tolist() == [38, 38]
    assert Sub().sample(filled(), 2, None).tolist() == [38, 38]


def test_get_stop_and_length_lists_the_episodes_held_oldest_first_across_the_ring_edge():
    """TorchRL's tests read a slice sampler's episodes through ``_get_stop_and_length``."""
    rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=SliceSampler(slice_len=2))
    x = torch.arange(13)  # episodes of 4 (ends at rows 3, 7, 11); the ring keeps rows 3..12
    rb.extend(TensorDict({"x": x, ("next", "done"): (x % 4 == 3).unsqueeze(-1)}, [13]))
    start, stop, length = rb.sampler._get_stop_and_length(rb.storage)
    assert start.tolist() == [[3], [4], [8], [2]]  # slots; row 12 is slot 2, written last
    assert stop.tolist() == [[3], [7], [1], [2]]
    assert length.tolist() == [1, 4, 4, 1]
    with pytest.raises(EmptyBufferError, match=r"cannot list episodes: the storage holds no rows"):
        SliceSampler(slice_len=2)._get_stop_and_length(LazyTensorStorage(4))


@pytest.mark.parametrize("given", ["trajectory", "end"])
def test_find_start_stop_traj_follows_torchrls_rules(given):
    """Ends where the id changes (or a flag is set); a full ring wraps, the cursor truncates."""
    ids = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 0])
    flags = torch.zeros(10, dtype=torch.bool)
    flags[[2, 4, 8]] = True
    arg = {"trajectory": ids} if given == "trajectory" else {"end": flags}
    find = SliceSampler(num_slices=2)._find_start_stop_traj
    start, stop, length = find(at_capacity=False, **arg)
    assert start.tolist() == [[0], [3], [5], [9]] and stop.tolist() == [[2], [4], [8], [9]]
    assert length.tolist() == [3, 2, 4, 1]
    start, stop, length = find(at_capacity=True, **arg)  # row 9 goes on at row 0
    assert start.tolist() == [[9], [3], [5]] and stop.tolist() == [[2], [4], [8]]
    assert length.tolist() == [4, 2, 4]
    start, stop, length = find(at_capacity=True, cursor=6, **arg)  # row 6 was written last
    assert start.tolist() == [[9], [3], [5], [7]] and stop.tolist() == [[2], [4], [6], [8]]
    assert length.tolist() == [4, 2, 2, 2]
    assert flags.sum() == 3  # the caller's flags are left as they were


def test_find_start_stop_traj_refuses_what_it_cannot_read():
    find = SliceSampler(num_slices=2)._find_start_stop_traj
    with pytest.raises(TypeError, match=r"Exactly one of trajectory= \(episode ids\) or end="):
        find(at_capacity=True)
    with pytest.raises(TypeError, match=r"Exactly one of trajectory="):
        find(trajectory=torch.zeros(3), end=torch.zeros(3, dtype=torch.bool), at_capacity=True)
    with pytest.raises(
        ValueError, match=r"takes one value per row of a 1-D storage, got shape \[2, 3\]"
    ):
        find(end=torch.zeros(2, 3, dtype=torch.bool), at_capacity=False)


def test_a_subclass_overriding_the_episode_view_is_refused_when_defined():
    """Overriding it would change nothing drawn: it reports the episodes found."""
    with pytest.raises(
        TypeError,
        match=r"Mine overrides SliceSampler._get_stop_and_length: in mixreplay it is a view "
        r"of the episodes found, not how the sampler finds them, so overriding it would "
        r"change nothing drawn; override _end_to_start_stop\(end, length\) or",
    ):
        type("Mine", (SliceSampler,), {"_get_stop_and_length": lambda self, *a, **k: None})

    class Fine(SliceSampler):  # other overrides are the subclass's business
        def info(self, index, storage):
            return super().info(index, storage)


class _PairedEpisodes(SliceSampler):
    """Every episode also ends at each odd slot: episodes are pairs of rows at most."""

    def _end_to_start_stop(self, end, length):
        end = end.clone()
        end[1::2] = True
        return super()._end_to_start_stop(end, length)


class _PairedEpisodesByIds(SliceSampler):
    """The same cut, made by overriding the other hook."""

    def _find_start_stop_traj(self, *, trajectory=None, end=None, at_capacity, cursor=None):
        n = (trajectory if trajectory is not None else end).numel()
        flags = torch.zeros(n, dtype=torch.bool)
        flags[1::2] = True
        return super()._find_start_stop_traj(end=flags, at_capacity=at_capacity, cursor=cursor)


@pytest.mark.parametrize("sampler_cls", [_PairedEpisodes, _PairedEpisodesByIds])
def test_a_subclass_boundary_hook_decides_where_slices_may_run(sampler_cls):
    """As in TorchRL, overriding _end_to_start_stop or _find_start_stop_traj changes the
    episodes drawn from, after every write too (a ring that wraps included)."""
    rb = ReplayBuffer(
        storage=LazyTensorStorage(24),
        sampler=sampler_cls(slice_len=2, traj_key="episode"),
        batch_size=32,
        generator=0,
    )
    for first in range(0, 40, 8):  # one episode id for everything: only the hook cuts it
        rb.extend(
            TensorDict(
                episode=torch.zeros(8, dtype=torch.long),
                obs=torch.arange(first, first + 8),
                batch_size=[8],
            )
        )
        starts = rb.sample()["obs"].view(-1, 2)
        assert (starts[:, 1] == starts[:, 0] + 1).all()
        assert (starts[:, 0] % 2 == 0).all(), starts[:, 0]  # never across an odd slot
        _, stop, lengths = rb.sampler._get_stop_and_length(rb.storage)
        assert (lengths <= 2).all()
        assert (stop.squeeze(-1) % 2 == 1).all()


def test_without_a_hook_the_same_rows_are_one_episode():
    """The test above can fail: the base sampler draws slices starting at odd rows."""
    rb = ReplayBuffer(
        storage=LazyTensorStorage(24),
        sampler=SliceSampler(slice_len=2, traj_key="episode"),
        batch_size=64,
        generator=0,
    )
    rb.extend(
        TensorDict(episode=torch.zeros(8, dtype=torch.long), obs=torch.arange(8), batch_size=[8])
    )
    assert (rb.sample()["obs"].view(-1, 2)[:, 0] % 2 == 1).any()

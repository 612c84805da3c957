"""SliceSampler with TorchRL's meanings: how it draws, finds episodes, and shortens slices.

TorchRL picks an episode uniformly (among those long enough) and then a start uniformly in
it; mixreplay drew every valid start equally likely, so longer episodes gave more slices
(kept as ``uniform_over="starts"``). Episode boundaries are found as TorchRL finds them, and
``strict_length=False``, ``pad_output``, ``span``, ``truncated_key`` and ``init_key`` mean
what they mean there.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from mixreplay import (
    CheckpointError,
    FrozenStorage,
    LazyTensorStorage,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
)
from mixreplay.samplers import SliceSampler
from tests.samplers.test_prioritized_sampler import chi2_critical, chi2_statistic


def episodes(lengths: list[int], *, key: str = "episode", done: bool = False) -> TensorDict:
    """Episodes back to back: ``t`` is the step written, ``step`` the step within its episode."""
    lengths_t = torch.tensor(lengths)
    eid = torch.repeat_interleave(torch.arange(len(lengths)), lengths_t)
    first = torch.repeat_interleave(lengths_t.cumsum(0) - lengths_t, lengths_t)
    n = int(lengths_t.sum())
    td = TensorDict({"t": torch.arange(n), "step": torch.arange(n) - first}, [n])
    if key:
        td[key] = eid
    if done:
        flag = torch.zeros(n, 1, dtype=torch.bool)
        flag[lengths_t.cumsum(0) - 1] = True
        td["next", "done"] = flag
    return td


def buffer(lengths, sampler, capacity=None, **kw) -> ReplayBuffer:
    rows = episodes(lengths, **kw)
    rb = ReplayBuffer(
        storage=LazyTensorStorage(capacity or rows.shape[0]), sampler=sampler, generator=0
    )
    rb.extend(rows)
    return rb


def slices(batch, info) -> list[list[int]]:
    """The batch's ``t`` split at the info's truncated marks (one list per slice)."""
    t = batch["t"].tolist()
    ends = info["next", "truncated"].reshape(-1).nonzero().reshape(-1).tolist()
    out, begin = [], 0
    for end in ends:
        out.append(t[begin : end + 1])
        begin = end + 1
    assert begin == len(t)
    return out


# -- how slices are drawn --------------------------------------------------------------------------


def test_each_episode_long_enough_is_equally_likely_and_starts_are_uniform_in_it():
    lengths = [30, 25, 15, 30, 4]  # the last is shorter than a slice: never drawn
    rb = buffer(lengths, SliceSampler(5))
    batch = rb.sample(5 * 4000)
    episode = batch["episode"].view(-1, 5)[:, 0]
    counts = torch.bincount(episode, minlength=5).double()
    assert counts[4] == 0
    probs = torch.full((4,), 0.25, dtype=torch.float64)
    assert chi2_statistic(counts[:4], probs) < chi2_critical(3)
    starts = batch["step"].view(-1, 5)[:, 0][episode == 0]  # episode 0: starts 0..25
    counts = torch.bincount(starts, minlength=26).double()
    assert chi2_statistic(counts, torch.full((26,), 1 / 26, dtype=torch.float64)) < chi2_critical(
        25
    )


def test_uniform_over_starts_gives_longer_episodes_more_slices():
    lengths = [30, 25, 15, 30, 4]
    rb = buffer(lengths, SliceSampler(5, uniform_over="starts"))
    episode = rb.sample(5 * 4000)["episode"].view(-1, 5)[:, 0]
    counts = torch.bincount(episode, minlength=5).double()
    starts = torch.tensor([26, 21, 11, 26, 0], dtype=torch.float64)
    assert counts[4] == 0
    assert chi2_statistic(counts[:4], starts[:4] / starts.sum()) < chi2_critical(3)


@pytest.mark.torchrl
def test_torchrl_draws_episodes_alike():
    """TorchRL's own SliceSampler, on the same rows: each long-enough episode a quarter too."""
    from torchrl.data import LazyTensorStorage as TorchRLStorage
    from torchrl.data import ReplayBuffer as TorchRLReplayBuffer
    from torchrl.data import SliceSampler as TorchRLSliceSampler

    rb = TorchRLReplayBuffer(
        storage=TorchRLStorage(104),
        sampler=TorchRLSliceSampler(slice_len=5, traj_key="episode"),
        generator=torch.Generator().manual_seed(0),
    )
    rb.extend(episodes([30, 25, 15, 30, 4]))
    episode = rb.sample(5 * 4000)["episode"].view(-1, 5)[:, 0]
    counts = torch.bincount(episode, minlength=5).double()
    assert counts[4] == 0
    assert chi2_statistic(counts[:4], torch.full((4,), 0.25, dtype=torch.float64)) < chi2_critical(
        3
    )


# -- where episodes come from ----------------------------------------------------------------


def test_episode_keys_are_found_as_torchrl_finds_them():
    traj = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2])
    both = TensorDict(
        {("collector", "traj_ids"): traj, "episode": torch.zeros(8, dtype=torch.int64)}, [8]
    )
    rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=SliceSampler(num_slices=2), generator=0)
    assert rb.sampler.traj_key is None  # not found yet
    rb.extend(both)
    batch = rb.sample(6).reshape(2, 3)
    assert rb.sampler.traj_key == ("collector", "traj_ids")  # preferred over "episode"
    assert (batch["collector", "traj_ids"] == batch["collector", "traj_ids"][:, :1]).all()

    rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=SliceSampler(num_slices=2), generator=0)
    rb.extend(TensorDict({"episode": traj}, [8]))
    rb.sample(6)
    assert rb.sampler.traj_key == "episode"

    done = torch.zeros(9, 1, dtype=torch.bool)
    done[[2, 5, 8]] = True
    rb = ReplayBuffer(storage=LazyTensorStorage(9), sampler=SliceSampler(num_slices=3), generator=0)
    rb.extend(TensorDict({("next", "done"): done, "obs": torch.arange(9)}, [9]))
    assert rb.sampler.traj_key is None  # from the end flags
    assert set(rb.sample(9)["obs"].view(3, 3)[:, 0].tolist()) <= {0, 3, 6}


def test_a_given_key_that_is_absent_falls_back_to_the_other_kind(caplog):
    """As in TorchRL: a missing traj_key uses the end flags (logged), a missing end key the ids."""
    rows = episodes([4, 4], key="whatever", done=True)
    rb = ReplayBuffer(
        storage=LazyTensorStorage(8), sampler=SliceSampler(4, traj_key="episode"), generator=0
    )
    rb.extend(rows)
    with caplog.at_level(logging.INFO, logger="mixreplay.samplers.slice"):
        assert sorted(rb.sample(8)["t"].view(2, 4)[:, 0].tolist()) in ([0, 0], [0, 4], [4, 4])
    assert (
        "traj_key 'episode' is not in the storage; episode boundaries come from the end "
        "flags ('next', 'done')" in caplog.text
    )
    rb = ReplayBuffer(
        storage=LazyTensorStorage(8), sampler=SliceSampler(4, end_key="terminal"), generator=0
    )
    rb.extend(episodes([4, 4]))
    assert set(rb.sample(40)["t"].view(-1, 4)[:, 0].tolist()) == {0, 4}
    assert rb.sampler.traj_key == "episode"


# -- shorter slices ------------------------------------------------------------------------------


@st.composite
def short_cases(draw):
    lengths = draw(st.lists(st.integers(1, 9), min_size=1, max_size=8))
    L = draw(st.integers(1, 6))
    k = draw(st.integers(1, 6))
    left = draw(st.sampled_from([False, True, 1, 2]))
    right = draw(st.sampled_from([False, True, 1, 2]))
    strict = draw(st.booleans())
    pad = draw(st.booleans()) and not strict
    if (left is not True and left and left >= L) or (right is not True and right and right >= L):
        left = right = False
    capacity_extra = draw(st.integers(0, 5))
    return lengths, L, k, (left, right), strict, pad, capacity_extra


@settings(max_examples=120, deadline=None)
@given(case=short_cases(), seed=st.integers(0, 2**16))
def test_every_slice_is_a_run_of_one_episode_of_torchrls_length(case, seed):
    """Whatever strict_length, pad_output and span: each slice is consecutive steps of one
    episode; its length is TorchRL's (L; min(len, L) for a short episode; cut by span, never
    below span's bound); padding repeats the last real row; the info marks each slice."""
    lengths, L, k, span, strict, pad, extra = case
    if strict and max(lengths) < L:
        return  # nothing to draw (tested elsewhere)
    sampler = SliceSampler(
        slice_len=L, strict_length=strict, pad_output=pad, span=span, traj_key="episode"
    )
    rows = episodes(lengths)
    rb = ReplayBuffer(
        storage=LazyTensorStorage(rows.shape[0] + extra), sampler=sampler, generator=seed
    )
    rb.extend(rows)
    batch, info = rb.sample(k * L, return_info=True)
    left, right = span
    if pad:
        assert batch.shape[0] == k * L
        mask = (
            info["collector", "mask"].view(k, L)
            if ("collector", "mask") in info.keys(True)
            else torch.ones(k, L, dtype=torch.bool)
        )
        real = [row[m].tolist() for row, m in zip(batch["t"].view(k, L), mask, strict=True)]
        for row, m in zip(batch["t"].view(k, L), mask, strict=True):
            n_real = int(m.sum())
            assert m[:n_real].all() and not m[n_real:].any()
            assert (row[n_real:] == row[n_real - 1]).all()  # padding repeats the last real row
    else:
        real = slices(batch, info)
        assert len(real) == k
        assert sampler.variable_length == (not strict or any(span))
    eid = rows["episode"].tolist()
    step = rows["step"].tolist()
    for s in real:
        assert len(s) >= 1 and all(b == a + 1 for a, b in zip(s, s[1:]))
        assert len({eid[t] for t in s}) == 1
        length = lengths[eid[s[0]]]
        full = min(length, L) if not strict else L
        assert len(s) <= full
        if len(s) < full:  # cut by span: at the episode's first or last step
            at_start, at_end = step[s[0]] == 0, step[s[-1]] == length - 1
            assert (left and at_start) or (right and at_end)
            if at_start and left and left is not True:
                assert len(s) >= full - left
            if at_end and right and right is not True and not at_start:
                assert len(s) >= right + 1
        if strict:
            assert length >= L


def test_strict_length_false_draws_short_episodes_whole():
    """TorchRL's test_slice_sampler_strictlength, by hand: 2 + 10 steps, two slices of 4."""
    rb = buffer([2, 10], SliceSampler(num_slices=2, strict_length=False, traj_key="episode"))
    sizes = set()
    for _ in range(50):
        batch, info = rb.sample(8, return_info=True)
        sizes.add(batch.shape[0])
        for s in slices(batch, info):
            assert s in ([0, 1],) or (len(s) == 4 and s[0] >= 2)
    assert sizes == {4, 6, 8}
    strict = buffer([2, 10], SliceSampler(num_slices=2, traj_key="episode"))
    assert all(strict.sample(8)["episode"].eq(1).all() for _ in range(20))


def test_pad_output_keeps_the_batch_size_and_masks_the_padding():
    rb = buffer([3, 6, 2], SliceSampler(5, strict_length=False, pad_output=True))
    batch, info = rb.sample(15, return_info=True)
    mask = info["collector", "mask"]
    assert batch.shape[0] == 15 and mask.shape == (15,) and mask.dtype == torch.bool
    truncated = info["next", "truncated"].view(3, 5)
    lengths = mask.view(3, 5).sum(1)
    for i in range(3):
        assert truncated[i, lengths[i] - 1] and not truncated[i].sum() > 1
    long_enough = buffer([8, 8], SliceSampler(4, strict_length=False, pad_output=True))
    _, info = long_enough.sample(8, return_info=True)
    assert ("collector", "mask") not in info.keys(True)  # nothing to pad, as in TorchRL


def test_span_cuts_slices_at_episode_edges():
    data = TensorDict(
        {"obs": torch.arange(1, 11).repeat(10), "eps": torch.arange(100) // 10 + 1}, [100]
    )
    for N in (2, 4):  # TorchRL's test_slice_sampler_left_right, through ReplayBuffer
        rb = ReplayBuffer(
            storage=LazyTensorStorage(100),
            sampler=SliceSampler(num_slices=10, traj_key="eps", span=(N, N)),
            generator=0,
        )
        rb.extend(data)
        for _ in range(10):
            batch, info = rb.sample(50, return_info=True)
            for s in slices(batch.set("t", torch.arange(batch.shape[0])), info):
                eps = batch["eps"][s]
                assert eps.unique().numel() == 1 and len(s) >= 5 - N


# -- TorchRL's info entries ------------------------------------------------------------------


def test_info_has_truncated_done_terminated_and_is_init_as_torchrl_writes_them():
    rows = episodes([6, 6], done=True)
    rows["next", "terminated"] = rows["next", "done"].clone()
    is_init = torch.zeros(12, 1, dtype=torch.bool)
    is_init[[0, 6]] = True
    rows["is_init"] = is_init
    rb = ReplayBuffer(storage=LazyTensorStorage(12), sampler=SliceSampler(3), generator=0)
    rb.extend(rows)
    batch, info = rb.sample(12, return_info=True)
    truncated = info["next", "truncated"]
    assert truncated.shape == (12, 1) and truncated.view(4, 3)[:, 2].all()
    assert truncated.view(4, 3)[:, :2].sum() == 0
    assert torch.equal(info["next", "done"], batch["next", "done"] | truncated)
    assert torch.equal(info["next", "terminated"], batch["next", "terminated"])
    assert torch.equal(info["is_init"].view(4, 3)[:, 0], torch.ones(4, dtype=torch.bool))
    assert torch.equal(info["is_init"].view(4, 3)[:, 1:], batch["is_init"].view(4, 3)[:, 1:])
    assert "is_init" not in batch.keys() or torch.equal(
        batch["is_init"], rows["is_init"][info["index"]]
    )
    plain = buffer([6, 6], SliceSampler(3, truncated_key=None, init_key=None))
    _, info = plain.sample(6, return_info=True)
    assert set(info.keys(True)) == {"index"}
    bare = buffer([6, 6], SliceSampler(3))
    _, info = bare.sample(
        6, return_info=True
    )  # nothing stored: done is truncated, terminated False
    assert torch.equal(info["next", "done"], info["next", "truncated"])
    assert not info["next", "terminated"].any() and "is_init" not in info.keys()


@pytest.mark.parametrize("uniform_over", ["trajectories", "starts"])
def test_info_marks_follow_each_draws_shape_and_writes_to_them_change_no_later_draw(
    uniform_over,
):
    # the slice positions of a draw are kept for the next draw of that shape: a draw of
    # another shape (batch size or slice length) gets its own, and the info handed out is
    # the caller's to write
    rb = buffer([9, 7, 12], SliceSampler(3, uniform_over=uniform_over))
    for n in (12, 6, 12, 9, 12):
        batch, info = rb.sample(n, return_info=True)
        truncated = info["next", "truncated"].view(n // 3, 3)
        assert truncated[:, 2].all() and not truncated[:, :2].any(), n
        assert [len(s) for s in slices(batch, info)] == [3] * (n // 3)
        info["next", "truncated"].fill_(True)  # the caller's copy
        info["next", "done"].fill_(False)
    # num_slices: three slices whatever the batch, so the slice length changes with it
    three = ReplayBuffer(
        storage=rb.storage,
        sampler=SliceSampler(num_slices=3, uniform_over=uniform_over),
        generator=0,
    )
    for n in (12, 9, 12, 6):
        _, info = three.sample(n, return_info=True)
        marks = info["next", "truncated"].reshape(-1).nonzero().reshape(-1).tolist()
        L = n // 3
        assert marks == list(range(L - 1, n, L)), (n, L)


def test_a_mixing_buffer_refuses_a_variable_length_source():
    offline = ReplayBuffer(storage=FrozenStorage.from_tensordict(episodes([10, 10])))
    with pytest.raises(
        ValueError,
        match=r"source 'online' samples with .*returns slices of varying length, so it cannot "
        r"give a mixing buffer its exact share of rows; use pad_output=True",
    ):
        OfflineToOnlineReplayBuffer(
            offline,
            online_capacity=40,
            online_sampler=SliceSampler(4, strict_length=False),
            offline_fraction=0.5,
            generator=0,
        )
    padded = OfflineToOnlineReplayBuffer(
        offline,
        online_capacity=40,
        online_sampler=SliceSampler(4, strict_length=False, pad_output=True),
        offline_fraction=0.5,
        generator=0,
    )
    padded.extend(episodes([2, 10]))
    assert padded.sample(8).shape[0] == 8


# -- checkpoints ---------------------------------------------------------------------------------


def test_a_checkpoint_of_the_former_slice_sampler_names_the_setting_that_resumes_it():
    rb = buffer([10, 10], SliceSampler(4), capacity=30)
    state = rb.state_dict()
    config = state["sampler"]["config"]
    del config["uniform_over"]  # what an earlier mixreplay saved: it drew uniformly over starts
    again = buffer([1], SliceSampler(4), capacity=30)
    with pytest.raises(
        CheckpointError,
        match=r"the sampler's settings differ \(uniform_over: saved 'starts', buffer "
        r"'trajectories'\)",
    ):
        again.load_state_dict(state)
    resumed = buffer([1], SliceSampler(4, uniform_over="starts"), capacity=30)
    resumed.load_state_dict(state)
    assert math.isfinite(float(resumed.sample(8)["t"].float().mean()))


@st.composite
def write_histories(draw):
    lengths = draw(st.lists(st.integers(1, 9), min_size=1, max_size=14))
    total = sum(lengths)
    capacity = draw(st.integers(1, 30))
    cuts = sorted(draw(st.lists(st.integers(1, max(1, total - 1)), max_size=8, unique=True)))
    chunks = [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True) if b > a]
    L = draw(st.integers(1, 4))
    by_ids = draw(st.booleans())
    return lengths, capacity, chunks, L, by_ids


@settings(max_examples=150, deadline=None)
@given(case=write_histories(), seed=st.integers(0, 2**16))
def test_the_episode_list_follows_every_write(case, seed):
    """The list of episodes kept up to date write by write equals one built from the rows."""
    lengths, capacity, chunks, L, by_ids = case
    rows = episodes(lengths, done=True)
    sampler = (
        SliceSampler(L, traj_key="episode") if by_ids else SliceSampler(L, end_key=("next", "done"))
    )
    storage = LazyTensorStorage(capacity)
    g = torch.Generator().manual_seed(seed)
    pos = 0
    for k in chunks:
        sampler.on_extend(storage.extend(rows[pos : pos + k]), storage)
        pos += k
        index = sampler._index(storage, L)
        first, length = index.episodes()
        # brute force: rows in time order, an episode ends at a done flag (or the newest row)
        n = len(storage)
        oldest = storage.cursor % capacity if n == capacity else 0
        slots = [(oldest + i) % capacity for i in range(n)]
        t = storage.column("t").tolist()
        expected, start = [], 0
        for i, slot in enumerate(slots):
            last = i == n - 1
            ends = (
                rows["next", "done"][t[slot]].item()
                if not by_ids
                else (last or rows["episode"][t[slot]] != rows["episode"][t[slots[i + 1]]])
            )
            if ends or last:
                expected.append((slots[start], i - start + 1))
                start = i + 1
        assert list(zip(first.tolist(), length.tolist(), strict=True)) == expected
        if max(length.tolist()) >= L:
            sampler.sample(storage, 2 * L, g)  # the draw reads the same list

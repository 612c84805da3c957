"""Samplers inside mixing buffers: priorities routed to their source, slices counted whole."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from mixreplay import (
    LazyTensorStorage,
    MixtureReplayBuffer,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
)
from mixreplay.samplers import PrioritizedSampler, SliceSampler
from tests.conftest import ted_rows


def episodes(n_eps, length, tag):
    """``n_eps`` episodes of ``length`` steps; ``t`` counts steps, ``ep`` numbers episodes."""
    n = n_eps * length
    td = ted_rows(n, tag=tag)
    t = torch.arange(n) % length
    td["t"] = t
    td["ep"] = torch.arange(n) // length
    td["next", "done"] = (t == length - 1).unsqueeze(-1)
    return td


def test_priority_updates_land_only_in_their_source():
    prio_a, prio_c = PrioritizedSampler(alpha=1.0), PrioritizedSampler(alpha=1.0)
    mix = MixtureReplayBuffer(
        {"a": LazyTensorStorage(20), "b": LazyTensorStorage(20), "c": LazyTensorStorage(20)},
        {"a": 1, "b": 1, "c": 1},
        samplers={"a": prio_a, "c": prio_c},
        generator=0,
    )
    for i, name in enumerate("abc"):
        mix.extend(ted_rows(20, tag=float(i)), source=name)
    batch, info = mix.sample(30, return_info=True)
    assert "weight" in info.keys() and torch.equal(info["weight"][10:20], torch.ones(10))
    new = torch.arange(30, dtype=torch.float32) + 1.0
    mix.update_priority(info, new)
    for sampler, src in ((prio_a, 0), (prio_c, 2)):
        rows = info["source"] == src
        got = sampler.tree.get(info["index"][rows])
        # the last update of a slot wins when a slot was drawn twice
        expected = {}
        for idx, p in zip(info["index"][rows].tolist(), new[rows].tolist()):
            expected[idx] = p
        want = torch.tensor([expected[i] for i in info["index"][rows].tolist()]) + sampler.eps
        assert torch.allclose(got.double(), want.double(), rtol=1e-5)
    untouched = set(range(20)) - set(info["index"][info["source"] == 0].tolist())
    assert torch.allclose(
        prio_a.tree.get(torch.tensor(sorted(untouched))).double(),
        torch.ones(len(untouched), dtype=torch.float64),
    )


def test_prioritized_online_side_of_offline_to_online():
    off = OfflineDataset.from_tensordict(ted_rows(50, tag=0.0))
    prio = PrioritizedSampler(alpha=1.0, beta=1.0)
    rb = OfflineToOnlineReplayBuffer(
        off, online_capacity=10, online_sampler=prio, generator=0, batch_size=20
    )
    rb.extend(ted_rows(10, tag=1.0))
    _, info = rb.sample(return_info=True)
    priority = torch.zeros(20)
    priority[info["source"] == 1] = torch.where(
        info["index"][info["source"] == 1] == 3, 1000.0, 1e-3
    )
    rb.update_priority(info, priority)
    batch, info = rb.sample(return_info=True)
    online_rewards = batch["next", "reward"][10:].squeeze(-1)
    assert (online_rewards == 3.0).float().mean() > 0.9  # row 3 now dominates the online draws
    assert info["weight"][:10].eq(1).all()  # offline rows are uniform


def test_update_priority_errors():
    rb = OfflineToOnlineReplayBuffer(OfflineDataset.from_tensordict(ted_rows(5)), online_capacity=5)
    rb.extend(ted_rows(5))
    _, info = rb.sample(4, return_info=True)
    with pytest.raises(ValueError, match="priority has 3 entries for a batch of 4 rows"):
        rb.update_priority(info, torch.ones(3))
    with pytest.raises(
        TypeError,
        match=r"update_priority expects the info TensorDict from sample\(..., return_info=True\)",
    ):
        rb.update_priority(torch.arange(4), torch.ones(4))
    rb.update_priority(info, torch.ones(4))  # uniform sources: ignored, no error


@pytest.mark.parametrize("f, B, L", [(0.3, 256, 8), (0.5, 64, 4), (0.1, 40, 5), (0.9, 48, 16)])
def test_slices_split_in_whole_slices(f, B, L):
    off = ReplayBuffer(storage=LazyTensorStorage(400), sampler=SliceSampler(L))
    off.extend(episodes(10, 40, tag=0.0))
    rb = OfflineToOnlineReplayBuffer(
        off,
        online_capacity=300,
        offline_fraction=f,
        online_sampler=SliceSampler(L),
        generator=0,
        source_key="src",
    )
    rb.extend(episodes(6, 50, tag=1.0))
    batch = rb.sample(B)
    n_off = round(f * B / L) * L
    assert int((batch["src"] == 0).sum()) == n_off
    t = batch["t"].view(-1, L)
    ep = batch["ep"].view(-1, L)
    src = batch["src"].view(-1, L)
    assert (t.diff(dim=1) == 1).all()  # consecutive steps
    assert (ep == ep[:, :1]).all() and (src == src[:, :1]).all()  # one episode, one source


def test_slices_need_a_multiple_of_slice_len():
    off = ReplayBuffer(storage=LazyTensorStorage(100), sampler=SliceSampler(8))
    off.extend(episodes(2, 50, tag=0.0))
    rb = OfflineToOnlineReplayBuffer(off, online_capacity=10, online_sampler=SliceSampler(8))
    with pytest.raises(ValueError, match="batch_size 100 is not a multiple of slice_len 8"):
        rb.sample(100)
    mixed_units = OfflineToOnlineReplayBuffer(
        off, online_capacity=10, online_sampler=SliceSampler(4)
    )
    with pytest.raises(ValueError, match=r"different slice lengths \[4, 8\]"):
        mixed_units.sample(64)


@given(
    lengths=st.lists(st.integers(1, 12), min_size=1, max_size=15),
    chunks=st.lists(st.integers(1, 37), min_size=1, max_size=12),
    seed=st.integers(0, 100),
)
@settings(max_examples=40, deadline=None)
def test_online_slices_never_cross_a_boundary_or_the_ring_cursor(lengths, chunks, seed):
    """A stream of episodes of random lengths, written in random chunks into a small ring that wraps."""
    ep = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    t = torch.cat([torch.arange(n) for n in lengths])
    total = ep.numel()
    stream = episodes(1, total, tag=1.0)
    stream["ep"], stream["t"] = ep, t
    stream["next", "done"] = torch.cat([t[1:] == 0, torch.tensor([False])]).unsqueeze(
        -1
    )  # last episode in progress
    stream["next", "reward"] = torch.arange(total, dtype=torch.float32).unsqueeze(
        -1
    )  # global write order
    rb = OfflineToOnlineReplayBuffer(
        OfflineDataset.from_tensordict(episodes(3, 20, tag=0.0)),
        online_capacity=24,
        online_sampler=SliceSampler(4),
        offline_fraction=0.25,
        generator=seed,
    )
    pos = 0
    for n in chunks:
        if pos >= total:
            break
        rb.extend(stream[pos : pos + n])
        pos += n
    batch = rb.sample(32)  # no online slice available yet: the online share goes offline
    online = batch[batch["action"][:, 0] == 1.0]
    if online.batch_size[0] == 0:
        return
    order = online["next", "reward"].view(-1, 4)
    assert (order.diff(dim=1) == 1).all()  # consecutive writes: never across the ring cursor
    ep_ids = online["ep"].view(-1, 4)
    assert (ep_ids == ep_ids[:, :1]).all()  # never across an episode boundary


def test_reproducible_with_priorities_and_slices():
    def build():
        off = ReplayBuffer(storage=LazyTensorStorage(400), sampler=SliceSampler(4))
        off.extend(episodes(10, 40, tag=0.0))
        rb = OfflineToOnlineReplayBuffer(
            off,
            online_capacity=200,
            online_sampler=PrioritizedSampler(),
            generator=5,
            batch_size=64,
        )
        rb.extend(episodes(5, 40, tag=1.0))
        return rb

    # slices offline, single prioritized rows online: the split is counted in slices of 4
    x, y = build(), build()
    bx, by = x.sample(), y.sample()
    assert torch.equal(bx["t"], by["t"]) and (bx["t"][:32].view(-1, 4).diff(dim=1) == 1).all()
    a = OfflineToOnlineReplayBuffer(
        OfflineDataset.from_tensordict(ted_rows(100)),
        online_capacity=50,
        online_sampler=PrioritizedSampler(),
        generator=9,
    )
    b = OfflineToOnlineReplayBuffer(
        OfflineDataset.from_tensordict(ted_rows(100)),
        online_capacity=50,
        online_sampler=PrioritizedSampler(),
        generator=9,
    )
    for rb in (a, b):
        rb.extend(ted_rows(50, tag=1.0))
    for _ in range(5):
        (xa, ia), (xb, ib) = a.sample(32, return_info=True), b.sample(32, return_info=True)
        assert torch.equal(xa["next", "reward"], xb["next", "reward"])
        a.update_priority(ia, xa["next", "reward"].squeeze(-1))
        b.update_priority(ib, xb["next", "reward"].squeeze(-1))
    assert torch.equal(a.sample(32)["next", "reward"], b.sample(32)["next", "reward"])


def test_source_key_nested():
    off = OfflineDataset.from_tensordict(TensorDict({"x": torch.zeros(5, 1)}, [5]))
    rb = OfflineToOnlineReplayBuffer(off, online_capacity=5, source_key=("meta", "source"))
    rb.extend(TensorDict({"x": torch.ones(5, 1)}, [5]))
    assert rb.sample(4)["meta", "source"].tolist() == [0, 0, 1, 1]


def short_episodes(lengths, tag):
    """Episodes of the given lengths; ``t`` counts steps within one, ``ep`` numbers them."""
    t = torch.cat([torch.arange(n) for n in lengths])
    ep = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    td = ted_rows(len(t), tag=tag)
    td["t"], td["ep"] = t, ep
    td["next", "done"] = (t == torch.tensor(lengths)[ep] - 1).unsqueeze(-1)
    return td


@pytest.mark.parametrize("prefetch", [None, 2])
@pytest.mark.parametrize("kind", ["offline-to-online", "mixture"])
def test_a_padded_slice_source_marks_its_padding_in_the_mixed_info(kind, prefetch):
    """A padded SliceSampler as a source: the mixed info carries ("collector", "mask"), False
    exactly on the padding rows (repeats of a short slice's last row), True elsewhere (the
    mixing buffer advises pad_output=True; the mask used to be lost)."""
    L = 4
    online = ReplayBuffer(
        storage=LazyTensorStorage(200),
        sampler=SliceSampler(slice_len=L, traj_key="ep", strict_length=False, pad_output=True),
    )
    online.extend(short_episodes([2, 5, 1, 3, 6, 2, 4], tag=1.0))
    offline = OfflineDataset.from_tensordict(episodes(10, 5, tag=-1.0))
    if kind == "mixture":
        rb = MixtureReplayBuffer(
            {"off": offline, "on": online},
            {"off": 1, "on": 1},
            batch_size=16,
            generator=0,
            prefetch=prefetch,
        )
    else:
        rb = OfflineToOnlineReplayBuffer(
            offline,
            online_storage=online.storage,
            online_sampler=online.sampler,
            batch_size=16,
            generator=0,
            prefetch=prefetch,
        )
    padded = 0
    try:
        for _ in range(20):
            batch, info = rb.sample(return_info=True)
            mask = info["collector", "mask"]
            assert mask.dtype == torch.bool and mask.shape == (16,)
            mine = info["source"] == 1
            assert bool(mask[~mine].all())  # every offline row is real
            t, ep = batch["t"][mine].view(-1, L), batch["ep"][mine].view(-1, L)
            m = mask[mine].view(-1, L)
            for ts, es, ms in zip(t, ep, m):
                real = int(ms.sum())
                assert real >= 1 and bool(ms[:real].all()) and not bool(ms[real:].any())
                assert (es == es[0]).all()  # one episode per slice
                assert ts[:real].tolist() == list(range(int(ts[0]), int(ts[0]) + real))
                assert (ts[real:] == ts[real - 1]).all()  # the padding repeats the last row
                padded += L - real
    finally:
        rb.close()
    assert padded > 0  # short slices were drawn and padded

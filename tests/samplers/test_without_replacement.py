"""``RandomSampler(replacement=False)`` is TorchRL's: a SamplerWithoutReplacement, with epochs.

It once drew ``n`` distinct rows per batch and nothing more: four batches of three from
eleven rows covered nine of them, where TorchRL covers all eleven (an epoch).
"""

from __future__ import annotations

import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mixreplay import (
    CheckpointError,
    LazyTensorStorage,
    OfflineToOnlineReplayBuffer,
    RandomSampler,
    ReplayBuffer,
    Sampler,
    SamplerWithoutReplacement,
)
from mixreplay._state import upgrade_saved_sampler
from tests.helpers import counted_rows as rows


def test_random_sampler_without_replacement_covers_every_row_in_an_epoch():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(11),
        sampler=RandomSampler(replacement=False),
        batch_size=3,
        generator=0,
    )
    rb.extend(rows(11))
    seen = [rb.sample()["x"].tolist() for _ in range(4)]
    assert [len(b) for b in seen] == [3, 3, 3, 2]  # the epoch's last batch is short, as in TorchRL
    assert sorted(sum(seen, [])) == list(range(11))
    assert rb.sampler.ran_out  # and it ended the epoch: iter(rb) stops there


def test_random_sampler_without_replacement_is_a_sampler_without_replacement():
    s = RandomSampler(replacement=False)
    assert type(s) is SamplerWithoutReplacement and isinstance(s, Sampler)
    assert (s.drop_last, s.shuffle, s.replacement) == (False, True, False)
    s = RandomSampler(replacement=False, drop_last=True, shuffle=False)
    assert type(s) is SamplerWithoutReplacement and (s.drop_last, s.shuffle) == (True, False)
    assert type(RandomSampler(replacement=True)) is RandomSampler
    assert type(SamplerWithoutReplacement(replacement=False)) is SamplerWithoutReplacement


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda: RandomSampler(drop_last=True),
            TypeError,
            r"RandomSampler got drop_last=True, which applies only without replacement: "
            r"RandomSampler\(replacement=False, drop_last=...\)",
        ),
        (
            lambda: RandomSampler(replacement=False, drop_last=1),
            TypeError,
            r"SamplerWithoutReplacement drop_last must be a bool, got int 1",
        ),
        (
            lambda: RandomSampler(replacement=0),
            TypeError,
            r"RandomSampler replacement must be a bool, got int 0",
        ),
        (
            lambda: type("Mine", (RandomSampler,), {})(replacement=False),
            TypeError,
            r"Mine\(replacement=False\): only RandomSampler itself turns into a "
            r"SamplerWithoutReplacement",
        ),
        (
            lambda: SamplerWithoutReplacement(replacement=True),
            TypeError,
            r"SamplerWithoutReplacement\(replacement=True\): it always draws without replacement",
        ),
    ],
)
def test_refused_spellings(make, error, message):
    with pytest.raises(error, match=message):
        make()


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 30),
    batch=st.integers(1, 12),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_one_iteration_is_one_epoch(n, batch, drop_last, seed):
    """``for b in rb``: each row at most once; every row once unless drop_last drops the rest."""
    if drop_last and batch > n:
        return  # refused (tested above)
    rb = ReplayBuffer(
        storage=LazyTensorStorage(32),
        sampler=RandomSampler(replacement=False, drop_last=drop_last),
        batch_size=batch,
        generator=seed,
    )
    rb.extend(rows(n))
    for _ in range(2):  # two epochs in a row
        drawn = [b["x"].tolist() for b in rb]
        flat = sum(drawn, [])
        assert len(flat) == len(set(flat))
        if drop_last:
            assert [len(b) for b in drawn] == [batch] * (n // batch)
        else:
            assert sorted(flat) == list(range(n))
            assert all(len(b) == batch for b in drawn[:-1])


def test_the_epoch_is_checkpointed_and_resumes():
    def make():
        rb = ReplayBuffer(
            storage=LazyTensorStorage(20),
            sampler=RandomSampler(replacement=False),
            batch_size=4,
            generator=3,
        )
        rb.extend(rows(10))
        return rb

    rb = make()
    first = rb.sample()["x"].tolist()
    state = rb.state_dict()
    rest = [b["x"].tolist() for b in rb]
    twin = make()
    twin.load_state_dict(state)
    assert [b["x"].tolist() for b in twin] == rest
    assert sorted(first + sum(rest, [])) == list(range(10))


def test_the_state_holds_torchrls_sample_list_the_rows_not_handed_out_yet():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(20),
        sampler=SamplerWithoutReplacement(),
        batch_size=4,
        generator=3,
    )
    rb.extend(rows(10))
    first = rb.sample()["x"].tolist()
    state = rb.sampler.state_dict()
    left = state["_sample_list"]
    assert sorted(first + left.tolist()) == list(range(10)) and left.numel() == 6
    assert torch.equal(left, rb.sampler._sample_list)
    left.fill_(-1)  # a copy: the epoch is not changed through it
    assert rb.sampler._sample_list.min() >= 0
    twin = SamplerWithoutReplacement()
    with pytest.raises(CheckpointError, match="'_sample_list' must be the rows of 'order' after"):
        twin.load_state_dict(state)
    assert twin._sample_list is None  # refused: nothing changed
    twin.load_state_dict({**state, "_sample_list": state["order"][4:]})
    assert torch.equal(twin._sample_list, rb.sampler._sample_list)
    del state["_sample_list"]  # a state saved before the key existed
    twin.load_state_dict(state)
    assert torch.equal(twin._sample_list, rb.sampler._sample_list)


def test_a_checkpoint_of_the_former_random_sampler_without_replacement_loads():
    """What a mixreplay before epochs saved for it loads as this sampler, at a fresh epoch."""
    old = ReplayBuffer(storage=LazyTensorStorage(20), generator=3)
    old.extend(rows(10))
    state = old.state_dict()
    # exactly the entry RandomSampler(replacement=False) wrote (it kept no state)
    state["sampler"] = {
        "type": "mixreplay.samplers.RandomSampler",
        "config": {"replacement": False},
        "state": {},
    }
    rb = ReplayBuffer(
        storage=LazyTensorStorage(20), sampler=RandomSampler(replacement=False), batch_size=4
    )
    rb.load_state_dict(state)
    assert sorted(sum((b["x"].tolist() for b in rb), [])) == list(range(10))
    # anything else passes through unchanged
    other = {"type": "mixreplay.samplers.RandomSampler", "config": {}, "state": {}}
    assert upgrade_saved_sampler(other) is other


def test_a_pickle_of_the_former_random_sampler_without_replacement_loads():
    legacy = RandomSampler()
    legacy.__dict__["replacement"] = False  # what such an object held
    restored = pickle.loads(pickle.dumps(legacy))
    assert type(restored) is SamplerWithoutReplacement and restored == SamplerWithoutReplacement()
    plain = pickle.loads(pickle.dumps(RandomSampler()))
    assert type(plain) is RandomSampler and plain.replacement is True


def test_as_a_mixing_source_each_row_is_drawn_once_per_epoch():
    offline = ReplayBuffer(storage=LazyTensorStorage(100))
    offline.extend(rows(100, start=1000))
    rb = OfflineToOnlineReplayBuffer(
        offline,
        online_capacity=20,
        online_sampler=RandomSampler(replacement=False),
        offline_fraction=0.5,
        generator=0,
    )
    rb.extend(rows(12))
    online = [rb.sample(8)["x"][4:].tolist() for _ in range(6)]  # 4 online rows per batch
    for epoch in (online[:3], online[3:]):  # 12 rows in 3 batches: one epoch each
        flat = sum(epoch, [])
        assert sorted(flat) == list(range(12))


@pytest.mark.torchrl
@pytest.mark.parametrize("drop_last", [False, True])
def test_batches_have_torchrls_sizes(drop_last):
    from torchrl.data import LazyTensorStorage as TorchRLStorage
    from torchrl.data import RandomSampler as TorchRLRandomSampler
    from torchrl.data import ReplayBuffer as TorchRLReplayBuffer

    ours = ReplayBuffer(
        storage=LazyTensorStorage(11),
        sampler=RandomSampler(replacement=False, drop_last=drop_last),
        batch_size=3,
        generator=0,
    )
    theirs = TorchRLReplayBuffer(
        storage=TorchRLStorage(11),
        sampler=TorchRLRandomSampler(replacement=False, drop_last=drop_last),
        batch_size=3,
    )
    ours.extend(rows(11))
    theirs.extend(torch.arange(11))
    for _ in range(2):
        mine = [b["x"].numel() for b in ours]
        assert mine == [b.numel() for b in theirs]

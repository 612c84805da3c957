"""A mixed batch's per-row source labels: the key they go to never names data or bookkeeping,
and a priority update routes by them only when they are this buffer's labels."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    LazyTensorStorage,
    MixtureReplayBuffer,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    PrioritizedSampler,
    ReplayBuffer,
)


def counted(n: int, start: int = 0) -> TensorDict:
    return TensorDict({"x": torch.arange(start, start + n, dtype=torch.float32)}, [n])


@pytest.mark.parametrize(
    "key",
    ["", ("next", ""), "index", "priority_weight", "td_error", "_weight", ("collector", "mask")],
)
@pytest.mark.parametrize("kind", ["offline-to-online", "mixture"])
def test_a_source_key_that_is_empty_or_bookkeeping_is_refused(key, kind):
    offline = OfflineDataset.from_tensordict(counted(20, -100))
    with pytest.raises(
        ValueError, match=r"is not a key for the source labels.*source_key='source'"
    ):
        if kind == "mixture":
            MixtureReplayBuffer(
                {"off": offline, "on": LazyTensorStorage(10)}, {"off": 1, "on": 1}, source_key=key
            )
        else:
            OfflineToOnlineReplayBuffer(offline, online_capacity=10, source_key=key)


def test_source_transforms_that_add_the_source_key_are_refused_at_sample():
    """Every source's read-side transform adds the key: the labels would overwrite the data
    silently; refused, naming it, and the buffer draws the same once the transforms are gone."""

    adding = [True]

    def add_src(td):
        return td.set("src", torch.full((td.shape[0],), 9)) if adding[0] else td

    def make():
        a = ReplayBuffer(storage=LazyTensorStorage(50))
        a.extend(counted(20, -100))
        b = ReplayBuffer(storage=LazyTensorStorage(50))
        b.extend(counted(20, 100))
        return (
            a,
            b,
            MixtureReplayBuffer(
                {"a": a, "b": b}, {"a": 1, "b": 1}, batch_size=8, generator=0, source_key="src"
            ),
        )

    a, b, rb = make()
    _, _, twin = make()
    a.append_transform(add_src)
    b.append_transform(add_src)
    twin_a, twin_b = twin.source("a"), twin.source("b")
    twin_a.append_transform(lambda td: td)
    twin_b.append_transform(lambda td: td)
    with pytest.raises(ValueError, match=r"source_key='src' names data: the rows hold 'src'"):
        rb.sample()
    adding[0] = False  # the transforms stop adding it: as if it had never been refused
    for _ in range(3):
        assert (rb.sample() == twin.sample()).all()


def _prioritized():
    rb = OfflineToOnlineReplayBuffer(
        OfflineDataset.from_tensordict(counted(40, -1000)),
        online_capacity=64,
        online_sampler=PrioritizedSampler(alpha=1.0, beta=1.0),
        batch_size=8,
        generator=0,
    )
    rb.extend(counted(30))
    return rb


@pytest.mark.parametrize(
    "edit, error, match",
    [
        (
            lambda s: s.fill_(7),
            ValueError,
            r"holds label 7 at row 0 of the batch, but this buffer "
            r"has 2 sources \(labels 0..1: 'offline', 'online'\)",
        ),
        (lambda s: s.fill_(-1), ValueError, r"holds label -1 at row 0"),
        (lambda s: s.float(), TypeError, r"integer source labels, got dtype torch.float32"),
        (lambda s: s.bool(), TypeError, r"integer source labels, got dtype torch.bool"),
    ],
)
def test_update_priority_refuses_labels_that_are_not_this_buffers(edit, error, match):
    """Labels out of range used to be dropped without a word (no priority changed), float or
    bool ones to fail with an unrelated IndexError; nothing changes when refused."""
    rb = _prioritized()
    _, info = rb.sample(return_info=True)
    info["source"] = edit(info["source"])
    tree = rb.online_buffer.sampler.tree.leaves.clone()
    with pytest.raises(error, match=match):
        rb.update_priority(info, torch.full((8,), 5.0))
    assert torch.equal(rb.online_buffer.sampler.tree.leaves, tree)

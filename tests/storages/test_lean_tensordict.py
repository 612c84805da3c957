"""The batch TensorDicts built on the hot path without tensordict's per-call checks (issue 20
item 5) are ordinary TensorDicts: tensordict's own ``_new_unsafe``, given the device after."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from mixreplay import layout


def test_the_hot_path_builder_makes_ordinary_tensordicts():
    leaves = {"obs": torch.randn(4, 3), "done": torch.zeros(4, 1, dtype=torch.bool)}
    size = torch.Size([4])
    for device in (None, "cpu", torch.device("cpu")):
        ref = TensorDict({**leaves, "next": dict(leaves)}, batch_size=size, device=device)
        mine = layout._new_td(
            {**leaves, "next": layout._new_td(dict(leaves), size, device)}, size, device
        )
        assert (mine == ref).all()
        assert mine.device == ref.device and mine["next"].device == ref["next"].device
        assert mine.batch_size == ref.batch_size
        # an ordinary TensorDict: it locks, clones, sets and checks shapes as any other
        mine.set("extra", torch.ones(4))
        assert mine.clone()["extra"].sum() == 4
        mine.lock_()
        assert mine.is_locked


def test_the_builder_does_not_share_the_source_dict():
    source = {"a": torch.zeros(2)}
    td = layout.new_tensordict(source, torch.Size([2]))
    td.set("b", torch.ones(2))
    assert list(source) == ["a"]

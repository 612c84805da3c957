"""The batch TensorDicts built on the hot path without tensordict's per-call checks are ordinary TensorDicts: their four fields set directly where that builds what
tensordict's own ``_new_unsafe`` builds (checked at import), else ``_new_unsafe`` itself."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from mixreplay import layout

BUILDERS = {"direct": layout._new_td_direct, "checked": layout._new_td_checked}


def test_this_tensordict_takes_the_direct_builder():
    # tensordict 0.14 and 0.15 (the suite's two runs) build the same four fields
    assert layout._direct_matches()
    assert layout._new_td is layout._new_td_direct


@pytest.mark.parametrize("name", BUILDERS)
def test_the_hot_path_builder_makes_ordinary_tensordicts(name):
    build = BUILDERS[name]
    leaves = {"obs": torch.randn(4, 3), "done": torch.zeros(4, 1, dtype=torch.bool)}
    size = torch.Size([4])
    for device in (None, "cpu", torch.device("cpu")):
        ref = TensorDict({**leaves, "next": dict(leaves)}, batch_size=size, device=device)
        mine = build({**leaves, "next": build(dict(leaves), size, device)}, size, device)
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

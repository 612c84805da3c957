"""The batch TensorDicts built on the hot path without tensordict's per-call checks (issue 20
item 5) are the TensorDicts tensordict itself would build from the same leaves."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from mixreplay import layout


def _parts(td: TensorDict) -> dict:
    out = {k: v for k, v in vars(td).items() if k != "_tensordict"}
    out["keys"] = list(td._tensordict)
    return out


def test_this_tensordict_takes_the_direct_builder():
    # 0.14 and 0.15 build a TensorDict from four attributes; another layout falls back
    assert layout._direct_matches()
    assert layout._new_td is layout._new_td_direct


def test_direct_builder_matches_new_unsafe():
    leaves = {"obs": torch.randn(4, 3), "done": torch.zeros(4, 1, dtype=torch.bool)}
    size = torch.Size([4])
    for device in (None, "cpu", torch.device("cpu")):
        ref = layout._new_td_unsafe(
            {**leaves, "next": layout._new_td_unsafe(dict(leaves), size, device)}, size, device
        )
        mine = layout._new_td_direct(
            {**leaves, "next": layout._new_td_direct(dict(leaves), size, device)}, size, device
        )
        assert _parts(mine) == _parts(ref)
        assert _parts(mine["next"]) == _parts(ref["next"])
        assert (mine == ref).all()
        assert mine.device == ref.device
        # an ordinary TensorDict: it locks, clones, sets and checks shapes as any other
        mine.set("extra", torch.ones(4))
        assert mine.clone()["extra"].sum() == 4
        mine.lock_()
        assert mine.is_locked


def test_direct_builder_does_not_share_the_source_dict():
    source = {"a": torch.zeros(2)}
    td = layout._new_td_direct(source, torch.Size([2]), None)
    td.set("b", torch.ones(2))
    assert list(source) == ["a"]

"""The ring's write path: the generated leaf reader and the one-call staging copy."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from mixreplay import LazyTensorStorage, SchemaMismatchError
from mixreplay.layout import RowLayout
from mixreplay.schema import Schema


def _rows(n: int, tag: float = 0.0) -> TensorDict:
    i = torch.arange(n) + tag
    return TensorDict(
        {
            "obs": i.float().unsqueeze(-1).expand(n, 3).clone(),
            "pix": i.to(torch.uint8).view(n, 1, 1).expand(n, 2, 2).clone(),
            "r": i.double(),
            "next": {"obs": (i + 1).float().unsqueeze(-1).expand(n, 3).clone(), "d": i > 1},
        },
        [n],
    )


def test_a_nested_tensordict_where_a_leaf_is_stored_is_a_schema_mismatch():
    # same dtype and per-row shape as the stored leaf: once an AttributeError from inside
    s = LazyTensorStorage(4)
    s.extend(TensorDict({"obs": torch.zeros(2, 3), "r": torch.zeros(2)}, [2]))
    bad = TensorDict({"obs": TensorDict({"x": torch.ones(2, 3)}, [2, 3]), "r": torch.zeros(2)}, [2])
    with pytest.raises(SchemaMismatchError, match=r"\('obs', 'x'\): in written"):
        s.extend(bad)
    assert len(s) == 2 and float(s[:]["obs"].abs().sum()) == 0


def test_the_fast_reader_gives_the_leaves_in_packing_order():
    td = _rows(3)
    layout = RowLayout(Schema.from_tensordict(td))
    got = layout.leaves_of(td)
    assert [g is td.get(f.key) for g, f in zip(got, layout.fields)] == [True] * len(got)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.integers(0, 12), st.integers(1, 5))
def test_one_call_staged_writes_store_what_a_packed_write_stores(before, start_tag, n):
    s = LazyTensorStorage(16)
    twin = RowLayout(Schema.from_tensordict(_rows(1)))
    s.extend(_rows(before))
    data = _rows(n, float(start_tag))
    slots = s.extend(data)
    assert torch.equal(s.rows[slots], twin.pack(data))
    assert torch.equal(s[slots]["next", "d"], data["next", "d"])

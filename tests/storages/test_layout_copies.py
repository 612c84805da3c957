"""A batch's leaves copied out of packed rows: values exact, one contiguous tensor per leaf.

``RowLayout.copy_out`` / ``copy_views`` make every leaf with one ``torch._foreach_clone``
of the leaves' typed views; the fallback (one clone per view) must give the same tensors.
"""

from __future__ import annotations

import pickle

import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from mixreplay import layout as layout_module
from mixreplay.layout import RowLayout
from mixreplay.schema import Schema

DTYPES = [
    torch.float32,
    torch.float64,
    torch.bfloat16,
    torch.bool,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.complex128,
]
SHAPES = [(), (1,), (3,), (2, 3), (5,)]


@st.composite
def schemas_and_rows(draw):
    n_keys = draw(st.integers(1, 6))
    n = draw(st.integers(0, 5))
    data = {}
    for i in range(n_keys):
        dtype = draw(st.sampled_from(DTYPES))
        shape = draw(st.sampled_from(SHAPES))
        key = ("next", f"k{i}") if draw(st.booleans()) else (f"k{i}",)
        top = 2 if dtype == torch.bool else 256  # a bool byte is 0 or 1
        raw = torch.randint(0, top, (n, *shape, dtype.itemsize), dtype=torch.uint8)
        value = raw.view(dtype).reshape(n, *shape)  # any bit pattern (NaN payloads too)
        node = data
        for part in key[:-1]:
            node = node.setdefault(part, {})
        node[key[-1]] = value
    return TensorDict(data, batch_size=[n])


def bits(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""


def check_copies(td: TensorDict, copied: TensorDict) -> None:
    for key, value in td.items(include_nested=True, leaves_only=True):
        got = copied.get(key)
        assert got.dtype == value.dtype and got.shape == value.shape, key
        assert bits(got) == bits(value), key  # bit for bit, NaN payloads included
        assert got.is_contiguous(), key
        assert got.stride() == torch.empty(got.shape).stride(), key  # canonical strides
        assert got.untyped_storage().nbytes() == got.nbytes, key  # its own memory only


@settings(max_examples=60, deadline=None)
@given(schemas_and_rows())
def test_copies_of_packed_rows_are_exact_contiguous_and_owned(td):
    layout = RowLayout(Schema.from_tensordict(td))
    words = layout.pack(td)
    check_copies(td, layout.copy_out(words))
    check_copies(td, layout.copy_views(layout.split(words), td.batch_size, None))
    # the copies share nothing with the packed rows
    before = words.clone()
    out = layout.copy_out(words)
    for _, t in out.items(include_nested=True, leaves_only=True):
        if t.numel():
            t.view(torch.uint8).fill_(7)
    assert torch.equal(words, before)
    pickle.loads(pickle.dumps(out))


@settings(max_examples=20, deadline=None)
@given(schemas_and_rows())
def test_the_clone_per_view_fallback_gives_the_same_leaves(td):
    # one dispatch is used from two rows up (fewer rows: one clone per view, as here)
    assume(td.batch_size[0] >= 2)
    layout = RowLayout(Schema.from_tensordict(td))
    words = layout.pack(td)
    fast = layout_module._clone_all(layout.split(words))
    slow = layout_module._clone_each(layout.split(words))
    assert len(fast) == len(slow) == len(layout.fields)
    for a, b in zip(fast, slow):
        assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
        assert bits(a) == bits(b)


def test_equal_schemas_share_the_generated_code_and_key_order_is_kept():
    # A storage loaded again builds its layout again: the generated functions are made once
    # per schema; a schema with the same leaves in another key order gets its own (the
    # batch's keys follow the order the rows were written in).
    rows = TensorDict(
        {"b": torch.arange(3.0), "a": torch.arange(3), "next": {"c": torch.ones(3, 2)}},
        batch_size=[3],
    )
    first, again = RowLayout(Schema.from_tensordict(rows)), RowLayout(Schema.from_tensordict(rows))
    assert first._copy_out is again._copy_out and first._gather is again._gather
    swapped = rows.select("a", "next", "b")
    other = RowLayout(Schema.from_tensordict(swapped))
    assert other._copy_out is not first._copy_out
    for lay, td in ((first, rows), (other, swapped)):
        out = lay.copy_out(lay.pack(td))
        assert list(out.keys(include_nested=True, leaves_only=True)) == list(
            td.keys(include_nested=True, leaves_only=True)
        )
        check_copies(td, out)

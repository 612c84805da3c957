"""A pickled or deep-copied buffer holds the data type it was given, exactly.

Every data type a buffer stores (see :mod:`mixreplay.data_types`) round-trips through
``pickle`` and ``copy.deepcopy``: the copy gives back the same type and structure, rows
and draws as the original, and takes writes of that type. A pytree's structure is copied
as it is, so node types a checkpoint cannot name (a namedtuple) copy too.
"""

from __future__ import annotations

import collections
import copy
import pickle

import pytest
import torch
from tensordict import TensorDict
from torch.utils._pytree import tree_flatten

from mixreplay import LazyMemmapStorage, LazyTensorStorage, ReplayBuffer
from tests.helpers import Inner, Outer

Pair = collections.namedtuple("Pair", ["obs", "reward"])


def _ids(n: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float32)


DATA = {
    "TensorDict [n]": lambda n: TensorDict({"x": _ids(n), ("n", "y"): _ids(n)[:, None]}, [n]),
    "TensorDict [n, 3]": lambda n: TensorDict({"x": _ids(n)[:, None].expand(n, 3)}, [n, 3]),
    "tensorclass": lambda n: Outer(
        key1=_ids(n)[:, None], next=Inner(key1=-_ids(n), batch_size=[n]), batch_size=[n]
    ),
    "tensor": lambda n: _ids(n)[:, None].expand(n, 2).clone(),
    "pytree of dicts, lists, tuples": lambda n: {
        "a": _ids(n),
        "b": {"c": [_ids(n)[:, None], (-_ids(n),)]},
        30: _ids(n).long(),
        ("t", 1): _ids(n) * 2,
    },
    "namedtuple": lambda n: Pair(_ids(n)[:, None], -_ids(n)),
    "namedtuple nested in a dict": lambda n: {"step": Pair(_ids(n), _ids(n) + 1), "k": _ids(n)},
    "list of items": lambda n: [
        Pair(torch.full((2,), float(i)), torch.tensor(-i)) for i in range(n)
    ],
}

COPIES = {
    "pickle": lambda rb: pickle.loads(pickle.dumps(rb)),
    "deepcopy": copy.deepcopy,
}


def _same(a, b) -> None:
    """Same type, structure and values (tensorclasses and TensorDicts compared as such)."""
    assert type(a) is type(b)
    if isinstance(a, TensorDict) or hasattr(a, "_tensordict"):
        assert a.batch_size == b.batch_size and (a == b).all()
        if hasattr(a, "next"):
            assert type(a.next) is type(b.next)
        return
    la, sa = tree_flatten(a)
    lb, sb = tree_flatten(b)
    assert sa == sb and all(type(x) is type(y) for x, y in zip(la, lb))
    assert all(torch.equal(x, y) for x, y in zip(la, lb))


@pytest.fixture(params=["tensor", "memmap"])
def storage(request, tmp_path):
    if request.param == "memmap":
        return lambda: LazyMemmapStorage(16, scratch_dir=tmp_path)
    return lambda: LazyTensorStorage(16)


@pytest.mark.parametrize("how", sorted(COPIES))
@pytest.mark.parametrize("kind", list(DATA))
def test_a_copy_keeps_the_data_type_rows_and_draws(storage, kind, how):
    make = DATA[kind]
    rb = ReplayBuffer(storage=storage(), batch_size=4, generator=0)
    rb.extend(make(6))
    rb.sample()
    twin = COPIES[how](rb)
    assert twin.storage.codec == rb.storage.codec
    _same(twin[:], rb[:])
    for _ in range(3):  # the copy continues the original's draws
        _same(twin.sample(), rb.sample())
    # and takes writes of that type, as the original does
    for buffer in (rb, twin):
        buffer.extend(make(3))
    _same(twin[:], rb[:])
    twin.close()
    rb.close()


def test_a_namedtuple_row_comes_back_as_its_class_from_a_copy():
    rb = ReplayBuffer(storage=LazyTensorStorage(8), batch_size=2, generator=0)
    rb.extend(Pair(torch.zeros(5, 1), torch.ones(5)))
    for copy_of in COPIES.values():
        twin = copy_of(rb)
        row = twin[0]
        assert type(row) is Pair and row.obs.shape == (1,) and row.reward.item() == 1.0
        assert type(twin.sample()) is Pair

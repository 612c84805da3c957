"""RowPolicy: key selection, renaming and the dtype policy, on plain arrays."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from mixreplay import DatasetError
from mixreplay.datasets.transforms import RowPolicy, flat_leaves, nest


def rows(n: int = 4) -> dict:
    return {
        ("observation", "pos"): np.zeros((n, 2)),
        ("observation", "vel"): np.zeros((n, 1), dtype=np.float16),
        ("action",): np.zeros((n, 1), dtype=np.float32),
        ("done",): np.zeros((n, 1), dtype=bool),
        ("next", "reward"): np.zeros((n, 1)),
        ("next", "count"): np.zeros((n,), dtype=np.int64),
    }


def dtypes(out: dict) -> dict:
    return {k: v.dtype for k, v in out.items()}


def test_default_casts_every_floating_leaf_to_float32():
    out = RowPolicy().apply(rows())
    assert dtypes(out) == {
        ("observation", "pos"): torch.float32,
        ("observation", "vel"): torch.float32,
        ("action",): torch.float32,
        ("done",): torch.bool,
        ("next", "reward"): torch.float32,
        ("next", "count"): torch.int64,
    }


def test_none_keeps_stored_dtypes():
    out = RowPolicy(dtype=None).apply(rows())
    assert out[("observation", "pos")].dtype == torch.float64
    assert out[("observation", "vel")].dtype == torch.float16


def test_other_floating_dtype_and_torch_dtypes():
    assert RowPolicy(dtype=torch.float64).apply(rows())[("action",)].dtype == torch.float64
    assert RowPolicy(dtype=np.float16).apply(rows())[("action",)].dtype == torch.float16


def test_mapping_casts_only_named_keys_after_renaming():
    policy = RowPolicy(
        rename={("next", "count"): "count"}, dtype={"count": "float32", "observation": "float16"}
    )
    out = policy.apply(rows())
    assert out[("count",)].dtype == torch.float32
    assert out[("observation", "pos")].dtype == torch.float16
    assert out[("next", "reward")].dtype == torch.float64  # unnamed: stored dtype


def test_select_subtrees_and_rename_subtrees():
    policy = RowPolicy(
        keys=["observation", ("next", "reward")], rename={"observation": ("obs", "state")}
    )
    assert set(policy.apply(rows())) == {
        ("obs", "state", "pos"),
        ("obs", "state", "vel"),
        ("next", "reward"),
    }


def test_a_single_key_string_selects_it():
    assert set(RowPolicy(keys="action").apply(rows())) == {("action",)}


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"keys": []}, r"keys=\[\] would keep no key"),
        ({"keys": [3]}, "a key must be a string or a non-empty tuple of strings, got 3"),
        ({"rename": [("a", "b")]}, r"rename must be a mapping \{old: new\}, got list"),
        ({"dtype": "int32"}, "must be a floating dtype"),
        ({"dtype": {"action": "nope"}}, r"dtype\['action'\] must be a dtype such as 'float32'"),
    ],
)
def test_bad_policies(kwargs, match):
    with pytest.raises(DatasetError, match=match):
        RowPolicy(**kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            {"keys": ["reward"]},
            r"key 'reward' not found in the source with keys \[\('observation', 'pos'\)",
        ),
        (
            {"keys": ["action"], "rename": {"done": "d"}},
            r"cannot rename 'done': not found in the source with keys \['action'\]",
        ),
        (
            {"rename": {"action": "done"}},
            r"rename maps both 'action' and 'done' to 'done'|rename maps both 'done' and 'action'",
        ),
        (
            {"rename": {"done": ("action", "x")}},
            r"'action' is both a leaf and the parent of \('action', 'x'\)",
        ),
        ({"dtype": {"reward": "float64"}}, r"dtype names key 'reward', not found in the source"),
    ],
)
def test_policies_that_do_not_fit_the_source(kwargs, match):
    with pytest.raises(DatasetError, match=match):
        RowPolicy(**kwargs).apply(rows())


def test_repr_eq_json_pickle():
    a = RowPolicy(
        keys=["observation", ("next", "reward")],
        rename={"observation": "obs"},
        dtype={"obs": "float64"},
    )
    assert repr(a) == (
        "RowPolicy(keys=['observation', ('next', 'reward')], rename={'observation': 'obs'}, dtype={'obs': 'float64'})"
    )
    b = pickle.loads(pickle.dumps(a))
    assert a == b and hash(a) == hash(b) and a.to_json() == b.to_json()
    assert a != RowPolicy()
    assert RowPolicy().to_json() == {"keys": None, "rename": [], "dtype": "float32"}
    assert RowPolicy(dtype=None).to_json()["dtype"] is None


def test_flat_leaves_and_nest():
    tree = {"a": np.zeros(1), "b": {"c": np.ones(1)}, "t": (np.zeros(1), np.ones(1))}
    flat = flat_leaves(tree, ("observation",))
    assert set(flat) == {
        ("observation", "a"),
        ("observation", "b", "c"),
        ("observation", "t", "0"),
        ("observation", "t", "1"),
    }
    assert set(nest(flat)["observation"]["t"]) == {"0", "1"}

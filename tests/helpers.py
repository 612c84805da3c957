"""Helpers shared by the test modules (rows that encode their id, state comparisons)."""

from __future__ import annotations

import torch
from tensordict import TensorDict

OFFLINE_BASE = -1000  # offline row i has id OFFLINE_BASE + i; online ids count from 0


def id_rows(start: int, n: int) -> TensorDict:
    """TED rows whose every leaf encodes the row's id (episodes end every 5 ids)."""
    ids = torch.arange(start, start + n)
    f = ids.to(torch.float32).unsqueeze(-1)
    end = (ids % 5 == 4).unsqueeze(-1)
    return TensorDict(
        {
            "observation": f.expand(n, 3).clone(),
            "action": f.expand(n, 2).clone(),
            "done": end.clone(),
            "terminated": end.clone(),
            "truncated": torch.zeros(n, 1, dtype=torch.bool),
            "next": {
                "observation": (f + 0.5).expand(n, 3).clone(),
                "reward": f.clone(),
                "done": end.clone(),
                "terminated": end.clone(),
                "truncated": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        batch_size=[n],
    )


def ids(batch) -> list[int]:
    return batch["next", "reward"].squeeze(-1).long().tolist()


def assert_same(x, y) -> None:
    """Two TensorDicts (or tuples of them) hold the same keys and equal tensors."""
    if isinstance(x, tuple):
        for a, b in zip(x, y, strict=True):
            assert_same(a, b)
        return
    kx = sorted(x.keys(include_nested=True, leaves_only=True), key=str)
    ky = sorted(y.keys(include_nested=True, leaves_only=True), key=str)
    assert kx == ky
    for k in kx:
        assert torch.equal(x[k], y[k]), k


def assert_state_equal(a, b, where="state") -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for k in a:
            assert_state_equal(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (u, v) in enumerate(zip(a, b)):
            assert_state_equal(u, v, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"

"""OfflineDataset built from TensorDicts: the edge cases of its rows (issue 18, item 16)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from mixreplay import EmptyBufferError, OfflineDataset

SHAPES = {"scalar": (), "flat": (3,), "matrix": (2, 3), "empty": (0,)}


def _rows(n: int) -> TensorDict:
    return TensorDict(
        {
            k: torch.arange(n * max(1, torch.Size(s).numel()), dtype=torch.float32).reshape(n, *s)
            if torch.Size(s).numel()
            else torch.zeros(n, *s)
            for k, s in SHAPES.items()
        },
        [n],
    )


def test_a_dataset_of_zero_rows_accepts_every_per_row_shape():
    ds = OfflineDataset.from_tensordict(_rows(0))
    assert len(ds) == 0 and ds.num_episodes == 0
    assert {k: ds.schema[k].shape for k in SHAPES} == {k: torch.Size(s) for k, s in SHAPES.items()}
    with pytest.raises(EmptyBufferError):
        ds.sample(2)


def test_rows_of_every_per_row_shape_read_back_exactly():
    rows = _rows(4)
    ds = OfflineDataset.from_tensordict(rows)
    for k in SHAPES:
        assert torch.equal(ds[:][k], rows[k]), k


@pytest.mark.parametrize(
    ("make", "err", "match"),
    [
        (
            lambda: {"x": torch.zeros(3)},
            TypeError,
            r"from_tensordict expects a TensorDict of rows, got dict; wrap it: TensorDict\(data, "
            r"batch_size=\[n\]\)",
        ),
        (
            lambda: TensorDict({"x": torch.zeros(2, 3)}, [2, 3]),
            ValueError,
            r"from_tensordict expects rows, a TensorDict with batch_size=\[n\], got "
            r"batch_size=\[2, 3\]; flatten it first: td.reshape\(-1\)",
        ),
        (
            lambda: TensorDict({"x": torch.zeros(2, device="meta")}, [2]),
            ValueError,
            r"key 'x' is on the meta device, which holds no data",
        ),
    ],
)
def test_what_is_not_rows_is_refused_with_the_fix(make, err, match):
    with pytest.raises(err, match=match):
        OfflineDataset.from_tensordict(make())

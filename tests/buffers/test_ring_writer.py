"""``rb.writer``: TorchRL's writer, on a mixreplay buffer a read-only view of ring order."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from mixreplay import LazyMemmapStorage, LazyTensorStorage, ReplayBuffer


@pytest.mark.parametrize("storage", [LazyTensorStorage, LazyMemmapStorage])
@pytest.mark.parametrize(("size", "cursors"), [(10, [3, 8, 3]), (5, [3, 3, 3]), (4, [3, 0, 1])])
def test_the_writer_reports_where_the_next_row_goes_as_torchrls_cursor(storage, size, cursors):
    rb = ReplayBuffer(storage=storage(size))
    assert rb.writer.cursor == 0 and rb.writer._cursor == 0
    seen = []
    for n in (3, 5, 5):
        rb.extend(TensorDict({"x": torch.arange(n)}, [n]))
        seen.append((rb.writer.cursor, rb.writer._cursor))
    # TorchRL's RoundRobinWriter: (previous cursor + rows written) % capacity
    assert seen == [(c, c) for c in cursors]
    assert repr(rb.writer) == f"RingWriter(cursor={cursors[-1]})"


@pytest.mark.parametrize("name", ["extend", "add", "state_dict", "_write_count"])
def test_a_writers_other_attributes_name_the_buffers_way(name):
    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    with pytest.raises(
        AttributeError,
        match=rf"RingWriter has no TorchRL '{name}': a mixreplay buffer writes in ring order "
        r"through rb.extend / rb.add; rb.writer only reports where the next row goes "
        r"\(rb.writer.cursor\)",
    ):
        getattr(rb.writer, name)
    with pytest.raises(AttributeError):
        rb.writer.cursor = 2  # read-only

"""The host gather scratch and the uniform drawer under torch's default
device (``torch.set_default_device`` / ``with torch.device(...)``, common in GPU learners)
must not move what the library allocates for host rows. ``meta`` stands in for ``cuda``
here so the tests run on a CPU-only machine."""

from __future__ import annotations

import copy

import torch

from mixreplay import LazyTensorStorage, ReplayBuffer
from tests.helpers import random_rows as rows


def test_sample_ignores_the_default_device():
    rb = ReplayBuffer(storage=LazyTensorStorage(100), generator=0)
    rb.extend(rows(30))
    want = copy.deepcopy(rb).sample(8)
    with torch.device("meta"):
        got = rb.sample(8)
    assert got["observation"].device.type == "cpu"
    assert (got == want).all()


def test_storage_gather_ignores_the_default_device():
    st = LazyTensorStorage(100)
    st.extend(rows(30))
    index = torch.tensor([3, 1, 29, 3])
    want = st.gather(index)
    st._gather_scratch = None  # made under the context below
    with torch.device("meta"):
        got = st.gather(index)
    assert got["reward"].device.type == "cpu"
    assert (got == want).all()


def test_the_packed_drawer_draws_on_the_host_whatever_the_default_device():
    """The drawer a mixing buffer gathers straight into its batch with draws the slots
    RandomSampler draws, into the caller's index buffer or a new tensor alike, on the host
    under another default device."""
    rb = ReplayBuffer(storage=LazyTensorStorage(100), generator=0)
    rb.extend(rows(30))
    W = rb.storage.layout.row_words
    want = rb.sampler.sample(rb.storage, 6, torch.Generator().manual_seed(5))
    want_out = torch.empty(6, W, dtype=torch.int64)
    rb.storage.gather_into(want, want_out)
    drawer = rb.packed_drawer()
    for kept in (None, torch.empty(6, dtype=torch.int64)):
        out = torch.empty(6, W, dtype=torch.int64)
        with torch.device("meta"):
            got = drawer(6, torch.Generator().manual_seed(5), out, kept)
        assert got.device.type == "cpu"
        assert torch.equal(got, want)
        assert torch.equal(out, want_out)
        assert kept is None or got is kept


def test_mixed_sample_made_under_another_default_device_draws_on_the_host():
    # the first batch under the default device makes the kept scratch rows and index buffers
    from mixreplay import OfflineToOnlineReplayBuffer

    def make():
        offline = ReplayBuffer(storage=LazyTensorStorage(100))
        offline.extend(rows(40, seed=1))
        rb = OfflineToOnlineReplayBuffer(offline, online_capacity=50, batch_size=8, generator=0)
        rb.extend(rows(20, seed=2))
        return rb

    plain, under = make(), make()
    want = [plain.sample() for _ in range(3)]
    with torch.device("meta"):
        got = [under.sample() for _ in range(3)]
    assert all(g["observation"].device.type == "cpu" for g in got)
    assert all((g == w).all() for g, w in zip(got, want))

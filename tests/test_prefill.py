import pytest
import torch

from mixreplay import (
    LazyTensorStorage,
    OfflineDataset,
    ReplayBuffer,
    prefill_replay_buffer,
    register_dataset,
)
from tests.conftest import ted_rows


def dataset(n=1000):
    return OfflineDataset.from_tensordict(ted_rows(n))


def rewards(rb):
    return rb[:]["next", "reward"].squeeze(-1)


def test_full_copy_is_every_row_once_in_order():
    rb = prefill_replay_buffer(
        ReplayBuffer(storage=LazyTensorStorage(2000)), dataset(), chunk_size=64
    )
    assert rewards(rb).tolist() == [float(i) for i in range(1000)]


def test_subset_is_distinct_and_seeded():
    a = prefill_replay_buffer(
        ReplayBuffer(storage=LazyTensorStorage(2000)), dataset(), n_samples=600, generator=3
    )
    b = prefill_replay_buffer(
        ReplayBuffer(storage=LazyTensorStorage(2000)), dataset(), n_samples=600, generator=3
    )
    assert len(a) == 600 and rewards(a).unique().numel() == 600
    assert torch.equal(rewards(a), rewards(b))


def test_n_samples_above_size_copies_everything():
    rb = prefill_replay_buffer(
        ReplayBuffer(storage=LazyTensorStorage(2000)), dataset(100), n_samples=10_000
    )
    assert len(rb) == 100


def test_returns_the_buffer_and_resolves_ids():
    register_dataset("prefill-test", lambda rest, batch_size=None: dataset(int(rest)), replace=True)
    target = ReplayBuffer(storage=LazyTensorStorage(100))
    assert prefill_replay_buffer(target, "prefill-test:50") is target
    assert len(target) == 50


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(n_samples=-1), ValueError, "n_samples must be an int >= 0 or None, got -1"),
        (dict(n_samples=2.5), TypeError, "n_samples must be an int >= 0 or None, got float"),
        (dict(chunk_size=0), ValueError, "chunk_size must be a positive int, got 0"),
    ],
)
def test_bad_arguments(kwargs, err, match):
    with pytest.raises(err, match=match):
        prefill_replay_buffer(ReplayBuffer(storage=LazyTensorStorage(10)), dataset(10), **kwargs)


def test_source_without_row_access_is_refused():
    class SampleOnly:
        def __len__(self):
            return 5

        def sample(self, n):
            return ted_rows(n)

    with pytest.raises(TypeError, match="cannot be read by row position"):
        prefill_replay_buffer(ReplayBuffer(storage=LazyTensorStorage(10)), SampleOnly())

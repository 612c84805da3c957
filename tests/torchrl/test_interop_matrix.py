"""TorchRL 0.14.1 objects on either side of mixreplay's buffers."""

import pytest
import torch
import torchrl.data as torchrl_data

pytestmark = pytest.mark.torchrl

from mixreplay import LazyTensorStorage as MLazy  # noqa: E402
from mixreplay import OfflineToOnlineReplayBuffer, SchemaMismatchError, prefill_replay_buffer  # noqa: E402
from mixreplay import ReplayBuffer as MRB  # noqa: E402
from tests.conftest import ted_rows  # noqa: E402

OFF, ON = 7.0, -3.0


def torchrl_offline(cls_name="ReplayBuffer", n=300):
    cls = getattr(torchrl_data, cls_name)
    rb = cls(storage=torchrl_data.LazyTensorStorage(n))
    rb.extend(ted_rows(n, tag=OFF))
    return rb


@pytest.mark.parametrize("cls_name", ["ReplayBuffer", "TensorDictReplayBuffer"])
def test_torchrl_buffer_as_offline(cls_name):
    off = torchrl_offline(cls_name)
    rb = OfflineToOnlineReplayBuffer(
        off, online_capacity=100, offline_fraction=0.3, batch_size=50, generator=0
    )
    assert (rb.sample()["action"][:, 0] == OFF).all()  # online still empty: offline only
    rb.extend(ted_rows(20, tag=ON))
    batch = rb.sample()
    assert batch.batch_size == torch.Size([50])
    assert (batch["action"][:15, 0] == OFF).all() and (batch["action"][15:, 0] == ON).all()
    # TensorDictReplayBuffer adds an "index" key to its samples: bookkeeping, not data
    assert "index" not in batch.keys()
    _, info = rb.sample(return_info=True)
    if cls_name == "TensorDictReplayBuffer":
        assert (info["index"][:15] >= 0).all()


def test_torchrl_storage_as_online():
    off = MRB(storage=MLazy(300))
    off.extend(ted_rows(300, tag=OFF))
    rb = OfflineToOnlineReplayBuffer(
        off,
        online_storage=torchrl_data.LazyTensorStorage(40),
        offline_fraction=0.25,
        batch_size=8,
        generator=0,
    )
    idx = rb.extend(ted_rows(50, tag=ON))  # wraps the TorchRL ring
    assert idx.tolist()[-1] == 49 % 40
    assert len(rb.online_buffer) == 40
    batch = rb.sample()
    assert batch["action"][:, 0].tolist() == [OFF] * 2 + [ON] * 6
    rewards = rb.online_buffer.storage[:]["next", "reward"].squeeze(-1)
    assert sorted(rewards.tolist()) == [float(i) for i in range(10, 50)]


def test_float64_torchrl_offline_raises_instead_of_upcasting():
    off = torchrl_data.ReplayBuffer(storage=torchrl_data.LazyTensorStorage(100))
    off.extend(ted_rows(100, tag=OFF).double())
    rb = OfflineToOnlineReplayBuffer(off, online_capacity=10, batch_size=8)
    with pytest.raises(
        SchemaMismatchError, match=r"'observation': offline float64\[3\], online float32\[3\]"
    ):
        rb.extend(ted_rows(4))


def test_torchrl_reference_would_have_failed_here():
    """The reference's first mixed batch over a TensorDictReplayBuffer fails; ours does not."""
    off = torchrl_offline("TensorDictReplayBuffer")
    reference = torchrl_data.OfflineToOnlineReplayBuffer(off, online_capacity=100, batch_size=10)
    reference.extend(ted_rows(20, tag=ON))
    with pytest.raises(KeyError):
        reference.sample()
    ours = OfflineToOnlineReplayBuffer(off, online_capacity=100, batch_size=10)
    ours.extend(ted_rows(20, tag=ON))
    assert ours.sample().batch_size == torch.Size([10])


def test_prefill_from_torchrl_copies_each_row_once():
    off = torchrl_offline(n=1000)
    target = MRB(storage=MLazy(2000))
    prefill_replay_buffer(target, off)
    rewards = target[:]["next", "reward"].squeeze(-1)
    assert len(target) == 1000 and rewards.unique().numel() == 1000


def test_prefill_into_torchrl_buffer():
    off = MRB(storage=MLazy(500))
    off.extend(ted_rows(500))
    target = torchrl_data.ReplayBuffer(storage=torchrl_data.LazyTensorStorage(1000))
    prefill_replay_buffer(target, off, n_samples=300, chunk_size=64, generator=1)
    assert len(target) == 300
    assert target[:300]["next", "reward"].unique().numel() == 300

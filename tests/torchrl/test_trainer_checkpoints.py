"""TorchRL trainer checkpoints hold the whole mixreplay buffer, and a resume continues it.

TorchRL's trainer saves in two ways: ``save_trainer_file=`` alone (its legacy
``torch.save`` of ``trainer.state_dict()``, where the buffer is the replay-buffer hook's
state) and ``checkpoint=Checkpoint()`` (``torchrl.checkpoint``, where the buffer is saved
through its own ``state_dict()``). Both must restore the online rows, samplers, generator,
schedule and step, so the resumed buffer draws the batches the saved one would have drawn.
"""

from __future__ import annotations

import pytest
import torch

from mixreplay import CheckpointError, LazyTensorStorage, OfflineToOnlineReplayBuffer, ReplayBuffer
from tests.helpers import assert_state_equal
from tests.torchrl.conftest import SAC_PROTOTYPE, make_trainer, pendulum_rows

pytestmark = [
    pytest.mark.torchrl,
    pytest.mark.filterwarnings(SAC_PROTOTYPE),
    # what save_trainer_file= alone means in TorchRL 0.14, deprecated there (not here)
    pytest.mark.filterwarnings("ignore:The legacy CKPT_BACKEND:DeprecationWarning"),
]


def offline_data(seed: int = 0) -> ReplayBuffer:
    offline = ReplayBuffer(storage=LazyTensorStorage(100))
    offline.extend(pendulum_rows(100, seed=seed))
    return offline


def buffer(offline: ReplayBuffer) -> OfflineToOnlineReplayBuffer:
    return OfflineToOnlineReplayBuffer(offline, online_capacity=100, batch_size=16, generator=1)


def checkpointing(kind: str, path):
    """The trainer arguments that make it save at the end of training (and load)."""
    from torchrl.checkpoint import Checkpoint

    if kind == "save_trainer_file":
        return {"save_trainer_file": path / "trainer.pt"}
    return {"save_trainer_file": path / "trainer", "checkpoint": Checkpoint()}


def trained(kind: str, path, offline: ReplayBuffer):
    rb = buffer(offline)
    trainer = make_trainer(rb, total_frames=60, frames_per_batch=20, **checkpointing(kind, path))
    trainer.train()  # saves when the last batch is done
    return trainer, rb


@pytest.mark.parametrize("kind", ["save_trainer_file", "checkpoint"])
def test_a_trainer_checkpoint_round_trips_the_buffer(kind, tmp_path):
    offline = offline_data()
    trainer, rb = trained(kind, tmp_path, offline)
    assert len(rb.online_buffer) == 60 and rb.step == 60 and rb.offline_fraction == 0.0
    saved = rb.state_dict()

    resumed_rb = buffer(offline)
    resumed = make_trainer(resumed_rb, total_frames=60, frames_per_batch=20)
    if kind == "checkpoint":
        from torchrl.checkpoint import Checkpoint

        resumed.checkpoint = Checkpoint()
    resumed.load_from_file(checkpointing(kind, tmp_path)["save_trainer_file"])
    assert resumed.collected_frames == 60
    assert_state_equal(resumed_rb.state_dict(), saved)
    resumed_rb.set_step(0)  # both back to a 50/50 split: the same mixed batches follow
    rb.set_step(0)
    for _ in range(3):
        a, info_a = rb.sample(return_info=True)
        b, info_b = resumed_rb.sample(return_info=True)
        assert info_a["source"].tolist() == [0] * 8 + [1] * 8
        assert torch.equal(info_a["index"], info_b["index"])
        assert (a == b).all()


def test_a_checkpoint_resumed_with_another_offline_dataset(tmp_path, caplog):
    """checkpoint=: the buffer's own state_dict refuses; save_trainer_file: the hook (TorchRL's
    contract, which saves no offline data) resumes and logs the difference."""
    from torchrl.checkpoint import Checkpoint
    from torchrl.checkpoint import CheckpointError as TorchRLCheckpointError

    trained("checkpoint", tmp_path / "a", offline_data())
    rb = buffer(offline_data(seed=1))
    resumed = make_trainer(rb, checkpoint=Checkpoint())
    with pytest.raises(TorchRLCheckpointError, match="Failed to load checkpoint component") as err:
        resumed.load_from_file(tmp_path / "a" / "trainer")
    assert isinstance(err.value.__cause__, CheckpointError)  # mixreplay's, naming the fix
    assert "source 'offline'" in str(err.value) and "allow_offline_mismatch=True" in str(err.value)
    assert len(rb.online_buffer) == 0

    trained("save_trainer_file", tmp_path, offline_data())
    rb = buffer(offline_data(seed=1))
    make_trainer(rb).load_from_file(tmp_path / "trainer.pt")
    assert len(rb.online_buffer) == 60
    assert "resuming anyway (allow_offline_mismatch=True)" in caplog.text

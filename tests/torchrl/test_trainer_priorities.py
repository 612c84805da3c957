"""TorchRL's ReplayBufferTrainer hook updates the priorities of mixreplay's prioritized buffers.

TorchRL's hook (``torchrl.trainers.ReplayBufferTrainer``, what redq and the coding_dqn
tutorial register) asks ``hasattr(rb, "update_tensordict_priority")``; without it, and
without TorchRL's own ``PrioritizedSampler`` class, it skips every priority update without a
word. mixreplay's TensorDict buffers have the method; a plain prioritized ``ReplayBuffer``
refuses the question, naming them.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    LazyMemmapStorage,
    LazyTensorStorage,
    PrioritizedSampler,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)

pytestmark = pytest.mark.torchrl


class _Trainer:
    """What ``ReplayBufferTrainer.register`` calls on a trainer: the ops it registers, by stage."""

    def __init__(self):
        self.ops: dict[str, list] = {}
        self.modules: dict[str, object] = {}

    def register_op(self, dest, op, **kwargs):
        self.ops.setdefault(dest, []).append(op)

    def register_module(self, name, module):
        self.modules[name] = module


def collected(n_envs: int = 2, steps: int = 10) -> TensorDict:
    """A collector's ``[envs, steps]`` batch."""
    n = n_envs * steps
    return TensorDict(
        {
            "observation": torch.arange(n, dtype=torch.float32).reshape(n_envs, steps, 1),
            "next": {
                "observation": torch.zeros(n_envs, steps, 1),
                "reward": torch.zeros(n_envs, steps, 1),
                "truncated": torch.zeros(n_envs, steps, 1, dtype=torch.bool),
            },
        },
        [n_envs, steps],
    )


def raw_priorities(rb) -> torch.Tensor:
    sampler = rb.sampler
    return sampler.tree.leaves[: len(rb)] ** (1 / sampler.alpha) - sampler.eps


@pytest.mark.parametrize(
    "make",
    [
        # redq's make_replay_buffer (prb=True), its storage with a scratch_dir
        lambda tmp: TensorDictReplayBuffer(
            storage=LazyMemmapStorage(64, scratch_dir=tmp / "rb"),
            sampler=PrioritizedSampler(max_capacity=64, alpha=0.7, beta=0.5),
            batch_size=8,
            generator=0,
        ),
        lambda tmp: TensorDictPrioritizedReplayBuffer(
            alpha=0.7, beta=0.5, storage=LazyTensorStorage(64), batch_size=8, generator=0
        ),
    ],
    ids=["redq", "TensorDictPrioritizedReplayBuffer"],
)
def test_torchrls_replay_buffer_hook_updates_the_priorities(make, tmp_path):
    from torchrl.trainers import ReplayBufferTrainer

    rb = make(tmp_path)
    trainer = _Trainer()
    ReplayBufferTrainer(rb, 8, flatten_tensordicts=True, memmap=False).register(trainer)
    (extend,) = trainer.ops["batch_process"]
    (sample,) = trainer.ops["process_optim_batch"]
    (update_priority,) = trainer.ops["post_loss"]

    extend(collected())
    before = raw_priorities(rb).clone()
    batch = sample(None)
    batch["td_error"] = torch.full((8,), 40.0)  # what TorchRL's losses write
    update_priority(batch)

    after = raw_priorities(rb)
    drawn = batch["index"].unique()
    assert torch.allclose(after[drawn], torch.full((drawn.numel(),), 40.0, dtype=after.dtype))
    untouched = torch.ones(len(rb), dtype=torch.bool)
    untouched[drawn] = False
    assert torch.equal(after[untouched], before[untouched])
    assert not torch.equal(after, before)


def test_a_plain_prioritized_buffer_is_refused_by_the_hook_naming_the_fix():
    from torchrl.trainers import ReplayBufferTrainer

    rb = ReplayBuffer(
        storage=LazyTensorStorage(64), sampler=PrioritizedSampler(alpha=0.7, beta=0.5)
    )
    with pytest.raises(
        TypeError, match=r"TensorDictPrioritizedReplayBuffer\(alpha=..., beta=...\)"
    ):
        ReplayBufferTrainer(rb, 8)


def test_the_hook_leaves_a_buffer_without_priorities_alone():
    from torchrl.trainers import ReplayBufferTrainer

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(64), batch_size=8, generator=0)
    trainer = _Trainer()
    ReplayBufferTrainer(rb, 8, flatten_tensordicts=True).register(trainer)
    trainer.ops["batch_process"][0](collected())
    batch = trainer.ops["process_optim_batch"][0](None)
    batch["td_error"] = torch.ones(8)
    trainer.ops["post_loss"][0](batch)  # as on TorchRL: nothing to update
    assert len(rb) == 20

"""TorchRL's offline-to-online trainer and hooks, driving mixreplay buffers.

TorchRL 0.14 trains offline-to-online with
``torchrl.trainers.algorithms.offline_to_online.OfflineToOnlineTrainer`` (SAC) and
two hooks. The trainer refuses any buffer that is not TorchRL's own
``OfflineToOnlineReplayBuffer``; this module gives the same three names, accepting
a mixreplay :class:`~mixreplay.OfflineToOnlineReplayBuffer` (TorchRL's still works):

- :class:`OfflineToOnlineTrainer`: TorchRL's trainer, the same arguments;
- :class:`OfflineToOnlineReplayBufferHook`: writes each collected batch to the
  online side and draws the mixed batch for each optimization step; its state is
  the whole mixreplay buffer (online rows, samplers, generator, schedule and step),
  so a trainer checkpoint resumes the exact sampling stream;
- :class:`OfflineToOnlineAnnealHook`: anneals the offline fraction by collected frames.

TorchRL code switches with its imports only::

    from mixreplay import OfflineToOnlineReplayBuffer, load_dataset
    from mixreplay.torchrl import OfflineToOnlineTrainer

Importing this module imports TorchRL (``pip install "mixreplay[torchrl]"``);
``import mixreplay`` alone never does.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

from mixreplay.errors import CheckpointError, require
from mixreplay.mixing.offline_to_online import OfflineToOnlineReplayBuffer

__all__ = [
    "OfflineToOnlineAnnealHook",
    "OfflineToOnlineReplayBufferHook",
    "OfflineToOnlineTrainer",
]

require("torchrl", "torchrl", "mixreplay.torchrl (TorchRL's trainer)")
with warnings.catch_warnings():
    # TorchRL's collectors warn, at import, about a deprecated base class of TorchRL's own
    # (VanillaWeightUpdater): nothing a user of this module can act on.
    warnings.filterwarnings(
        "ignore", r"Creating \w+ which inherits from WeightUpdaterBase", DeprecationWarning
    )
    from torchrl.data import OfflineToOnlineReplayBuffer as _TorchRLBuffer
    from torchrl.trainers.algorithms import offline_to_online as _reference
    from torchrl.trainers.algorithms.sac import SACTrainer

#: the buffers the trainer and hooks drive: mixreplay's and TorchRL's own
BUFFER_TYPES = (OfflineToOnlineReplayBuffer, _TorchRLBuffer)


class OfflineToOnlineReplayBufferHook(_reference.OfflineToOnlineReplayBufferHook):
    """TorchRL's replay-buffer hook (collected batch in, mixed batch out), for mixreplay buffers.

    As in TorchRL: on ``pre_epoch`` the collected batch (masked by
    ``("collector", "mask")`` if present, flattened) keeps only the keys the offline
    dataset has, moves to the CPU and is written to the online side; on
    ``process_optim_batch`` a mixed batch of ``batch_size`` is drawn (the buffer's
    ``batch_size`` if ``None``) and moved to ``device``.

    State: for a mixreplay buffer, :meth:`state_dict` is the buffer's own
    :meth:`~mixreplay.OfflineToOnlineReplayBuffer.state_dict`: online rows, samplers,
    generator, the offline-fraction schedule and its step, so a resumed trainer draws
    the batches the saved one would have drawn. The offline dataset is referenced,
    never copied: a resumed buffer keeps the one it was built with. As TorchRL's hook
    stores no offline data at all, a different offline dataset only logs a warning;
    pass ``allow_offline_mismatch=False`` to make it a
    :class:`~mixreplay.CheckpointError`. For TorchRL's own buffer the state is TorchRL's
    (online buffer and the two fractions).

    Args:
        replay_buffer: a mixreplay or TorchRL ``OfflineToOnlineReplayBuffer``.

    Keyword Args:
        batch_size: rows per mixed batch; the buffer's ``batch_size`` if ``None``.
        device: where sampled batches go (``None``: where they are).
        align_to_offline_keys: keep only the offline dataset's keys of collected batches.
        allow_offline_mismatch: load a state saved with another offline dataset (logged).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage, OfflineToOnlineReplayBuffer, ReplayBuffer
        >>> from mixreplay.torchrl import OfflineToOnlineReplayBufferHook
        >>> offline = ReplayBuffer(storage=LazyTensorStorage(100))
        >>> _ = offline.extend(TensorDict({"observation": torch.zeros(100, 3)}, [100]))
        >>> rb = OfflineToOnlineReplayBuffer(offline, online_capacity=100, batch_size=8,
        ...                                  generator=0, source_key="source")
        >>> hook = OfflineToOnlineReplayBufferHook(rb)
        >>> collected = TensorDict({"observation": torch.ones(2, 5, 3),
        ...                         "loc": torch.zeros(2, 5, 1)}, [2, 5])
        >>> _ = hook.extend(collected)  # pre_epoch: 10 rows, offline keys only
        >>> len(rb.online_buffer), sorted(rb.online_buffer.sample(1).keys())
        (10, ['observation'])
        >>> hook.sample(None)["source"].tolist()  # process_optim_batch
        [0, 0, 0, 0, 1, 1, 1, 1]
    """

    def __init__(
        self,
        replay_buffer: Any,
        *,
        batch_size: int | None = None,
        device: Any = None,
        align_to_offline_keys: bool = True,
        allow_offline_mismatch: bool = True,
    ) -> None:
        super().__init__(
            replay_buffer,
            batch_size=batch_size,
            device=device,
            align_to_offline_keys=align_to_offline_keys,
        )
        self.allow_offline_mismatch = allow_offline_mismatch

    def state_dict(self) -> dict[str, Any]:
        if isinstance(self.replay_buffer, OfflineToOnlineReplayBuffer):
            return {"mixreplay": self.replay_buffer.state_dict()}
        return super().state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        mine = isinstance(self.replay_buffer, OfflineToOnlineReplayBuffer)
        if mine and "mixreplay" in state_dict:
            self.replay_buffer.load_state_dict(
                state_dict["mixreplay"], allow_offline_mismatch=self.allow_offline_mismatch
            )
        elif "mixreplay" in state_dict:
            raise CheckpointError(
                "this hook state holds a mixreplay buffer, but the hook drives a "
                f"{type(self.replay_buffer).__name__}; build the trainer with the mixreplay "
                "OfflineToOnlineReplayBuffer the checkpoint was saved from"
            )
        else:  # TorchRL's format: the online buffer and the two fractions
            super().load_state_dict(state_dict)


class OfflineToOnlineAnnealHook(_reference.OfflineToOnlineAnnealHook):
    """TorchRL's annealing hook, for mixreplay buffers: ``anneal(collected_frames, anneal_frames)``.

    Registered on ``post_steps``, it decays the offline fraction linearly from the
    buffer's base fraction to 0 over ``anneal_frames`` collected frames. Its state is
    empty, as in TorchRL: the schedule and its step live in the buffer's state.

    Args:
        trainer: anything with ``collected_frames`` (the trainer).
        replay_buffer: a mixreplay or TorchRL ``OfflineToOnlineReplayBuffer``.
        anneal_frames: frames over which the fraction reaches 0.

    Examples:
        >>> import torch
        >>> from types import SimpleNamespace
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage, OfflineToOnlineReplayBuffer, ReplayBuffer
        >>> from mixreplay.torchrl import OfflineToOnlineAnnealHook
        >>> offline = ReplayBuffer(storage=LazyTensorStorage(10))
        >>> _ = offline.extend(TensorDict({"observation": torch.zeros(10, 3)}, [10]))
        >>> rb = OfflineToOnlineReplayBuffer(offline, online_capacity=10, offline_fraction=0.8)
        >>> trainer = SimpleNamespace(collected_frames=250)
        >>> OfflineToOnlineAnnealHook(trainer, rb, anneal_frames=1000)()
        >>> round(rb.offline_fraction, 6)
        0.6
    """


class OfflineToOnlineTrainer(_reference.OfflineToOnlineTrainer):
    """TorchRL's offline-to-online SAC trainer, accepting a mixreplay buffer.

    The arguments and behaviour are TorchRL's
    (``torchrl.trainers.algorithms.offline_to_online.OfflineToOnlineTrainer``): each
    collected batch goes to the online side, every optimization step samples a mixed
    batch, and the offline fraction anneals to 0 over ``anneal_frames`` frames
    (``total_frames`` by default; ``<= 0`` keeps it fixed). ``replay_buffer`` may be a
    mixreplay or a TorchRL ``OfflineToOnlineReplayBuffer``; the hooks are this module's,
    so trainer checkpoints (``save_trainer_file=``, ``checkpoint=``) hold the whole
    mixreplay buffer and a resumed run continues the same sampling stream.

    Only the type check differs from TorchRL's class: its ``__init__`` is TorchRL's
    with the check widened, and TorchRL's SAC trainer does the rest.

    Raises:
        TypeError: ``replay_buffer`` is not an ``OfflineToOnlineReplayBuffer``.
        ValueError: ``async_collection=True`` (as in TorchRL).

    Examples:
        >>> import warnings
        >>> import torch
        >>> from tensordict.nn import NormalParamExtractor, TensorDictModule
        >>> from torchrl.collectors import Collector
        >>> from torchrl.envs import GymEnv
        >>> from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
        >>> from torchrl.objectives import SACLoss, SoftUpdate
        >>> from mixreplay import LazyTensorStorage, OfflineToOnlineReplayBuffer, ReplayBuffer
        >>> from mixreplay.torchrl import OfflineToOnlineTrainer
        >>> _ = torch.manual_seed(0)
        >>> env = GymEnv("Pendulum-v1")
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(torch.nn.Sequential(MLP(in_features=3, out_features=2,
        ...                                              num_cells=[16]), NormalParamExtractor()),
        ...                      in_keys=["observation"], out_keys=["loc", "scale"]),
        ...     in_keys=["loc", "scale"], spec=env.action_spec, distribution_class=TanhNormal)
        >>> qvalue = ValueOperator(MLP(in_features=4, out_features=1, num_cells=[16]),
        ...                        in_keys=["observation", "action"])
        >>> loss = SACLoss(actor, qvalue)
        >>> offline = ReplayBuffer(storage=LazyTensorStorage(100))
        >>> _ = offline.extend(env.rollout(50).exclude("collector"))
        >>> rb = OfflineToOnlineReplayBuffer(offline, online_capacity=100, batch_size=16)
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")  # TorchRL's own deprecation notices
        ...     trainer = OfflineToOnlineTrainer(
        ...         collector=Collector(env, actor, frames_per_batch=20, total_frames=40),
        ...         total_frames=40, frame_skip=1, optim_steps_per_batch=1, loss_module=loss,
        ...         replay_buffer=rb, optimizer=torch.optim.Adam(loss.parameters()),
        ...         target_net_updater=SoftUpdate(loss, tau=0.01), progress_bar=False,
        ...         enable_logging=False)
        ...     trainer.train()
        >>> len(rb.online_buffer), rb.offline_fraction
        (40, 0.0)
    """

    def __init__(self, **kwargs: Any) -> None:
        bound = _SIGNATURE.bind(self, **kwargs)  # TorchRL's arguments, TorchRL's defaults
        bound.apply_defaults()
        args = dict(bound.arguments)
        del args["self"]
        replay_buffer = args["replay_buffer"]
        if not isinstance(replay_buffer, BUFFER_TYPES):
            raise TypeError(
                "OfflineToOnlineTrainer requires an OfflineToOnlineReplayBuffer (mixreplay's or "
                f"TorchRL's), got {type(replay_buffer).__name__}; wrap the offline dataset: "
                "OfflineToOnlineReplayBuffer(offline, online_capacity=...)"
            )
        if args["async_collection"]:
            raise ValueError("OfflineToOnlineTrainer does not support async_collection.")
        anneal_frames = args.pop("anneal_frames")
        batch_size = args.pop("batch_size")
        args["replay_buffer"] = None  # as TorchRL does: the hooks below drive the buffer
        SACTrainer.__init__(self, **args)  # skips only TorchRL's type check

        self.replay_buffer = replay_buffer
        self.anneal_frames = args["total_frames"] if anneal_frames is None else anneal_frames
        device = getattr(replay_buffer.online_buffer.storage, "device", "cpu")
        OfflineToOnlineReplayBufferHook(
            replay_buffer, batch_size=batch_size, device=device
        ).register(self)
        if self.anneal_frames > 0:
            OfflineToOnlineAnnealHook(self, replay_buffer, self.anneal_frames).register(self)


_SIGNATURE = inspect.signature(_reference.OfflineToOnlineTrainer.__init__)
OfflineToOnlineTrainer.__init__.__signature__ = _SIGNATURE  # type: ignore[attr-defined]

"""TorchRL 0.14.1 objects on either side of mixreplay's buffers: the interop matrix.

Into mixreplay: TorchRL buffers and datasets as the offline side, TorchRL storages as the
online side, TorchRL transforms on any source, prefill from and into TorchRL buffers.
Out of mixreplay: mixreplay buffers in TorchRL's own buffer, hooks and trainer, and
mixreplay's trainer and hooks around TorchRL's buffer.
"""

import pytest
import torch
import torchrl.data as torchrl_data

from mixreplay import (
    CheckpointError,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    SchemaMismatchError,
    load_dataset,
    prefill_replay_buffer,
)
from mixreplay import LazyTensorStorage as MLazy
from mixreplay import ReplayBuffer as MRB
from tests.conftest import ted_rows
from tests.datasets.conftest import make_minari, record
from tests.torchrl.conftest import SAC_PROTOTYPE, make_trainer

pytestmark = pytest.mark.torchrl

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


@pytest.mark.parametrize(
    "make_storage",
    [
        lambda tmp: torchrl_data.LazyMemmapStorage(40, scratch_dir=tmp),
        lambda tmp: torchrl_data.TensorStorage(ted_rows(40).zero_()),
        lambda tmp: torchrl_data.ListStorage(40),
    ],
    ids=["LazyMemmapStorage", "TensorStorage", "ListStorage"],
)
def test_other_torchrl_storages_as_online(make_storage, tmp_path):
    off = MRB(storage=MLazy(300))
    off.extend(ted_rows(300, tag=OFF))
    rb = OfflineToOnlineReplayBuffer(
        off, online_storage=make_storage(tmp_path), offline_fraction=0.25, batch_size=8, generator=0
    )
    rb.extend(ted_rows(50, tag=ON))  # wraps the 40-row ring
    assert len(rb.online_buffer) == 40
    batch = rb.sample()
    assert batch["action"][:, 0].tolist() == [OFF] * 2 + [ON] * 6
    assert 10 <= batch["next", "reward"][2:].min() and batch["next", "reward"][2:].max() < 50


def f64(td):
    return td.apply(lambda t: t.double() if t.is_floating_point() else t)


def test_torchrl_buffer_with_its_own_double_to_float_mixes():
    """TorchRL's own append_transform on a TorchRL buffer: mixreplay mixes what it produces."""
    from torchrl.envs.transforms import DoubleToFloat

    off = torchrl_data.ReplayBuffer(storage=torchrl_data.LazyTensorStorage(100))
    off.extend(f64(ted_rows(100, tag=OFF)))
    off.append_transform(DoubleToFloat())
    rb = OfflineToOnlineReplayBuffer(off, online_capacity=10, batch_size=8, generator=0)
    rb.extend(ted_rows(4, tag=ON))
    batch = rb.sample()
    assert batch["observation"].dtype == torch.float32
    assert batch["action"][:, 0].tolist() == [OFF] * 4 + [ON] * 4


def test_torchrl_transforms_on_mixreplay_sources():
    """TorchRL Transforms attached to a mixreplay source, and as the mixing buffer's transform."""
    from torchrl.envs.transforms import Compose, RewardScaling

    offline = OfflineDataset.from_tensordict(ted_rows(100, tag=OFF))
    offline.append_transform(RewardScaling(loc=1.0, scale=2.0, in_keys=[("next", "reward")]))
    rb = OfflineToOnlineReplayBuffer(
        offline,
        online_capacity=50,
        batch_size=4,
        generator=0,
        transform=Compose(RewardScaling(loc=0.0, scale=10.0, in_keys=[("next", "reward")])),
    )
    rb.extend(ted_rows(10, tag=ON))
    batch, info = rb.sample(return_info=True)
    index = info["index"].to(torch.float32)  # the reward of row i is i (ted_rows)
    expected = torch.cat([(index[:2] * 2 + 1) * 10, index[2:] * 10])
    assert batch["next", "reward"].squeeze(-1).tolist() == expected.tolist()


@pytest.fixture
def local_minari(tmp_path, monkeypatch):
    """A Minari dataset of real Pendulum episodes, written locally (no download)."""
    import gymnasium as gym

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    env = gym.make("Pendulum-v1", max_episode_steps=50)
    make_minari("test/pendulum-v0", env, record(env, 4, seed=0))
    return "test/pendulum-v0"


def test_torchrl_minari_dataset_as_offline(local_minari, tmp_path):
    """TorchRL's MinariExperienceReplay (local, no network) as the offline side."""
    from torchrl.data.datasets import MinariExperienceReplay
    from torchrl.envs.transforms import DoubleToFloat, ExcludeTransform

    ds = MinariExperienceReplay(
        local_minari, batch_size=8, load_from_local_minari=True, root=tmp_path / "torchrl"
    )
    assert len(ds) == 200
    online = load_dataset(f"minari:{local_minari}").storage[:30]  # the same env, TED rows
    online = online.select(*ds[:1].keys(True, True), strict=False)
    # as TorchRL loads it: an 'episode' key and float64 rewards; refused, clearly, and unwritten
    plain = OfflineToOnlineReplayBuffer(ds, online_capacity=100, batch_size=8)
    with pytest.raises(SchemaMismatchError, match=r"\('next', 'reward'\): offline float64\[1\]"):
        plain.extend(online)
    assert len(plain.online_buffer) == 0
    # TorchRL's own transforms on TorchRL's dataset make it mix
    ds.append_transform(DoubleToFloat(in_keys=[("next", "reward")]))
    ds.append_transform(ExcludeTransform("episode"))
    rb = OfflineToOnlineReplayBuffer(ds, online_capacity=100, generator=0)
    rb.extend(online.exclude("episode"))
    batch, info = rb.sample(16, return_info=True)
    assert "index" not in batch.keys() and "episode" not in batch.keys()
    assert info["source"].tolist() == [0] * 8 + [1] * 8
    rows = ds[info["index"][:8]]  # TorchRL's rows, read back by the index the batch reports
    assert torch.equal(batch["observation"][:8], rows["observation"])
    assert torch.equal(batch["next", "reward"][:8], rows["next", "reward"])


def test_mixreplay_dataset_in_torchrls_buffer():
    """A mixreplay OfflineDataset as the offline side of TorchRL's own buffer."""
    ds = OfflineDataset.from_tensordict(ted_rows(100, tag=OFF))
    rb = torchrl_data.OfflineToOnlineReplayBuffer(ds, online_capacity=50, batch_size=8)
    rb.extend(ted_rows(10, tag=ON))
    assert rb.sample()["action"][:, 0].tolist() == [OFF] * 4 + [ON] * 4


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


# -- mixreplay buffers in TorchRL's hooks and trainer, and the other way round --------------


def mixed_buffer(**kwargs):
    off = MRB(storage=MLazy(300))
    off.extend(ted_rows(300, tag=OFF))
    return OfflineToOnlineReplayBuffer(
        off, online_capacity=100, batch_size=8, generator=0, **kwargs
    )


def collected(n_env=2, steps=5, tag=ON):
    """A collector's batch: ``[n_env, steps]`` rows, a mask, and policy outputs the buffer drops."""
    rows = ted_rows(n_env * steps, tag=tag).reshape(n_env, steps)
    mask = torch.ones(n_env, steps, dtype=torch.bool)
    mask[0, 3:] = False
    rows["collector", "mask"] = mask
    rows["loc"] = torch.zeros(n_env, steps, 1)
    return rows


def test_torchrls_own_hooks_drive_a_mixreplay_buffer():
    from torchrl.trainers.algorithms.offline_to_online import (
        OfflineToOnlineAnnealHook,
        OfflineToOnlineReplayBufferHook,
    )

    rb = mixed_buffer(offline_fraction=0.5)
    hook = OfflineToOnlineReplayBufferHook(rb, batch_size=8)
    hook.extend(collected())  # 8 valid rows of 10, TED keys only
    assert len(rb.online_buffer) == 8
    assert set(rb.online_buffer.sample(1).keys()) == set(ted_rows(1).keys())
    assert hook.sample(None)["action"][:, 0].tolist() == [OFF] * 4 + [ON] * 4
    trainer = type("Stub", (), {"collected_frames": 25})()
    OfflineToOnlineAnnealHook(trainer, rb, anneal_frames=100)()
    assert rb.offline_fraction == pytest.approx(0.375)
    # TorchRL's hook state (online rows and both fractions) round-trips through mixreplay's buffer
    other = mixed_buffer(offline_fraction=0.9)
    OfflineToOnlineReplayBufferHook(other).load_state_dict(hook.state_dict())
    assert len(other.online_buffer) == 8
    assert (other.offline_fraction, other.base_offline_fraction) == pytest.approx((0.375, 0.5))


def test_mixreplay_hook_state_is_the_whole_buffer():
    from mixreplay.torchrl import OfflineToOnlineReplayBufferHook

    rb = mixed_buffer(offline_fraction=0.5)
    hook = OfflineToOnlineReplayBufferHook(rb)
    hook.extend(collected())
    rb.anneal(20, 100)
    state = hook.state_dict()
    assert (
        set(state) == {"mixreplay"} and state["mixreplay"]["kind"] == "OfflineToOnlineReplayBuffer"
    )
    resumed = mixed_buffer(offline_fraction=0.5)
    OfflineToOnlineReplayBufferHook(resumed).load_state_dict(state)
    assert (resumed.step, resumed.offline_fraction) == (20, pytest.approx(0.4))
    for _ in range(3):  # the same generator: the same batches from here on
        assert torch.equal(rb.sample()["next", "reward"], resumed.sample()["next", "reward"])


def test_mixreplay_hook_offline_mismatch(caplog):
    from mixreplay.torchrl import OfflineToOnlineReplayBufferHook

    rb = mixed_buffer()
    hook = OfflineToOnlineReplayBufferHook(rb)
    hook.extend(collected())
    other_offline = MRB(storage=MLazy(300))
    other_offline.extend(ted_rows(300, tag=OFF + 1))  # other rows: another fingerprint
    strict = OfflineToOnlineReplayBuffer(other_offline, online_capacity=100, batch_size=8)
    with pytest.raises(CheckpointError, match="source 'offline'.*allow_offline_mismatch=True"):
        OfflineToOnlineReplayBufferHook(strict, allow_offline_mismatch=False).load_state_dict(
            hook.state_dict()
        )
    assert len(strict.online_buffer) == 0
    # the default follows TorchRL's hook, which saves no offline data: resume, and say so
    OfflineToOnlineReplayBufferHook(strict).load_state_dict(hook.state_dict())
    assert len(strict.online_buffer) == 8
    assert "resuming anyway (allow_offline_mismatch=True)" in caplog.text


def test_mixreplay_hook_with_torchrls_buffer_keeps_torchrls_state():
    from mixreplay.torchrl import OfflineToOnlineReplayBufferHook

    off = torchrl_offline()
    rb = torchrl_data.OfflineToOnlineReplayBuffer(off, online_capacity=100, batch_size=8)
    hook = OfflineToOnlineReplayBufferHook(rb)
    hook.extend(collected())
    state = hook.state_dict()
    assert set(state) == {"online_buffer", "offline_fraction", "base_offline_fraction"}
    with pytest.raises(
        CheckpointError,
        match="this hook state holds a mixreplay buffer, but the hook drives a "
        "OfflineToOnlineReplayBuffer",
    ):
        hook.load_state_dict(OfflineToOnlineReplayBufferHook(mixed_buffer()).state_dict())


def test_torchrls_trainer_refuses_a_mixreplay_buffer():
    """Why mixreplay.torchrl exists: TorchRL's trainer checks for its own class."""
    from torchrl.trainers.algorithms.offline_to_online import OfflineToOnlineTrainer

    with pytest.raises(TypeError, match="requires an OfflineToOnlineReplayBuffer, got Offline"):
        OfflineToOnlineTrainer(
            collector=None,
            total_frames=1,
            frame_skip=1,
            optim_steps_per_batch=1,
            loss_module=None,
            replay_buffer=mixed_buffer(),
        )


@pytest.mark.parametrize(
    "bad, match",
    [
        (torchrl_data.ReplayBuffer(storage=torchrl_data.LazyTensorStorage(4)), "got ReplayBuffer"),
        (None, "got NoneType"),
    ],
)
def test_mixreplays_trainer_refuses_other_buffers(bad, match):
    from mixreplay.torchrl import OfflineToOnlineTrainer

    with pytest.raises(
        TypeError,
        match=r"OfflineToOnlineTrainer requires an OfflineToOnlineReplayBuffer \(mixreplay's or "
        rf"TorchRL's\), {match}; wrap the offline dataset",
    ):
        OfflineToOnlineTrainer(
            collector=None,
            total_frames=1,
            frame_skip=1,
            optim_steps_per_batch=1,
            loss_module=None,
            replay_buffer=bad,
        )
    # TorchRL's signature decides what is missing or unknown, before any check of ours
    with pytest.raises(TypeError, match="missing a required argument: 'collector'"):
        OfflineToOnlineTrainer(replay_buffer=mixed_buffer())
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'not_an_argument'"):
        OfflineToOnlineTrainer(
            collector=None,
            total_frames=1,
            frame_skip=1,
            optim_steps_per_batch=1,
            loss_module=None,
            replay_buffer=bad,
            not_an_argument=1,
        )
    with pytest.raises(ValueError, match="does not support async_collection"):
        OfflineToOnlineTrainer(
            collector=None,
            total_frames=1,
            frame_skip=1,
            optim_steps_per_batch=1,
            loss_module=None,
            replay_buffer=mixed_buffer(),
            async_collection=True,
        )


def test_mixreplays_trainer_has_torchrls_signature():
    import inspect

    from torchrl.trainers.algorithms import offline_to_online as reference

    from mixreplay.torchrl import OfflineToOnlineTrainer

    assert inspect.signature(OfflineToOnlineTrainer) == inspect.signature(
        reference.OfflineToOnlineTrainer
    )


def hook_layout(trainer):
    """What a trainer registered: op names per stage, and its modules."""
    stages = {
        name: [type(getattr(op[0], "__self__", op[0])).__name__ for op in ops]
        for name, ops in vars(trainer).items()
        if name.endswith("_ops") and isinstance(ops, list)
    }
    return stages, sorted(trainer._modules)


@pytest.mark.filterwarnings(SAC_PROTOTYPE)
@pytest.mark.parametrize("anneal_frames", [None, 0])
def test_mixreplays_trainer_registers_what_torchrls_does(anneal_frames):
    """The same stages, hooks and modules as TorchRL's trainer around TorchRL's buffer."""
    from torchrl.trainers.algorithms import offline_to_online as reference

    ours = make_trainer(mixed_buffer(), anneal_frames=anneal_frames)
    theirs = make_trainer(
        torchrl_data.OfflineToOnlineReplayBuffer(
            torchrl_offline(), online_capacity=100, batch_size=8
        ),
        anneal_frames=anneal_frames,
    )
    assert type(theirs).__mro__[1] is reference.OfflineToOnlineTrainer  # mixreplay's, subclassed
    assert hook_layout(ours) == hook_layout(theirs)
    assert ("offline_to_online_anneal" in ours._modules) == (anneal_frames is None)


@pytest.mark.filterwarnings(SAC_PROTOTYPE)
@pytest.mark.parametrize("side", ["torchrl buffer", "torchrl offline in mixreplay buffer"])
def test_mixreplays_trainer_trains_with_torchrl_objects(side):
    from tests.torchrl.conftest import pendulum_rows

    offline = torchrl_data.ReplayBuffer(storage=torchrl_data.LazyTensorStorage(100))
    offline.extend(pendulum_rows(100))
    if side == "torchrl buffer":
        rb = torchrl_data.OfflineToOnlineReplayBuffer(offline, online_capacity=100, batch_size=16)
    else:
        rb = OfflineToOnlineReplayBuffer(offline, online_capacity=100, batch_size=16, generator=0)
    trainer = make_trainer(rb, total_frames=40, frames_per_batch=20)
    trainer.train()
    assert trainer.collected_frames == 40 and len(rb.online_buffer) == 40
    assert rb.offline_fraction == 0.0

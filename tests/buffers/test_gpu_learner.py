"""Ready for a GPU learner: where batches land (``batch_device``) and where indices are drawn.

The tests that need a GPU (indices drawn by a generator on the storage's device, one
host-to-device copy per batch, no host synchronisation in the steady state) run wherever
CUDA is present; the rest check, on the CPU, that the new paths change nothing a host-only
buffer draws or saves.
"""

from __future__ import annotations

import logging

import pytest
import torch
from tensordict import TensorDict, tensorclass

from mixreplay import (
    CheckpointError,
    LazyTensorStorage,
    MixtureReplayBuffer,
    OfflineToOnlineReplayBuffer,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
)
from mixreplay.buffers.base import device_seed
from tests.helpers import mixed_rows as rows

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device")
#: every device batches can land on here (the GPU ones run where CUDA is present)
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])
B = 32


def same(a: TensorDict, b: TensorDict) -> None:
    """Equal keys, dtypes and values (compared on the host)."""
    la = {k: v for k, v in a.items(include_nested=True, leaves_only=True)}
    lb = {k: v for k, v in b.items(include_nested=True, leaves_only=True)}
    assert la.keys() == lb.keys()
    for k in la:
        assert la[k].dtype == lb[k].dtype, k
        assert torch.equal(la[k].cpu(), lb[k].cpu()), k


def replay(seed: int = 0, device: str = "cpu", **kw) -> ReplayBuffer:
    rb = ReplayBuffer(storage=LazyTensorStorage(200, device=device), generator=seed, **kw)
    rb.extend(rows(150))
    return rb


def offline_to_online(**kw) -> OfflineToOnlineReplayBuffer:
    off = ReplayBuffer(storage=LazyTensorStorage(300))
    off.extend(rows(300, seed=1))
    rb = OfflineToOnlineReplayBuffer(
        off, online_capacity=200, offline_fraction=0.5, generator=0, **kw
    )
    rb.extend(rows(100, seed=2))
    return rb


def mixture(**kw) -> MixtureReplayBuffer:
    a, b = (
        ReplayBuffer(storage=LazyTensorStorage(100)),
        ReplayBuffer(storage=LazyTensorStorage(100)),
    )
    a.extend(rows(100, seed=3))
    b.extend(rows(60, seed=4))
    return MixtureReplayBuffer({"a": a, "b": b}, {"a": 0.7, "b": 0.3}, generator=5, **kw)


# -- batch_device: where batches land ------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sampler", [RandomSampler, SamplerWithoutReplacement])
def test_replay_buffer_batches_on_batch_device_are_the_batches_drawn_without_it(device, sampler):
    plain, landed = replay(sampler=sampler()), replay(sampler=sampler(), batch_device=device)
    for _ in range(5):
        want, info = plain.sample(B, return_info=True)
        got, got_info = landed.sample(B, return_info=True)
        assert got.device == torch.device(device) or got.device.type == device
        assert all(v.device.type == device for v in got.values(True, True))
        same(got, want)
        assert torch.equal(got_info["index"].cpu(), info["index"])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("build", [offline_to_online, mixture])
def test_mixing_batches_on_batch_device_are_the_batches_drawn_without_it(device, build):
    plain, landed = build(source_key="source"), build(source_key="source", batch_device=device)
    for _ in range(5):
        want, info = plain.sample(B, return_info=True)
        got, got_info = landed.sample(B, return_info=True)
        assert all(v.device.type == device for v in got.values(True, True))
        same(got, want)
        same(got_info, info)


@pytest.mark.parametrize("device", DEVICES)
def test_a_transformed_source_lands_on_batch_device_too(device):
    """A source with its own transform takes the generic path (no packed gather): the whole
    batch is moved at the end, with the same rows."""

    def scale(td):
        return td.set("observation", td["observation"] * 2)

    plain, landed = offline_to_online(), offline_to_online(batch_device=device)
    for rb in (plain, landed):
        rb.offline_buffer.append_transform(scale)
    got, want = landed.sample(B), plain.sample(B)
    assert all(v.device.type == device for v in got.values(True, True))
    same(got, want)


def test_batch_device_none_and_cpu_mean_batches_where_the_rows_are():
    assert replay().batch_device is None
    assert replay(batch_device="cpu").batch_device == torch.device("cpu")
    assert offline_to_online(batch_device=torch.device("cpu")).batch_device == torch.device("cpu")


@pytest.mark.skipif(CUDA, reason="checks the refusal on a machine without CUDA")
def test_batch_device_without_that_device_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"batch_device='cuda': no such cuda device is available"):
        ReplayBuffer(storage=LazyTensorStorage(10), batch_device="cuda")
    with pytest.raises(ValueError, match=r"batch_device='cuda': no such cuda device"):
        offline_to_online(batch_device="cuda")


def test_batch_device_that_is_no_device_is_refused():
    with pytest.raises(ValueError, match=r"batch_device='cuda:99': no such cuda device"):
        ReplayBuffer(storage=LazyTensorStorage(10), batch_device="cuda:99")
    with pytest.raises(ValueError, match=r"batch_device='gpu' is not a device name"):
        ReplayBuffer(storage=LazyTensorStorage(10), batch_device="gpu")
    with pytest.raises(TypeError, match=r"batch_device must be a device .* got int 3"):
        mixture(batch_device=3)


def test_gather_to_another_device_is_one_packed_staging_buffer_and_one_copy():
    """The staging path of ``gather_to`` on a machine without a GPU: to the ``meta`` device
    (shapes and dtypes only) every leaf arrives with its shape and dtype, split out of one
    packed buffer; to the storage's own device it is the ordinary gather."""
    st = LazyTensorStorage(50)
    st.extend(rows(50))
    index = torch.tensor([3, 1, 4, 1, 5])
    same(st.gather_to(index, torch.device("cpu")), st.gather(index))
    meta = st.gather_to(index, torch.device("meta"))
    want = st.gather(index)
    for key, value in want.items(True, True):
        got = meta.get(key)
        assert got.device.type == "meta" and got.dtype == value.dtype and got.shape == value.shape


def test_transforms_run_on_batch_device():
    seen = []

    def record(td):
        seen.append(td["observation"].device)
        return td

    rb = replay(batch_device=DEVICES[-1], transform=record)
    rb.sample(B)
    assert seen == [torch.device(DEVICES[-1], 0) if DEVICES[-1] == "cuda" else torch.device("cpu")]


# -- generators: indices drawn where the rows are ------------------------------------------


def test_host_only_buffers_save_what_they_always_saved():
    """No ``device_generators`` entry unless a generator on a device drew: host checkpoints
    (and tests/fixtures) keep their exact layout."""
    for rb in (replay(), offline_to_online(), mixture()):
        rb.sample(B)
        state = rb.state_dict()
        assert "device_generators" not in state
        assert rb._generator_for(torch.device("cpu")) is rb.generator


def test_device_seed_is_a_function_of_the_state_and_the_device():
    g = torch.Generator().manual_seed(7)
    before = g.get_state()
    s0 = device_seed(g, torch.device("cuda", 0))
    assert torch.equal(g.get_state(), before)  # reading the state draws nothing
    assert s0 == device_seed(torch.Generator().manual_seed(7), torch.device("cuda", 0))
    assert s0 != device_seed(g, torch.device("cuda", 1))
    assert s0 != device_seed(torch.Generator().manual_seed(8), torch.device("cuda", 0))
    assert 0 <= s0 < 2**63


@pytest.mark.parametrize(
    ("saved", "match"),
    [
        ([1, 2], r"device_generators must be a dict of device name to generator state, got list"),
        ({"gpu:0": {}}, r"device_generators: 'gpu:0' is not a device name"),
        ({"cpu": {}}, r"'cpu' is the buffer's own generator, saved as '_rng'"),
    ],
)
@pytest.mark.parametrize("build", [replay, offline_to_online])
def test_corrupt_device_generators_are_refused_and_change_nothing(build, saved, match):
    rb = build()
    state = rb.state_dict()
    rb.sample(B)
    before = rb.generator.get_state()
    with pytest.raises(CheckpointError, match=match):
        rb.load_state_dict({**state, "device_generators": saved})
    assert torch.equal(rb.generator.get_state(), before)


@pytest.mark.skipif(CUDA, reason="checks a machine without CUDA")
def test_a_checkpoint_with_a_gpu_generator_loads_on_a_host_only_machine(caplog):
    """A GPU run's checkpoint holds its device generator; here no storage can be on that
    device, so it is skipped (logged) and the host draws are exactly the saved buffer's."""
    rb = replay()
    state = rb.state_dict()
    ref = replay()
    ref.load_state_dict(state)
    gpu = {"cuda:0": {"device": "cuda:0", "state": torch.zeros(16, dtype=torch.uint8)}}
    with caplog.at_level(logging.INFO, logger="mixreplay.buffers.base"):
        rb.load_state_dict({**state, "device_generators": gpu})
    assert "the saved generator on cuda:0 is not restored" in caplog.text
    same(rb.sample(B), ref.sample(B))


def test_prefetch_rewinds_every_generator():
    """Discarded prefetched batches rewind the generators: the sequence is the plain one."""
    plain = replay(batch_size=B)
    with replay(batch_size=B, prefetch=2) as ahead:
        for _ in range(3):
            same(ahead.sample(), plain.sample())
        ahead.state_dict()  # discards the queued batches and rewinds
        for _ in range(3):
            same(ahead.sample(), plain.sample())


# -- on a GPU ------------------------------------------------------------------------------


@needs_cuda
def test_device_storage_draws_indices_on_its_device():
    rb = replay(device="cuda")
    gen = rb._generator_for(rb.storage.device)
    assert gen.device.type == "cuda" and gen is not rb.generator
    _, info = rb.sample(B, return_info=True)
    assert info["index"].device.type == "cuda"
    again = replay(device="cuda")
    for _ in range(3):  # seeded: the same batches
        same(rb.sample(B), again.sample(B))
    assert rb.generator.device.type == "cpu"


@needs_cuda
@pytest.mark.parametrize("sampler", [RandomSampler, SamplerWithoutReplacement])
def test_device_generators_round_trip_through_checkpoints(sampler, tmp_path):
    rb = replay(device="cuda", sampler=sampler())
    rb.sample(B)
    state = rb.state_dict()
    assert list(state["device_generators"]) == ["cuda:0"]
    rb.dumps(tmp_path / "ckpt")
    copy, loaded = (
        replay(device="cuda", sampler=sampler()),
        replay(device="cuda", sampler=sampler()),
    )
    copy.load_state_dict(state)
    loaded.loads(tmp_path / "ckpt")
    for _ in range(4):
        want = rb.sample(B)
        same(copy.sample(B), want)
        same(loaded.sample(B), want)


@needs_cuda
def test_a_host_only_checkpoint_seeds_the_device_generator_as_the_saving_buffer_did():
    """A state written before any draw on the device (or by an earlier version) has no
    device generator: the restored buffer seeds it from the restored host generator, as
    the buffer that wrote the state did at its first draw there."""
    rb = replay(device="cuda")
    state = rb.state_dict()
    assert "device_generators" not in state
    restored = replay(seed=123, device="cuda")
    restored.sample(B)  # its own device generator, replaced by the load
    restored.load_state_dict(state)
    for _ in range(3):
        same(restored.sample(B), rb.sample(B))


def _host_and_cuda_mixer(off: ReplayBuffer, generator: int) -> OfflineToOnlineReplayBuffer:
    """Host offline rows, 100 online rows in a CUDA ring."""
    rb = OfflineToOnlineReplayBuffer(
        off,
        online_storage=LazyTensorStorage(200, device="cuda"),
        offline_fraction=0.5,
        generator=generator,
    )
    rb.extend(rows(100, seed=2))
    return rb


@needs_cuda
def test_mixing_draws_the_device_source_on_its_device():
    off = ReplayBuffer(storage=LazyTensorStorage(300))
    off.extend(rows(300, seed=1))
    rb = _host_and_cuda_mixer(off, generator=0)
    rb.sample(B)
    state = rb.state_dict()
    assert list(state["device_generators"]) == ["cuda:0"]
    twin = _host_and_cuda_mixer(off, generator=9)
    twin.load_state_dict(state)
    for _ in range(3):
        same(twin.sample(B), rb.sample(B))


def _h2d_copies(fn) -> int:
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return len([e for e in prof.events() if "HtoD" in e.name])


@needs_cuda
def test_host_rows_bound_for_the_gpu_are_one_copy_per_batch():
    rb = replay(batch_device="cuda")
    rb.sample(B)
    assert _h2d_copies(lambda: rb.sample(B)) <= 1
    mixed = offline_to_online(batch_device="cuda")
    mixed.sample(B)
    assert _h2d_copies(lambda: mixed.sample(B)) <= 2  # one per host source


@needs_cuda
@pytest.mark.parametrize(
    "build",
    [
        lambda: replay(batch_device="cuda"),
        lambda: replay(device="cuda"),
        lambda: offline_to_online(batch_device="cuda"),
        lambda: offline_to_online(batch_device="cuda", source_key="source"),
    ],
)
def test_steady_state_sampling_never_waits_for_the_gpu(build):
    rb = build()
    rb.sample(B)  # first batch: layouts compiled, generators made
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            rb.sample(B)
    finally:
        torch.cuda.set_sync_debug_mode("default")


# -- every data type lands on batch_device (with prefetching and pinning where testable) -------


@tensorclass
class Step:
    observation: torch.Tensor
    reward: torch.Tensor


def _data(kind: str, n: int):
    """``n`` rows of a data type a ReplayBuffer takes, and a function listing a batch's leaves."""
    x = torch.arange(n, dtype=torch.float32).unsqueeze(-1)
    if kind == "tensordict":
        return TensorDict({"obs": x.expand(n, 3).clone(), "next": {"r": x.clone()}}, [n])
    if kind == "tensordict-2d":
        return TensorDict({"obs": x.unsqueeze(1).expand(n, 2, 3).clone()}, [n, 2])
    if kind == "tensorclass":
        return Step(observation=x.expand(n, 3).clone(), reward=x.clone(), batch_size=[n])
    if kind == "tensor":
        return x.expand(n, 4).clone()
    if kind == "pytree":
        return {"obs": x.expand(n, 3).clone(), "pair": (x.clone(), torch.arange(n))}
    return [x[i].expand(3).clone() for i in range(n)]  # a list: one row per item


def _leaves(batch) -> list[torch.Tensor]:
    if isinstance(batch, TensorDict):
        return list(batch.values(True, True))
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, Step):
        return [batch.observation, batch.reward]
    return [v for v in torch.utils._pytree.tree_leaves(batch) if isinstance(v, torch.Tensor)]


KINDS = ["tensordict", "tensordict-2d", "tensorclass", "tensor", "pytree", "list"]
PINS = [False] + ([True] if CUDA else [])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("device", [None, *DEVICES])
@pytest.mark.parametrize("prefetch", [None, 2])
@pytest.mark.parametrize("pin", PINS)
def test_every_data_type_lands_on_batch_device(kind, device, prefetch, pin):
    """``batch_device`` (and ``pin_memory``, ``prefetch``) with every data type a ReplayBuffer
    gives back: the same rows as a plain buffer's, of the same type, where asked (pytrees used
    to raise ``'dict' object has no attribute 'device'`` from every sample)."""
    if pin and device not in (None, "cpu"):
        pytest.skip("pinned memory is host memory")
    plain = ReplayBuffer(storage=LazyTensorStorage(50), batch_size=8, generator=3)
    landed = ReplayBuffer(
        storage=LazyTensorStorage(50),
        batch_size=8,
        generator=3,
        batch_device=device,
        prefetch=prefetch,
        pin_memory=pin,
    )
    plain.extend(_data(kind, 20))
    landed.extend(_data(kind, 20))
    try:
        for _ in range(3):
            want, got = plain.sample(), landed.sample()
            assert type(got) is type(want)
            leaves = _leaves(got)
            assert len(leaves) == len(_leaves(want)) > 0
            for a, b in zip(leaves, _leaves(want)):
                assert a.device.type == (device or "cpu")
                assert torch.equal(a.cpu(), b)
                assert a.is_pinned() == pin
    finally:
        landed.close()

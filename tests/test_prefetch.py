"""prefetch=N: batches drawn ahead by one thread, equal to the synchronous sequence, rewound on checkpoints."""

import gc
import logging
import threading

import pytest
import torch
from tensordict import TensorDict

from mixreplay import (
    LazyTensorStorage,
    MixtureReplayBuffer,
    OfflineToOnlineReplayBuffer,
    PrioritizedSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
)
from mixreplay.errors import EmptyBufferError


def rows(n, start=0):
    x = torch.arange(start, start + n)
    return TensorDict({"x": x, "obs": x.float().unsqueeze(-1).expand(n, 3).clone()}, [n])


def prefetch_threads():
    return [t for t in threading.enumerate() if t.name.startswith("mixreplay-prefetch")]


@pytest.fixture(autouse=True)
def no_thread_left():
    yield
    gc.collect()
    for t in prefetch_threads():
        t.join(timeout=5)
    assert prefetch_threads() == []


def make_rb(prefetch, sampler=None, n=50):
    rb = ReplayBuffer(
        storage=LazyTensorStorage(1000),
        batch_size=8,
        generator=123,
        prefetch=prefetch,
        sampler=sampler,
    )
    rb.extend(rows(n))
    return rb


def xs(batches):
    return [b["x"].tolist() for b in batches]


@pytest.mark.parametrize("depth", [1, 2, 5])
@pytest.mark.parametrize("kind", ["random", "without", "prioritized"])
def test_prefetched_batches_equal_the_synchronous_sequence(depth, kind):
    def sampler():
        return {
            "random": None,
            "without": SamplerWithoutReplacement(),
            "prioritized": PrioritizedSampler(),
        }[kind]

    with make_rb(None, sampler()) as plain, make_rb(depth, sampler()) as ahead:
        assert xs(plain.sample() for _ in range(20)) == xs(ahead.sample() for _ in range(20))
        assert ahead._prefetcher.ready == depth


def test_same_seed_same_batches_with_interleaved_writes():
    # Writes wait for the draws already asked for, so thread timing never shows in a batch.
    def run():
        with make_rb(2) as rb:
            out = []
            for i in range(30):
                out.append(rb.sample()["x"].tolist())
                rb.extend(rows(3, 1000 + 3 * i))
            return out

    first, second = run(), run()
    assert first == second
    assert any(v >= 1000 for b in first for v in b)  # new rows do reach later batches


def test_other_batch_size_rewinds_the_queue():
    with make_rb(None) as plain, make_rb(3) as ahead:
        seq = [8, 8, 5, 8, 3, 8, 8]
        assert xs(plain.sample(n) for n in seq) == xs(ahead.sample(n) for n in seq)


def test_iter_without_replacement_is_one_epoch_even_when_prefetching():
    for depth in (None, 2):
        with make_rb(depth, SamplerWithoutReplacement(), n=20) as rb:
            epoch = xs(rb)
            assert [len(b) for b in epoch] == [8, 8, 4]
            assert sorted(sum(epoch, [])) == list(range(20))
            assert sorted(sum(xs(rb), [])) == list(range(20))  # the next epoch


class Unlucky(Exception):
    """What the transform below raises on the batches it refuses."""


def refuse_some(batch):
    """A transform that raises on about 1 batch in 10, by the rows it holds (data-dependent,
    so a draw that is retried fails again)."""
    if int(batch["x"].sum()) % 10 == 3:
        raise Unlucky(f"refused the batch of x-sum {int(batch['x'].sum())}")
    return batch


def make_kind(kind, prefetch, transform=None):
    """A buffer of ``kind`` whose batches go through ``transform``; rows with distinct ``x``."""
    if kind == "replay":
        rb = ReplayBuffer(
            storage=LazyTensorStorage(200),
            batch_size=8,
            generator=5,
            prefetch=prefetch,
            transform=transform,
        )
        rb.extend(rows(60))
        return rb
    offline = ReplayBuffer(storage=LazyTensorStorage(100))
    offline.extend(rows(40))
    if kind == "offline-to-online":
        rb = OfflineToOnlineReplayBuffer(
            offline,
            online_capacity=100,
            batch_size=8,
            generator=5,
            prefetch=prefetch,
            transform=transform,
        )
        rb.extend(rows(30, 500))
        return rb
    rb = MixtureReplayBuffer(
        {"a": offline, "b": LazyTensorStorage(100)},
        {"a": 0.3, "b": 0.7},
        batch_size=8,
        generator=5,
        prefetch=prefetch,
        transform=transform,
    )
    rb.extend(rows(30, 500), source="b")
    return rb


def outcomes(rb, n):
    """What ``n`` calls of ``sample()`` gave: each batch's rows, or the error's message."""
    out = []
    for _ in range(n):
        try:
            out.append(rb.sample()["x"].tolist())
        except Unlucky as err:
            out.append(str(err))
    return out


@pytest.mark.parametrize("kind", ["replay", "offline-to-online", "mixture"])
@pytest.mark.parametrize("depth", [1, 3])
def test_a_failed_draw_is_handed_out_in_its_place_as_without_prefetching(kind, depth):
    """Prefetching is invisible: the same batches and the same errors, in the same order.

    A draw whose transform raises is raised by the ``sample()`` it belongs to, and the
    next ``sample()`` draws the next batch, as a buffer without prefetching does (it used
    to retry the failed draw, which a data-dependent failure fails again, for ever)."""
    plain = make_kind(kind, None, refuse_some)
    ahead = make_kind(kind, depth, refuse_some)
    try:
        expected = outcomes(plain, 120)
        assert 3 <= sum(isinstance(o, str) for o in expected) <= 30  # the test sees failures
        assert outcomes(ahead, 120) == expected
    finally:
        ahead.close()


def test_empty_buffer_error_surfaces():
    with ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2, prefetch=2) as rb:
        with pytest.raises(EmptyBufferError, match="extend the buffer with rows first"):
            rb.sample()
        rb.extend(rows(4))
        assert rb.sample().batch_size == torch.Size([2])


def test_close_stops_the_thread_and_keeps_the_sequence():
    plain, ahead = make_rb(None), make_rb(2)
    a = xs(ahead.sample() for _ in range(3))
    assert prefetch_threads()
    ahead.close()
    a += xs(ahead.sample() for _ in range(3))  # drawn synchronously, rewound first
    assert a == xs(plain.sample() for _ in range(6))
    assert ahead.prefetch == 0


def test_dropped_buffer_stops_its_thread():
    rb = make_rb(3)
    rb.sample()
    assert prefetch_threads()
    del rb  # the autouse fixture checks that no thread is left


@pytest.mark.parametrize("how", ["dumps", "state_dict"])
def test_checkpoint_discards_and_rewinds(tmp_path, how):
    plain, ahead = make_rb(None), make_rb(3)
    assert xs(plain.sample() for _ in range(4)) == xs(ahead.sample() for _ in range(4))
    twin = make_rb(None)
    if how == "dumps":
        ahead.dumps(tmp_path / "ckpt")
        twin.loads(tmp_path / "ckpt")
    else:
        twin.load_state_dict(ahead.state_dict())
    after_live = xs(ahead.sample() for _ in range(5))
    # The restored buffer, the live one and one that never prefetched agree from here on.
    assert xs(twin.sample() for _ in range(5)) == after_live == xs(plain.sample() for _ in range(5))
    ahead.close()


def test_loads_into_a_prefetching_buffer(tmp_path):
    src = make_rb(None)
    src.sample()
    src.dumps(tmp_path / "ckpt")
    expected = xs(src.sample() for _ in range(4))
    with make_rb(2) as rb:
        rb.sample()  # fill its queue with batches of the state about to be replaced
        rb.loads(tmp_path / "ckpt")
        assert xs(rb.sample() for _ in range(4)) == expected


def test_prefetch_needs_a_batch_size_and_an_int():
    with pytest.raises(ValueError, match="prefetch=2 needs batch_size="):
        ReplayBuffer(storage=LazyTensorStorage(10), prefetch=2)
    with pytest.raises(TypeError, match="prefetch must be an int"):
        ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2, prefetch=1.5)
    with pytest.raises(
        ValueError, match="prefetch must be an int >= 0 \\(batches kept ready\\) or None, got -1"
    ):
        ReplayBuffer(storage=LazyTensorStorage(10), batch_size=2, prefetch=-1)
    with pytest.raises(ValueError, match="prefetch=2 needs batch_size="):
        OfflineToOnlineReplayBuffer(make_rb(None), online_capacity=10, prefetch=2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
def test_pin_memory_without_cuda_is_refused():
    with pytest.raises(ValueError, match="pin_memory=True needs a CUDA device"):
        ReplayBuffer(storage=LazyTensorStorage(10), pin_memory=True)
    with pytest.raises(ValueError, match="pin_memory=True needs a CUDA device"):
        OfflineToOnlineReplayBuffer(make_rb(None), online_capacity=10, pin_memory=True)
    with pytest.raises(TypeError, match="pin_memory must be True or False, got str"):
        ReplayBuffer(storage=LazyTensorStorage(10), pin_memory="yes")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_pin_memory_returns_pinned_batches():
    with ReplayBuffer(
        storage=LazyTensorStorage(100), batch_size=4, pin_memory=True, prefetch=2
    ) as rb:
        rb.extend(rows(10))
        batch = rb.sample()
        assert all(v.is_pinned() for v in batch.values(True, True))


# -- mixing buffers ------------------------------------------------------------------------------


def make_o2o(prefetch, fraction=0.5):
    offline = ReplayBuffer(storage=LazyTensorStorage(100))
    offline.extend(rows(40))
    rb = OfflineToOnlineReplayBuffer(
        offline,
        online_capacity=100,
        offline_fraction=fraction,
        batch_size=10,
        generator=7,
        prefetch=prefetch,
        source_key="src",
    )
    rb.extend(rows(20, 500))
    return rb


def test_mixing_prefetch_equals_sync_and_is_deterministic_with_writes():
    plain, ahead = make_o2o(None), make_o2o(2)
    seq_p, seq_a = [], []
    for _ in range(15):
        seq_p.append(plain.sample(return_info=True))
        seq_a.append(ahead.sample(return_info=True))
    for (bp, ip), (ba, ia) in zip(seq_p, seq_a):
        assert torch.equal(bp["x"], ba["x"]) and torch.equal(ip["index"], ia["index"])
        assert torch.equal(ip["source"], ia["source"])
    ahead.close()

    def run():
        with make_o2o(3) as rb:
            out = []
            for i in range(12):
                out.append(rb.sample()["x"].tolist())
                rb.extend(rows(2, 900 + 2 * i))
            return out

    assert run() == run()


def test_anneal_that_changes_the_split_redraws_the_queue():
    plain, ahead = make_o2o(None, 0.5), make_o2o(3, 0.5)
    for step in range(0, 100, 10):
        plain.anneal(step, 100)
        ahead.anneal(step, 100)
        bp, ba = plain.sample(), ahead.sample()
        assert torch.equal(bp["x"], ba["x"])
        assert ba["src"].tolist().count(0) == round(ahead.offline_fraction * 10)
    ahead.close()


def test_mixture_prefetch_and_checkpoint(tmp_path):
    def make(prefetch):
        mix = MixtureReplayBuffer(
            {"a": LazyTensorStorage(50), "b": LazyTensorStorage(50)},
            {"a": 0.3, "b": 0.7},
            batch_size=10,
            generator=3,
            prefetch=prefetch,
        )
        mix.extend(rows(20), source="a")
        mix.extend(rows(20, 100), source="b")
        return mix

    plain, ahead, twin = make(None), make(2), make(None)
    assert xs(plain.sample() for _ in range(3)) == xs(ahead.sample() for _ in range(3))
    ahead.dumps(tmp_path / "mix")
    twin.loads(tmp_path / "mix")
    assert (
        xs(twin.sample() for _ in range(4))
        == xs(ahead.sample() for _ in range(4))
        == xs(plain.sample() for _ in range(4))
    )
    assert ahead.write_count == 40
    ahead.close()


@pytest.mark.parametrize("kind", ["offline-to-online", "mixture"])
def test_a_new_step_redraws_what_it_changes_as_without_prefetching(kind):
    """``set_step`` (a schedule moving every step) while prefetching: every batch splits as
    the plain buffer's. A mixture carries remainders from batch to batch, so batches queued
    under the old weights split differently from the first changed step on."""
    from mixreplay.schedules import Linear

    def make(prefetch):
        offline = ReplayBuffer(storage=LazyTensorStorage(100))
        offline.extend(rows(40))
        if kind == "mixture":
            rb = MixtureReplayBuffer(
                {"a": offline, "b": LazyTensorStorage(100)},
                {"a": Linear(0.9, 0.1, 60), "b": Linear(0.1, 0.9, 60)},
                batch_size=7,
                generator=2,
                prefetch=prefetch,
                source_key="src",
            )
            rb.extend(rows(30, 500), source="b")
        else:
            rb = OfflineToOnlineReplayBuffer(
                offline,
                online_capacity=100,
                batch_size=7,
                generator=2,
                prefetch=prefetch,
                offline_fraction=Linear(0.9, 0.1, 60),
                source_key="src",
            )
            rb.extend(rows(30, 500))
        return rb

    plain, ahead = make(None), make(3)
    try:
        for step in range(60):
            plain.set_step(step)
            ahead.set_step(step)
            bp, ba = plain.sample(), ahead.sample()
            assert ba["src"].tolist() == bp["src"].tolist(), step
            assert ba["x"].tolist() == bp["x"].tolist(), step
    finally:
        ahead.close()


# -- properties ----------------------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_op = st.one_of(
    st.just(("sample", None)),
    st.tuples(st.just("sample"), st.integers(1, 12)),
    st.just(("state_dict", None)),
    st.just(("iter", None)),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    depth=st.integers(1, 4),
    ops=st.lists(_op, min_size=1, max_size=12),
    kind=st.sampled_from(["random", "without"]),
)
def test_any_sequence_of_reads_matches_the_synchronous_buffer(depth, ops, kind):
    def make(prefetch):
        sampler = SamplerWithoutReplacement() if kind == "without" else None
        return make_rb(prefetch, sampler, n=30)

    plain, ahead = make(None), make(depth)
    try:
        for op, arg in ops:
            if op == "sample":
                assert plain.sample(arg)["x"].tolist() == ahead.sample(arg)["x"].tolist()
            elif op == "state_dict":
                sp, sa = plain.state_dict(), ahead.state_dict()
                assert torch.equal(sp["_rng"]["state"], sa["_rng"]["state"])
            else:
                # the first three batches of an iteration (fewer when an epoch ends first)
                assert [b["x"].tolist() for b, _ in zip(plain, range(3))] == [
                    b["x"].tolist() for b, _ in zip(ahead, range(3))
                ]
    finally:
        ahead.close()


def test_pickled_prefetching_buffer_continues_the_same_sequence():
    import pickle

    with make_rb(2) as rb:
        rb.sample()
        copy = pickle.loads(pickle.dumps(rb))
        try:
            assert copy.prefetch == 2
            assert xs(copy.sample() for _ in range(5)) == xs(rb.sample() for _ in range(5))
        finally:
            copy.close()


@pytest.mark.parametrize("kind", ["replay", "offline-to-online", "mixture"])
def test_alpha_and_beta_changed_while_prefetching_apply_from_the_next_batch(kind):
    """Annealing beta every step (and moving alpha) while batches are drawn ahead: every batch
    and its weights are the plain buffer's (they were drawn under the old settings, or not,
    depending on how far the worker had got)."""

    def make(prefetch):
        sampler = PrioritizedSampler(100, alpha=0.7, beta=0.4)
        if kind == "replay":
            rb = ReplayBuffer(
                storage=LazyTensorStorage(100),
                sampler=sampler,
                batch_size=8,
                generator=0,
                prefetch=prefetch,
            )
            rb.extend(rows(60))
            return rb, sampler
        offline = ReplayBuffer(storage=LazyTensorStorage(100))
        offline.extend(rows(40, 1000))
        if kind == "mixture":
            rb = MixtureReplayBuffer(
                {"off": offline, "on": LazyTensorStorage(100)},
                {"off": 1, "on": 1},
                samplers={"on": sampler},
                batch_size=8,
                generator=0,
                prefetch=prefetch,
            )
            rb.extend(rows(60), source="on")
        else:
            rb = OfflineToOnlineReplayBuffer(
                offline,
                online_capacity=100,
                online_sampler=sampler,
                batch_size=8,
                generator=0,
                prefetch=prefetch,
            )
            rb.extend(rows(60))
        return rb, sampler

    (plain, ps), (ahead, pa) = make(None), make(3)
    try:
        for step in range(40):
            for sampler in (ps, pa):
                sampler.beta = 0.4 + 0.6 * step / 40
                if step % 10 == 5:
                    sampler.alpha = 0.3 + step / 40
            bp, ip = plain.sample(return_info=True)
            ba, ia = ahead.sample(return_info=True)
            assert ba["x"].tolist() == bp["x"].tolist(), step
            assert torch.equal(ia["weight"], ip["weight"]), step
            idx = ip["index"] if kind == "replay" else ip
            prio = torch.arange(1, 9, dtype=torch.float32) * (1 + step % 3)
            plain.update_priority(idx, prio)
            ahead.update_priority(ia["index"] if kind == "replay" else ia, prio)
    finally:
        ahead.close()


# -- the queue as TorchRL names it: rb._prefetch_queue, rb._futures_lock, "_prefetch_state" --


def test_the_queue_view_holds_what_the_next_samples_hand_out():
    plain = make_rb(None)
    with make_rb(3) as rb:
        assert rb._prefetch_queue == ()  # nothing asked for before the first sample
        first = rb.sample()
        queued = rb._prefetch_queue
        assert len(queued) == 3  # the depth, between two samples
        looked = [q.result() for q in queued]  # (batch, info), oldest first
        assert all(q.done() for q in queued) and rb._prefetch_queue == queued  # looking: no change
        handed = [rb.sample(return_info=True) for _ in range(3)]
        for (batch, info), (out, out_info) in zip(looked, handed):
            assert batch is out and torch.equal(info["index"], out_info["index"])
        # and the sequence is the one of a buffer that never prefetched
        assert xs([first] + [b for b, _ in handed]) == xs(plain.sample() for _ in range(4))
    assert rb._prefetch_queue == ()  # closed: nothing queued
    assert plain._prefetch_queue == ()
    with pytest.raises(AttributeError):  # no queue, no lock
        _ = plain._futures_lock


class GatedCollate:
    """A collate_fn whose calls after the first wait for ``release`` (a draw held in flight)."""

    def __init__(self):
        self.calls = 0
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, batch):
        self.calls += 1
        if self.calls > 1:
            self.started.set()
            assert self.release.wait(timeout=10), "never released"
        return batch


def gated_rb(seed=123):
    collate = GatedCollate()
    rb = ReplayBuffer(
        storage=LazyTensorStorage(1000),
        batch_size=8,
        generator=seed,
        prefetch=2,
        collate_fn=collate,
    )
    rb.extend(rows(30))
    rb.sample()  # the first draw; the next one waits in the worker
    assert collate.started.wait(timeout=10)
    return rb, collate


def release_when_held(rb, collate, seen):
    """Release the draw in flight once ``rb._futures_lock`` is held (watchdog: 10 s)."""
    lock = rb._futures_lock

    def held_elsewhere() -> bool:  # an RLock: another thread's hold makes this acquire fail
        if lock.acquire(blocking=False):
            lock.release()
            return False
        return True

    try:
        seen.append(any(held_elsewhere() or collate.release.wait(0.001) for _ in range(10_000)))
    finally:
        collate.release.set()


@pytest.mark.parametrize("call", ["state_dict", "load_state_dict", "dumps"])
def test_a_checkpoint_or_load_waits_for_draws_in_flight_holding_the_futures_lock(tmp_path, call):
    """TorchRL's contract, kept: while a state is read or replaced, the draws in flight are
    waited for under the queue's lock, so none is asked for or handed out meanwhile."""
    saved = make_rb(None)
    saved.sample()
    state = saved.state_dict()
    rb, collate = gated_rb()
    seen: list[bool] = []
    watcher = threading.Thread(target=release_when_held, args=(rb, collate, seen), daemon=True)
    watcher.start()
    try:
        if call == "state_dict":
            rb.state_dict()
        elif call == "dumps":
            rb.dumps(tmp_path / "ckpt")
        else:
            rb.load_state_dict(state)
        watcher.join(timeout=20)
        assert seen == [True], "the lock was not held while the draw in flight was waited for"
        if call == "load_state_dict":  # and the load is exact
            assert xs(rb.sample() for _ in range(4)) == xs(saved.sample() for _ in range(4))
    finally:
        collate.release.set()
        rb.close()


@pytest.mark.parametrize("depth", [None, 1, 2, 5])
def test_prefetch_state_records_the_depth_and_loads_into_any(depth, caplog):
    caplog.set_level(logging.INFO, logger="mixreplay")
    with make_rb(2) as src:
        src.sample()
        state = src.state_dict()
        assert state["_prefetch_state"] == {"capacity": 2}  # no batches: they were undone
        expected = xs(src.sample() for _ in range(5))
    older = {k: v for k, v in state.items() if k != "_prefetch_state"}  # a state saved before it
    for s in (state, older):
        with make_rb(depth) as rb:
            rb.load_state_dict(s)
            assert xs(rb.sample() for _ in range(5)) == expected
    assert (f"saved with prefetch=2, loaded with prefetch={depth or 0}" in caplog.text) == (
        depth != 2
    )


@pytest.mark.parametrize("bad", [None, 1.5, -1, True, "2"])
def test_a_corrupt_prefetch_state_is_refused_changing_nothing(bad):
    from mixreplay.errors import CheckpointError

    state = make_rb(None, n=20).state_dict()
    state["_prefetch_state"] = {"capacity": bad} if bad is not None else [2]
    with make_rb(2) as rb, make_rb(2) as untouched:
        for b in (rb, untouched):
            b.sample()
        with pytest.raises(CheckpointError, match="_prefetch_state must be a dict"):
            rb.load_state_dict(state)
        assert len(rb) == 50  # the rows, the queue and the generator as they were:
        assert xs(rb.sample() for _ in range(5)) == xs(untouched.sample() for _ in range(5))


def test_a_load_draws_nothing_ahead_so_a_write_after_it_is_seen_as_by_the_saved_buffer():
    """The loaded buffer's queue stays empty until it samples: the saved buffer had undone its
    queued draws, so both draw the next batches after the write that follows."""
    with make_rb(2) as src, make_rb(2) as twin:
        src.sample()
        twin.load_state_dict(src.state_dict())
        assert twin._prefetch_queue == ()
        for rb in (src, twin):
            rb.extend(rows(50, start=1000))
        assert xs(twin.sample() for _ in range(6)) == xs(src.sample() for _ in range(6))

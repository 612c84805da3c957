"""The lock order of mixreplay.buffers.base, held under the documented threading model.

One collector thread extends while the learner samples and, every other batch, reads the
whole state (``dumps``, ``state_dict`` alone, ``state_dict(copy=False)`` inside
``state_lock()``, ``loads``), for every buffer kind, with and without prefetching. A broken
order hangs for good (a save waiting for the prefetch worker, which waits for the storage lock
the save holds), so every case runs in a child process under a watchdog: the child dumps its
threads' stacks and exits when a case outlives its time, and the parent kills it if even that
fails.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

KINDS = ["replay", "prioritized", "offline-to-online", "mixture"]
HOW = ["dumps", "state_dict", "state_lock", "loads"]

CHILD = textwrap.dedent(
    """
    import faulthandler, os, sys, tempfile, threading
    import torch
    from tensordict import TensorDict
    from mixreplay import (LazyTensorStorage, MixtureReplayBuffer, OfflineDataset,
                           OfflineToOnlineReplayBuffer, PrioritizedSampler, ReplayBuffer)

    def rows(n, start):
        x = torch.arange(start, start + n, dtype=torch.float32).unsqueeze(-1)
        return TensorDict({"x": x, "y": x.expand(n, 3).clone()}, [n])

    def make(kind, prefetch):
        common = dict(batch_size=16, generator=0, prefetch=prefetch)
        if kind in ("replay", "prioritized"):
            sampler = PrioritizedSampler(300, 0.7, 0.5) if kind == "prioritized" else None
            rb = ReplayBuffer(storage=LazyTensorStorage(300), sampler=sampler, **common)
            return rb, rb.extend
        offline = OfflineDataset.from_tensordict(rows(100, -1000))
        if kind == "offline-to-online":
            rb = OfflineToOnlineReplayBuffer(offline, online_capacity=300, **common)
            return rb, rb.extend
        rb = MixtureReplayBuffer({"off": offline, "on": LazyTensorStorage(300)},
                                 {"off": 0.5, "on": 0.5}, **common)
        return rb, lambda td: rb.extend(td, source="on")

    def run(kind, prefetch, how, where):
        rb, extend = make(kind, prefetch)
        extend(rows(40, 0))
        stop = threading.Event()
        failures = []

        def collector():
            start = 40
            try:
                while not stop.is_set():
                    extend(rows(3, start))
                    start += 3
            except BaseException as err:
                failures.append(err)

        writer = threading.Thread(target=collector, daemon=True)
        writer.start()
        path = os.path.join(where, "ck")
        rb.dumps(path)
        try:
            for i in range(40):
                rb.sample()
                if i % 2:
                    continue
                if how == "dumps":
                    rb.dumps(path)
                elif how == "state_dict":
                    rb.state_dict()
                elif how == "state_lock":
                    with rb.state_lock():
                        rb.state_dict(copy=False)
                else:
                    rb.loads(path)
        finally:
            stop.set()
            writer.join()
            rb.close()
        if failures:
            raise failures[0]

    kinds, prefetches, hows = (sys.argv[1].split(","), [int(p) for p in sys.argv[2].split(",")],
                               sys.argv[3].split(","))
    with tempfile.TemporaryDirectory(dir=sys.argv[4]) as where:
        for kind in kinds:
            for prefetch in prefetches:
                for how in hows:
                    print("case", kind, prefetch, how, flush=True)
                    # the watchdog: a case that outlives its time dumps every stack and exits
                    faulthandler.dump_traceback_later(60, exit=True)
                    run(kind, prefetch, how, where)
                    faulthandler.cancel_dump_traceback_later()
    print("all held", flush=True)
    """
)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.heavy  # a child process per buffer kind, ~8 s each
def test_reading_the_whole_state_while_a_collector_extends_never_hangs(kind, tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, kind, "0,2", ",".join(HOW), str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=600,  # the parent's watchdog, should the child's fail
            env=env,
        )
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"hung beyond the child's own watchdog; its output: {err.stdout}")
    cases = [line for line in done.stdout.splitlines() if line.startswith("case")]
    assert done.returncode == 0 and "all held" in done.stdout, (
        f"the last case started ({cases[-1] if cases else 'none'}) did not finish:\n"
        f"{done.stderr[-4000:]}"
    )
    assert len(cases) == 2 * len(HOW)


# -- a source's lock, held from outside, and close() from another thread ------------------------
# Each scenario runs in a child process (a few seconds): a broken lock order hangs the thread
# under the watchdog and also the interpreter's exit (the prefetch worker is not a daemon).

import threading  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402

from mixreplay import (  # noqa: E402
    LazyTensorStorage,
    LockOrderError,
    OfflineDataset,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
)


def _rows(n: int, start: int) -> TensorDict:
    x = torch.arange(start, start + n, dtype=torch.float32).unsqueeze(-1)
    return TensorDict({"x": x, "y": x.expand(n, 3).clone()}, [n])


def _xs(batch) -> list[float]:
    return batch["x"].reshape(-1).tolist()


def _closed(*buffers) -> None:
    """Close ``buffers`` under the watchdog too (a close waits for the prefetch worker)."""
    _watched(lambda: [b.close() for b in buffers], 30.0)


def _watched(fn, seconds: float = 60.0):
    """Run ``fn`` in a thread; fail (instead of hanging) when it has not returned in time."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - handed to the test
            out["error"] = err

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"hung for {seconds} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


def _pair(offline, prefetch):
    rb = OfflineToOnlineReplayBuffer(
        offline, online_capacity=100, batch_size=8, generator=0, prefetch=prefetch
    )
    rb.extend(_rows(20, 0))
    return rb


def scenario_a_sources_state_lock_holds_every_buffer_reading_it_still():
    """``with offline.state_lock():`` then sampling from (or saving) a prefetching buffer that
    reads it: the buffer's worker needed that lock, and the sample waited for it for ever. A
    source's whole-state read now pauses the buffers reading it; the batches are the plain
    buffer's."""
    offline = OfflineDataset.from_tensordict(_rows(100, -1000))
    plain, ahead = _pair(offline, None), _pair(offline, 2)
    expected = [_xs(plain.sample()) for _ in range(8)]

    def inside():
        got = [_xs(ahead.sample())]
        with offline.state_lock():
            got += [_xs(ahead.sample()) for _ in range(3)]
            ahead.state_dict()
        with ahead.online_buffer.state_lock():
            got += [_xs(ahead.sample()) for _ in range(4)]
        return got

    try:
        assert _watched(inside) == expected
    finally:
        _closed(ahead)


def scenario_two_buffers_sharing_a_dataset_are_saved_together(tmp_path):
    """``with rb1.state_lock(): rb2.dumps(...)``: rb1's hold of the shared dataset pauses
    rb2's worker too, so rb2's save does not wait on rb1's lock."""
    offline = OfflineDataset.from_tensordict(_rows(100, -1000))
    rb1, rb2 = _pair(offline, 2), _pair(offline, 3)
    rb1.sample(), rb2.sample()

    def save_both():
        for _ in range(5):
            with rb1.state_lock():
                rb1.dumps(tmp_path / "one")
                rb2.dumps(tmp_path / "two")
            rb1.sample(), rb2.sample()

    try:
        _watched(save_both)
    finally:
        _closed(rb1, rb2)


def scenario_a_raw_storage_lock_held_is_refused_instead_of_waited_for():
    """Holding a source storage's lock itself (not through state_lock) while the buffer's worker
    has draws waiting for it: the call is refused with a LockOrderError after a short grace,
    with nothing changed; outside the block every batch is the plain buffer's, none lost."""
    offline = ReplayBuffer(storage=LazyTensorStorage(100))
    offline.extend(_rows(100, -1000))
    plain, ahead = _pair(offline, None), _pair(offline, 2)
    for rb in (plain, ahead):
        rb.extend(_rows(5, 500))
    expected = [_xs(plain.sample()) for _ in range(12)]

    def inside():
        got = [_xs(ahead.sample())]
        ahead._prefetcher.wait()
        refused = 0
        with offline.storage.lock:
            ahead._prefetcher.refill()  # draws asked for now wait for the lock held here
            for _ in range(6):
                try:
                    got.append(_xs(ahead.sample()))
                except LockOrderError as err:
                    assert "this thread holds it" in str(err)
                    refused += 1
                    break
        got += [_xs(ahead.sample()) for _ in range(12 - len(got))]
        return got, refused

    try:
        got, refused = _watched(inside)
    finally:
        _closed(ahead)
    assert refused == 1
    assert got == expected


def scenario_a_source_restored_on_its_own_undoes_the_readers_queue():
    """TorchRL's checkpoint hook saves and restores ``rb.online_buffer`` directly, then sets
    the fraction: with prefetch the buffer served rows the restore had removed. The restore
    now pauses the buffer reading that source first; the batches are the plain buffer's."""

    def run(prefetch):
        offline = OfflineDataset.from_tensordict(_rows(50, -1000))
        rb = _pair(offline, prefetch)
        out = [_xs(rb.sample())]
        saved = rb.online_buffer.state_dict()
        fraction = rb._offline_fraction
        out.append(_xs(rb.sample()))
        rb.extend(_rows(30, 500))
        out.append(_xs(rb.sample()))
        if prefetch:
            rb._prefetcher.wait()  # the worker has drawn ahead from the rows about to go
        rb.online_buffer.load_state_dict(saved)
        rb._offline_fraction = fraction
        out += [_xs(rb.sample()) for _ in range(4)]
        held = set(rb.online_buffer[:]["x"].reshape(-1).tolist())
        rb.close()
        return out, held

    (plain, _), (ahead, held) = _watched(lambda: run(None)), _watched(lambda: run(2))
    # (the batch right after the extend was drawn before it, by design: prefetch semantics)
    assert ahead[:2] == plain[:2] and ahead[3:] == plain[3:]
    assert all(v in held for batch in ahead[3:] for v in batch if v >= 0)


def scenario_close_from_another_thread_loses_and_repeats_no_draw(depth):
    """close() while another thread samples: that thread's batches, before and after, are the
    plain buffer's sequence (no error, none lost, none drawn twice)."""
    plain = ReplayBuffer(storage=LazyTensorStorage(1000), batch_size=8, generator=0)
    plain.extend(_rows(500, 0))
    expected = [_xs(plain.sample()) for _ in range(400)]
    for trial in range(8):
        rb = ReplayBuffer(
            storage=LazyTensorStorage(1000), batch_size=8, generator=0, prefetch=depth
        )
        rb.extend(_rows(500, 0))
        got: list = []
        started = threading.Event()

        def learner(rb=rb, got=got, started=started, trial=trial):
            for i in range(400):
                got.append(_xs(rb.sample()))
                if i == 5 * trial:
                    started.set()

        t = threading.Thread(target=learner, daemon=True)
        t.start()
        started.wait(30)
        _closed(rb)
        t.join(60)
        assert not t.is_alive(), "the learner hung"
        assert got == expected[: len(got)] and len(got) == 400, trial


class _Tmp:
    """Stands for a temporary directory the child makes (its repr is replaced there)."""

    def __repr__(self) -> str:
        return "TMP"


def scenario_a_checkpoint_waiting_for_the_worker_never_hangs_a_thread_holding_its_lock(op):
    """Thread A holds the storage's lock; a learner's sample asks for a draw (the worker waits
    for A's lock); B saves or loads the state, holding the prefetch queue while it waits for
    that draw; then A samples. A used to wait for the queue for ever (and so B and the worker):
    A is refused with a LockOrderError after the grace, nothing changed, and B finishes once A
    leaves its block."""
    rb = ReplayBuffer(storage=LazyTensorStorage(64), batch_size=8, prefetch=2, generator=0)
    rb.extend(_rows(64, 0))
    saved = rb.state_dict()
    rb.sample()
    rb._prefetcher.wait()
    out: dict = {}
    holding = threading.Event()

    def a():
        with rb.storage.lock:
            holding.set()
            time.sleep(1.0)
            try:
                rb.sample()
                out["a"] = "sampled"
            except LockOrderError as err:
                out["a"] = str(err)

    def b():
        out["b"] = rb.load_state_dict(saved) if op == "load" else rb.state_dict()

    ta = threading.Thread(target=a, daemon=True)
    ta.start()
    holding.wait(10)
    _watched(rb.sample, 30.0)  # a ready batch handed out; the draw it owes waits for A's lock
    tb = threading.Thread(target=b, daemon=True)
    tb.start()
    time.sleep(0.2)
    ta.join(30)
    tb.join(30)
    assert not ta.is_alive() and not tb.is_alive(), f"hung: {out}"
    assert "this thread holds it" in out["a"], out["a"]
    assert "b" in out
    _watched(lambda: [rb.sample() for _ in range(3)], 30.0)
    _closed(rb)


def scenario_the_futures_lock_is_reentrant():
    """TorchRL's ``rb._futures_lock`` is re-entrant: calls made while holding it return."""
    rb = ReplayBuffer(storage=LazyTensorStorage(64), batch_size=8, prefetch=2, generator=0)
    rb.extend(_rows(64, 0))
    rb.sample()

    def inside():
        with rb._futures_lock:
            rb.sample()
            rb.extend(_rows(4, 100))
            rb[0] = _rows(1, -5)
            state = rb.state_dict()
            rb.load_state_dict(state)

    try:
        _watched(inside, 30.0)
    finally:
        _closed(rb)


_TMP = _Tmp()


def _in_child(scenario: str, *args: object) -> None:
    """Run ``scenario(*args)`` of this module in a child process, under a watchdog."""
    call = f"m.{scenario}({', '.join(repr(a) for a in args)})"
    code = (
        "import faulthandler, tempfile, pathlib\n"
        "faulthandler.dump_traceback_later(150, exit=True)\n"
        "import tests.test_lock_order as m\n"
        "with tempfile.TemporaryDirectory() as d:\n"
        f"    {call.replace('TMP', 'pathlib.Path(d)')}\n"
        "print('scenario held')\n"
    )
    root = pathlib.Path(__file__).resolve().parents[1]
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=200,
            cwd=root,
            env=dict(os.environ, OMP_NUM_THREADS="1"),
        )
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"{scenario} hung beyond its own watchdog: {err.stdout}")
    assert done.returncode == 0 and "scenario held" in done.stdout, done.stderr[-4000:]


def test_a_sources_state_lock_holds_every_buffer_reading_it_still():
    """``with offline.state_lock():`` then sampling from (or saving) a prefetching buffer that
    reads it: the worker needed that lock and the sample waited for ever. A source's
    whole-state read now pauses the buffers reading it; the batches are the plain buffer's."""
    _in_child("scenario_a_sources_state_lock_holds_every_buffer_reading_it_still")


def test_two_buffers_sharing_a_dataset_are_saved_together():
    """``with rb1.state_lock(): rb2.dumps(...)`` over one shared dataset."""
    _in_child("scenario_two_buffers_sharing_a_dataset_are_saved_together", _TMP)


def test_a_raw_storage_lock_held_is_refused_instead_of_waited_for():
    """A raw source storage lock held while the worker's draws wait for it: LockOrderError
    after a short grace, nothing changed, no batch lost."""
    _in_child("scenario_a_raw_storage_lock_held_is_refused_instead_of_waited_for")


def test_a_source_restored_on_its_own_undoes_the_readers_queue():
    """TorchRL's checkpoint hook restores ``rb.online_buffer`` directly: no stale rows served."""
    _in_child("scenario_a_source_restored_on_its_own_undoes_the_readers_queue")


@pytest.mark.heavy  # three child processes
def test_close_from_another_thread_loses_and_repeats_no_draw():
    """close() while another thread samples (prefetch 1, 2, 4): no error, none lost or twice."""
    for depth in (1, 2, 4):
        _in_child("scenario_close_from_another_thread_loses_and_repeats_no_draw", depth)


@pytest.mark.parametrize("op", ["load", "save"])
def test_a_checkpoint_waiting_for_the_worker_never_hangs_a_thread_holding_its_lock(op):
    """Three threads: a raw storage lock held, a checkpoint holding the prefetch queue while
    it waits for a draw needing that lock: the lock holder's sample is refused, none hangs."""
    _in_child(
        "scenario_a_checkpoint_waiting_for_the_worker_never_hangs_a_thread_holding_its_lock",
        op,
    )


def test_the_futures_lock_is_reentrant():
    """``with rb._futures_lock:`` then sample, extend, write in place, save, load: no hang."""
    _in_child("scenario_the_futures_lock_is_reentrant")

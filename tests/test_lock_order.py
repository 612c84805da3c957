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
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.heavy  # a child process per buffer kind, ~8 s each

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

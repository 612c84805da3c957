"""Run many :class:`~mixreplay.demo.experiment.RunSpec` in parallel worker processes.

One worker per core, each single-threaded (``torch.set_num_threads(1)``): small
SAC updates do not speed up with more threads, and runs side by side use the
cores fully. Workers start with ``forkserver`` where the platform has it, else
``spawn``; never ``fork``, which would copy the parent's torch thread pools. The
fork server imports torch, gymnasium and the learner once (:func:`start_workers`
starts it early, while the parent prepares the dataset), so every worker forks
from it with its imports done instead of importing them anew.
Workers report when a run starts and its steps through a queue; the caller turns
that into progress bars.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue as queue_module
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

__all__ = ["default_workers", "run_specs", "start_workers"]

log = logging.getLogger(__name__)

# set in each worker by _init_worker
_PROGRESS_QUEUE = None


def default_workers() -> int:
    """The number of cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


# imported once by the fork server, so that workers fork with them already imported
_PRELOAD = ["mixreplay.demo.experiment", "gymnasium"]


def _context():
    methods = mp.get_all_start_methods()
    if "forkserver" in methods:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        return ctx
    return mp.get_context("spawn")


def start_workers() -> None:
    """Start the fork server now, in the background (a no-op without ``forkserver``).

    Its imports (torch and the rest, seconds on a busy machine) then overlap with
    whatever the caller does before :func:`run_specs`; that call forks from it.
    """
    ctx = _context()
    if ctx.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


def _init_worker(progress_queue, log_level: int, environ: dict[str, str]) -> None:
    global _PROGRESS_QUEUE
    # A fork server started earlier passes on the environment it was started with, not the
    # caller's current one: set the caller's (data roots such as MINARI_DATASETS_PATH).
    os.environ.clear()
    os.environ.update(environ)
    import torch

    torch.set_num_threads(1)
    logging.basicConfig(level=log_level, format="%(levelname)s %(name)s: %(message)s")
    _PROGRESS_QUEUE = progress_queue


def _run_in_worker(index: int, spec, target):
    if target is None:
        from mixreplay.demo.experiment import run_arm as target

    q = _PROGRESS_QUEUE
    if q is not None:
        q.put((index, 0))  # 0 steps: the run has started

    def progress(n: int) -> None:
        if q is not None:
            q.put((index, n))

    return target(spec, progress)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel queued runs and end running ones: a failed or interrupted demo should not
    wait minutes for its sibling runs to finish."""
    terminate = getattr(pool, "terminate_workers", None)  # Python >= 3.14
    if terminate is not None:
        terminate()
        return
    # shutdown() forgets the worker processes: take them first, or they would run on
    # (and keep the interpreter from exiting) after the pool is gone
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=10)


def run_specs(
    specs: Sequence,
    *,
    workers: int | None = None,
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    on_result: Callable[[int, list[dict]], None] | None = None,
    on_tick: Callable[[], None] | None = None,
    target: Callable[[Any, Callable[[int], None]], list[dict]] | None = None,
) -> list[dict]:
    """Run every spec, ``workers`` at a time; return all records (in spec order).

    The callbacks run in this process; ``i`` is the run's index in ``specs``.

    Args:
        specs: the runs.
        workers: processes; default one per core, never more than runs.
        target: what a worker calls, ``target(spec, progress)``, a module-level function
            returning a list of records; default
            :func:`~mixreplay.demo.experiment.run_arm`.
        on_start: ``on_start(i)`` when a worker begins run ``i``.
        on_progress: ``on_progress(i, steps_done_since_last_call)``.
        on_result: ``on_result(i, records)`` as run ``i`` finishes.
        on_tick: called about every 0.2 s while waiting (to redraw clocks).

    The first run that fails cancels the others and its exception propagates.
    """
    if not specs:
        return []
    workers = min(workers or default_workers(), len(specs))
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    ctx = _context()
    progress_queue = ctx.Queue()
    results: dict[int, list[dict]] = {}

    def drain(timeout: float) -> None:
        try:
            item = progress_queue.get(timeout=timeout)
        except queue_module.Empty:
            return
        while True:
            index, steps = item
            if steps == 0:
                if on_start is not None:
                    on_start(index)
            elif on_progress is not None:
                on_progress(index, steps)
            try:
                item = progress_queue.get_nowait()
            except queue_module.Empty:
                return

    log.info("running %d runs in %d %s worker(s)", len(specs), workers, ctx.get_start_method())
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(progress_queue, logging.getLogger().getEffectiveLevel(), dict(os.environ)),
    ) as pool:
        futures = {pool.submit(_run_in_worker, i, spec, target): i for i, spec in enumerate(specs)}
        pending = set(futures)
        try:
            while pending:
                drain(timeout=0.2)
                if on_tick is not None:
                    on_tick()
                done, pending = wait(pending, timeout=0, return_when=FIRST_COMPLETED)
                for future in sorted(done, key=futures.__getitem__):
                    i = futures[future]
                    results[i] = future.result()
                    drain(timeout=0)  # this run's last steps before its result
                    if on_result is not None:
                        on_result(i, results[i])
        except BaseException:
            _stop(pool)
            raise
        finally:
            drain(timeout=0.05)
    progress_queue.close()
    progress_queue.join_thread()
    return [record for i in range(len(specs)) for record in results[i]]

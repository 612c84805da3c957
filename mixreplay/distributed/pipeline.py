"""Off-thread sending and fetching for a prefetching handle, in the caller's call order.

A prefetching learner should not pay, on its own thread, for submitting the next
request and for fetching and decoding the batch: on a busy machine a Ray submit
alone can take a millisecond. :class:`CallPipeline` gives a handle two daemon
threads: a *sender* that submits calls in the exact order the handle made them,
and a *fetcher* that waits for prefetched batches and decodes them.

Order is what keeps batches reproducible: Ray runs one caller's actor calls in
submission order, so every call of the handle goes through the sender's queue
whenever that queue is not empty (a call made while it is empty is submitted
directly, which keeps blocking calls such as ``len(rb)`` as fast as without a
pipeline). The sequence the actor sees is therefore the program order of the
thread using the handle.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future

__all__ = ["CallPipeline"]

log = logging.getLogger(__name__)

_STOP = object()


class CallPipeline:
    """A sender thread and a fetcher thread for one handle.

    Args:
        fetch: turns an ``ObjectRef`` of a prefetched call into its result
            (``ray.get`` and decoding, errors translated); runs on the fetcher thread.
    """

    def __init__(self, fetch: Callable):
        self._fetch = fetch
        self._lock = threading.Lock()
        self._unsent = 0  # calls queued for the sender and not submitted yet
        self._to_send: queue.SimpleQueue = queue.SimpleQueue()
        self._to_fetch: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._send_loop, name="mixreplay-send", daemon=True),
            threading.Thread(target=self._fetch_loop, name="mixreplay-fetch", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def submit(self, method, *args):
        """Submit ``method.remote(*args)`` after every call queued before it; return its ``ObjectRef``."""
        with self._lock:
            if self._unsent == 0:
                return method.remote(*args)
            self._unsent += 1
            future: Future = Future()
            self._to_send.put((method, args, future, False))
        return future.result()

    def prefetch(self, method, *args) -> Future:
        """Queue ``method.remote(*args)``; the future gets the fetched result."""
        future: Future = Future()
        with self._lock:
            self._unsent += 1
            self._to_send.put((method, args, future, True))
        return future

    def _send_loop(self) -> None:
        while True:
            item = self._to_send.get()
            if item is _STOP:
                self._to_fetch.put(_STOP)
                return
            method, args, future, fetch = item
            with self._lock:
                try:
                    ref = method.remote(*args)
                except BaseException as err:  # noqa: BLE001 - handed to the caller
                    ref = None
                    future.set_exception(err)
                self._unsent -= 1
            if ref is None:
                continue
            if fetch:
                self._to_fetch.put((ref, future))
            else:
                future.set_result(ref)

    def _fetch_loop(self) -> None:
        while True:
            item = self._to_fetch.get()
            if item is _STOP:
                return
            ref, future = item
            try:
                future.set_result(self._fetch(ref))
            except BaseException as err:  # noqa: BLE001 - handed to the caller
                future.set_exception(err)

    def close(self) -> None:
        """Stop both threads once the calls already queued are sent and fetched."""
        self._to_send.put(_STOP)

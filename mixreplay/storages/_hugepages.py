"""Ring rows on transparent huge pages (Linux), where the OS offers them.

A sample gathers a few hundred rows scattered over the whole ring: with 4 KiB
pages nearly every row costs a TLB miss once the ring outgrows what the TLB
covers, so the gather slows as the capacity grows. Backed by 2 MiB pages the
same ring needs 512 times fewer TLB entries (``benchmarks/bench_hugepages.py``
measures the gather at several capacities with and without).

:func:`zeros` allocates a ring of at least :data:`MIN_BYTES` on the CPU 2 MiB
aligned (a view into a slightly larger tensor), asks the kernel for huge pages
with ``madvise(MADV_HUGEPAGE)`` before any page is touched, then zeroes it. It
falls back silently to a plain ``torch.zeros`` (logged at debug level) where
huge pages are not offered: another OS, ``/sys/kernel/mm/transparent_hugepage/enabled``
set to ``never``, a failing ``madvise``, a non-CPU device, a small ring.

Opt out with the environment variable ``MIXREPLAY_HUGEPAGES=0`` (read when a
ring allocates), or ``mixreplay.storages._hugepages.ENABLED = False``.

The result is an ordinary int64 tensor: it pickles (the 2 MiB of slack travel
with it and the copy is a plain allocation), moves to shared memory and into
checkpoints like any other.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import sys
from typing import Any

import torch

__all__ = ["ENABLED", "MIN_BYTES", "huge_pages_offered", "zeros"]

_log = logging.getLogger(__name__)

HUGE = 2 * 1024 * 1024  # bytes of one x86-64 / arm64 (4 KiB base pages) huge page
MIN_BYTES = HUGE  # rings smaller than one huge page gain nothing
_MADV_HUGEPAGE = 14  # <sys/mman.h>, Linux
_SETTING = "/sys/kernel/mm/transparent_hugepage/enabled"

#: set to False to allocate every ring with plain ``torch.zeros``
ENABLED = True


@functools.cache
def huge_pages_offered() -> bool:
    """Whether this OS gives transparent huge pages to a region that asks (Linux, THP not ``never``)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        with open(_SETTING) as f:
            setting = f.read()
    except OSError as err:
        _log.debug("no transparent huge pages: %s unreadable (%s)", _SETTING, err)
        return False
    chosen = setting[setting.find("[") + 1 : setting.find("]")] if "[" in setting else ""
    if chosen not in ("always", "madvise"):
        _log.debug("no transparent huge pages: %s says %r", _SETTING, setting.strip())
        return False
    return True


@functools.cache
def _madvise() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    fn = libc.madvise
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def _wanted(nbytes: int, device: torch.device) -> bool:
    if not ENABLED or os.environ.get("MIXREPLAY_HUGEPAGES", "1").strip().lower() in (
        "0",
        "false",
        "no",
        "off",
    ):
        return False
    return device.type == "cpu" and nbytes >= MIN_BYTES and huge_pages_offered()


def zeros(rows: int, words: int, device: torch.device) -> torch.Tensor:
    """``torch.zeros(rows, words, dtype=torch.int64, device=device)``, on huge pages where offered."""
    nbytes = rows * words * 8
    if not _wanted(nbytes, device):
        return torch.zeros(rows, words, dtype=torch.int64, device=device)
    raw = torch.empty(nbytes + HUGE, dtype=torch.uint8)  # untouched: no page is backed yet
    base = raw.data_ptr()
    offset = -base % HUGE
    start = base + offset
    length = (raw.numel() - offset) // HUGE * HUGE  # the whole huge pages inside `raw`
    try:
        rc = _madvise()(start, length, _MADV_HUGEPAGE) if length > 0 else -1
    except (OSError, AttributeError) as err:  # no libc madvise
        _log.debug("no transparent huge pages: madvise unavailable (%s)", err)
        rc = -1
    if rc != 0:
        _log.debug(
            "no transparent huge pages for a ring of %d bytes: madvise failed (errno %d)",
            nbytes,
            ctypes.get_errno(),
        )
        return torch.zeros(rows, words, dtype=torch.int64, device=device)
    out = raw[offset : offset + nbytes].view(torch.int64).view(rows, words)
    out.zero_()  # the first touch: the kernel backs the advised range with huge pages
    _log.debug("ring of %d bytes on transparent huge pages (2 MiB aligned)", nbytes)
    return out

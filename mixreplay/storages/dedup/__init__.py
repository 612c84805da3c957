"""Observations stored once: storages that keep each next value a single time.

In TorchRL's TED layout every transition carries ``observation`` and
``("next", "observation")``, and within an episode the second is the first of the
following row: pixel data is stored twice. A *dedup* storage keeps, for every key
present both at the root and under ``"next"`` with the same per-row shape and dtype
(the TED flags ``done`` / ``terminated`` / ``truncated`` excepted, see
:func:`dedup_keys`), the root value only, and reads the next value from the
following row. A row keeps its own copy of its next values (an *exception*) when
that would be wrong or unknown:

- the last step of an episode: its ``("next", "done")``, ``("next", "terminated")``
  or ``("next", "truncated")`` is set (or, for read-only rows, the next row starts
  an episode);
- a row whose next values differ, in any byte, from the following row's root
  values (so a dedup storage returns exactly what was written, whatever the data:
  ``-0.0`` stays ``-0.0``, NaN payloads stay);
- the newest row of a ring (its following row is not written yet), the ring's last
  slot (its following slot is slot 0) and the last of read-only rows.

Where things live::

    rows          int64 [max_size, Ws]   each row without its deduplicated next values
    exceptions    int64 [P, Xw]          the next values of the rows that keep their own
    exception_of  int32 [max_size]       per slot, its exception row (-1: the following row)

``Ws`` words hold the stored row (a :class:`~mixreplay.layout.RowLayout` of the
schema without the deduplicated next keys), ``Xw`` words the deduplicated next
values of one row. A ring's exception pool grows by doubling as needed (a memory-
mapped ring keeps it in a file beside its rows); with episodes of ``L`` steps about
``max_size / L`` rows are exceptions. The storages expose the *full* layout
(:attr:`~mixreplay.storages.base.Storage.layout`, the schema as written), and
:meth:`gather_into` writes full packed rows, so mixing buffers gather a dedup
source straight into their packed output, beside plain sources.

Reading ``k`` rows: one ``index_select`` per contiguous run of stored bytes into the
output, one per run of next values from the following rows, and a lookup of the
rows' exceptions (a few small ops; the exception rows are then copied over).

For read-only data (offline datasets), :class:`DedupEncoder` turns rows into what
must be written (stored rows and exceptions), chunk by chunk, and
:class:`DedupFrozenStorage` reads them back.
"""

from mixreplay.storages.dedup.frozen import DedupFrozenStorage, DedupReads
from mixreplay.storages.dedup.layout import (
    END_KEYS,
    FLAG_NAMES,
    DedupEncoder,
    DedupLayout,
    DedupRows,
    dedup_keys,
    dedup_rows,
)
from mixreplay.storages.dedup.ring import (
    DedupLazyMemmapStorage,
    DedupLazyTensorStorage,
    DedupTensorStorage,
    dedup_class,
    expand_ring_state,
)

__all__ = [
    "END_KEYS",
    "FLAG_NAMES",
    "DedupEncoder",
    "DedupFrozenStorage",
    "DedupLayout",
    "DedupLazyMemmapStorage",
    "DedupLazyTensorStorage",
    "DedupReads",
    "DedupRows",
    "DedupTensorStorage",
    "dedup_class",
    "dedup_keys",
    "dedup_rows",
    "expand_ring_state",
]

"""Any number of named sources mixed by weight, exact per batch and in the long run."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase

from mixreplay._state import Plan, state_int
from mixreplay.buffers.replay import ReplayBuffer
from mixreplay.errors import CheckpointError, ReadOnlyError
from mixreplay.mixing.engine import MixingBuffer
from mixreplay.mixing.fractions import (
    Weight,
    check_fraction,
    plan_schedule,
    schedule_config,
)
from mixreplay.mixing.source import as_mix_source
from mixreplay.mixing.split import carried_split
from mixreplay.samplers import Sampler
from mixreplay.schedules import Schedule, as_schedule, check_step
from mixreplay.schema import NestedKey
from mixreplay.storages.base import Storage
from mixreplay.storages.foreign import looks_like_storage
from mixreplay.transforms import Transform

__all__ = ["MixtureReplayBuffer", "carried_split"]  # carried_split: its home is mixing.split


class MixtureReplayBuffer(MixingBuffer):
    """Any number of named sources, each with its share of every batch.

    Counts: each batch gives source ``i`` the floor or the ceiling of its quota
    ``B * w_i`` (``w`` the fractions normalized over the sources that have rows), so
    every batch is within one row of exact. The rows rounding leaves over go to the
    sources whose running total would soonest fall a row behind their running quota,
    a remainder carried from batch to batch (and saved in checkpoints): while the
    fractions and the batch size stay the same, after any number of batches each
    source's total is less than one row from its total quota, however small its
    weight, so the long-run share converges to the weights (weights 1:1:1 at ``B=10``
    give 4/3/3, 3/4/3, 3/3/4, ...). While a schedule changes the fractions, or the
    batch size changes, from batch to batch, a source may be a little more than one
    row behind for a while (at most 1.5 rows in 3,000 random runs of mixed sizes). See
    :func:`~mixreplay.mixing.split.carried_split`. Sources with nothing to draw are
    skipped and their share goes to the others in proportion to their fractions (the
    carry restarts when the set of such sources changes).

    Args:
        sources: name -> a mixreplay buffer or dataset, a storage, a TorchRL buffer or
            dataset, or any object with ``sample(n)`` and ``len()``. Order matters: it
            is the order of rows in a batch and of the source labels.
        fractions: name -> a weight (normalized over the sources) or a schedule.

    Keyword Args:
        batch_size: default batch size.
        generator: a ``torch.Generator`` or int seed for every draw.
        samplers: name -> sampler, for sources given as storages (see below).
        transform: applied to each whole batch, last (after each source's own).
        source_key: when set, each batch carries the int64 source index of every row.
            It must not name a data key.
        prefetch: batches a background thread keeps ready (needs ``batch_size``; see
            :mod:`mixreplay.prefetch`); :meth:`set_step` redraws them if the split changes.
        pin_memory: return batches in page-locked memory (needs CUDA).
        batch_device: where batches land (``None``: on the device of the last source's
            rows). With ``batch_device="cuda"``, each host source's rows are gathered into
            a page-locked packed buffer and moved with one ``non_blocking`` copy (see
            :class:`~mixreplay.ReplayBuffer`); refused when this machine has no such device.
        rate_limiter: a :class:`~mixreplay.MinSize` or :class:`~mixreplay.SampleToInsertRatio`
            holding rows sampled (every row of a batch) per row written to any writable
            source within its band (see :mod:`mixreplay.rate_limit`); refused when no
            source is writable.

    A source given as a storage (``LazyTensorStorage(...)``) becomes a
    :class:`~mixreplay.ReplayBuffer` with ``samplers.get(name)``.

    Thread safety and checkpoints: as for :class:`OfflineToOnlineReplayBuffer`
    (collectors may :meth:`extend` any source while one learner samples;
    :meth:`dumps` saves the rows of every writable source and references the
    read-only ones).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage, MixtureReplayBuffer
        >>> mix = MixtureReplayBuffer(
        ...     {"a": LazyTensorStorage(100), "b": LazyTensorStorage(100), "c": LazyTensorStorage(100)},
        ...     {"a": 0.5, "b": 0.3, "c": 0.2}, batch_size=10, generator=0, source_key="src")
        >>> for i, name in enumerate("abc"):
        ...     _ = mix.extend(TensorDict({"x": torch.full((5,), i)}, [5]), source=name)
        >>> mix.sample()["src"].tolist()
        [0, 0, 0, 0, 0, 1, 1, 1, 2, 2]
    """

    _in_place_way = "write a source's rows in place with rb.source(name)[index] = ..."

    def __init__(
        self,
        sources: Mapping[str, Any],
        fractions: Mapping[str, float | Schedule | Callable[[int], float]],
        *,
        batch_size: int | None = None,
        generator: torch.Generator | int | None = None,
        samplers: Mapping[str, Sampler] | None = None,
        transform: Transform | None = None,
        source_key: NestedKey | None = None,
        prefetch: int | None = None,
        pin_memory: bool = False,
        batch_device: torch.device | str | None = None,
        rate_limiter: Any = None,
    ):
        if not isinstance(sources, Mapping) or not sources:
            raise TypeError(
                f"sources must be a non-empty mapping name -> buffer, got {type(sources).__name__}"
            )
        bad_names = [n for n in sources if not isinstance(n, str) or not n]
        if bad_names:
            raise TypeError(
                f"source names must be non-empty strings, got {bad_names!r}; name each source, "
                "e.g. {'offline': dataset, 'online': LazyTensorStorage(100_000)}"
            )
        if not isinstance(fractions, Mapping):
            raise TypeError(
                f"fractions must be a mapping name -> fraction, got {type(fractions).__name__}"
            )
        if samplers is not None and not isinstance(samplers, Mapping):
            raise TypeError(
                f"samplers must be a mapping name -> Sampler, got {type(samplers).__name__}; "
                "e.g. samplers={'online': PrioritizedSampler()}"
            )
        if set(fractions) != set(sources):
            raise ValueError(
                f"fractions must name exactly the sources: sources {sorted(sources)}, "
                f"fractions {sorted(fractions)}"
            )
        samplers = dict(samplers or {})
        unknown = set(samplers) - set(sources)
        if unknown:
            raise ValueError(
                f"samplers name unknown sources {sorted(unknown)}; sources are {sorted(sources)}"
            )
        self._init_common(
            batch_size, generator, transform, source_key, prefetch, pin_memory, batch_device
        )
        built = []
        for name, obj in sources.items():
            if isinstance(obj, Storage) or looks_like_storage(obj):
                obj = ReplayBuffer(
                    storage=obj,
                    sampler=samplers.pop(name, None),
                    generator=self._generator,
                    _mixing_source=True,
                )
            elif name in samplers:
                raise ValueError(
                    f"samplers[{name!r}] applies to a source given as a storage; source {name!r} is a "
                    f"{type(obj).__name__}, which keeps its own sampler"
                )
            if isinstance(obj, ReplayBuffer) and not obj.storage.writable and len(obj) == 0:
                raise ValueError(
                    f"source {name!r} ({type(obj).__name__}) is read-only and holds no rows, so it could "
                    "never contribute to a batch; fill the dataset before mixing, or drop the source"
                )
            built.append(as_mix_source(obj, name))
        # one schedule per source; a number is a constant Weight
        self._fractions: list[Schedule] = [
            as_schedule(f) if callable(f) else Weight(f, f"fractions[{name!r}]")
            for name, f in ((name, fractions[name]) for name in sources)
        ]
        self._cache: tuple[int | float, list[float]] | None = None
        if all(isinstance(f, Weight) and f.weight == 0 for f in self._fractions):
            raise ValueError(
                f"fractions sum to 0 ({dict(fractions)}); give at least one source a share"
            )
        self._init_sources(list(sources), built)
        self._init_rate_limiter(rate_limiter)
        self._step: int | float = 0
        self._carry: list[float] = [0.0] * len(self._names)
        self._carry_live: tuple[int, ...] = ()
        self._pending: tuple[tuple[int, ...], list[float]] | None = None
        self._evaluate(0)  # a schedule that fails at step 0 fails here

    def _evaluate(self, step: int | float) -> list[float]:
        cached = self._cache
        if cached is not None and cached[0] == step:  # weights and schedules of the step alone
            return cached[1]
        sizes = None
        out = []
        for name, schedule in zip(self._names, self._fractions):
            if schedule.needs_sizes and sizes is None:
                sizes = {n: len(s) for n, s in zip(self._names, self._sources)}
            value = schedule(step, sizes=sizes if schedule.needs_sizes else None)
            if not isinstance(schedule, Weight):  # a weight is any number >= 0, checked once
                value = check_fraction(
                    value, f"fractions[{name!r}] at step {step}", open_interval=False
                )
            out.append(value)
        if sizes is None:
            self._cache = (step, out)
        return out

    def _split(self, batch_units: int, live: list[int], sizes: list[int]) -> list[int]:
        weights = self._evaluate(self._step)
        live_t = tuple(live)
        carry = self._carry if live_t == self._carry_live else [0.0] * len(self._names)
        counts, new = carried_split(
            batch_units, [weights[i] for i in live], [carry[i] for i in live]
        )
        full = [0.0] * len(self._names)
        for i, c in zip(live, new):
            full[i] = c
        self._pending = (live_t, full)
        return counts

    def _commit_split(self, counts: list[int]) -> None:
        if self._pending is not None:
            self._carry_live, self._carry = self._pending
            self._pending = None

    def _split_state(self) -> Any:
        return self._carry_live, list(self._carry)

    def _restore_split_state(self, state: Any) -> None:
        self._carry_live, self._carry = state[0], list(state[1])
        self._pending = None

    @property
    def fractions(self) -> dict[str, float]:
        """The current weight of each source (not yet normalized)."""
        return dict(zip(self._names, self._evaluate(self._step)))

    def set_step(self, step: int | float) -> None:
        """Move every schedule to ``step``."""
        before = self._evaluate(self._step)
        after = self._evaluate(step)  # first: a schedule that raises changes nothing
        self._step = check_step(step)
        # weights read from the sources' sizes change with every write: always redraw then
        if after != before or any(s.needs_sizes for s in self._fractions):
            self._fractions_changed()

    @property
    def step(self) -> int | float:
        return self._step

    def source(self, name: str) -> Any:
        """The buffer (or dataset) behind source ``name``, as given or built from a storage."""
        return self._sources[self._index(name)].obj

    def _index(self, name: str) -> int:
        try:
            return self._names.index(name)
        except ValueError:
            raise KeyError(f"no source named {name!r}; sources are {list(self._names)}") from None

    def extend(
        self, data: TensorDictBase, *, source: str, timeout: float | None = None
    ) -> torch.Tensor:
        """Write rows to source ``source``; return the slots written.

        With a rate limiter the rows go in as its band allows, waiting up to ``timeout``
        seconds (``None``: until allowed, or until :meth:`close`); see :mod:`mixreplay.rate_limit`.
        """
        i = self._index(source)
        src = self._sources[i]
        if not src.writable:
            raise ReadOnlyError(
                f"source {source!r} is read-only ({type(src.obj).__name__}): mixreplay samples it but "
                "does not write to it; extend a writable source (a storage or a ReplayBuffer over one)"
            )
        return self._write(i, data, timeout)

    # -- state -----------------------------------------------------------------------------

    def _mixing_state(self) -> dict[str, Any]:
        fractions: dict[str, Any] = {}
        for name, schedule in zip(self._names, self._fractions):
            if isinstance(schedule, Weight):
                fractions[name] = {"fixed": schedule.weight}
            else:
                fractions[name] = {"schedule": schedule_config(schedule)}
        return {
            "fractions": fractions,
            "step": self._step,
            "carry": {"live": list(self._carry_live), "values": list(self._carry)},
        }

    def _settings(self) -> dict[str, str]:
        fractions = ", ".join(f"{n}: {f!r}" for n, f in zip(self._names, self._fractions))
        return {"fractions": f"{{{fractions}}}", **super()._settings()}

    def _plan_mixing_state(self, state: dict[str, Any]) -> Plan:
        saved = state.get("fractions")
        if not isinstance(saved, dict) or set(saved) != set(self._names):
            raise CheckpointError(
                f"the state's fractions do not name this buffer's sources: {saved!r}"
            )
        planned: list[Schedule] = []
        for name, current in zip(self._names, self._fractions):
            entry = saved[name]
            what = f"fractions[{name!r}]"
            if not isinstance(entry, dict):
                raise CheckpointError(f"{what} must be a dict, got {entry!r}")
            if "fixed" in entry:
                try:
                    weight = Weight(entry["fixed"], what)
                except (TypeError, ValueError) as err:
                    raise CheckpointError(str(err)) from None
                planned.append(current if current == weight else weight)
            else:
                planned.append(plan_schedule(entry.get("schedule"), current, what))
        step = state.get("step")
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not step >= 0:
            raise CheckpointError(f"step must be a number >= 0, got {step!r}")
        carry = state.get("carry")
        live: tuple[int, ...] = ()
        values: list[float] = [0.0] * len(self._names)
        if carry is not None:  # format 1 had no carry
            saved_live = carry.get("live", []) if isinstance(carry, dict) else None
            saved_values = carry.get("values") if isinstance(carry, dict) else None
            # any finite carry: under a schedule a source may run more than one row behind
            if (
                not isinstance(saved_live, list)
                or not isinstance(saved_values, list)
                or len(saved_values) != len(self._names)
                or any(
                    isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                    for v in saved_values
                )
            ):
                raise CheckpointError(
                    f"carry must hold {len(self._names)} finite numbers and live source "
                    f"indices, got {carry!r}"
                )
            live = tuple(state_int(i, "carry live source") for i in saved_live)
            if any(i >= len(self._names) for i in live):
                raise CheckpointError(
                    f"carry live source indices must be below {len(self._names)}, got {list(live)}"
                )
            values = [float(v) for v in saved_values]

        def apply() -> None:
            self._fractions, self._cache = planned, None
            self._step = step
            self._carry_live, self._carry = live, values
            self._pending = None

        return apply

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{n}: {len(s)} rows @ {f:.3f}"
            for n, s, f in zip(self._names, self._sources, self._evaluate(self._step))
        )
        return f"{type(self).__name__}({parts}, batch_size={self._batch_size})"

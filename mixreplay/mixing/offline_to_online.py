"""The two-source buffer of the reference API: an offline dataset and an online ring."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDictBase

from mixreplay._state import Plan, state_fraction
from mixreplay._validate import check_int
from mixreplay.buffers.replay import ReplayBuffer
from mixreplay.errors import CheckpointError
from mixreplay.mixing.engine import MixingBuffer
from mixreplay.mixing.fractions import check_fraction, plan_schedule, schedule_config
from mixreplay.mixing.source import BufferSource, as_mix_source
from mixreplay.mixing.split import split_counts
from mixreplay.samplers import Sampler
from mixreplay.schedules import Anneal, Constant, Schedule, as_schedule, check_step
from mixreplay.schema import NestedKey
from mixreplay.storages.base import check_row
from mixreplay.storages.ring import LazyTensorStorage
from mixreplay.transforms import Transform

__all__ = ["OfflineToOnlineReplayBuffer"]

log = logging.getLogger(__name__)


class OfflineToOnlineReplayBuffer(MixingBuffer):
    """An immutable offline dataset and an online ring, mixed in an exact proportion.

    :meth:`extend` writes to the online ring only. :meth:`sample` draws exactly
    ``round(offline_fraction * B)`` offline rows (Python's ``round``, half to even)
    and ``B - round(...)`` online rows, offline rows first, as one flat ``[B]``
    TensorDict. While the online ring is empty, or when the offline count is
    ``B``, the whole batch is offline; when it is 0, the whole batch is online.

    The offline fraction is one schedule of the step: a float is a constant
    schedule; :meth:`set_step` moves along it; :meth:`anneal(step, total_steps)
    <anneal>` installs the reference's linear decay from the base fraction,
    ``base * max(0, 1 - step / total_steps)``, and moves to ``step`` (so a later
    :meth:`set_step` continues along that decay, and ``anneal`` replaces any
    schedule given at construction). The base fraction is the constructor's
    (for a schedule, its value at step 0).

    Offline and online rows must agree on keys, dtypes and per-row shapes after
    each source's own transforms: the first :meth:`extend` checks it and raises
    :class:`~mixreplay.errors.SchemaMismatchError` naming every key that differs
    (nothing is ever upcast silently). Sampler bookkeeping keys such as TorchRL's
    ``"index"`` are not data and are dropped. Transforms attached to the offline
    dataset or to :attr:`online_buffer` run on their rows; the ``transform`` of this
    buffer runs last, on the whole batch.

    Thread safety: a collector thread may :meth:`extend` while a learner thread
    calls :meth:`sample` and :meth:`update_priority`. Every source's rows and
    sampler state are read and written under that source's storage lock, so a
    sampled row is always a whole row from one write and lengths only grow.
    Call :meth:`sample`, :meth:`anneal`, :meth:`set_step` and :meth:`loads`
    from one thread (the learner): they share the buffer's generator and fraction.

    Checkpoints: :meth:`dumps` / :meth:`loads` save and restore the filled online
    rows, the ring cursor, samplers, generator, schedule, step and base fraction
    (and a rate limiter's counts); the offline dataset is referenced by its
    fingerprint, never copied.

    Args:
        offline_dataset: a mixreplay buffer or dataset, a TorchRL ``ReplayBuffer``
            or dataset, any object with ``sample(n)`` and ``len()``, or a dataset ID
            such as ``"minari:mujoco/hopper/expert-v0"`` resolved by
            :func:`~mixreplay.load_dataset`.

    Keyword Args:
        online_storage: the online ring (a mixreplay or TorchRL storage). Exclusive
            with ``online_capacity``.
        online_capacity: capacity of a new :class:`~mixreplay.LazyTensorStorage`.
        offline_fraction: share of each batch drawn offline, in ``(0, 1)``, or a
            schedule of the step (:mod:`mixreplay.schedules`, or any function).
        batch_size: default batch size; required with a dataset ID (and forwarded).
        transform: applied to each whole batch, last.
        generator: a ``torch.Generator`` or int seed; every draw (offline rows
            included, unless the offline side is foreign) comes from it.
        online_sampler: sampler of the online ring (uniform by default).
        source_key: when set, each batch carries an int64 ``[B]`` label under this
            key: 0 for offline rows, 1 for online rows. It must not name a data key.
        prefetch: batches a background thread keeps ready (needs ``batch_size``; see
            :mod:`mixreplay.prefetch`). A change of :meth:`anneal` or :meth:`set_step`
            that changes the split redraws them, so every batch has the current split.
        pin_memory: return batches in page-locked memory (needs CUDA).
        batch_device: where batches land (``None``: on the device of the last source's
            rows). With ``batch_device="cuda"``, each host source's rows are gathered into
            a page-locked packed buffer and moved with one ``non_blocking`` copy (see
            :class:`~mixreplay.ReplayBuffer`); refused when this machine has no such device.
        rate_limiter: a :class:`~mixreplay.MinSize` or :class:`~mixreplay.SampleToInsertRatio`
            holding rows sampled (every row of a batch, offline ones included) per online
            row written within its band: ``sample`` and ``extend`` wait for it (see
            :mod:`mixreplay.rate_limit` and the guide's page on asynchronous fine-tuning).
        **dataset_kwargs: forwarded to the dataset loader with a dataset ID.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage, OfflineToOnlineReplayBuffer, ReplayBuffer
        >>> offline = ReplayBuffer(storage=LazyTensorStorage(1000))
        >>> _ = offline.extend(TensorDict({"observation": torch.randn(1000, 4)}, [1000]))
        >>> rb = OfflineToOnlineReplayBuffer(offline, online_capacity=500, offline_fraction=0.25,
        ...                                  batch_size=32, generator=0, source_key="source")
        >>> _ = rb.extend(TensorDict({"observation": torch.randn(10, 4)}, [10]))
        >>> rb.sample()["source"].bincount().tolist()
        [8, 24]
    """

    _in_place_way = "write online rows in place with rb.online_buffer[index] = ..."

    def __init__(
        self,
        offline_dataset: Any,
        *,
        online_storage: Any = None,
        online_capacity: int | None = None,
        offline_fraction: float | Schedule | Callable[[int], float] = 0.5,
        batch_size: int | None = None,
        transform: Transform | None = None,
        generator: torch.Generator | int | None = None,
        online_sampler: Sampler | None = None,
        source_key: NestedKey | None = None,
        prefetch: int | None = None,
        pin_memory: bool = False,
        batch_device: torch.device | str | None = None,
        rate_limiter: Any = None,
        **dataset_kwargs: Any,
    ):
        if online_storage is not None and online_capacity is not None:
            raise ValueError(
                "Provide online_storage OR online_capacity, not both (got online_storage="
                f"{type(online_storage).__name__}, online_capacity={online_capacity!r})"
            )
        if online_storage is None and online_capacity is None:
            raise ValueError(
                "Provide one of online_storage or online_capacity: the online buffer needs a "
                "size, e.g. online_capacity=100_000 (rows)"
            )
        if online_capacity is not None:
            online_storage = LazyTensorStorage(
                check_int(
                    online_capacity, "online_capacity", min=1, what="a positive number of rows"
                )
            )
        if callable(offline_fraction):
            self._schedule = as_schedule(offline_fraction)
            base = None
        else:
            base = check_fraction(offline_fraction, "offline_fraction", open_interval=True)
            self._schedule = Constant(base)
        self._step: int | float = 0
        self._cache: tuple[Schedule, int | float, float] | None = None
        if isinstance(offline_dataset, str):
            from mixreplay.datasets import load_dataset  # a dataset ID: the one lazy import

            if "batch_size" not in dataset_kwargs:
                if batch_size is None:
                    raise ValueError(
                        f"batch_size must be provided when offline_dataset is a string "
                        f"({offline_dataset!r}), so the dataset can be constructed: pass batch_size=..."
                    )
                dataset_kwargs["batch_size"] = batch_size
            offline_dataset = load_dataset(offline_dataset, **dataset_kwargs)
        elif dataset_kwargs:
            raise ValueError(
                f"dataset_kwargs are only forwarded when offline_dataset is a string; got "
                f"{sorted(dataset_kwargs)} with a {type(offline_dataset).__name__}: pass them "
                "directly to your dataset constructor instead"
            )
        self._init_common(
            batch_size, generator, transform, source_key, prefetch, pin_memory, batch_device
        )
        offline = as_mix_source(offline_dataset, "offline")
        if len(offline) == 0:
            raise ValueError(
                f"the offline dataset ({type(offline_dataset).__name__}) holds no rows; fill it "
                "before mixing, or use a plain ReplayBuffer for online-only training"
            )
        self._offline_dataset = offline_dataset
        self._online_buffer = ReplayBuffer(
            storage=online_storage,
            sampler=online_sampler,
            generator=self._generator,
            _mixing_source=True,
        )
        self._init_sources(("offline", "online"), [offline, BufferSource(self._online_buffer)])
        self._init_rate_limiter(rate_limiter)
        self._base_fraction = self._fraction_at(0) if base is None else base

    # -- the fraction: one schedule of the step ------------------------------------------------

    def _fraction_at(self, step: int | float, schedule: Schedule | None = None) -> float:
        if schedule is None:
            schedule = self._schedule
            cached = self._cache
            # a schedule of the step alone is a pure function: evaluate it once per step
            if cached is not None and cached[0] is schedule and cached[1] == step:
                return cached[2]
        sizes = None
        if schedule.needs_sizes:
            sizes = {"offline": len(self._sources[0]), "online": len(self._sources[1])}
        value = check_fraction(
            schedule(step, sizes=sizes),
            f"offline_fraction from {schedule!r} at step {step}",
            open_interval=False,
        )
        if sizes is None:
            self._cache = (schedule, step, value)
        return value

    def _split_key(self) -> tuple[object, Any] | None:
        schedule = self._schedule
        return None if schedule.needs_sizes else (schedule, self._step)

    def _split(self, batch_units: int, live: list[int], sizes: list[int]) -> list[int]:
        if len(live) == 1:
            return [batch_units]
        f = self._fraction_at(self._step)
        return split_counts(batch_units, [f, 1.0 - f])

    # -- reference API ---------------------------------------------------------------------

    def extend(self, data: TensorDictBase, *, timeout: float | None = None) -> torch.Tensor:
        """Write online rows (batch ``[n]``); return the online slots written.

        With a rate limiter the rows go in as its band allows, waiting up to ``timeout``
        seconds (``None``: until allowed, or until :meth:`close`); see :mod:`mixreplay.rate_limit`.
        """
        return self._write(1, data, timeout)

    def add(self, row: TensorDictBase, *, timeout: float | None = None) -> int:
        """Write one online row (batch ``[]``); return its slot."""
        check_row(row)
        return int(self.extend(row.unsqueeze(0), timeout=timeout)[0])

    def anneal(self, step: int | float, total_steps: int | float) -> None:
        """Decay the offline fraction linearly to 0: ``base * max(0, 1 - step / total_steps)``.

        Installs that decay (:class:`~mixreplay.schedules.Anneal`) as the schedule and
        moves to ``step``. ``step`` and ``total_steps`` may be any real numbers
        (``1e6``, NumPy integers, 0-dim tensors); ``total_steps`` must be ``> 0``.
        """
        schedule = Anneal(self._base_fraction, total_steps)
        value = self._fraction_at(step, schedule)  # validates step; changes nothing on error
        self._schedule, self._step = schedule, check_step(step)
        log.debug("annealed the offline fraction to %.4f", value)
        self._fractions_changed()

    def set_step(self, step: int | float) -> None:
        """Move the offline-fraction schedule to ``step`` (no change for a constant fraction)."""
        self._fraction_at(step)  # evaluated first: a schedule that raises changes nothing
        self._step = check_step(step)
        self._fractions_changed()

    @property
    def step(self) -> int | float:
        """The step the schedule is at."""
        return self._step

    @property
    def offline_fraction(self) -> float:
        """The offline share used by the next :meth:`sample`."""
        return self._fraction_at(self._step)

    @property
    def _offline_fraction(self) -> float:
        # TorchRL's hooks read and write these two fields; they map onto the schedule.
        return self.offline_fraction

    @_offline_fraction.setter
    def _offline_fraction(self, value: float) -> None:
        self._schedule = Constant(check_fraction(value, "offline_fraction", open_interval=False))
        self._fractions_changed()

    @property
    def _base_offline_fraction(self) -> float:
        return self._base_fraction

    @_base_offline_fraction.setter
    def _base_offline_fraction(self, value: float) -> None:
        self._base_fraction = check_fraction(value, "base offline_fraction", open_interval=False)

    @property
    def base_offline_fraction(self) -> float:
        """The fraction :meth:`anneal` decays from (the constructor's)."""
        return self._base_fraction

    @property
    def offline_buffer(self) -> Any:
        """The offline dataset, as given (never written to)."""
        return self._offline_dataset

    @property
    def online_buffer(self) -> ReplayBuffer:
        """The online :class:`~mixreplay.ReplayBuffer` that :meth:`extend` writes to."""
        return self._online_buffer

    @property
    def write_count(self) -> int:
        """Online rows written since creation, overwritten ones included (TorchRL's trainer reads it)."""
        return self._online_buffer.write_count

    @property
    def schedule(self) -> Schedule:
        """The offline-fraction schedule (:class:`~mixreplay.schedules.Constant` for a float)."""
        return self._schedule

    # -- state -----------------------------------------------------------------------------

    def _by_reference(self, i: int) -> bool:
        return i == 0  # the offline side is referenced, never copied, whatever holds it

    def _mixing_state(self) -> dict[str, Any]:
        return {
            "fraction": {
                "schedule": schedule_config(self._schedule),
                "step": self._step,
                "base_offline_fraction": self._base_fraction,
            }
        }

    def _settings(self) -> dict[str, str]:
        return {"offline_fraction": repr(self._schedule), **super()._settings()}

    def _plan_mixing_state(self, state: dict[str, Any]) -> Plan:
        saved = state.get("fraction")
        if not isinstance(saved, dict):
            raise CheckpointError(f"the state holds no offline fraction: {saved!r}")
        schedule = plan_schedule(
            saved.get("schedule"), self._schedule, "the offline-fraction schedule"
        )
        step = saved.get("step")
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not step >= 0:
            raise CheckpointError(f"step must be a number >= 0, got {step!r}")
        base = state_fraction(saved.get("base_offline_fraction"), "base_offline_fraction")
        try:
            self._fraction_at(step, schedule)
        except (ValueError, TypeError) as err:
            raise CheckpointError(f"the saved schedule fails at step {step}: {err}") from None

        def apply() -> None:
            self._schedule, self._step, self._base_fraction = schedule, step, base

        return apply

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(offline={type(self._offline_dataset).__name__}, "
            f"offline_fraction={self.offline_fraction:.3f}, "
            f"online_size={len(self._online_buffer)}, batch_size={self._batch_size})"
        )

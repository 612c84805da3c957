"""Fractions and weights of the mixing buffers: their checks and how a checkpoint holds them.

An :class:`~mixreplay.OfflineToOnlineReplayBuffer`'s offline fraction and each
:class:`~mixreplay.MixtureReplayBuffer` source's weight is a schedule of the step
(:mod:`mixreplay.schedules`); a number given for a mixture weight is a constant
:class:`Weight`. A checkpoint stores a schedule as its config
(:meth:`~mixreplay.schedules.Schedule.to_config`), a weight as ``{"fixed": w}``, and
a schedule that cannot be stored (:attr:`~mixreplay.schedules.Schedule.storable`
false: a plain function) by its ``repr`` only: the buffer that loads it must be
built with that same function.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mixreplay._validate import check_real
from mixreplay.errors import CheckpointError
from mixreplay.schedules import Schedule

__all__ = ["Weight", "check_fraction", "check_weight", "plan_schedule", "schedule_config"]


def check_fraction(value: Any, name: str, *, open_interval: bool) -> float:
    """A fraction in ``[0, 1]`` (``(0, 1)`` with ``open_interval``), as a float."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isfinite(value):
        interval = "(0, 1)" if open_interval else "[0, 1]"
        raise ValueError(f"{name} must be a finite number in {interval}, got {value!r}")
    out = check_real(value, name, what="a float")  # a number (TypeError otherwise), finite
    if open_interval and not 0.0 < out < 1.0:
        raise ValueError(
            f"{name} must be in (0, 1) (exclusive), got {out!r}; for online-only data use a "
            "plain ReplayBuffer, for offline-only sample the dataset itself"
        )
    if not 0.0 <= out <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {out!r}")
    return out


def check_weight(value: Any, name: str) -> float:
    """A mixture weight: a finite number >= 0 (weights are normalized over the sources)."""
    return check_real(
        value, name, min=0.0, what="a number >= 0 (a weight), a Schedule or a function of the step"
    )


class Weight(Schedule):
    """A mixture source's constant weight: any number ``>= 0``, normalized with the others'.

    What a number given as a :class:`~mixreplay.MixtureReplayBuffer` fraction
    becomes. Unlike the schedules of :mod:`mixreplay.schedules` its value is not a
    share in ``[0, 1]`` but a weight; a checkpoint stores it as ``{"fixed": w}``.

    Examples:
        >>> Weight(3)(1000)
        3.0
    """

    config_name = "_Weight"  # not registered: saved as {"fixed": w}, not as a schedule config

    def __init__(self, value: float, name: str = "weight"):
        self.weight = check_weight(value, name)

    def __call__(self, step: int | float, sizes: Mapping[str, int] | None = None) -> float:
        return self.weight  # any weight >= 0, not a share in [0, 1]: no range check

    def value(self, step: int | float, sizes: Mapping[str, int] | None = None) -> float:
        return self.weight

    def params(self) -> dict[str, Any]:
        return {"value": self.weight}


def schedule_config(schedule: Schedule) -> dict[str, Any]:
    """A schedule's config, or, for one a checkpoint cannot store, its ``repr`` only."""
    if not schedule.storable:
        return {"type": None, "repr": repr(schedule)}
    return schedule.to_config()


def plan_schedule(saved: Any, current: Schedule, what: str) -> Schedule:
    """The schedule a saved config stands for (the buffer's own plain function for a ``repr``)."""
    if not isinstance(saved, dict):
        raise CheckpointError(f"{what}: a schedule config is a dict, got {saved!r}")
    if saved.get("type") is None:  # one a checkpoint cannot store was saved by repr only
        if current.storable:
            raise CheckpointError(
                f"{what} was a plain function ({saved.get('repr')}), which a checkpoint cannot "
                f"store; build the buffer with that same function, got {current!r}"
            )
        return current
    try:
        schedule = Schedule.from_config(saved)
    except (ValueError, TypeError) as err:
        raise CheckpointError(f"{what}: {err}") from None
    return current if current == schedule else schedule

"""What every stateful part shares: the load protocol and the state of generators and samplers.

Each part of a buffer owns its state, as torch modules do: ``state_dict()``
returns tensors and JSON values, ``load_state_dict(state)`` restores them. To
restore a buffer made of parts without ever leaving it half restored, loading is
two-phase: ``plan_load_state_dict(state)`` checks everything and changes
nothing, and returns the function that applies the state; a composite plans
every part first, then applies them all. Any problem is a
:class:`~mixreplay.CheckpointError` naming the part and what does not fit.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch

from mixreplay._validate import check_saved_int
from mixreplay.errors import CheckpointError

__all__ = [
    "Plan",
    "Stateful",
    "generator_state",
    "jsonable",
    "plan_generator",
    "upgrade_saved_sampler",
    "plan_sampler",
    "sampler_state",
    "saved_name",
    "state_fraction",
    "state_int",
]

Plan = Callable[[], None]


@runtime_checkable
class Stateful(Protocol):
    """Anything a checkpoint can hold: it saves and restores its own state."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def jsonable(value: Any) -> Any:
    """``value`` as JSON would give it back (tuples become lists), for comparisons."""
    return json.loads(json.dumps(value))


def state_int(value: Any, what: str, lo: int = 0) -> int:
    return check_saved_int(value, what, min=lo)


def state_fraction(value: Any, what: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 <= value <= 1
    ):
        raise CheckpointError(f"{what} must be a finite number in [0, 1], got {value!r}")
    return float(value)


def generator_state(generator: torch.Generator) -> dict[str, Any]:
    return {"device": str(generator.device), "state": generator.get_state()}


def plan_generator(generator: torch.Generator, saved: Any, what: str) -> Plan:
    """Check a saved generator state against ``generator``; return the setter."""
    state = saved.get("state") if isinstance(saved, dict) else None
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8:
        got = (
            f"{state.dtype}{list(state.shape)}"
            if isinstance(state, torch.Tensor)
            else repr(saved)[:60]
        )
        raise CheckpointError(f"{what}: a generator state must be a uint8 tensor, got {got}")
    try:
        torch.Generator(device=generator.device).set_state(state)
    except (RuntimeError, TypeError, ValueError) as err:
        raise CheckpointError(
            f"{what}: the saved state does not fit a {generator.device} generator ({err})"
        ) from None

    def apply() -> None:
        generator.set_state(state)

    return apply


def saved_name(saved: Any) -> Any:
    """A sampler's name as saved: format 2 wrote a module path
    (``mixreplay.samplers.prioritized.PrioritizedSampler``), whose last part is the name."""
    if isinstance(saved, str) and "." in saved:
        return saved.rpartition(".")[2]
    return saved


def sampler_state(sampler: Any) -> dict[str, Any]:
    return {
        "type": sampler.config_name,
        "config": jsonable(sampler.config()),
        "state": sampler.state_dict(),
    }


def _saved_dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CheckpointError(
            f"{what} must be a dict, got {type(value).__name__} {repr(value)[:60]}; "
            "the checkpoint is corrupt"
        )
    return value


def upgrade_saved_sampler(saved: Any) -> Any:
    """A sampler entry of a checkpoint written by an earlier mixreplay, in today's terms.

    - ``RandomSampler(replacement=False)`` once drew ``n`` distinct rows per batch and
      kept no state; the same call now builds a ``SamplerWithoutReplacement`` (TorchRL's
      meaning): its entry loads as that sampler at the start of a fresh epoch.
    - ``SliceSampler`` once drew every valid start equally likely; it now draws as
      TorchRL does unless built with ``uniform_over="starts"``: an entry without that
      setting says ``"starts"``, so resuming it with today's default is refused (the
      sampling would silently change) and the error names the setting to pass.

    Other entries pass through unchanged.
    """
    if not isinstance(saved, dict) or not isinstance(saved.get("config"), dict):
        return saved
    kind, config = saved.get("type"), saved["config"]
    if isinstance(kind, str):  # format 2 wrote a module path, whose last part is the name
        kind = kind.rpartition(".")[2]
    if kind == "RandomSampler" and config == {"replacement": False}:
        return {
            "type": "SamplerWithoutReplacement",
            "config": {"drop_last": False, "shuffle": True},
            "state": {
                "order": torch.empty(0, dtype=torch.int64),
                "pos": 0,
                "len": 0,
                "ran_out": False,
                "started": False,
            },
        }
    if kind == "SliceSampler" and "uniform_over" not in config:
        return {**saved, "config": {**config, "uniform_over": "starts"}}
    return saved


def plan_sampler(sampler: Any, saved: Any, what: str) -> Plan:
    """Check a saved sampler (type, settings, state) against ``sampler``; return the loader."""
    saved = upgrade_saved_sampler(saved)  # entries an earlier mixreplay wrote
    if not isinstance(saved, dict):
        raise CheckpointError(f"{what}: the checkpoint holds no sampler state")
    kind = sampler.config_name
    if saved_name(saved.get("type")) != kind:
        raise CheckpointError(
            f"{what}: the checkpoint was saved with a {saved.get('type')}, this buffer samples "
            f"with a {kind}; build the buffer with the same sampler"
        )
    config = _saved_dict(saved.get("config"), f"{what}: the saved sampler config")
    state = _saved_dict(saved.get("state"), f"{what}: the saved sampler state")
    mine = jsonable(sampler.config())
    differ = sorted(
        k for k in set(config) | set(mine) if config.get(k) != mine.get(k) and k not in state
    )
    if differ:
        shown = ", ".join(f"{k}: saved {config.get(k)!r}, buffer {mine.get(k)!r}" for k in differ)
        raise CheckpointError(
            f"{what}: the sampler's settings differ ({shown}); build the buffer with the saved "
            "sampler settings"
        )
    try:
        trial = copy.deepcopy(sampler)
    except Exception:  # noqa: BLE001 - a sampler that cannot be copied loads without a dry run
        trial = None
    if trial is not None:
        try:
            trial.load_state_dict(state)
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as err:
            raise CheckpointError(
                f"{what}: the saved sampler state does not load ({err})"
            ) from None
    return lambda: sampler.load_state_dict(state)

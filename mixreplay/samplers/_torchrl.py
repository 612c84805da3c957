"""TorchRL sampler arguments: accepted where they mean what mixreplay does, refused otherwise.

A TorchRL user's ``SliceSampler(strict_length=False)`` must not be silently taken
with another meaning: each argument of TorchRL 0.14's samplers that mixreplay does
not implement is accepted only with values that mean mixreplay's own behaviour,
and refused otherwise with a ``TypeError`` that names it and the mixreplay way
(the rule of :mod:`mixreplay._torchrl_args`, for samplers).
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_torchrl_kwargs"]

#: argument -> (values that mean mixreplay's own behaviour, the mixreplay way)
Table = dict[str, tuple[tuple[Any, ...], str]]


def _same(value: Any, accepted: Any) -> bool:
    return value is accepted or (type(value) is type(accepted) and value == accepted)


def check_torchrl_kwargs(owner: str, kwargs: dict[str, Any], table: Table) -> None:
    """Raise ``TypeError`` for a keyword that is unknown, or a TorchRL one with a value mixreplay lacks."""
    for name, value in kwargs.items():
        if name not in table:
            raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}")
        accepted, way = table[name]
        if not any(_same(value, a) for a in accepted):
            shown = " / ".join(repr(a) for a in accepted)
            raise TypeError(
                f"{owner} does not support TorchRL's {name}={value!r} (only {shown}, which is "
                f"mixreplay's behaviour); {way}"
            )

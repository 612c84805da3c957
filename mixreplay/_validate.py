"""Argument checks shared by every public entry point.

One rule everywhere: a value of the wrong *type* raises :class:`TypeError`, a value
of the right type but outside what is allowed raises :class:`ValueError`. Both name
the argument, show the rejected value, and (where one helps) say what to pass instead.

Numbers are accepted in any form a user is likely to hold: Python ints and floats,
NumPy scalars and 0-dim tensors. ``bool`` is never a number here (``True`` as a
batch size is a bug, not 1).
"""

from __future__ import annotations

import math
import numbers
import operator
import os
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

from mixreplay.errors import CheckpointError

__all__ = [
    "TorchRLTable",
    "check_bool",
    "check_callable",
    "check_choice",
    "check_int",
    "check_path",
    "check_real",
    "check_saved_int",
    "check_torchrl_kwargs",
    "check_type",
    "describe",
    "shown",
]

T = TypeVar("T")


def describe(value: Any) -> str:
    """``"int 3"``, ``"str 'a'"``: a value as error messages show it."""
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(value).__name__} {text}"


def _fix(hint: str) -> str:
    return f"; {hint}" if hint else ""


def check_int(
    value: Any,
    name: str,
    *,
    min: int | None = None,
    max: int | None = None,
    what: str = "",
    hint: str = "",
) -> int:
    """``value`` as a Python int within ``[min, max]``.

    Accepts anything with ``__index__`` (NumPy integers, 0-dim integer tensors).
    ``what`` replaces "an int" in messages (e.g. ``"a positive number of rows"``).

    Raises:
        TypeError: not an integer (``bool`` and floats included, even ``2.0``).
        ValueError: outside ``[min, max]``.
    """
    kind = what or "an int"
    if isinstance(value, bool):
        raise TypeError(f"{name} must be {kind}, got {describe(value)}{_fix(hint)}")
    try:
        out = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be {kind}, got {describe(value)}{_fix(hint)}") from None
    if (min is not None and out < min) or (max is not None and out > max):
        bounds = what or f"an int {_interval(min, max)}"
        raise ValueError(f"{name} must be {bounds}, got {out}{_fix(hint)}")
    return out


def _interval(
    lo: float | None, hi: float | None, open_lo: bool = False, open_hi: bool = False
) -> str:
    if lo is not None and hi is not None:
        return f"in {'(' if open_lo else '['}{lo:g}, {hi:g}{')' if open_hi else ']'}"
    if lo is not None:
        return f"{'>' if open_lo else '>='} {lo:g}"
    if hi is not None:
        return f"{'<' if open_hi else '<='} {hi:g}"
    return ""


def check_real(
    value: Any,
    name: str,
    *,
    min: float | None = None,
    max: float | None = None,
    open_min: bool = False,
    open_max: bool = False,
    what: str = "",
    hint: str = "",
) -> float:
    """``value`` as a finite Python float within the given bounds.

    Accepts ints, floats, NumPy scalars and 0-dim tensors.

    Raises:
        TypeError: not a real number.
        ValueError: NaN, infinite, or out of bounds.
    """
    kind = what or "a number"
    if isinstance(value, (bool, str, bytes)):
        raise TypeError(f"{name} must be {kind}, got {describe(value)}{_fix(hint)}")
    if isinstance(value, numbers.Real):
        out = float(value)
    else:
        try:
            out = float(value)  # 0-dim tensors, NumPy scalars
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"{name} must be {kind}, got {describe(value)}{_fix(hint)}") from None
    bad = not math.isfinite(out)
    if min is not None:
        bad = bad or (out <= min if open_min else out < min)
    if max is not None:
        bad = bad or (out >= max if open_max else out > max)
    if bad:
        where = _interval(min, max, open_min, open_max)
        what = f"a finite number {where}" if where else "a finite number"
        raise ValueError(f"{name} must be {what}, got {out!r}{_fix(hint)}")
    return out


def check_bool(value: Any, name: str) -> bool:
    """``value`` if it is a ``bool``; ``TypeError`` otherwise (``0``/``1`` are not flags)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {describe(value)}")
    return value


def check_callable(value: Any, name: str, *, hint: str = "") -> Callable[..., Any]:
    """``value`` if it is callable; ``TypeError`` naming ``name`` otherwise."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {describe(value)}{_fix(hint)}")
    return value


def check_type(value: Any, name: str, types: type[T] | tuple[type, ...], *, hint: str = "") -> T:
    """``value`` if it is an instance of ``types``; ``TypeError`` naming ``name`` otherwise."""
    if not isinstance(value, types):
        wanted = (
            " or ".join(t.__name__ for t in types) if isinstance(types, tuple) else types.__name__
        )
        raise TypeError(f"{name} must be a {wanted}, got {describe(value)}{_fix(hint)}")
    return value  # type: ignore[return-value]


def check_choice(value: Any, name: str, choices: Collection[Any]) -> Any:
    """``value`` if it is one of ``choices``; ``ValueError`` listing them otherwise."""
    if value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {listed}, got {value!r}")
    return value


def check_path(value: Any, name: str, *, what: str = "a path") -> Path:
    """``value`` (a ``str`` or ``os.PathLike``) as an expanded :class:`~pathlib.Path`."""
    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be {what} (str or os.PathLike), got {describe(value)}")
    if isinstance(value, str) and not value:
        raise ValueError(f"{name} must be a non-empty path, got ''")
    return Path(value).expanduser()


def check_saved_int(
    value: Any, what: str, *, min: int = 0, error: Callable[[str], Exception] | None = None
) -> int:
    """An int ``>= min`` read from a saved state (JSON: ``bool`` and floats are not ints).

    Raises ``error`` (a :class:`~mixreplay.CheckpointError` by default) naming ``what``.
    """
    if isinstance(value, (bool, float)):
        out = None
    else:
        try:
            out = operator.index(value)
        except TypeError:
            out = None
    if out is None or out < min:
        raise (error or CheckpointError)(f"{what} must be an int >= {min}, got {describe(value)}")
    return out


#: TorchRL argument -> (values that mean mixreplay's own behaviour, the mixreplay way)
#: argument -> (the values that mean mixreplay's own behaviour, or a test of the value; the
#: mixreplay way)
TorchRLTable = dict[str, tuple[tuple[Any, ...] | Callable[[Any], bool], str]]


def shown(value: Any) -> str:
    """``repr(value)`` for a message, shortened; never raises (a TorchRL writer that is not
    attached to a storage fails in its own ``repr``)."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= 80 else text[:77] + "..."


def _same(value: Any, accepted: Any) -> bool:
    return value is accepted or (type(value) is type(accepted) and value == accepted)


def check_torchrl_kwargs(owner: str, kwargs: dict[str, Any], table: TorchRLTable) -> None:
    """Refuse a keyword that is unknown, or a TorchRL one with a value mixreplay lacks.

    A TorchRL argument mixreplay does not implement is accepted only with the values
    listed in ``table`` (those that mean what mixreplay does anyway), or those its test
    accepts; any other value raises ``TypeError`` naming the argument and the mixreplay way.
    """
    for name, value in kwargs.items():
        if name not in table:
            raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}")
        accepted, way = table[name]
        if callable(accepted):
            ok, only = accepted(value), "TorchRL's default"
        else:
            ok, only = any(_same(value, a) for a in accepted), " / ".join(map(repr, accepted))
        if not ok:
            raise TypeError(
                f"{owner} does not support TorchRL's {name}={shown(value)} (only {only}, which "
                f"is mixreplay's behaviour){_fix(way)}"
            )

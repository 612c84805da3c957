"""What a loader keeps of a source's rows: key selection, renaming and the dtype policy.

Every loader (``minari:``, ``d4rl:``) first builds rows in the TED layout, then
passes each chunk through one :class:`RowPolicy`, applied in this order:

1. ``keys``: keep only these keys (a key naming a sub-tree keeps all its leaves);
2. ``rename``: ``{old: new}``, where ``old`` is a leaf or a sub-tree (then every
   leaf under it moves);
3. ``dtype``: ``"float32"`` by default, casting every floating leaf (Minari
   stores rewards as float64); ``None`` keeps the stored dtypes; a mapping
   ``{key: dtype}`` (output names, after renaming) casts only those keys.

The policy is strict: a key that is not in the source, a rename that would
collide with another key, or a dtype that is not a dtype raises
:class:`~mixreplay.errors.DatasetError` listing the keys that do exist. Its
:meth:`~RowPolicy.to_json` is part of the cache key, so rows converted under one
policy are never served under another.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from mixreplay.errors import DatasetError
from mixreplay.schema import NestedKey, format_key, normalize_key

__all__ = ["RowPolicy", "flat_leaves", "nest"]

Leaves = Mapping[tuple[str, ...], "np.ndarray | torch.Tensor"]


def _as_dtype(value, what: str) -> torch.dtype:
    if isinstance(value, torch.dtype):
        return value
    if isinstance(value, str):
        dtype = getattr(torch, value.removeprefix("torch."), None)
        if isinstance(dtype, torch.dtype):
            return dtype
    if isinstance(value, (type, np.dtype)):
        try:
            return torch.from_numpy(np.empty(0, dtype=value)).dtype
        except TypeError:
            pass
    raise DatasetError(f"{what} must be a dtype such as 'float32' or torch.float32, got {value!r}")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _under(key: tuple[str, ...], prefix: tuple[str, ...]) -> bool:
    return key[: len(prefix)] == prefix


def _key_list(keys: Iterable[tuple[str, ...]]) -> str:
    return "[" + ", ".join(format_key(k) for k in keys) + "]"


class RowPolicy:
    """Which keys a loader keeps, under which names, with which dtypes.

    Keyword Args:
        keys: keep only these keys (strings or tuples; a sub-tree key keeps its leaves).
            ``None`` keeps every key.
        rename: ``{old: new}``; ``old`` is a leaf or a sub-tree of the kept keys.
        dtype: ``"float32"`` (the default) casts every floating leaf to float32;
            any floating dtype works the same way; ``None`` keeps stored dtypes;
            a mapping ``{key: dtype}`` (keys named after renaming) casts only those.

    Examples:
        >>> import numpy as np
        >>> from mixreplay.datasets.transforms import RowPolicy
        >>> policy = RowPolicy(keys=["observation", ("next", "reward")], rename={"observation": "obs"})
        >>> rows = {("observation",): np.zeros((4, 3)), ("next", "reward"): np.zeros((4, 1)),
        ...         ("action",): np.zeros((4, 2))}
        >>> {k: (tuple(v.shape), v.dtype) for k, v in policy.apply(rows).items()}
        {('obs',): ((4, 3), torch.float32), ('next', 'reward'): ((4, 1), torch.float32)}
        >>> policy
        RowPolicy(keys=['observation', ('next', 'reward')], rename={'observation': 'obs'}, dtype='float32')
    """

    def __init__(
        self,
        *,
        keys: Iterable[NestedKey] | None = None,
        rename: Mapping[NestedKey, NestedKey] | None = None,
        dtype: str | torch.dtype | Mapping[NestedKey, str | torch.dtype] | None = "float32",
    ):
        if isinstance(keys, (str, tuple)):
            keys = [keys]
        try:
            self.keys = None if keys is None else tuple(normalize_key(k) for k in keys)
            if rename is not None and not isinstance(rename, Mapping):
                raise DatasetError(
                    f"rename must be a mapping {{old: new}}, got {type(rename).__name__}"
                )
            self.rename = tuple(
                (normalize_key(o), normalize_key(n)) for o, n in (rename or {}).items()
            )
        except TypeError as err:
            raise DatasetError(str(err)) from err
        if self.keys is not None and not self.keys:
            raise DatasetError("keys=[] would keep no key; pass None to keep every key")
        self.dtype: dict[tuple[str, ...], torch.dtype] | torch.dtype | None
        if isinstance(dtype, Mapping):
            self.dtype = {normalize_key(k): _as_dtype(v, f"dtype[{k!r}]") for k, v in dtype.items()}
        elif dtype is None:
            self.dtype = None
        else:
            self.dtype = single = _as_dtype(dtype, "dtype")
            if not single.is_floating_point:
                raise DatasetError(
                    f"dtype={dtype!r} applies to every floating key and must be a floating dtype; "
                    "cast other keys with a mapping, e.g. dtype={'action': 'int64'}"
                )

    # -- the policy as data -------------------------------------------------------------------

    def to_json(self) -> dict:
        """A JSON-able description of the policy (part of the cache key)."""
        dtype: dict[str, str] | str | None
        if isinstance(self.dtype, dict):
            dtype = {"/".join(k): _dtype_name(v) for k, v in sorted(self.dtype.items())}
        else:
            dtype = None if self.dtype is None else _dtype_name(self.dtype)
        return {
            "keys": None if self.keys is None else [list(k) for k in self.keys],
            "rename": [[list(o), list(n)] for o, n in self.rename],
            "dtype": dtype,
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RowPolicy) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(repr(self))

    def __repr__(self) -> str:
        def show(k):
            return k[0] if len(k) == 1 else k

        keys = None if self.keys is None else [show(k) for k in self.keys]
        rename = {show(o): show(n) for o, n in self.rename}
        dtype: dict[Any, str] | str | None
        if isinstance(self.dtype, dict):
            dtype = {show(k): _dtype_name(v) for k, v in self.dtype.items()}
        else:
            dtype = None if self.dtype is None else _dtype_name(self.dtype)
        return f"RowPolicy(keys={keys!r}, rename={rename!r}, dtype={dtype!r})"

    # -- applying it ---------------------------------------------------------------------------

    def output_keys(
        self, source_keys: Iterable[tuple[str, ...]], *, where: str = "the source"
    ) -> dict:
        """Map each kept source key to its output key; raise if the policy does not fit.

        Args:
            source_keys: the leaves the loader builds.
            where: names the source in messages, e.g. ``"minari:test/pendulum-v0"``.
        """
        source_keys = list(source_keys)
        kept = source_keys
        if self.keys is not None:
            for k in self.keys:
                if not any(_under(s, k) for s in source_keys):
                    raise DatasetError(
                        f"key {format_key(k)} not found in {where} with keys {_key_list(source_keys)}; "
                        "fix keys=[...]"
                    )
            kept = [s for s in source_keys if any(_under(s, k) for k in self.keys)]
        mapping = {s: s for s in kept}
        for old, new in self.rename:
            moved = [s for s in kept if _under(s, old)]
            if not moved:
                raise DatasetError(
                    f"cannot rename {format_key(old)}: not found in {where} with keys {_key_list(kept)}; "
                    "fix rename={old: new}"
                )
            for s in moved:
                mapping[s] = new + mapping[s][len(old) :]
        outputs = list(mapping.values())
        seen: dict[tuple[str, ...], tuple[str, ...]] = {}
        for s, out in mapping.items():
            if out in seen:
                raise DatasetError(
                    f"rename maps both {format_key(seen[out])} and {format_key(s)} to {format_key(out)}; "
                    "give them different names"
                )
            seen[out] = s
        for out in outputs:
            for other in outputs:
                if other != out and _under(other, out):
                    raise DatasetError(
                        f"after renaming, {format_key(out)} is both a leaf and the parent of "
                        f"{format_key(other)}; give them different names"
                    )
        if isinstance(self.dtype, dict):
            for k in self.dtype:
                if not any(_under(out, k) for out in outputs):
                    raise DatasetError(
                        f"dtype names key {format_key(k)}, not found in {where} with keys "
                        f"{_key_list(outputs)} (after keys/rename); fix dtype={{key: dtype}}"
                    )
        return mapping

    def cast_to(self, key: tuple[str, ...], dtype: torch.dtype) -> torch.dtype:
        """The dtype the output leaf ``key``, stored as ``dtype``, gets."""
        if self.dtype is None:
            return dtype
        if isinstance(self.dtype, dict):
            for k, d in self.dtype.items():
                if _under(key, k):
                    return d
            return dtype
        return self.dtype if dtype.is_floating_point else dtype

    def apply(
        self, leaves: Leaves, *, where: str = "the source"
    ) -> dict[tuple[str, ...], torch.Tensor]:
        """Select, rename and cast a chunk of rows given as ``{key: array [n, ...]}``."""
        mapping = self.output_keys(leaves.keys(), where=where)
        out = {}
        for s, key in mapping.items():
            v = leaves[s]
            t = v if isinstance(v, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(v))
            out[key] = t.to(self.cast_to(key, t.dtype))
        return out

    def apply_td(self, rows: TensorDictBase, *, where: str = "the source") -> TensorDict:
        """:meth:`apply` to a ``[n]`` TensorDict of rows; returns a new TensorDict."""
        leaves: Leaves = {
            normalize_key(k): v for k, v in rows.items(include_nested=True, leaves_only=True)
        }
        return TensorDict(nest(self.apply(leaves, where=where)), batch_size=rows.batch_size)


def flat_leaves(tree, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Flatten nested dicts (and tuples, as ``"0"``, ``"1"``, ...) of arrays into ``{key: array}``."""
    out: dict[tuple[str, ...], Any]
    if isinstance(tree, Mapping):
        out = {}
        for k, v in tree.items():
            out.update(flat_leaves(v, prefix + (str(k),)))
        return out
    if isinstance(tree, tuple):
        out = {}
        for i, v in enumerate(tree):
            out.update(flat_leaves(v, prefix + (str(i),)))
        return out
    return {prefix: tree}


def nest(leaves: Mapping[tuple[str, ...], torch.Tensor]) -> dict:
    """``{("a", "b"): x}`` -> ``{"a": {"b": x}}`` (what ``TensorDict(...)`` takes)."""
    root: dict = {}
    for key, value in leaves.items():
        node = root
        for p in key[:-1]:
            node = node.setdefault(p, {})
        node[key[-1]] = value
    return root

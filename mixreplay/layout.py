"""The packed row layout behind every mixreplay storage.

A :class:`RowLayout` packs the leaves of a :class:`~mixreplay.schema.Schema` into a
fixed number of 8-byte words, so a whole row (every key, every dtype) is one row
of a single ``int64`` tensor. Writing a row is one copy per dtype group; a whole
row sits in one or two cache lines, so the random reads of a sampled batch touch
few lines.

A sampled batch never leaks the packing: :meth:`RowLayout.gather` reads each leaf
with its own ``index_select`` from a strided typed view of the rows, and
:meth:`RowLayout.copy_out` copies packed words (a mixing buffer's batch, a
staging buffer moved to a device) into one new tensor per leaf, all of them made
by one ``torch._foreach_clone`` of the leaves' typed views (one dispatch for the
whole batch; :meth:`RowLayout.copy_views` when the views are kept between batches). Each leaf of a
batch owns its storage, as in a TorchRL batch: ``torch.save``, ``pickle``,
multiprocessing queues, ``share_memory_()`` and ``resize_`` behave as users
expect. :meth:`RowLayout.unpack` (typed views, no copy) is only for views of the
stored rows themselves (``storage._storage``, :meth:`column`).

Leaves are ordered by decreasing item size, so every leaf starts at an offset
aligned to its own item size; rows are padded to a multiple of 8 bytes.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from tensordict import TensorDict, TensorDictBase

from mixreplay.errors import SchemaMismatchError
from mixreplay.schema import Field, Schema, format_key

_HOST = torch.device("cpu")

__all__ = ["WORD_BYTES", "RowLayout"]

WORD_BYTES = 8

#: the generated unpack / copy_out / copy_views / gather functions of each schema (keyed by
#: its fields in the user's order, which decide both the packing and the output's key order)
_COMPILED: dict[tuple[Field, ...], tuple[Any, Any, Any, Any]] = {}


@dataclass(frozen=True)
class _Group:
    """Consecutive leaves of one dtype: how to split a typed view of the row into them."""

    dtype: torch.dtype
    start: int  # first column, in units of this dtype
    stop: int
    fields: tuple[int, ...]  # indices into RowLayout.fields
    sizes: tuple[int, ...]  # split sizes over the whole typed row
    parts: tuple[int, ...]  # which split part holds each field


class RowLayout:
    """Where each leaf of a :class:`Schema` lives inside a packed row of 8-byte words.

    Args:
        schema: the leaves to pack.
    """

    def __init__(self, schema: Schema):
        if len(schema) == 0:
            raise SchemaMismatchError("a row needs at least one tensor leaf; got an empty schema")
        # Canonical order (item size, dtype, key): equal schemas pack identically,
        # whatever order their keys were written in.
        order = sorted(
            range(len(schema)),
            key=lambda i: (
                -schema.fields[i].dtype.itemsize,
                str(schema.fields[i].dtype),
                schema.fields[i].key,
            ),
        )
        self.schema = schema
        self.fields: tuple[Field, ...] = tuple(schema.fields[i] for i in order)
        offsets, pos = [], 0
        for f in self.fields:
            offsets.append(pos)
            pos += f.nbytes
        self.offsets = tuple(offsets)
        self.data_bytes = pos
        # A row is a whole number of its widest item (complex128 is 16 bytes), so every
        # dtype group can be viewed over the packed words of any number of rows.
        align = max([WORD_BYTES] + [f.dtype.itemsize for f in self.fields])
        self.row_bytes = max(align, -(-pos // align) * align)
        self.row_words = self.row_bytes // WORD_BYTES
        self.groups = self._make_groups()
        # Leaves whose per-row shape is not one flat dim need a reshape after the split.
        self._reshape = tuple((i, f.shape) for i, f in enumerate(self.fields) if len(f.shape) != 1)
        self._tree = self._make_tree()
        # generated once per schema (a storage loaded again builds its layout again)
        compiled = _COMPILED.get(schema.fields)
        if compiled is None:
            if len(_COMPILED) >= 256:  # schemas made on the fly by transforms: do not hoard
                _COMPILED.clear()
            compiled = _COMPILED[schema.fields] = (
                self._compile_unpack(owned=False),
                self._compile_unpack(owned=True),
                self._compile_copy_views(),
                self._compile_gather(),
            )
        self._unpack, self._copy_out, self._copy_views, self._gather = compiled
        # The strided per-leaf views of the last rows gathered from (dropped with them).
        self._columns: tuple[weakref.ref, tuple[torch.Tensor, ...]] | None = None
        # Leaves already [n, k] are written as they are; others are flattened first, to
        # their known width (a -1 cannot be resolved for 0 rows).
        self._flat = tuple(len(f.shape) == 1 for f in self.fields)
        self._width = tuple(f.numel for f in self.fields)

    def _make_groups(self) -> tuple[_Group, ...]:
        groups = []
        i = 0
        while i < len(self.fields):
            dtype = self.fields[i].dtype
            j = i
            while j < len(self.fields) and self.fields[j].dtype == dtype:
                j += 1
            size = dtype.itemsize
            start = self.offsets[i] // size
            stop = start + sum(f.numel for f in self.fields[i:j])
            width = self.row_bytes // size
            sizes, parts = [], []
            if start:
                sizes.append(start)
            for f in self.fields[i:j]:
                parts.append(len(sizes))
                sizes.append(f.numel)
            if width - stop:
                sizes.append(width - stop)
            groups.append(
                _Group(dtype, start, stop, tuple(range(i, j)), tuple(sizes), tuple(parts))
            )
            i = j
        return tuple(groups)

    def _make_tree(self) -> dict:
        tree: dict = {}
        for i, f in enumerate(self.fields):
            node = tree
            for p in f.key[:-1]:
                node = node.setdefault(p, {})
                if not isinstance(node, dict):
                    raise SchemaMismatchError(f"key {format_key(f.key)} is both a leaf and a node")
            node[f.key[-1]] = i
        # Keep the user's key order (schema order), not the packing order.
        ordered: dict = {}
        for f in self.schema.fields:
            node, src = ordered, tree
            for p in f.key[:-1]:
                node = node.setdefault(p, {})
                src = src[p]
            node[f.key[-1]] = src[f.key[-1]]
        return ordered

    def __reduce__(self):
        # the generated functions are rebuilt from the schema, not pickled
        return (RowLayout, (self.schema,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RowLayout) and self.fields == other.fields

    def __hash__(self) -> int:
        return hash(self.fields)

    def __repr__(self) -> str:
        return f"RowLayout({len(self.fields)} leaves, {self.data_bytes} bytes in {self.row_bytes})"

    # -- reading ---------------------------------------------------------------------------

    def split(self, words: torch.Tensor) -> list[torch.Tensor]:
        """Typed views, one per leaf (in ``self.fields`` order), of packed rows ``[n, W]``."""
        leaves: list = [None] * len(self.fields)
        for g in self.groups:
            parts = words.view(g.dtype).split_with_sizes(g.sizes, dim=-1)
            for fi, pi in zip(g.fields, g.parts):
                leaves[fi] = parts[pi]
        for i, shape in self._reshape:
            leaves[i] = leaves[i].reshape(*leaves[i].shape[:-1], *shape)
        return leaves

    def unpack(self, words: torch.Tensor, device: torch.device | None = None) -> TensorDict:
        """Wrap packed rows ``[n, W]`` as a TensorDict of typed views (no copy).

        The leaves share ``words`` (views of several dtypes over one buffer): use it
        for views of stored rows, never for a batch handed to a user (:meth:`copy_out`).
        """
        return self._unpack(words, device)

    def copy_out(self, words: torch.Tensor, device: torch.device | None = None) -> TensorDict:
        """Packed rows ``[n, W]`` as a TensorDict of new tensors, one per leaf.

        Each leaf owns its storage (nothing is shared with ``words`` or another leaf),
        on ``words``' device: one ``narrow_copy`` per leaf, issued without waiting on a device.
        """
        return self._copy_out(words, device)

    def new_rows(self, n: int, device: torch.device) -> PackedRows:
        """Uninitialised packed rows ``[n, W]`` on ``device`` with their :meth:`split` views,
        for a buffer that gathers into them again and again (:meth:`copy_views`)."""
        words = torch.empty(n, self.row_words, dtype=torch.int64, device=device)
        return PackedRows(words, self.split(words), torch.Size([n]))

    def copy_views(
        self, views: Sequence[torch.Tensor], batch_size: torch.Size, device: torch.device | None
    ) -> TensorDict:
        """:meth:`copy_out` of packed rows whose :meth:`split` views were kept: ``views``
        (``split(words)``, ``[*batch_size, ...]`` each) copied into new tensors, one per leaf.

        A buffer that reuses one packed scratch buffer keeps its views and saves their
        making on every batch; the copies are those of :meth:`copy_out`.
        """
        return self._copy_views(views, batch_size, device)

    def gather(
        self, rows: torch.Tensor, index: torch.Tensor, device: torch.device | None = None
    ) -> TensorDict:
        """Rows ``index`` of packed ``rows`` as a TensorDict of new tensors, one per leaf.

        One ``index_select`` per leaf from a strided typed view of ``rows`` (the views
        are kept while ``rows`` lives); each leaf owns its storage.
        """
        cached = self._columns
        if cached is None or cached[0]() is not rows:
            cached = self._columns = (_rows_ref(rows, self), self.columns(rows))
        return self._gather(cached[1], index, device)

    def columns(self, rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Per leaf (``self.fields`` order), a typed view ``[n, *shape]`` of packed ``rows``."""
        return tuple(self.split(rows))

    def _leaf_exprs(self, owned: bool) -> tuple[dict[str, Any], list[str], dict[int, str]]:
        env: dict[str, Any] = {"NEW": _new_td, "CLONE": _clone_all, "EACH": _clone_each}
        lines: list[str] = []
        where = {}
        for gi, g in enumerate(self.groups):
            env[f"D{gi}"] = g.dtype
            lines.append(f"    p{gi} = words.view(D{gi}).split_with_sizes({g.sizes!r}, -1)")
            for fi, pi in zip(g.fields, g.parts):
                where[fi] = f"p{gi}[{pi}]"
        for fi, f in enumerate(self.fields):
            if len(f.shape) == 0:
                where[fi] += ".squeeze(-1)"
            elif len(f.shape) > 1:
                where[fi] += f".unflatten(-1, {tuple(f.shape)!r})"
        if owned:  # every leaf's typed view copied at once: one new tensor per leaf
            views = ", ".join(where[fi] for fi in range(len(self.fields)))
            lines.append(f"    L = (CLONE if len(bs) == 1 and bs[0] > 1 else EACH)([{views}])")
            where = {fi: f"L[{fi}]" for fi in range(len(self.fields))}
        return env, lines, where

    def _compile_copy_views(self):
        """Straight-line code for :meth:`copy_views`."""
        env: dict[str, Any] = {"NEW": _new_td, "CLONE": _clone_all, "EACH": _clone_each}
        lines = [
            "def copy_views(views, bs, device):",
            "    L = (CLONE if len(bs) == 1 and bs[0] > 1 else EACH)(views)",
        ]
        where = {fi: f"L[{fi}]" for fi in range(len(self.fields))}
        return self._compile_tree("copy_views", env, lines, where)

    def _compile_gather(self):
        """Straight-line code for :meth:`gather`: one ``index_select`` per leaf."""
        env: dict[str, Any] = {"NEW": _new_td, "SEL": torch.index_select}
        lines = ["def gather(C, index, device):", "    bs = index.shape"]
        where = {fi: f"SEL(C[{fi}], 0, index)" for fi in range(len(self.fields))}
        return self._compile_tree("gather", env, lines, where)

    def _compile_unpack(self, owned: bool):
        """Straight-line code for :meth:`unpack` / :meth:`copy_out`, generated once per layout.

        With one op per dtype group (and one copy per leaf when ``owned``) and no
        Python loop over keys, building the batch costs a few microseconds.
        """
        env, body, where = self._leaf_exprs(owned)
        lines = ["def unpack(words, device):", "    bs = words.shape[:-1]", *body]
        return self._compile_tree("unpack", env, lines, where)

    def _compile_tree(self, name: str, env: dict[str, Any], lines: list[str], where: dict):
        counter = iter(range(1 << 30))

        def emit(tree: dict) -> str:
            items = []
            for name, item in tree.items():
                value = where[item] if isinstance(item, int) else emit(item)
                items.append(f"{name!r}: {value}")
            var = f"t{next(counter)}"
            lines.append(f"    {var} = NEW({{{', '.join(items)}}}, bs, device)")
            return var

        lines.append(f"    return {emit(self._tree)}")
        exec("\n".join(lines), env)  # noqa: S102 - code built from validated key strings
        return env[name]

    # -- writing ---------------------------------------------------------------------------

    def leaves_of(self, td: TensorDictBase) -> list[torch.Tensor]:
        """The leaves of ``td`` in packing order, checked against the schema.

        Raises:
            SchemaMismatchError: a key is missing or extra, or a dtype or shape differs.
        """
        got = self._read_plain(td)
        # not None: the leaves; None: a mismatch or an unusual tree, checked generically
        return got[0] if got is not None else self._leaves_generic(td)

    def leaves_on(self, td: TensorDictBase, device: torch.device) -> list[torch.Tensor]:
        """:meth:`leaves_of`, detached and on ``device``: the values a write copies.

        Raises:
            SchemaMismatchError: a key is missing or extra, or a dtype or shape differs.
        """
        got = self._read_plain(td)
        # no grad, on the CPU already (== first: a device's .type costs ~0.8 µs a write)
        if got is not None and got[1] and (device == _HOST or device.type == "cpu"):
            return got[0]
        leaves = got[0] if got is not None else self._leaves_generic(td)
        if any(v.requires_grad or v.device != device for v in leaves):
            leaves = [v.detach().to(device) for v in leaves]
        return leaves

    def _read_plain(self, td: TensorDictBase) -> tuple[list[torch.Tensor], bool] | None:
        """:meth:`_read_leaves` of a plain ``[n]`` TensorDict; ``None`` for anything else."""
        if type(td) is TensorDict and td.batch_dims == 1:
            return self._read_leaves(td._tensordict, td.batch_size[0])
        return None

    def _leaves_generic(self, td: TensorDictBase) -> list[torch.Tensor]:
        got = Schema.from_tensordict(td, batch_dims=td.batch_dims)
        if got != self.schema:
            self._raise_mismatch(td)
        return [td.get(f.key) for f in self.fields]

    def _raise_mismatch(self, td: TensorDictBase) -> None:
        got = Schema.from_tensordict(td, batch_dims=td.batch_dims)
        self.schema.check_compatible(
            got,
            ignore_one_sided=frozenset(),
            names=("stored", "written"),
            fix="write rows with the same keys, dtypes and per-row shapes as the first write "
            "(cast with td.float() or select keys with td.select(...)), "
            "or use a new storage for the new layout",
        )
        raise SchemaMismatchError(  # pragma: no cover - the check above always finds the key
            "written rows do not match the stored layout"
        )

    def group_views(self, words: torch.Tensor) -> list[torch.Tensor]:
        """Per dtype group, the typed columns ``[n, cols]`` of packed rows ``words``."""
        return [words.view(g.dtype)[:, g.start : g.stop] for g in self.groups]

    def write(
        self,
        leaves: Sequence[torch.Tensor],
        views: Sequence[torch.Tensor],
        rows: slice | None = None,
    ) -> None:
        """Copy ``leaves`` (or ``leaves[i][rows]``) into destination group views.

        Args:
            leaves: values in ``self.fields`` order, from :meth:`leaves_of`.
            views: one typed ``[n, cols]`` destination per group (:meth:`group_views`
                of the destination rows).
            rows: which rows of the leaves to copy (all by default).
        """
        flat, width = self._flat, self._width
        for g, dest in zip(self.groups, views):
            parts = []
            for fi in g.fields:
                v = leaves[fi] if rows is None else leaves[fi][rows]
                parts.append(v if flat[fi] else v.reshape(v.shape[0], width[fi]))
            if len(parts) == 1:
                dest.copy_(parts[0])
            else:
                torch.cat(parts, dim=1, out=dest)

    def pack(self, td: TensorDictBase, device: torch.device | None = None) -> torch.Tensor:
        """Pack a ``[n]`` TensorDict into new rows ``[n, W]`` (padding zeroed).

        Args:
            td: the rows; checked against the schema first.
            device: where the packed rows go (the leaves' device by default).
        """
        leaves = self.leaves_of(td)
        n = td.batch_size[0]
        if device is None:
            device = leaves[0].device
        elif any(v.device != device for v in leaves):
            leaves = [v.to(device) for v in leaves]
        dest = torch.zeros(n, self.row_words, dtype=torch.int64, device=device)
        if any(v.requires_grad for v in leaves):  # values are packed, never autograd history
            leaves = [v.detach() for v in leaves]
        self.write(leaves, self.group_views(dest))
        return dest

    def write_leaves(
        self,
        leaves: list[torch.Tensor] | tuple[torch.Tensor, ...],
        views: list[torch.Tensor] | tuple[torch.Tensor, ...],
    ) -> None:
        """Copy ``leaves`` (from :meth:`leaves_of`) into ``views``, the per-leaf typed views
        of the destination rows (:meth:`split`), all in one call (C++ all the way: an
        interrupt lands before or after it). Worth it where the views are kept: the
        staging rows of small writes."""
        torch._foreach_copy_(views, leaves)  # a list or a tuple: no copy of either

    def _read_leaves(self, root: dict, n: int) -> tuple[list[torch.Tensor], bool] | None:
        """``(leaves, plain)`` of a plain TensorDict ``[n]`` (its ``_tensordict``) whose keys,
        dtypes and shapes are exactly the schema's, ``plain`` when no leaf requires grad and
        all are on the CPU; ``None`` for anything else (a mismatch, another TensorDict class
        inside, a tensor subclass): :meth:`_leaves_generic` then decides.

        Generated once per layout as straight-line code (:meth:`_compile_read_leaves`)."""
        self._read_leaves = self._compile_read_leaves()  # type: ignore[method-assign]
        return self._read_leaves(root, n)

    def _compile_read_leaves(self):
        env: dict[str, Any] = {"TD": TensorDict, "T": torch.Tensor}
        lines = ["def read(r0, n):"]
        nodes = iter(range(1, 1 << 30))
        fetch: list[str] = []

        def walk(tree: dict, var: str) -> None:
            fetch.append(f"        if len({var}) != {len(tree)}: return None")
            for name, item in tree.items():
                if isinstance(item, int):
                    fetch.append(f"        v{item} = {var}[{name!r}]")
                else:
                    sub = f"r{next(nodes)}"
                    fetch.append(f"        {sub} = {var}[{name!r}]")
                    fetch.append(f"        if type({sub}) is not TD: return None")
                    fetch.append(f"        {sub} = {sub}._tensordict")
                    walk(item, sub)

        walk(self._tree, "r0")
        lines += ["    try:", *fetch, "    except KeyError:", "        return None"]
        k = range(len(self.fields))
        for i, f in enumerate(self.fields):
            env[f"D{i}"] = f.dtype
        shapes = [repr(("n", *f.shape)).replace("'n'", "n") for f in self.fields]
        lines.append(f"    if {' or '.join(f'type(v{i}) is not T' for i in k)}: return None")
        lines.append(f"    if {' or '.join(f'v{i}.dtype is not D{i}' for i in k)}: return None")
        lines.append(f"    if {' or '.join(f'v{i}.shape != {shapes[i]}' for i in k)}: return None")
        leaves = ", ".join(f"v{i}" for i in k)
        grad = " or ".join(f"v{i}.requires_grad" for i in k)
        cpu = " and ".join(f"v{i}.is_cpu" for i in k)
        lines.append(f"    return [{leaves}], not ({grad}) and ({cpu})")
        exec("\n".join(lines), env)  # noqa: S102 - code built from validated key strings
        return env["read"]


class PackedRows(NamedTuple):
    """Packed rows kept for reuse (:meth:`RowLayout.new_rows`)."""

    words: torch.Tensor
    #: the typed view of each leaf over ``words`` (:meth:`RowLayout.split`)
    views: list[torch.Tensor]
    batch_size: torch.Size


def _clone_each(views: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [v.clone(memory_format=torch.contiguous_format) for v in views]


# New contiguous tensors with the values of typed column views of packed rows, one dispatch
# for all of them. Over two rows or more such a view is never dense unless it is contiguous
# (a leaf's columns of row-major rows), so the strides the clone preserves are the
# contiguous ones; zero or one row (where any stride is dense) goes to ``_clone_each``, as
# everything does on a torch without ``_foreach_clone`` (tests/storages/test_layout_copies.py).
_clone_all = getattr(torch, "_foreach_clone", _clone_each)


def _rows_ref(rows: torch.Tensor, layout: RowLayout) -> weakref.ref:
    """A weak reference to ``rows`` that drops ``layout``'s cached views of them once they
    are gone (so the views do not keep their memory alive); it holds the layout weakly
    too, so no reference cycle is made."""
    owner = weakref.ref(layout)

    def forget(ref: weakref.ref) -> None:
        lay = owner()
        if lay is not None and lay._columns is not None and lay._columns[0] is ref:
            lay._columns = None

    return weakref.ref(rows, forget)


def _build(tree: dict, leaves: list, batch_size: torch.Size, device) -> TensorDict:
    source = {}
    for name, item in tree.items():
        source[name] = (
            leaves[item] if isinstance(item, int) else _build(item, leaves, batch_size, device)
        )
    return _new_td(source, batch_size, device)


def _new_td_checked(source: dict, batch_size: torch.Size, device) -> TensorDict:
    # tensordict's constructor for already-checked leaves, built without a device and then
    # given it: ``_new_unsafe`` with a device asks torch, per new instance, whether MPS is
    # available (a few µs per batch on the hot path).
    td = TensorDict._new_unsafe(source=source, batch_size=batch_size, device=None)
    if device is not None:
        td._device = device if isinstance(device, torch.device) else torch.device(device)
    return td


_blank_td = object.__new__


def _new_td_direct(source: dict, batch_size: torch.Size, device) -> TensorDict:
    # The four fields ``_new_unsafe`` sets when given a dict of tensors (or TensorDicts), set
    # straight: its compile check and per-key loop cost ~1.6 µs of the ~2.4 µs of a batch's
    # TensorDict, and a batch builds one per nesting level. ``source`` becomes the
    # TensorDict's own dict: callers pass a new one.
    td = _blank_td(TensorDict)
    td._tensordict = source
    td._batch_size = batch_size
    td._device = (
        device if device is None or isinstance(device, torch.device) else torch.device(device)
    )
    td._td_dim_names = None
    return td


def _direct_matches() -> bool:
    """Whether :func:`_new_td_direct` builds what ``_new_unsafe`` builds on this tensordict
    (the same fields, a plain dict of leaves); checked once at import, so another tensordict
    version that changes its fields falls back to ``_new_unsafe``."""
    leaf = torch.zeros(2)
    bs = torch.Size([2])
    ref = TensorDict._new_unsafe(source={"a": leaf}, batch_size=bs, device=None)
    got = _new_td_direct({"a": leaf}, bs, None)
    try:
        return (
            type(ref._tensordict) is dict
            and vars(ref).keys() == vars(got).keys()
            and ref._td_dim_names is None
            and got.batch_size == bs
            and got["a"] is leaf
            and got.device is None
            and got.clone()["a"].shape == leaf.shape
        )
    except Exception:  # noqa: BLE001 - any difference means: use the library's constructor
        return False


_new_td = _new_td_direct if _direct_matches() else _new_td_checked


def new_tensordict(leaves: dict[str, torch.Tensor], batch_size: torch.Size) -> TensorDict:
    """A flat TensorDict of ``leaves`` built without re-checking them (the caller made each
    one ``[*batch_size, ...]``, on one device): a few µs less than ``TensorDict(...)``.
    ``leaves`` itself stays the caller's."""
    return _new_td(dict(leaves), batch_size, None)

"""The sampler contract: :class:`Sampler`."""

from __future__ import annotations

import functools
import inspect
from typing import Any, ClassVar

import torch

from mixreplay.errors import DataStructureError, EmptyBufferError
from mixreplay.storages.base import Storage

__all__ = ["MASK_KEY", "Sampler"]

#: where a padding sampler marks real rows (``True``) and padding (``False``): TorchRL's key
MASK_KEY = ("collector", "mask")


class Sampler:
    """How a source picks the rows of a batch: the contract every sampler fulfils.

    A sampler serves one storage. The buffer that owns both calls
    :meth:`attach` once, :meth:`on_extend` after each write and :meth:`sample`
    for each batch, always holding the storage's ``lock``. Of the storage a
    sampler reads only ``len()``, ``max_size``, ``cursor``, ``write_count``,
    ``generation``, ``rewrites`` and ``device`` (and the rows, through ``column``);
    any state it derives from the rows' contents is keyed on ``(generation, rewrites,
    write_count)``, so a restore of the rows (which changes ``generation``), an
    in-place write (``rewrites``) or a write it was not told about is always noticed.
    What it keeps per slot (priorities, an epoch's order) follows ``generation`` and
    ``write_count`` only: an in-place write keeps it (a slice sampler's epoch of episodes
    also follows the list of episodes: a write that moves a boundary starts a new one).

    The draw contract (what a buffer, or a mixing engine drawing one source's
    share, may rely on): ``sample(storage, n, generator)`` returns a 1-D int64
    tensor of slots of filled rows, drawn only with ``generator``, and

    - exactly ``n`` of them, except in two declared cases: a sampler with epochs
      (``ran_out`` semantics, :class:`~mixreplay.SamplerWithoutReplacement`)
      returns the rest of its epoch, fewer than ``n``, as the batch that ends it
      (``ran_out`` is then true, and the next call starts a new epoch, whose rows
      may repeat those of that short draw); a sampler with
      ``variable_length = True`` (``SliceSampler(strict_length=False)``) returns
      whole slices of its own lengths. A caller needing exactly ``n`` rows asks
      again for the rest (a variable-length sampler cannot serve it: check
      ``variable_length`` first);
    - with ``replacement = False``, distinct slots within one returned draw (not
      across two draws: a caller completing a short draw removes what repeats);
    - a multiple of ``unit`` rows (slices of ``unit`` steps) asked for: ``n`` must
      be one.

    A draw that cannot be served raises before the generator or the sampler's
    state change. Subclasses implement :meth:`sample`; the other hooks have
    no-op defaults. A subclass written for TorchRL's protocol
    (``sample(storage, batch_size) -> (index, info)``) is refused when the class
    is defined.

    TorchRL's call on its own works too, with TorchRL's meaning: without a
    generator, ``sampler.sample(storage, batch_size)`` (or ``batch_size=``) draws
    from torch's global generator (``torch.manual_seed`` makes it repeatable, as in
    TorchRL) and returns ``(index, info)``: ``info`` is a dict holding
    ``"priority_weight"`` for a prioritized sampler and a sampler's own entries
    (:meth:`info`, TorchRL's slice entries). ``storage`` is a mixreplay storage,
    filled through a buffer or with ``storage.set``; the sampler follows its rows as
    it does inside a buffer (new rows of a prioritized storage get the largest
    priority).

    A checkpoint names a sampler by :attr:`config_name` (its class name unless the
    class sets it), never by module path: moving a sampler class to another module
    keeps every checkpoint that names it loadable; renaming one means setting
    ``config_name`` to the old name.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import LazyTensorStorage, ReplayBuffer, Sampler
        >>> class Newest(Sampler):
        ...     def sample(self, storage, n, generator):
        ...         return torch.full((n,), (storage.cursor - 1) % storage.max_size)
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=Newest())
        >>> _ = rb.extend(TensorDict({"x": torch.arange(5)}, [5]))
        >>> rb.sample(2)["x"]
        tensor([4, 4])
    """

    #: the granularity of a draw: a mixing buffer asks this source for a multiple of
    #: ``unit`` rows (a slice sampler's slice length).
    unit: int = 1
    #: whether a row may be drawn twice within one draw; a mixing buffer checks that a
    #: source declaring ``False`` holds enough rows before drawing.
    replacement: bool = True
    #: set by samplers with epochs once the current one is exhausted (ends ``iter(rb)``).
    ran_out: bool = False
    #: whether the short last chunk of an epoch is dropped: a ``ReplayBuffer`` holding such
    #: a sampler needs a ``batch_size`` (TorchRL's rule: the chunk is short against it).
    drop_last: bool = False
    #: whether :meth:`update_priority` does anything (mixing buffers route updates only there).
    prioritized: bool = False
    #: whether a draw may return a number of rows of its own choosing (slices of varying
    #: length); a mixing buffer, which needs exact shares, cannot use such a sampler.
    variable_length: bool = False
    #: whether a draw may hold padding rows, marked ``False`` in the ``("collector", "mask")``
    #: entry of :meth:`info` (``SliceSampler(pad_output=True)``)
    pads: bool = False
    #: grows whenever a setting that changes what a draw gives changes (a prioritized
    #: sampler's ``alpha`` and ``beta``): a prefetching buffer redraws the batches it drew
    #: ahead with the old settings
    settings_version: int = 0
    #: what TorchRL's ``sample(storage, batch_size)`` says first when ``storage`` is not a
    #: mixreplay storage (TorchRL's own words, where its tests match them)
    foreign_storage_lead: ClassVar[str] = ""
    #: the name a checkpoint saves this sampler under (the class name by default)
    config_name: ClassVar[str] = "Sampler"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "config_name" not in cls.__dict__:
            cls.config_name = cls.__name__
        sample = cls.__dict__.get("sample")
        if sample is None or not inspect.isfunction(sample):
            return
        if "__mixreplay_draw__" in sample.__dict__:
            return  # already taught TorchRL's call (a class body reusing another's sample)
        params = list(inspect.signature(sample).parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
        if len(positional) < 4 and not varargs:  # self, storage, n, generator
            shown = ", ".join(p.name for p in positional)
            raise TypeError(
                f"{cls.__name__}.sample({shown}) follows TorchRL's sampler protocol "
                "(sample(storage, batch_size) -> (index, info)); a mixreplay Sampler implements "
                "sample(self, storage, n, generator) -> index: return n int64 slots drawn with "
                "the torch.Generator it is handed (see mixreplay.Sampler)"
            )
        cls.sample = _with_torchrl_call(sample)  # type: ignore[method-assign]

    def __getattr__(self, name: str) -> Any:
        # Only reached for missing attributes: a TorchRL one gets the mixreplay way.
        way = _TORCHRL_METHODS.get(name)
        if way is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raise AttributeError(f"{type(self).__name__} has no TorchRL {name!r}: {way}")

    def attach(self, storage: Storage) -> None:
        """Called once by the buffer that owns this sampler, with the storage it samples.

        A sampler that sizes state by the storage checks here that it fits
        (e.g. a ``max_capacity`` given at construction). The default does nothing.
        """

    def sample(self, storage: Storage, n: int, generator: torch.Generator) -> torch.Tensor:
        """Return ``n`` int64 slots of filled rows of ``storage``, drawn with ``generator``."""
        raise NotImplementedError

    def sample_into(
        self, storage: Storage, n: int, generator: torch.Generator, index: torch.Tensor
    ) -> torch.Tensor:
        """:meth:`sample`, drawing into ``index`` (an int64 ``[n]`` buffer of the caller's, on
        the generator's device) where the sampler can; returns the slots, in ``index`` or in
        a new tensor. The same numbers as :meth:`sample` either way. The default: a new one."""
        return self.sample(storage, n, generator)

    def available(self, storage: Storage) -> int:
        """How many units could be drawn now; a mixing buffer skips a source with none."""
        return len(storage)

    def on_extend(self, index: torch.Tensor, storage: Storage) -> None:
        """Called after rows were written at ``index`` (slots of the ring)."""

    def weight(self, index: torch.Tensor, storage: Storage) -> torch.Tensor | None:
        """Importance weights of sampled rows, or ``None`` when sampling is uniform."""
        return None

    def info(self, index: torch.Tensor, storage: Storage) -> dict[Any, torch.Tensor] | None:
        """Extra per-row entries for ``sample(return_info=True)`` about the draw that just
        returned ``index`` (called right after :meth:`sample`, under the same lock), or ``None``.

        TorchRL's slice sampler puts ``("next", "truncated")`` and the like there.
        """
        return None

    def check_priority(
        self, index: torch.Tensor, priority: torch.Tensor, *, positions: torch.Tensor | None = None
    ) -> Any:
        """Validate a priority update whole without applying it; return it ready to apply.

        A caller that updates several samplers at once (a mixing buffer) checks
        every part first, then applies each with :meth:`apply_priority`, so a bad
        value anywhere changes nothing anywhere.

        Args:
            index: slots, as :meth:`sample` returned them.
            priority: one value per slot, or a scalar.

        Keyword Args:
            positions: what to call each entry in an error message: the position
                of ``priority[i]`` in the caller's own input (default ``i``).

        Raises:
            TypeError: this sampler does not use priorities (the default).
        """
        raise TypeError(
            f"{type(self).__name__} does not use priorities; attach a PrioritizedSampler "
            "to the source whose priorities you update"
        )

    def apply_priority(self, checked: Any) -> None:
        """Apply what :meth:`check_priority` returned (nothing else can fail now)."""
        raise TypeError(
            f"{type(self).__name__} does not use priorities; attach a PrioritizedSampler "
            "to the source whose priorities you update"
        )

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """Set priorities: :meth:`check_priority`, then :meth:`apply_priority`."""
        self.apply_priority(self.check_priority(index, priority))

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint needs to resume this sampler (tensors and JSON values)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; a state that does not fit raises and changes nothing.

        Any index derived from the rows is dropped and rebuilt on the next draw.
        """
        return None

    def draw_state(self) -> Any:
        """What :meth:`sample` changes in this sampler, as a snapshot (``None``: nothing).

        A prefetching buffer records it before each draw, and puts it back with
        :meth:`restore_draw_state` to undo draws it discards.
        """
        return None

    def restore_draw_state(self, state: Any) -> None:
        """Put back a :meth:`draw_state` snapshot."""

    def config(self) -> dict[str, Any]:
        """Constructor arguments, JSON-able (saved in checkpoints)."""
        return {}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Sampler)
            and type(self) is type(other)
            and self.config() == other.config()
        )

    __hash__ = object.__hash__


_NO_GENERATOR: Any = object()  # ``sample(storage, batch_size)``: TorchRL's call


def _with_torchrl_call(draw: Any) -> Any:
    """``draw`` (mixreplay's ``sample(storage, n, generator)``), also answering TorchRL's call.

    With a generator (every mixreplay caller) the call goes straight to ``draw``;
    without one it is TorchRL's ``sample(storage, batch_size) -> (index, info)``.
    """

    missing = _NO_GENERATOR

    @functools.wraps(draw)
    def sample(
        self: Sampler,
        storage: Any,
        n: Any = None,
        generator: Any = missing,
        *,
        batch_size: Any = None,
    ) -> Any:
        if generator is not missing and batch_size is None:
            return draw(self, storage, n, generator)
        return _torchrl_sample(self, draw, storage, n, generator, batch_size)

    sample.__mixreplay_draw__ = draw  # type: ignore[attr-defined]
    return sample


def _torchrl_sample(
    sampler: Sampler,
    draw: Any,
    storage: Any,
    n: Any,
    generator: Any,
    batch_size: Any,
) -> tuple[torch.Tensor, dict[Any, torch.Tensor]]:
    """TorchRL's ``sampler.sample(storage, batch_size) -> (index, info)`` on a mixreplay sampler."""
    name = type(sampler).__name__
    if batch_size is not None:
        if n is not None:
            raise TypeError(
                f"{name}.sample got the batch size twice (n={n!r} and batch_size="
                f"{batch_size!r}); pass one: sample(storage, batch_size)"
            )
        n = batch_size
    if not isinstance(storage, Storage):
        raise DataStructureError(
            f"{sampler.foreign_storage_lead}{name}.sample(storage, batch_size) reads a mixreplay storage "
            "(LazyTensorStorage, LazyMemmapStorage, TensorStorage), got "
            f"{type(storage).__module__}.{type(storage).__name__}; store the rows in one of them"
        )
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise TypeError(f"{name}.sample batch_size must be a positive int, got {n!r}")
    if generator is _NO_GENERATOR or generator is None:
        generator = torch.default_generator  # TorchRL draws from the global RNG
    with storage.lock:
        if len(storage) == 0:
            raise EmptyBufferError(
                "Cannot sample from an empty storage: write rows first (storage.set, or "
                "extend the buffer that holds it)"
            )
        sampler.attach(storage)
        index = draw(sampler, storage, n, generator)
        info: dict[Any, torch.Tensor] = {}
        weight = sampler.weight(index, storage)
        if weight is not None:
            info["priority_weight"] = weight
        for key, value in (sampler.info(index, storage) or {}).items():
            # TorchRL's dict spells a one-part key as a str: info["truncated"]
            info[key[0] if isinstance(key, tuple) and len(key) == 1 else key] = value
    return index, info


#: TorchRL Sampler methods mixreplay's samplers lack -> the mixreplay way
_WRITES = (
    "the buffer tells its sampler of writes (ReplayBuffer.extend calls "
    "sampler.on_extend(index, storage)); use the sampler through a ReplayBuffer"
)
_TORCHRL_METHODS: dict[str, str] = {
    "add": _WRITES,
    "extend": _WRITES,
    "mark_update": _WRITES,
    "dumps": "save the buffer that holds it: rb.dumps(path) (or sampler.state_dict())",
    "loads": "load the buffer that holds it: rb.loads(path) (or sampler.load_state_dict(state))",
    "default_priority": "only a PrioritizedSampler has priorities (it has default_priority)",
    "_empty": "empty the buffer that holds it: rb.empty()",
}


# Its public home, where pickles find it (checkpoints name a sampler by config_name).
Sampler.__module__ = "mixreplay.samplers"

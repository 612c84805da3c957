"""The sampler contract (:class:`Sampler`) and the default uniform sampler."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from mixreplay.errors import EmptyBufferError
from mixreplay.storages.base import Storage

__all__ = ["RandomSampler", "Sampler"]


class Sampler:
    """How a source picks the rows of a batch: the contract every sampler fulfils.

    A sampler serves one storage. The buffer that owns both calls
    :meth:`attach` once, :meth:`on_extend` after each write and :meth:`sample`
    for each batch, always holding the storage's ``lock``. Of the storage a
    sampler reads only ``len()``, ``max_size``, ``cursor``, ``write_count``,
    ``generation`` and ``device`` (and the rows, through ``column``); any state
    it derives from the rows is keyed on ``(generation, write_count)``, so a
    restore of the rows (which changes ``generation``) or a write it was not told
    about is always noticed.

    Subclasses implement :meth:`sample`; the other hooks have no-op defaults.

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
    #: whether :meth:`update_priority` does anything (mixing buffers route updates only there).
    prioritized: bool = False
    #: the name a checkpoint saves this sampler under (the class name by default)
    config_name: ClassVar[str] = "Sampler"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "config_name" not in cls.__dict__:
            cls.config_name = cls.__name__

    def attach(self, storage: Storage) -> None:
        """Called once by the buffer that owns this sampler, with the storage it samples.

        A sampler that sizes state by the storage checks here that it fits
        (e.g. a ``max_capacity`` given at construction). The default does nothing.
        """

    def sample(self, storage: Storage, n: int, generator: torch.Generator) -> torch.Tensor:
        """Return ``n`` int64 slots of filled rows of ``storage``, drawn with ``generator``."""
        raise NotImplementedError

    def available(self, storage: Storage) -> int:
        """How many units could be drawn now; a mixing buffer skips a source with none."""
        return len(storage)

    def on_extend(self, index: torch.Tensor, storage: Storage) -> None:
        """Called after rows were written at ``index`` (slots of the ring)."""

    def weight(self, index: torch.Tensor, storage: Storage) -> torch.Tensor | None:
        """Importance weights of sampled rows, or ``None`` when sampling is uniform."""
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


class RandomSampler(Sampler):
    """Uniform sampling over the filled rows, with replacement (default) or without.

    Args:
        replacement: draw rows independently (a row may repeat within a batch), or,
            with ``False``, ``n`` distinct rows per draw (``torch.randperm``: it costs
            ``O(len)`` per batch, and ``n`` may not exceed the rows held).

    Examples:
        >>> import torch
        >>> from mixreplay import LazyTensorStorage, RandomSampler, ReplayBuffer
        >>> from tensordict import TensorDict
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=RandomSampler(),
        ...                   generator=torch.Generator().manual_seed(0))
        >>> _ = rb.extend(TensorDict({"x": torch.arange(10)}, [10]))
        >>> rb.sample(4)["x"].shape
        torch.Size([4])
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=RandomSampler(replacement=False),
        ...                   generator=0)
        >>> _ = rb.extend(TensorDict({"x": torch.arange(10)}, [10]))
        >>> sorted(rb.sample(10)["x"].tolist()) == list(range(10))
        True
    """

    def __init__(self, replacement: bool = True):
        if not isinstance(replacement, bool):
            raise TypeError(
                f"RandomSampler replacement must be a bool, got {type(replacement).__name__} {replacement!r}"
            )
        self.replacement = replacement

    def config(self) -> dict[str, Any]:
        return {} if self.replacement else {"replacement": False}

    def sample(self, storage: Storage, n: int, generator: torch.Generator) -> torch.Tensor:
        size = len(storage)
        if size == 0:
            raise EmptyBufferError("cannot sample: the source holds no rows; extend it first")
        if self.replacement:
            return torch.randint(size, (n,), generator=generator, device=generator.device)
        if n > size:  # checked before drawing, so the generator is left untouched
            raise ValueError(
                f"cannot draw {n} distinct rows without replacement from a source holding {size}; "
                f"ask for at most {size} rows, or use RandomSampler(replacement=True)"
            )
        return torch.randperm(size, generator=generator, device=generator.device)[:n]


# Their public home, where pickles find them (checkpoints name a sampler by config_name).
Sampler.__module__ = RandomSampler.__module__ = "mixreplay.samplers"

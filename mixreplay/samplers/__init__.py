"""Samplers: which rows of one source a batch draws.

A sampler is a small strategy object attached to one source. It draws row
indices with the generator it is handed (never the global RNG), so the buffer
that owns the generator owns the randomness and can save it::

    Sampler               the protocol
    ├── RandomSampler     uniform, with replacement (the default)
    ├── PrioritizedSampler  proportional to priority, with importance weights
    ├── SliceSampler      runs of consecutive steps inside one episode
    └── SamplerWithoutReplacement  epochs: every row once, in chunks of one permutation
"""

from __future__ import annotations

import torch

from mixreplay.errors import EmptyBufferError

__all__ = [
    "PrioritizedSampler",
    "RandomSampler",
    "Sampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
]


class Sampler:
    """How a source picks the rows of a batch.

    Subclasses implement :meth:`sample`; the other hooks have no-op defaults.

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

    #: rows per sampling unit: a batch of ``B`` rows holds ``B // unit`` units.
    unit: int = 1
    #: whether a row may be drawn twice within one draw; mixing buffers check that a
    #: source sampled without replacement holds enough rows before drawing.
    replacement: bool = True
    #: set by samplers with epochs once the current one is exhausted.
    ran_out: bool = False
    #: whether :meth:`update_priority` does anything (mixing buffers route updates only there).
    prioritized: bool = False

    def sample(self, storage, n: int, generator: torch.Generator) -> torch.Tensor:
        """Return ``n`` int64 row indices in ``[0, len(storage))``."""
        raise NotImplementedError

    def available(self, storage) -> int:
        """How many units could be drawn now; a mixing buffer skips a source with none."""
        return len(storage)

    def on_extend(self, index: torch.Tensor, storage) -> None:
        """Called after rows were written at ``index`` (slots of the ring)."""

    def weight(self, index: torch.Tensor, storage) -> torch.Tensor | None:
        """Importance weights of sampled rows, or ``None`` when sampling is uniform."""
        return None

    def check_priority(self, index: torch.Tensor, priority: torch.Tensor) -> object:
        """Validate a priority update without applying it (raise as :meth:`update_priority` would)."""
        self.update_priority(index, priority)  # the base class refuses every update
        return None

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        raise TypeError(
            f"{type(self).__name__} does not use priorities; attach a PrioritizedSampler "
            "to the source whose priorities you update"
        )

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        return None

    def draw_state(self):
        """What :meth:`sample` changes in this sampler, as a snapshot (``None``: nothing).

        A prefetching buffer records it before each draw, and puts it back with
        :meth:`restore_draw_state` to undo draws it discards.
        """
        return None

    def restore_draw_state(self, state) -> None:
        """Put back a :meth:`draw_state` snapshot."""

    def config(self) -> dict:
        """Constructor arguments, JSON-able (saved in checkpoints)."""
        return {}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.config() == other.config()

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

    def config(self) -> dict:
        return {} if self.replacement else {"replacement": False}

    def sample(self, storage, n: int, generator: torch.Generator) -> torch.Tensor:
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


def __getattr__(name: str):
    # The prioritized and slice samplers live in their own modules; import them on use.
    if name == "PrioritizedSampler":
        from mixreplay.samplers.prioritized import PrioritizedSampler

        return PrioritizedSampler
    if name == "SliceSampler":
        from mixreplay.samplers.slice import SliceSampler

        return SliceSampler
    if name == "SamplerWithoutReplacement":
        from mixreplay.samplers.without_replacement import SamplerWithoutReplacement

        return SamplerWithoutReplacement
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

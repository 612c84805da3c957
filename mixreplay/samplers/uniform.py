"""Uniform sampling with replacement: :class:`RandomSampler`, the default sampler."""

from __future__ import annotations

from typing import Any

import torch

from mixreplay.errors import EmptyBufferError
from mixreplay.samplers.base import Sampler
from mixreplay.samplers.without_replacement import SamplerWithoutReplacement
from mixreplay.storages.base import Storage

__all__ = ["RandomSampler"]


class RandomSampler(Sampler):
    """Uniform sampling over the filled rows, with replacement.

    As in TorchRL, ``RandomSampler(replacement=False, **kwargs)`` builds a
    :class:`~mixreplay.SamplerWithoutReplacement` (``drop_last``, ``shuffle`` go
    to it): epochs in which every row is drawn once, not merely ``n`` distinct
    rows per batch.

    Args:
        replacement: ``True`` (this sampler), or ``False`` for a
            :class:`~mixreplay.SamplerWithoutReplacement`.

    Examples:
        >>> import torch
        >>> from mixreplay import LazyTensorStorage, RandomSampler, ReplayBuffer
        >>> from tensordict import TensorDict
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=RandomSampler(),
        ...                   generator=torch.Generator().manual_seed(0))
        >>> _ = rb.extend(TensorDict({"x": torch.arange(10)}, [10]))
        >>> rb.sample(4)["x"].shape
        torch.Size([4])
        >>> RandomSampler(replacement=False, drop_last=True)  # TorchRL's dispatch
        SamplerWithoutReplacement(drop_last=True, shuffle=True)
    """

    def __new__(cls, replacement: bool = True, **kwargs: Any) -> Any:
        if not isinstance(replacement, bool):
            raise TypeError(
                f"RandomSampler replacement must be a bool, got {type(replacement).__name__} {replacement!r}"
            )
        if not replacement:
            if cls is not RandomSampler:
                raise TypeError(
                    f"{cls.__name__}(replacement=False): only RandomSampler itself turns into a "
                    "SamplerWithoutReplacement; build SamplerWithoutReplacement(...) directly"
                )
            return SamplerWithoutReplacement(**kwargs)
        return super().__new__(cls)

    def __init__(self, replacement: bool = True, **kwargs: Any):
        if kwargs:
            name = next(iter(kwargs))
            raise TypeError(
                f"RandomSampler got {name}={kwargs[name]!r}, which applies only without "
                f"replacement: RandomSampler(replacement=False, {name}=...) (a "
                "SamplerWithoutReplacement)"
            )

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state.get("replacement") is False:
            # pickled when RandomSampler(replacement=False) drew n distinct rows per batch:
            # it is now what that call builds, a SamplerWithoutReplacement (a fresh epoch)
            self.__class__ = SamplerWithoutReplacement  # type: ignore[assignment]
            SamplerWithoutReplacement.__init__(self)  # type: ignore[arg-type]
            return
        self.__dict__.update({k: v for k, v in state.items() if k != "replacement"})

    def sample(self, storage: Storage, n: int, generator: torch.Generator) -> torch.Tensor:
        size = len(storage)
        if size == 0:
            raise EmptyBufferError("cannot sample: the source holds no rows; extend it first")
        return torch.randint(size, (n,), generator=generator, device=generator.device)

    def sample_into(
        self, storage: Storage, n: int, generator: torch.Generator, index: torch.Tensor
    ) -> torch.Tensor:
        size = len(storage)
        if size == 0:
            raise EmptyBufferError("cannot sample: the source holds no rows; extend it first")
        # the very numbers: randint(size, ...) is random_(0, size) of a new tensor
        return index.random_(0, size, generator=generator)


# Its public home: checkpoints name a sampler by module and class, and pickles find it there.
RandomSampler.__module__ = "mixreplay.samplers"

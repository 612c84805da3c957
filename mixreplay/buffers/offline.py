"""Offline datasets: read-only rows with their episode boundaries, sampled like any buffer."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase

from mixreplay.buffers.replay import ReplayBuffer
from mixreplay.errors import DatasetError
from mixreplay.samplers import Sampler
from mixreplay.storages.frozen import FrozenStorage
from mixreplay.transforms import Transform

__all__ = ["OfflineDataset", "check_episode_starts"]

_META = torch.device("meta")


def check_episode_starts(starts: Any, rows: int, where: str = "episode_starts") -> torch.Tensor:
    """``starts`` as an int64 tensor: 0 first (for rows > 0), strictly increasing, below ``rows``.

    Raises:
        DatasetError: naming ``where`` and the first offending value.
    """
    try:
        t = torch.as_tensor(starts if isinstance(starts, torch.Tensor) else list(starts))
    except (TypeError, ValueError, RuntimeError) as err:
        raise DatasetError(
            f"{where} must be a sequence of ints, got {type(starts).__name__} ({err})"
        ) from None
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool or t.dim() > 1:
        raise DatasetError(f"{where} must be a 1-d sequence of ints, got {t.dtype}{list(t.shape)}")
    t = t.reshape(-1).to(torch.int64)
    if rows == 0:
        if t.numel():
            raise DatasetError(
                f"{where} must be empty for a dataset of 0 rows, got {t[:8].tolist()}"
            )
        return t
    if t.numel() == 0 or int(t[0]) != 0:
        raise DatasetError(f"{where} must start with 0 (the first row), got {t[:8].tolist()}")
    bad = (t[1:] <= t[:-1]).nonzero()
    if bad.numel():
        i = int(bad[0]) + 1
        raise DatasetError(
            f"{where} must increase strictly, got {int(t[i])} after {int(t[i - 1])} (position {i})"
        )
    if int(t[-1]) >= rows:
        raise DatasetError(f"{where} must stay below the {rows} rows, got {int(t[-1])}")
    return t


class OfflineDataset(ReplayBuffer):
    """A read-only offline dataset: packed rows, their schema and episode boundaries.

    Built by the loaders (``load_dataset("minari:...")``, ``"d4rl:..."``,
    ``"memmap:..."``) or from a TensorDict with :meth:`from_tensordict`. Usable
    wherever a buffer is: as ``offline_dataset`` of a mixing buffer, by
    :func:`~mixreplay.prefill_replay_buffer`, or on its own with :meth:`sample`.
    Its transforms (``transform=``, :meth:`append_transform`) apply to the rows it
    contributes to a mixed batch, exactly as when it is sampled alone.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay import OfflineDataset
        >>> ds = OfflineDataset.from_tensordict(
        ...     TensorDict({"obs": torch.arange(6.0).unsqueeze(-1)}, [6]), episode_starts=[0, 4])
        >>> len(ds), ds.num_episodes, ds[5]["obs"]
        (6, 2, tensor([5.]))
    """

    def __init__(
        self,
        storage: FrozenStorage,
        *,
        episode_starts: torch.Tensor | None = None,
        metadata: Mapping[str, Any] | None = None,
        path: str | os.PathLike[str] | None = None,
        sampler: Sampler | None = None,
        batch_size: int | None = None,
        generator: torch.Generator | int | None = None,
        transform: Transform | None = None,
    ):
        if not isinstance(storage, FrozenStorage):
            raise TypeError(
                f"an OfflineDataset reads a FrozenStorage, got {type(storage).__name__}"
            )
        super().__init__(
            storage=storage,
            sampler=sampler,
            batch_size=batch_size,
            generator=generator,
            transform=transform,
        )
        if episode_starts is None:
            episode_starts = torch.zeros(1 if len(storage) else 0, dtype=torch.int64)
        self._episode_starts = check_episode_starts(episode_starts, len(storage))
        self.metadata = dict(metadata or {})
        self.path = None if path is None else Path(path)

    @classmethod
    def from_tensordict(
        cls, td: TensorDictBase, *, episode_starts: Any = None, **kwargs: Any
    ) -> OfflineDataset:
        """Pack a ``[n]`` TensorDict (copied) into an in-memory dataset (``n`` may be 0).

        Raises:
            TypeError: ``td`` is not a TensorDict.
            ValueError: its batch is not one dimension of rows, or it holds no data
                (the ``meta`` device).
        """
        if not isinstance(td, TensorDictBase):
            raise TypeError(
                f"from_tensordict expects a TensorDict of rows, got {type(td).__name__}; wrap "
                "it: TensorDict(data, batch_size=[n])"
            )
        if td.batch_dims != 1:
            raise ValueError(
                f"from_tensordict expects rows, a TensorDict with batch_size=[n], got "
                f"batch_size={list(td.batch_size)}; flatten it first: td.reshape(-1)"
            )
        on_meta = [k for k, v in td.items(True, True) if getattr(v, "device", None) == _META]
        if on_meta:
            raise ValueError(
                f"key {on_meta[0]!r} is on the meta device, which holds no data; build the rows "
                "on the CPU or a GPU"
            )
        storage = FrozenStorage.from_tensordict(td)
        meta = {"fingerprint": storage.fingerprint, "rows": len(storage)}
        return cls(storage, episode_starts=episode_starts, metadata=meta, **kwargs)

    @property
    def storage(self) -> FrozenStorage:
        storage = self._storage
        assert isinstance(storage, FrozenStorage)
        return storage

    @property
    def episode_starts(self) -> torch.Tensor:
        """First row of each episode (int64, ascending)."""
        return self._episode_starts

    @property
    def num_episodes(self) -> int:
        return int(self._episode_starts.numel())

    @property
    def episode_ids(self) -> torch.Tensor:
        """The episode number of every row (int64 ``[len]``)."""
        ids = torch.zeros(len(self), dtype=torch.int64)
        if self.num_episodes > 1:
            ids[self._episode_starts[1:]] = 1
            ids = ids.cumsum(0)
        return ids

    @property
    def fingerprint(self) -> str:
        """A hash of the packed rows (checkpoints compare it)."""
        return self.storage.fingerprint

    @property
    def source_id(self) -> str | None:
        return self.metadata.get("source_id")

    def state_dict(self, *, copy: bool = True, by_reference: bool = True) -> dict[str, Any]:
        """As :meth:`ReplayBuffer.state_dict`; the rows are referenced (they are read-only)."""
        state = super().state_dict(copy=copy, by_reference=True)
        state["reference"] = {
            "source_id": self.source_id,
            "path": None if self.path is None else str(self.path),
        }
        return state

    def __repr__(self) -> str:
        where = f", path={str(self.path)!r}" if self.path else ""
        return (
            f"OfflineDataset(rows={len(self)}, episodes={self.num_episodes}, "
            f"schema={self.schema!r}{where})"
        )

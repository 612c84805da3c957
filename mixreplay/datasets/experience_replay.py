"""TorchRL's dataset classes by name: ``MinariExperienceReplay`` and ``D4RLExperienceReplay``.

TorchRL's training programs open offline data with
``MinariExperienceReplay(dataset_id, batch_size, root=..., download=..., sampler=...,
prefetch=..., split_trajs=...)`` and ``D4RLExperienceReplay(...)``: buffers you
``sample()``, whose batches carry the rows' ``"index"`` (TorchRL's
``TensorDictReplayBuffer``). These classes take TorchRL 0.14's constructor keywords
and open the data with mixreplay's own loaders (``minari:`` and ``d4rl:``, the
conversion cache), so a program runs with only its import changed.

What the rows hold: mixreplay's TED rows of the file, with the file's dtypes (as
TorchRL keeps them: Minari's rewards are float64, which TorchRL's programs cast with
``append_transform(DoubleToFloat())``); see :mod:`mixreplay.datasets.minari` and
:mod:`mixreplay.datasets.d4rl`. TorchRL's keyword meanings:

- ``root``: where the converted copy is kept (TorchRL keeps its own memory-mapped copy
  there); mixreplay's cache (``$MIXREPLAY_DATA_DIR``, else ``~/.cache/mixreplay``) when
  ``None``.
- ``download``: ``True`` (TorchRL's default): read the local copy, fetch it when missing
  (Minari's remote, D4RL's URL); ``False``: never fetch; ``"force"``: fetch and
  convert again.
- ``split_trajs=True``: the rows as TorchRL's padded trajectories, a ``[episodes,
  longest]`` TensorDict with ``"mask"`` (the real steps) and ``"traj_ids"``; each
  trajectory's padding is zeros and the last column's ``("next", "done")`` is set, as
  TorchRL sets it. The buffer then samples whole trajectories (``[B, longest]``). D4RL's
  trajectories also hold TorchRL's root ``"reward"``: what reaching the step earned (the
  previous step's reward; ``0`` at an episode's start, where TorchRL carries the previous
  episode's last reward over).
- ``sampler``, ``transform``, ``prefetch``, ``pin_memory``, ``collate_fn``: the buffer's.
- ``writer``: a dataset is read-only (TorchRL's default, ``ImmutableDatasetWriter``);
  ``None``, TorchRL's ``ImmutableDatasetWriter`` and ``RoundRobinWriter`` are accepted
  and ``extend``/``add`` raise :class:`~mixreplay.errors.ReadOnlyError`.
- ``_storage`` may be replaced, as TorchRL's decision-transformer program does
  (``data._storage = TensorStorage(rows)``): the sampler is re-attached to the new rows.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from mixreplay._validate import check_bool, check_choice, describe
from mixreplay.buffers.offline import OfflineDataset
from mixreplay.buffers.tensordict import TensorDictReplayBuffer
from mixreplay.errors import ReadOnlyError
from mixreplay.samplers import Sampler
from mixreplay.storages.base import Storage
from mixreplay.storages.foreign import adapt_storage
from mixreplay.storages.ring import TensorStorage
from mixreplay.transforms import Transform

__all__ = [
    "D4RLExperienceReplay",
    "MinariExperienceReplay",
    "previous_reward",
    "split_trajectories",
]


def _accepted_writer(writer: Any) -> bool:
    if writer is None:
        return True
    cls = writer if isinstance(writer, type) else type(writer)
    return cls.__module__.split(".")[0] == "torchrl" and cls.__name__ in (
        "ImmutableDatasetWriter",
        "RoundRobinWriter",
        "TensorDictRoundRobinWriter",
    )


def split_trajectories(rows: TensorDictBase, episode_starts: torch.Tensor) -> TensorDict:
    """Rows ``[n]`` as zero-padded trajectories ``[episodes, longest]`` (TorchRL's layout).

    Adds ``"mask"`` (``True`` on real steps) and ``"traj_ids"`` (the episode number,
    ``0`` on padding, as TorchRL pads every key with zeros), and sets
    ``("next", "done")`` on the last column, as TorchRL's D4RL dataset does.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay.datasets.experience_replay import split_trajectories
        >>> rows = TensorDict({"x": torch.arange(5.0), ("next", "done"): torch.zeros(5, 1, dtype=torch.bool)}, [5])
        >>> out = split_trajectories(rows, torch.tensor([0, 3]))
        >>> out.batch_size, out["x"].tolist(), out["mask"].tolist()
        (torch.Size([2, 3]), [[0.0, 1.0, 2.0], [3.0, 4.0, 0.0]], [[True, True, True], [True, True, False]])
    """
    n = rows.batch_size[0]
    starts = episode_starts.to(torch.int64)
    lengths = torch.diff(starts, append=torch.tensor([n]))
    episodes, longest = int(starts.numel()), int(lengths.max()) if starts.numel() else 0
    # where each row lands: (episode, step)
    episode = torch.repeat_interleave(torch.arange(episodes), lengths)
    step = torch.arange(n) - starts[episode]
    out = TensorDict({}, [episodes, longest])
    for key, value in rows.items(include_nested=True, leaves_only=True):
        padded = torch.zeros((episodes, longest, *value.shape[1:]), dtype=value.dtype)
        padded[episode, step] = value
        out.set(key, padded)
    mask = torch.zeros(episodes, longest, dtype=torch.bool)
    mask[episode, step] = True
    out.set("mask", mask)
    traj_ids = torch.zeros(episodes, longest, dtype=torch.int64)
    traj_ids[episode, step] = episode
    out.set("traj_ids", traj_ids)
    if ("next", "done") in out.keys(include_nested=True):
        out["next", "done"][:, -1] = True
    return out


class _DatasetExperienceReplay(TensorDictReplayBuffer):
    """What TorchRL's two dataset classes share: a read-only
    :class:`~mixreplay.TensorDictReplayBuffer` (batches carry ``"index"``) over rows a
    mixreplay loader opened."""

    def __init__(
        self,
        dataset: OfflineDataset,
        *,
        batch_size: int | None,
        sampler: Sampler | None,
        writer: Any,
        collate_fn: Callable[[Any], Any] | None,
        pin_memory: bool,
        prefetch: int | None,
        transform: Transform | None,
        split_trajs: bool,
        root: Path | None,
    ):
        if not _accepted_writer(writer):
            raise TypeError(
                f"{type(self).__name__} does not take writer={describe(writer)}: a dataset is "
                "read-only (TorchRL's ImmutableDatasetWriter); to add rows, mix it with an "
                "online buffer (OfflineToOnlineReplayBuffer) or prefill_replay_buffer a new buffer"
            )
        self.split_trajs = split_trajs
        self.root = root
        self.dataset = dataset
        self.metadata = dict(dataset.metadata)
        if split_trajs:
            rows = self._trajectory_rows(dataset)
            storage: Storage = TensorStorage(split_trajectories(rows, dataset.episode_starts))
        else:
            storage = dataset.storage
        super().__init__(
            storage=storage,
            sampler=sampler,
            batch_size=batch_size,
            transform=transform,
            prefetch=prefetch,
            pin_memory=pin_memory,
            collate_fn=collate_fn,
        )

    def _trajectory_rows(self, dataset: OfflineDataset) -> TensorDictBase:
        """The rows ``split_trajs=True`` pads into trajectories."""
        return dataset[:]

    # TorchRL's decision-transformer program replaces the rows: data._storage = TensorStorage(td)
    @property
    def _storage(self) -> Storage:
        return self.__dict__["_rows"]

    @_storage.setter
    def _storage(self, storage: Any) -> None:
        if not isinstance(storage, Storage):
            storage = adapt_storage(storage)
        if "_rows" in self.__dict__:  # a replacement, after construction
            self._discard_prefetched()
            self._sampler.attach(storage)
        self.__dict__["_rows"] = storage

    @property
    def episode_starts(self) -> torch.Tensor:
        """First row of each episode of the dataset (int64, ascending)."""
        return self.dataset.episode_starts

    def extend(
        self, data: Any, *, update_priority: bool | None = None, timeout: float | None = None
    ) -> torch.Tensor:
        raise ReadOnlyError(
            f"{type(self).__name__} is read-only (TorchRL's ImmutableDatasetWriter): to add "
            "rows, mix it with an online buffer (OfflineToOnlineReplayBuffer) or copy it into "
            "a new buffer with prefill_replay_buffer"
        )

    def add(self, data: Any, *, timeout: float | None = None) -> Any:
        return self.extend(data)

    @property
    def data_path_root(self) -> Path | None:
        """The converted copy's directory (TorchRL's name)."""
        return self.dataset.path

    @property
    def data_path(self) -> Path | None:
        """The converted copy's directory (TorchRL's name; the same with ``split_trajs``)."""
        return self.dataset.path


def _download(value: Any) -> bool | str:
    # TorchRL's types: a bool or "force" (1 == True, so check_choice alone would take 1)
    if not isinstance(value, (bool, str)):
        raise TypeError(
            f"download must be True, False or 'force', got {describe(value)}; e.g. "
            "download=True (fetch when missing)"
        )
    return check_choice(value, "download", (True, False, "force"))


def _dataset_id(value: Any, paths: bool) -> str:
    """``dataset_id`` as a str: a name (or, ``paths``, a file path); refused otherwise."""
    kinds = (str, os.PathLike) if paths else (str,)
    if not isinstance(value, kinds):
        what = "a dataset name or an HDF5 file path (str or os.PathLike)" if paths else "a str"
        raise TypeError(
            f"dataset_id must be {what}, got {describe(value)}; e.g. "
            + ("'hopper-medium-v2'" if paths else "'mujoco/hopper/expert-v0'")
        )
    return str(os.fspath(value))


def _root(root: Any) -> Path | None:
    return None if root is None else Path(os.fspath(root)).expanduser()


def _load(prefix: str, dataset_id: str, download: bool | str, root: Path | None, **kw: Any):
    from mixreplay.datasets.registry import load_dataset

    return load_dataset(
        f"{prefix}:{dataset_id}",
        dtype=None,  # the file's dtypes, as TorchRL keeps them
        download=download,
        refresh=download == "force",  # convert again too
        cache_dir=root,
        **kw,
    )


class MinariExperienceReplay(_DatasetExperienceReplay):
    """TorchRL's ``MinariExperienceReplay``, opened by mixreplay's ``minari:`` loader.

    Args:
        dataset_id: a Minari dataset ID (``"mujoco/hopper/expert-v0"``).
        batch_size: the default batch size of :meth:`sample` (``None``: pass it to ``sample``).

    Keyword Args:
        root: where the converted copy is kept (mixreplay's cache when ``None``).
        download: ``True``: read the local Minari root (``$MINARI_DATASETS_PATH``), let
            Minari download the dataset when it is not there; ``False``: local only;
            ``"force"``: download and convert again.
        sampler, writer, collate_fn, pin_memory, prefetch, transform: as TorchRL's (see
            the module docstring for ``writer``).
        split_trajs: sample whole padded trajectories (see the module docstring).
        load_from_local_minari: ``True``: read the local Minari root, never download.

    Raises:
        DatasetNotFoundError: not in the local Minari root and not downloaded.
        TypeError: a keyword value mixreplay has no meaning for (``writer``).

    Examples:
        >>> from mixreplay import MinariExperienceReplay
        >>> data = MinariExperienceReplay("D4RL/door/human-v2", batch_size=32)  # doctest: +SKIP
        >>> data.sample()["index"].shape  # doctest: +SKIP
        torch.Size([32])
    """

    def __init__(
        self,
        dataset_id: str,
        batch_size: int | None,
        *,
        root: str | os.PathLike[str] | None = None,
        download: bool | str = True,
        sampler: Sampler | None = None,
        writer: Any = None,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Transform | None = None,
        split_trajs: bool = False,
        load_from_local_minari: bool = False,
    ):
        dataset_id = _dataset_id(dataset_id, paths=False)
        download = _download(download)
        local = check_bool(load_from_local_minari, "load_from_local_minari")
        self.dataset_id = dataset_id
        self.download = download
        self.load_from_local_minari = local
        dataset = _load(
            "minari",
            dataset_id,
            False if local else download,
            _root(root),
            load_from_local_minari=local,
        )
        super().__init__(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            writer=writer,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
            split_trajs=check_bool(split_trajs, "split_trajs"),
            root=_root(root),
        )


def previous_reward(rows: TensorDictBase, episode_starts: torch.Tensor) -> torch.Tensor:
    """The reward received on reaching each row's state: the previous row's
    ``("next", "reward")`` within its episode, ``0`` at an episode's start.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from mixreplay.datasets.experience_replay import previous_reward
        >>> rows = TensorDict({("next", "reward"): torch.tensor([[1.0], [2.0], [3.0]])}, [3])
        >>> previous_reward(rows, torch.tensor([0, 2])).flatten().tolist()
        [0.0, 1.0, 0.0]
    """
    reward = rows["next", "reward"]
    out = torch.zeros_like(reward)
    out[1:] = reward[:-1]
    out[episode_starts.to(torch.int64)] = 0
    return out


class D4RLExperienceReplay(_DatasetExperienceReplay):
    """TorchRL's ``D4RLExperienceReplay``, opened by mixreplay's ``d4rl:`` loader (h5py only).

    Args:
        dataset_id: a D4RL dataset name (``"hopper-medium-v2"``, looked up in
            ``$D4RL_DATASET_DIR``, else downloaded from D4RL's URL) or an HDF5 file path.
        batch_size: the default batch size of :meth:`sample`.
        sampler, writer, collate_fn, pin_memory, prefetch, transform: as TorchRL's.
        split_trajs: sample whole padded trajectories (see the module docstring).
        from_env: any bool: mixreplay reads the file, which holds what ``env.get_dataset()``
            returns.
        use_truncated_as_done: ``True`` only: ``done = terminated | truncated``.
        direct_download: ``None`` or ``True``: mixreplay reads (and downloads) the file
            itself; the d4rl package is never used.
        terminate_on_end: ``None`` or ``True`` (TorchRL refuses ``False`` with a direct download too).
        download: ``True``: download a published dataset missing locally; ``False``:
            never; ``"force"``: download and convert again.
        root: where the converted copy is kept (mixreplay's cache when ``None``).
        **env_kwargs: refused, as TorchRL refuses them with a direct download.

    Raises:
        DatasetNotFoundError: no such file and no download.
        TypeError: a keyword value mixreplay has no meaning for, or ``env_kwargs``.

    Examples:
        >>> from mixreplay import D4RLExperienceReplay
        >>> data = D4RLExperienceReplay("hopper-medium-v2", batch_size=256)  # doctest: +SKIP
        >>> data.sample()["index"].shape  # doctest: +SKIP
        torch.Size([256])
    """

    def __init__(
        self,
        dataset_id: str,
        batch_size: int | None,
        sampler: Sampler | None = None,
        writer: Any = None,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Transform | None = None,
        split_trajs: bool = False,
        from_env: bool = False,
        use_truncated_as_done: bool = True,
        direct_download: bool | None = None,
        terminate_on_end: bool | None = None,
        download: bool | str = True,
        root: str | os.PathLike[str] | None = None,
        **env_kwargs: Any,
    ):
        if env_kwargs:
            raise TypeError(
                f"D4RLExperienceReplay got unexpected keyword arguments {sorted(env_kwargs)}: "
                "environment keywords need TorchRL's d4rl-package path; mixreplay reads the "
                "D4RL file directly (as TorchRL does with direct_download=True, which refuses "
                "them too)"
            )
        dataset_id = _dataset_id(dataset_id, paths=True)
        download = _download(download)
        self.dataset_id = dataset_id
        self.download = download
        self.use_truncated_as_done = use_truncated_as_done
        self.from_env = from_env
        dataset = _load(
            "d4rl",
            dataset_id,
            download,
            _root(root),
            from_env=from_env,
            use_truncated_as_done=use_truncated_as_done,
            direct_download=direct_download,
            terminate_on_end=terminate_on_end,
        )
        super().__init__(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            writer=writer,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            prefetch=prefetch,
            transform=transform,
            split_trajs=check_bool(split_trajs, "split_trajs"),
            root=_root(root),
        )

    def _trajectory_rows(self, dataset: OfflineDataset) -> TensorDictBase:
        # TorchRL's D4RL rows also hold a root "reward" (what reaching the step earned); its
        # decision-transformer program computes the root return-to-go from it
        rows = dataset[:]
        if "reward" not in rows.keys():
            rows.set("reward", previous_reward(rows, dataset.episode_starts))
        return rows

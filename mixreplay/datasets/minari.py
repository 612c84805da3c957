"""``minari:<dataset_id>``: a Minari dataset from the local Minari root, in the TED layout.

The dataset is read through Minari's own API (``minari.load_dataset``,
``iterate_episodes``) from ``$MINARI_DATASETS_PATH`` (else Minari's default,
``~/.minari/datasets``), converted once into the memmap cache (see
:mod:`mixreplay.datasets.cache`) and opened read-only from there.

Each Minari episode holds ``T`` actions, rewards, terminations, truncations and
``T + 1`` observations. It becomes ``T`` rows::

    observation              observations[:-1]      (a sub-TensorDict for Dict/Tuple spaces)
    action                   actions
    done, terminated, truncated   False [1]         (the step starts from a live state)
    next/observation         observations[1:]
    next/reward              rewards [1]            (float64 in Minari: float32 by default)
    next/terminated          terminations [1]
    next/truncated           truncations [1]
    next/done                terminations | truncations
    next/info/...            infos, only with keep_infos=True (infos[1:] when Minari
                             stored T + 1 of them, the reset's info being dropped)

The root flags are all False, as in a TorchRL rollout: the root of a row is the
state the action was taken in, and no action is taken from a finished state.
TorchRL's ``MinariExperienceReplay`` omits the root flags altogether; mixreplay
keeps them so that loaded rows and rows from a TorchRL collector share one schema.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from tensordict import TensorDict

from mixreplay._validate import check_bool, check_choice
from mixreplay.datasets.source import Source
from mixreplay.datasets.transforms import flat_leaves, nest
from mixreplay.errors import DatasetError, DatasetNotFoundError, MissingDependencyError, require
from mixreplay.schema import format_key

__all__ = ["MinariSource"]

log = logging.getLogger(__name__)

#: rows per chunk written (whole episodes are never split; bounded memory)
CHUNK_ROWS = 1 << 16


def _minari():
    return require("minari", "minari", "the 'minari:' dataset loader")


def _numeric(key: tuple[str, ...], value, where: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise DatasetError(
            f"{where}: key {format_key(key)} holds {arr.dtype} values, not numbers or booleans; "
            "mixreplay stores tensors only: drop it with keys=[...]"
            + (" or load without keep_infos" if "info" in key else "")
        )
    return arr


class MinariSource(Source):
    """``minari:<dataset_id>``: a Minari dataset, read episode by episode into TED chunks.

    Opened by the one loader (:mod:`mixreplay.datasets.loader`), which adds the row
    options, the cache and the dataset's options; these are the Minari-specific ones.

    Args:
        name: ``(namespace/)name-vN`` in the Minari root (``$MINARI_DATASETS_PATH``,
            else ``~/.minari/datasets``).

    Keyword Args:
        download: ``False`` (the default): read the local Minari root only, nothing
            is fetched unless asked; ``True``: let Minari download the dataset when
            it is not local (``minari.download_dataset``; Minari's remote needs
            ``minari[hf]``); ``"force"``: download it again even if it is local.
            (TorchRL downloads by default; mixreplay asks, see docs/datasets.md.)
        load_from_local_minari: TorchRL's keyword: ``True`` reads the local Minari
            root and never downloads (it wins over ``download``, as in TorchRL);
            ``False`` leaves ``download`` in charge.
        **base: ``prefix``, ``policy``, ``keep_infos``, ``dedup_next`` (filled by the loader).

    Raises:
        DatasetNotFoundError: the dataset is not in the Minari root and downloading is off.
        DatasetError: a malformed ID, or Minari cannot download or open it.
        MissingDependencyError: minari is not installed.

    Examples:
        >>> from mixreplay import load_dataset
        >>> ds = load_dataset("minari:mujoco/hopper/expert-v0", batch_size=256)  # doctest: +SKIP
    """

    def __init__(
        self,
        name: str,
        *,
        download: bool | str = False,
        load_from_local_minari: bool = False,
        **base: Any,
    ):
        minari = _minari()
        from minari.dataset.minari_dataset import parse_dataset_id

        super().__init__(name, **base)
        check_choice(download, "download", (False, True, "force"))
        if check_bool(load_from_local_minari, "load_from_local_minari"):
            download = False
        if not isinstance(name, str) or not name:
            raise DatasetError(f"a Minari dataset ID must be a non-empty string, got {name!r}")
        try:
            parse_dataset_id(name)
        except (ValueError, TypeError) as err:
            raise DatasetError(
                f"{name!r} is not a Minari dataset ID: write it as (namespace/)name-vN, "
                "e.g. 'mujoco/hopper/expert-v0' (Minari rejects '.' in names)"
            ) from err
        self._index: tuple[Any, np.ndarray, list[int]] | None = None
        self.path = Path(minari.storage.get_dataset_path(name))
        if (self.path / "data").is_dir() and download != "force":
            return
        root = self.path
        for _ in name.split("/"):
            root = root.parent
        if not download:
            raise DatasetNotFoundError(
                f"Minari dataset {name!r} not found: searched {self.path} in the Minari root "
                f"{root} (set by MINARI_DATASETS_PATH, else ~/.minari/datasets). Create it there, "
                "point MINARI_DATASETS_PATH at the root that holds it, or pass download=True to "
                "fetch it with Minari"
            )
        log.info("downloading Minari dataset %s into %s", name, root)
        try:
            minari.download_dataset(name, force_download=download == "force")
        except ImportError as err:  # Minari's remotes need extras of Minari's own
            raise MissingDependencyError(
                f"Minari cannot download {name!r} without its remote's package: {err}"
            ) from err
        except Exception as err:  # network, unknown remote ID: Minari raises many kinds
            raise DatasetError(f"Minari could not download {name!r}: {err}") from err

    def files(self) -> list[Path]:
        return [p for p in self.path.rglob("*") if p.is_file()]

    def _open(self):
        try:
            return _minari().load_dataset(self.name)
        except (OSError, ValueError, KeyError) as err:
            raise DatasetError(
                f"Minari could not open {self.name!r} at {self.path}: {err}"
            ) from err

    def _episodes(self):
        """The opened dataset, its episode indices and their lengths (read once per source)."""
        if self._index is None:
            ds = self._open()
            indices = np.asarray(ds.episode_indices)
            lengths = [int(m["total_steps"]) for m in ds.storage.get_episode_metadata(indices)]
            self._index = ds, indices, lengths
        return self._index

    def rows_hint(self) -> int | None:
        return sum(self._episodes()[2])

    def read(self) -> tuple[Iterator[TensorDict], list[int], dict]:
        ds, indices, lengths = self._episodes()
        self._index = None  # a later read() sees the files as they are then
        starts, total = [], 0
        for n in lengths:
            if n:
                starts.append(total)
                total += n
        info = {"episodes": len(starts), "transitions": total, "empty_episodes": lengths.count(0)}
        return self._chunks(ds, indices, lengths), starts, info

    # -- episode -> rows -----------------------------------------------------------------------

    def _episode(self, ep) -> dict[tuple[str, ...], np.ndarray]:
        where = f"{self.source_id} episode {ep.id}"
        n = len(ep.rewards)
        rows: dict[tuple[str, ...], np.ndarray] = {}
        nexts: dict[tuple[str, ...], np.ndarray] = {}
        for key, obs in flat_leaves(ep.observations, ("observation",)).items():
            obs = _numeric(key, obs, where)
            if obs.shape[:1] != (n + 1,):
                raise DatasetError(
                    f"{where}: {format_key(key)} holds {obs.shape[0] if obs.ndim else 0} observations for "
                    f"{n} steps; Minari episodes hold T + 1 observations"
                )
            rows[key] = obs[:-1]
            nexts[("next",) + key] = obs[1:]
        for key, act in flat_leaves(ep.actions, ("action",)).items():
            act = _numeric(key, act, where)
            if act.shape[:1] != (n,):
                raise DatasetError(
                    f"{where}: {format_key(key)} holds {act.shape[:1]} rows for {n} steps"
                )
            rows[key] = act
        live = np.zeros((n, 1), dtype=bool)
        rows[("done",)], rows[("terminated",)], rows[("truncated",)] = live, live, live
        terminated = np.asarray(ep.terminations, dtype=bool).reshape(n, 1)
        truncated = np.asarray(ep.truncations, dtype=bool).reshape(n, 1)
        rows.update(nexts)
        rows[("next", "reward")] = _numeric(("next", "reward"), ep.rewards, where).reshape(n, 1)
        rows[("next", "done")] = terminated | truncated
        rows[("next", "terminated")] = terminated
        rows[("next", "truncated")] = truncated
        if self.keep_infos and ep.infos:
            for key, value in flat_leaves(ep.infos, ("next", "info")).items():
                value = _numeric(key, value, where)
                if value.shape[:1] == (n + 1,):
                    value = value[1:]  # the first info is the reset's
                elif value.shape[:1] != (n,):
                    raise DatasetError(
                        f"{where}: info {format_key(key)} holds {value.shape[:1]} rows for {n} steps "
                        f"(expected {n + 1} or {n}); load without keep_infos"
                    )
                rows[key] = value
        return rows

    def _chunks(self, ds, indices, lengths) -> Iterator[TensorDict]:
        signature: dict | None = None
        buffer: dict[tuple[str, ...], list[np.ndarray]] = {}
        pending = 0
        for i, ep in enumerate(ds.iterate_episodes(indices)):
            n = len(ep.rewards)
            if n != lengths[i]:
                raise DatasetError(
                    f"{self.source_id} episode {ep.id} holds {n} steps; its metadata says {lengths[i]}"
                )
            if n == 0:
                continue
            rows = self._episode(ep)
            sig = {k: (v.shape[1:], v.dtype) for k, v in rows.items()}
            if signature is None:
                signature = sig
            elif sig != signature:
                raise DatasetError(_describe_change(self.source_id, ep.id, signature, sig))
            for k, v in rows.items():
                buffer.setdefault(k, []).append(v)
            pending += n
            if pending >= CHUNK_ROWS:
                yield self._flush(buffer, pending)
                buffer, pending = {}, 0
        if pending:
            yield self._flush(buffer, pending)

    def _flush(self, buffer: Mapping[tuple[str, ...], list[np.ndarray]], n: int) -> TensorDict:
        leaves = {k: (v[0] if len(v) == 1 else np.concatenate(v)) for k, v in buffer.items()}
        return TensorDict(nest(self.policy.apply(leaves, where=self.source_id)), batch_size=[n])


def _describe_change(source_id: str, episode, before: dict, after: dict) -> str:
    lines = []
    for k in before.keys() | after.keys():
        a, b = before.get(k), after.get(k)
        if a != b:
            show = lambda s: "missing" if s is None else f"{s[1]}{list(s[0])}"  # noqa: E731
            lines.append(f"{format_key(k)}: earlier episodes {show(a)}, this one {show(b)}")
    return (
        f"{source_id} episode {episode} does not match the earlier episodes:\n  "
        + "\n  ".join(sorted(lines))
        + "\nFix: every episode of a dataset must have the same keys, shapes and dtypes"
    )

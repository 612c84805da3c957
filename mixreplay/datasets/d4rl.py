"""``d4rl:<name-or-path>``: an HDF5 file in the D4RL layout, in the TED layout.

Read with h5py only (the ``d4rl`` package is not needed). The file holds flat
arrays over ``N`` rows: ``observations``, ``actions``, ``rewards``,
``terminals``, ``timeouts``, optionally ``next_observations`` and ``infos/*``.

Resolving the ID:

- a path (it ends in ``.hdf5``/``.h5``, holds a path separator, or exists): that file;
- a name, looked up in ``$D4RL_DATASET_DIR`` (default ``~/.d4rl/datasets``): first
  ``<name>.hdf5``, then the file name D4RL itself saves the dataset under (the
  last component of its download URL) for the locomotion datasets
  ``{hopper,halfcheetah,walker2d,ant}-<kind>-v{0,1,2}``: ``hopper-medium-v2`` ->
  ``hopper_medium-v2.hdf5``; v0 files have no version (``hopper_medium.hdf5``) and
  call medium-replay ``mixed`` (``hopper_mixed.hdf5``, ``walker_mixed.hdf5``).
  Other D4RL datasets: pass the path.

Rows (``N`` source rows, row ``i``)::

    observation              observations[i]
    action                   actions[i]
    done, terminated, truncated   False [1]
    next/observation         next_observations[i], or derived (below)
    next/reward              rewards[i] [1]
    next/terminated          terminals[i]
    next/truncated           timeouts[i]     (a timeout is a truncation, never a termination)
    next/done                terminals[i] | timeouts[i]
    info/...                 infos/*[i], only with keep_infos=True (at the root: D4RL
                             records them with the observation and action of row i)

Episodes end at ``terminals | timeouts``. With ``next_observations`` stored,
every row is kept. Without it, the next observation is ``observations[i + 1]``
inside an episode, as in D4RL's ``qlearning_dataset``; a row with no successor
in its episode is dropped: the last row of each timed-out episode and the last
row of the file when it ends no episode. A terminal row is always kept, with a
zero ``next/observation`` (no successor exists; ``terminated`` masks it). When
a row was dropped, the row before it, now the last of its episode, carries
``truncated=True`` so that ``done`` still marks where each stored trajectory ends.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from tensordict import TensorDict

from mixreplay.buffers.offline import OfflineDataset
from mixreplay.datasets.cache import Source, load_cached
from mixreplay.datasets.transforms import RowPolicy, nest
from mixreplay.errors import DatasetError, DatasetNotFoundError, require

__all__ = ["D4RLSource", "d4rl_dataset_dir", "d4rl_file_names", "load_d4rl", "resolve_d4rl"]

log = logging.getLogger(__name__)

#: source rows read per chunk (bounded memory)
CHUNK_ROWS = 1 << 16

REQUIRED = ("observations", "actions", "rewards", "terminals", "timeouts")

_LOCOMOTION = re.compile(
    r"(hopper|halfcheetah|walker2d|ant)-(random|medium|expert|medium-replay|medium-expert|full-replay)-v(\d+)"
)


def d4rl_dataset_dir() -> Path:
    """``$D4RL_DATASET_DIR``, else ``~/.d4rl/datasets`` (D4RL's own default)."""
    return Path(os.environ.get("D4RL_DATASET_DIR") or "~/.d4rl/datasets").expanduser()


def d4rl_file_names(name: str) -> list[str]:
    """File names to try for the D4RL dataset ``name``, in order."""
    names = [f"{name}.hdf5"]
    m = _LOCOMOTION.fullmatch(name)
    if m:
        agent, kind, version = m.group(1), m.group(2), int(m.group(3))
        if version == 0:
            if kind == "medium-replay":
                names.append(f"{'walker' if agent == 'walker2d' else agent}_mixed.hdf5")
            elif kind != "full-replay":
                names.append(f"{agent}_{kind.replace('-', '_')}.hdf5")
        else:
            names.append(f"{agent}_{kind.replace('-', '_')}-v{version}.hdf5")
    return names


def resolve_d4rl(name_or_path: str | os.PathLike) -> Path:
    """The D4RL file a ``d4rl:`` ID names (see the module docstring)."""
    text = os.fspath(name_or_path)
    if not text:
        raise DatasetError(
            "a d4rl: ID needs a dataset name or a file path, e.g. 'd4rl:hopper-medium-v2'"
        )
    path = Path(text).expanduser()
    if path.suffix in (".hdf5", ".h5") or os.sep in text or "/" in text or path.exists():
        if path.is_file():
            return path.resolve()
        raise DatasetNotFoundError(
            f"no D4RL file at {path}: the path does not exist or is not a file"
        )
    root = d4rl_dataset_dir()
    names = d4rl_file_names(text)
    for n in names:
        if (root / n).is_file():
            return (root / n).resolve()
    raise DatasetNotFoundError(
        f"D4RL dataset {text!r} not found in {root} (D4RL_DATASET_DIR, default ~/.d4rl/datasets): "
        f"looked for {', '.join(names)}. mixreplay reads D4RL files but never downloads them: put the "
        "file there, set D4RL_DATASET_DIR, or pass its path ('d4rl:/path/to/file.hdf5')"
    )


def _h5py():
    return require("h5py", "d4rl", "the 'd4rl:' dataset loader")


def _datasets(group, prefix: tuple[str, ...]) -> dict:
    """Every dataset under an HDF5 group, by nested key."""
    import h5py

    out = {}
    for name, item in group.items():
        if isinstance(item, h5py.Group):
            out.update(_datasets(item, prefix + (name,)))
        else:
            out[prefix + (name,)] = item
    return out


class _Plan:
    """Which source rows are kept, their flags, and where episodes start (from the flags alone)."""

    def __init__(self, terminals: np.ndarray, timeouts: np.ndarray, derive_next: bool):
        n = terminals.shape[0]
        ends = terminals | timeouts
        self.terminated = terminals
        self.truncated = timeouts.copy()
        if derive_next:
            self.has_next = np.zeros(n, dtype=bool)
            self.has_next[:-1] = ~ends[:-1]
            self.keep = self.has_next | terminals
            # the row before a dropped row now ends its stored trajectory
            dropped_after = np.zeros(n, dtype=bool)
            dropped_after[:-1] = ~self.keep[1:]
            self.truncated |= self.keep & self.has_next & dropped_after
        else:
            self.has_next = None
            self.keep = np.ones(n, dtype=bool)
        # first kept row of each episode, in kept-row numbering (O(episodes) memory, not O(rows))
        first = np.concatenate([[0], np.flatnonzero(ends[:-1]) + 1])
        kept = np.add.reduceat(self.keep, first, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(kept)[:-1]])
        self.starts = offsets[kept > 0].tolist()
        self.rows = int(self.keep.sum())
        self.dropped = int(n - self.rows)


class D4RLSource(Source):
    """A D4RL-layout HDF5 file, read chunk by chunk into TED rows.

    Args:
        name_or_path: a D4RL dataset name or a file path (see :func:`resolve_d4rl`).

    Keyword Args:
        keep_infos: keep ``infos/*`` under ``("info", ...)``.
        policy: key selection, renaming and dtype policy.
    """

    prefix = "d4rl"

    def __init__(self, name_or_path, *, keep_infos: bool = False, policy: RowPolicy | None = None):
        self.requested = os.fspath(name_or_path)
        self.path = resolve_d4rl(name_or_path)
        self.name = str(self.path)
        self.keep_infos = bool(keep_infos)
        self.policy = policy or RowPolicy()
        self.options = {"keep_infos": self.keep_infos, **self.policy.to_json()}

    def files(self) -> list[Path]:
        return [self.path]

    def _open(self):
        h5py = _h5py()
        try:
            return h5py.File(self.path, "r")
        except OSError as err:
            raise DatasetError(f"{self.path} is not a readable HDF5 file: {err}") from err

    def _check(self, f) -> int:
        missing = [k for k in REQUIRED if k not in f]
        if missing:
            raise DatasetError(
                f"{self.path} is not in the D4RL layout: key {missing[0]!r} not found in a file with keys "
                f"[{', '.join(repr(k) for k in f.keys())}]; a D4RL file holds "
                f"{', '.join(REQUIRED)} (and optionally next_observations, infos/*)"
            )
        n = f["observations"].shape[0]
        sizes = {k: f[k].shape[0] for k in (*REQUIRED, "next_observations") if k in f}
        if self.keep_infos and "infos" in f:
            sizes.update(
                {"/".join(k): d.shape[0] for k, d in _datasets(f["infos"], ("infos",)).items()}
            )
        bad = {k: v for k, v in sizes.items() if v != n}
        if bad:
            raise DatasetError(
                f"{self.path}: every array must have one entry per row ({n} observations), but "
                + ", ".join(f"{k} has {v}" for k, v in bad.items())
            )
        if n == 0:
            raise DatasetError(f"{self.path} holds no rows")
        return n

    def rows_hint(self) -> int | None:
        with self._open() as f:
            return int(f["observations"].shape[0]) if "observations" in f else None

    def read(self) -> tuple[Iterator[TensorDict], list[int], dict]:
        with self._open() as f:
            n = self._check(f)
            terminals = np.asarray(f["terminals"][:]).astype(bool).reshape(n)
            timeouts = np.asarray(f["timeouts"][:]).astype(bool).reshape(n)
            derive = "next_observations" not in f
        plan = _Plan(terminals, timeouts, derive_next=derive)
        if plan.rows == 0:
            raise DatasetError(f"{self.path}: no row has a next observation, nothing to convert")
        if plan.dropped:
            log.info(
                "%s has no next_observations: derived them from the next row; dropped %d rows with no "
                "successor (last rows of timed-out episodes)",
                self.path,
                plan.dropped,
            )
        info = {
            "requested": self.requested,
            "source_rows": n,
            "dropped_rows": plan.dropped,
            "next_observation": "derived" if derive else "stored",
        }
        return self._chunks(plan, n), plan.starts, info

    def _chunks(self, plan: _Plan, n: int) -> Iterator[TensorDict]:
        with self._open() as f:
            infos = _datasets(f["infos"], ("info",)) if self.keep_infos and "infos" in f else {}
            for a in range(0, n, CHUNK_ROWS):
                b = min(n, a + CHUNK_ROWS)
                keep = plan.keep[a:b]
                m = int(keep.sum())
                if m == 0:
                    continue
                obs = np.asarray(f["observations"][a : min(n, b + 1)])
                if plan.has_next is None:
                    nxt = np.asarray(f["next_observations"][a:b])
                else:
                    nxt = np.zeros((b - a,) + obs.shape[1:], dtype=obs.dtype)
                    has = plan.has_next[a:b]
                    succ = obs[1:]
                    if succ.shape[0] < b - a:  # the file's last row: never has a successor
                        has = has[: succ.shape[0]]
                    nxt[: has.shape[0]][has] = succ[has]
                rewards = np.asarray(f["rewards"][a:b])
                rewards = rewards.reshape(b - a, 1) if rewards.ndim == 1 else rewards
                terminated = plan.terminated[a:b].reshape(-1, 1)
                truncated = plan.truncated[a:b].reshape(-1, 1)
                live = np.zeros((b - a, 1), dtype=bool)
                leaves = {
                    ("observation",): obs[: b - a],
                    ("action",): np.asarray(f["actions"][a:b]),
                    ("done",): live,
                    ("terminated",): live,
                    ("truncated",): live,
                    ("next", "observation"): nxt,
                    ("next", "reward"): rewards,
                    ("next", "done"): terminated | truncated,
                    ("next", "terminated"): terminated,
                    ("next", "truncated"): truncated,
                }
                for key, d in infos.items():
                    value = np.asarray(d[a:b])
                    if value.dtype.kind not in "biuf":
                        raise DatasetError(
                            f"{self.path}: infos/{'/'.join(key[1:])} holds {value.dtype} values, not "
                            "numbers; load without keep_infos, or drop it with keys=[...]"
                        )
                    leaves[key] = value
                if m < b - a:
                    leaves = {k: v[keep] for k, v in leaves.items()}
                yield TensorDict(
                    nest(self.policy.apply(leaves, where=f"d4rl:{self.path}")), batch_size=[m]
                )


def load_d4rl(
    name_or_path: str,
    *,
    keep_infos: bool = False,
    keys=None,
    rename=None,
    dtype="float32",
    cache_dir=None,
    refresh: bool = False,
    progress=None,
    batch_size: int | None = None,
    generator=None,
    sampler=None,
    transform=None,
) -> OfflineDataset:
    """Open a D4RL-layout HDF5 file as a read-only :class:`OfflineDataset` (TED layout).

    The first load converts the file into the cache (``$MIXREPLAY_DATA_DIR``);
    later loads reopen the cache unless the file's size or mtime changed.

    Args:
        name_or_path: a D4RL dataset name resolved in ``$D4RL_DATASET_DIR``
            (``"hopper-medium-v2"``) or the path of an HDF5 file.

    Keyword Args:
        keep_infos: keep ``infos/*`` under ``("info", ...)``.
        keys, rename, dtype: see :class:`~mixreplay.datasets.transforms.RowPolicy`
            (floating leaves become float32 by default; ``dtype=None`` keeps the file's).
        cache_dir: cache root instead of ``$MIXREPLAY_DATA_DIR``.
        refresh: convert again even if the cache is current.
        progress: called with the row count of each converted chunk.
        batch_size, generator, sampler, transform: forwarded to the dataset.

    Raises:
        DatasetNotFoundError: no file by that name or path.
        DatasetError: the file is not in the D4RL layout, or the policy does not fit.
        MissingDependencyError: h5py is not installed (needed only to convert).

    Examples:
        >>> from mixreplay import load_dataset
        >>> ds = load_dataset("d4rl:hopper-medium-v2", batch_size=256)  # doctest: +SKIP
    """
    policy = RowPolicy(keys=keys, rename=rename, dtype=dtype)
    source = D4RLSource(name_or_path, keep_infos=keep_infos, policy=policy)
    return load_cached(
        source,
        cache_dir=cache_dir,
        refresh=refresh,
        progress=progress,
        batch_size=batch_size,
        generator=generator,
        sampler=sampler,
        transform=transform,
    )

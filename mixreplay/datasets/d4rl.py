"""``d4rl:<name-or-path>``: an HDF5 file in the D4RL layout, in the TED layout.

Read with h5py only (the ``d4rl`` package is not needed). The file holds flat
arrays over ``N`` rows: ``observations``, ``actions``, ``rewards``,
``terminals``, ``timeouts``, optionally ``next_observations`` and ``infos/*``.

Resolving the ID:

- a path (it ends in ``.hdf5``/``.h5``, holds a path separator, or exists): that file;
- a name, looked up in ``$D4RL_DATASET_DIR`` (default ``~/.d4rl/datasets``): first
  ``<name>.hdf5``, then the file name D4RL itself saves the dataset under (the
  last component of its download URL, :mod:`~mixreplay.datasets.d4rl_urls`):
  ``hopper-medium-v2`` -> ``hopper_medium-v2.hdf5``, ``walker2d-medium-replay-v0``
  -> ``walker_mixed.hdf5``;
- a name D4RL publishes and no local file: downloaded from D4RL's URL into
  ``$D4RL_DATASET_DIR`` (as TorchRL does; resumable, size- and digest-checked,
  see :mod:`~mixreplay.datasets.download`) unless ``download=False``.

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

import collections
import functools
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tensordict import TensorDict

from mixreplay._validate import check_choice, check_type
from mixreplay.datasets.d4rl_urls import D4RL_PATHS, d4rl_url
from mixreplay.datasets.source import Source
from mixreplay.datasets.transforms import nest
from mixreplay.errors import DatasetError, DatasetNotFoundError, require

__all__ = ["D4RLSource", "d4rl_dataset_dir", "d4rl_file_names", "resolve_d4rl"]

log = logging.getLogger(__name__)

#: source rows read per chunk (bounded memory)
CHUNK_ROWS = 1 << 16

REQUIRED = ("observations", "actions", "rewards", "terminals", "timeouts")


@functools.cache
def _shared_file_names() -> frozenset[str]:
    """File names D4RL uses for more than one dataset (downloaded under ``<name>.hdf5``)."""
    counts = collections.Counter(path.rsplit("/", 1)[-1] for path in D4RL_PATHS.values())
    return frozenset(name for name, n in counts.items() if n > 1)


def d4rl_dataset_dir() -> Path:
    """``$D4RL_DATASET_DIR``, else ``~/.d4rl/datasets`` (D4RL's own default)."""
    return Path(os.environ.get("D4RL_DATASET_DIR") or "~/.d4rl/datasets").expanduser()


def d4rl_file_names(name: str) -> list[str]:
    """File names to try for the D4RL dataset ``name``, in order: ``<name>.hdf5``, then
    the one D4RL downloads it to (unless D4RL uses that name for several datasets)."""
    names = [f"{name}.hdf5"]
    path = D4RL_PATHS.get(name)
    if path is not None:
        file = path.rsplit("/", 1)[-1]
        if file not in names and file not in _shared_file_names():
            names.append(file)
    return names


def _check_name_lengths(text: str) -> None:
    """Refuse an ID whose names no file system holds (a name over 255 bytes), which would
    otherwise surface as a bare ``OSError`` from the first look for the file."""
    longest = max((len(os.fsencode(part)) for part in Path(text).parts), default=0)
    if longest > 255:
        raise DatasetError(
            f"d4rl: ID {text!r:.80} ({len(text):,} characters) names no dataset: a name in it is "
            f"{longest:,} bytes, longer than a file name may be (255); pass the dataset's name "
            "(e.g. 'hopper-medium-v2') or the path of its file"
        )


def _is_path(text: str) -> bool:
    path = Path(text).expanduser()
    return path.suffix in (".hdf5", ".h5") or os.sep in text or "/" in text or path.exists()


def resolve_d4rl(name_or_path: str | os.PathLike[str]) -> Path:
    """The local D4RL file a ``d4rl:`` ID names (see the module docstring); never downloads.

    Raises:
        DatasetNotFoundError: no such file (the message lists what was tried).
    """
    text = os.fspath(name_or_path)
    if not text:
        raise DatasetError(
            "a d4rl: ID needs a dataset name or a file path, e.g. 'd4rl:hopper-medium-v2'"
        )
    _check_name_lengths(text)
    path = Path(text).expanduser()
    if _is_path(text):
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
    known = text in D4RL_PATHS
    raise DatasetNotFoundError(
        f"D4RL dataset {text!r} not found in {root} (D4RL_DATASET_DIR, default ~/.d4rl/datasets): "
        f"looked for {', '.join(names)}. "
        + (
            "Pass download=True (the default) to download it from D4RL, put the file there, "
            "set D4RL_DATASET_DIR, or pass its path ('d4rl:/path/to/file.hdf5')"
            if known
            else "D4RL publishes no dataset by that name: put the file there, set "
            "D4RL_DATASET_DIR, or pass its path ('d4rl:/path/to/file.hdf5')"
        )
    )


def _download_target(name: str) -> Path:
    file = D4RL_PATHS[name].rsplit("/", 1)[-1]
    if file in _shared_file_names():
        file = f"{name}.hdf5"
    return d4rl_dataset_dir() / file


def check_d4rl_file(path: Path) -> None:
    """Raise :class:`DatasetError` unless ``path`` is an HDF5 file holding D4RL's arrays."""
    h5py = _h5py()
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise DatasetError(f"not a readable HDF5 file: {err}") from None
    with f:
        check_layout(f, "the file", keep_infos=False)


def _member(f: Any, key: str, subject: str) -> Any:
    """``f[key]`` as an array (an h5py Dataset), or a DatasetError saying what it is instead."""
    import h5py

    link = f.get(key, getlink=True)
    try:
        item = f[key]
    except (KeyError, OSError, RuntimeError) as err:
        if isinstance(link, h5py.SoftLink):
            raise DatasetError(
                f"{subject} is not in the D4RL layout: {key!r} is a link to nothing ({link.path})"
            ) from None
        raise DatasetError(
            f"{subject} is not in the D4RL layout: {key!r} cannot be read ({err})"
        ) from None
    if isinstance(item, h5py.Group):
        raise DatasetError(
            f"{subject} is not in the D4RL layout: {key!r} is an HDF5 group, not an array "
            f"(it holds [{', '.join(repr(k) for k in item.keys())}])"
        )
    if not isinstance(item, h5py.Dataset):
        raise DatasetError(
            f"{subject} is not in the D4RL layout: {key!r} is a {type(item).__name__}, not an array"
        )
    if item.ndim == 0:
        raise DatasetError(
            f"{subject} is not in the D4RL layout: {key!r} is a scalar, not an array with one "
            "entry per row"
        )
    if item.dtype.kind not in "biuf":
        raise DatasetError(
            f"{subject} is not in the D4RL layout: {key!r} holds {item.dtype.str} values, not "
            "numbers or booleans"
        )
    return item


def check_layout(f: Any, subject: str, *, keep_infos: bool) -> int:
    """The row count of an open D4RL file, after checking its layout.

    Every required key is a numeric array with one entry per row; ``rewards``,
    ``terminals`` and ``timeouts`` hold one value per row (``[N]`` or ``[N, 1]``);
    ``next_observations``, when present, has the shape of ``observations``; with
    ``keep_infos``, ``infos`` is a group of such arrays.

    Raises:
        DatasetError: naming ``subject`` (the file), the key and what is wrong.
    """
    missing = [k for k in REQUIRED if k not in f and f.get(k, getlink=True) is None]
    if missing:
        raise DatasetError(
            f"{subject} is not in the D4RL layout: key {missing[0]!r} not found in a file with keys "
            f"[{', '.join(repr(k) for k in f.keys())}]; a D4RL file holds "
            f"{', '.join(REQUIRED)} (and optionally next_observations, infos/*)"
        )
    arrays = {k: _member(f, k, subject) for k in REQUIRED}
    n = arrays["observations"].shape[0]
    for key in ("rewards", "terminals", "timeouts"):
        shape = list(arrays[key].shape)
        if shape[1:] not in ([], [1]):
            raise DatasetError(
                f"{subject} is not in the D4RL layout: {key!r} has shape {shape}; expected "
                f"[{shape[0]}] or [{shape[0]}, 1] (one value per row)"
            )
    if "next_observations" in f or f.get("next_observations", getlink=True) is not None:
        nxt = _member(f, "next_observations", subject)
        if nxt.shape != arrays["observations"].shape:
            raise DatasetError(
                f"{subject} is not in the D4RL layout: 'next_observations' has shape "
                f"{list(nxt.shape)}; expected that of observations, "
                f"{list(arrays['observations'].shape)}"
            )
        arrays["next_observations"] = nxt
    sizes = {k: a.shape[0] for k, a in arrays.items()}
    if keep_infos and "infos" in f:
        import h5py

        if not isinstance(f["infos"], h5py.Group):
            raise DatasetError(
                f"{subject} is not in the D4RL layout: 'infos' is an array, not a group of "
                "arrays; load without keep_infos"
            )
        sizes.update(
            {"/".join(k): d.shape[0] for k, d in _datasets(f["infos"], ("infos",)).items()}
        )
    bad = {k: v for k, v in sizes.items() if v != n}
    if bad:
        raise DatasetError(
            f"{subject}: every array must have one entry per row ({n} observations), but "
            + ", ".join(f"{k} has {v}" for k, v in bad.items())
        )
    if n == 0:
        raise DatasetError(f"{subject} holds no rows")
    return n


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
        self.has_next: np.ndarray | None
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
    """``d4rl:<name-or-path>``: a D4RL-layout HDF5 file, read chunk by chunk into TED rows.

    Opened by the one loader (:mod:`mixreplay.datasets.loader`), which adds the row
    options, the cache and the dataset's options; these are the D4RL-specific ones.

    Args:
        name: a D4RL dataset name (``"hopper-medium-v2"``) or a file path.

    Keyword Args:
        download: ``True`` (the default, as in TorchRL): a dataset D4RL publishes that
            is not in ``$D4RL_DATASET_DIR`` is downloaded there from D4RL's URL;
            ``False``: never download; ``"force"``: download it again.
        download_progress: called with the byte count of each downloaded chunk (and
            ``set_total(n)`` if it has one); the library itself only logs.
        sha256: the SHA-256 the downloaded file must have (D4RL publishes none; the
            size the server announces, any digest header it sends and the D4RL layout
            are always checked).
        from_env: TorchRL's keyword (how TorchRL obtains the arrays); mixreplay always
            reads the file, which holds what ``env.get_dataset()`` returns: any bool.
        direct_download: TorchRL's keyword; mixreplay reads and downloads the file
            itself, without the d4rl package: ``None`` or ``True``.
        use_truncated_as_done: TorchRL's keyword; ``True``: ``done = terminated |
            truncated``, which mixreplay always stores.
        terminate_on_end: TorchRL's keyword; ``None`` or ``True``: every row whose next
            observation is known is kept (all rows when the file stores
            ``next_observations``).
        **base: ``prefix``, ``policy``, ``keep_infos``, ``dedup_next`` (filled by the loader).

    Raises:
        DatasetNotFoundError: no file by that name or path (and no download).
        DatasetError: the file is not in the D4RL layout, a download failed.
        MissingDependencyError: h5py is not installed (needed to download and convert).
        TypeError: a TorchRL keyword with a value mixreplay has no meaning for.

    Examples:
        >>> from mixreplay import load_dataset
        >>> ds = load_dataset("d4rl:hopper-medium-v2", batch_size=256)  # doctest: +SKIP
    """

    def __init__(
        self,
        name: str,
        *,
        download: bool | str = True,
        download_progress: Callable[[int], None] | None = None,
        sha256: str | None = None,
        from_env: bool | None = None,
        direct_download: bool | None = None,
        use_truncated_as_done: bool = True,
        terminate_on_end: bool | None = None,
        **base: Any,
    ):
        check_choice(download, "download", (True, False, "force"))
        if sha256 is not None:
            check_type(sha256, "sha256", str)
        _torchrl_keyword("from_env", from_env, (None, True, False), "")
        _torchrl_keyword(
            "direct_download",
            direct_download,
            (None, True),
            "mixreplay reads and downloads D4RL files itself; the d4rl package is never used",
        )
        _torchrl_keyword(
            "use_truncated_as_done",
            use_truncated_as_done,
            (True,),
            "mixreplay keeps terminated and truncated apart, with done = terminated | truncated; "
            "read ('next', 'terminated') where only terminations should end a return",
        )
        _torchrl_keyword(
            "terminate_on_end",
            terminate_on_end,
            (None, True),
            "mixreplay keeps every row whose next observation is known (TorchRL refuses False "
            "too without the d4rl package)",
        )
        self.requested = os.fspath(name)
        self.path = self._locate(self.requested, download, download_progress, sha256)
        super().__init__(str(self.path), **base)

    @staticmethod
    def _locate(
        text: str,
        download: bool | str,
        progress: Callable[[int], None] | None,
        sha256: str | None,
    ) -> Path:
        if text:
            _check_name_lengths(text)
        url = None if not text or _is_path(text) else d4rl_url(text)
        if url is not None and download == "force":
            from mixreplay.datasets.download import download as fetch  # urllib: imported on need

            _h5py()  # before fetching a file that could not be converted
            return fetch(
                url, _download_target(text), sha256=sha256, check=check_d4rl_file, progress=progress
            ).resolve()
        try:
            return resolve_d4rl(text)
        except DatasetNotFoundError:
            if url is None or not download:
                raise
        from mixreplay.datasets.download import download as fetch

        _h5py()
        log.info("D4RL dataset %s is not in %s: downloading %s", text, d4rl_dataset_dir(), url)
        target = _download_target(text)
        return fetch(url, target, sha256=sha256, check=check_d4rl_file, progress=progress).resolve()

    def slug(self) -> str:
        return self.path.stem

    def files(self) -> list[Path]:
        return [self.path]

    def _open(self):
        h5py = _h5py()
        try:
            return h5py.File(self.path, "r")
        except OSError as err:
            raise DatasetError(f"{self.path} is not a readable HDF5 file: {err}") from err

    def _check(self, f) -> int:
        return check_layout(f, str(self.path), keep_infos=self.keep_infos)

    def rows_hint(self) -> int | None:
        with self._open() as f:
            try:
                return int(f["observations"].shape[0])
            except (KeyError, AttributeError, IndexError, TypeError, OSError):
                return None  # read() says what is wrong

    def _damaged(self, err: BaseException, key: str | None = None) -> DatasetError:
        what = f" reading {key!r}" if key else ""
        return DatasetError(
            f"{self.path} cannot be read ({type(err).__name__}{what}: {err}); the file is damaged: "
            "restore it, or download it again (download='force')"
        )

    def read(self) -> tuple[Iterator[TensorDict], list[int], dict]:
        with self._open() as f:
            n = self._check(f)
            try:
                terminals = np.asarray(f["terminals"][:]).astype(bool).reshape(n)
                timeouts = np.asarray(f["timeouts"][:]).astype(bool).reshape(n)
            except OSError as err:
                raise self._damaged(err, "terminals/timeouts") from None
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
        def rows(key: str, a: int, b: int) -> np.ndarray:
            try:
                return np.asarray(f[key][a:b])
            except OSError as err:  # h5py: a chunk that cannot be read or decoded
                raise self._damaged(err, key) from None

        with self._open() as f:
            infos = _datasets(f["infos"], ("info",)) if self.keep_infos and "infos" in f else {}
            for a in range(0, n, CHUNK_ROWS):
                b = min(n, a + CHUNK_ROWS)
                keep = plan.keep[a:b]
                m = int(keep.sum())
                if m == 0:
                    continue
                obs = rows("observations", a, min(n, b + 1))
                if plan.has_next is None:
                    nxt = rows("next_observations", a, b)
                else:
                    nxt = np.zeros((b - a,) + obs.shape[1:], dtype=obs.dtype)
                    has = plan.has_next[a:b]
                    succ = obs[1:]
                    if succ.shape[0] < b - a:  # the file's last row: never has a successor
                        has = has[: succ.shape[0]]
                    nxt[: has.shape[0]][has] = succ[has]
                rewards = rows("rewards", a, b)
                rewards = rewards.reshape(b - a, 1) if rewards.ndim == 1 else rewards
                terminated = plan.terminated[a:b].reshape(-1, 1)
                truncated = plan.truncated[a:b].reshape(-1, 1)
                live = np.zeros((b - a, 1), dtype=bool)
                leaves = {
                    ("observation",): obs[: b - a],
                    ("action",): rows("actions", a, b),
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
                    value = rows(d.name, a, b)
                    if value.dtype.kind not in "biuf":
                        raise DatasetError(
                            f"{self.path}: infos/{'/'.join(key[1:])} holds {value.dtype} values, not "
                            "numbers; load without keep_infos, or drop it with keys=[...]"
                        )
                    leaves[key] = value
                if m < b - a:
                    leaves = {k: v[keep] for k, v in leaves.items()}
                yield TensorDict(
                    nest(self.policy.apply(leaves, where=self.source_id)), batch_size=[m]
                )


def _torchrl_keyword(name: str, value: Any, accepted: tuple[Any, ...], way: str) -> None:
    if not any(value is a for a in accepted):
        raise TypeError(
            f"load_dataset('d4rl:...') does not support TorchRL's {name}={value!r} (only "
            f"{' / '.join(repr(a) for a in accepted)}){'; ' + way if way else ''}"
        )

"""``mixreplay inspect`` and ``mixreplay convert``.

``inspect`` opens any dataset ID (converting a source such as ``minari:`` or
``d4rl:`` into the cache on first use, and downloading a missing D4RL file, with
progress bars) and prints its rows, episodes, schema, size on disk and
per-episode return statistics. ``convert`` writes the rows of any dataset ID into
a new directory in mixreplay's memmap format, readable as ``memmap:<dir>``.

Every prefix, and what each loader option means for it, comes from the dataset
registry (:mod:`mixreplay.datasets.registry`): a prefix added with
``register_dataset`` is inspected and converted like a built-in one.

How :mod:`mixreplay.cli` plugs these in: ``add_dataset_parsers(subparsers)`` adds
``inspect`` and ``convert`` (``mixreplay cache`` lives in :mod:`mixreplay.cli.cache`); each
sets ``func`` to a ``run_*(args) -> int``. A user's mistake (a bad ID, an unknown
prefix, a missing file or extra, an option the prefix does not take) is *raised*
as :class:`~mixreplay.errors.DatasetError` (:class:`~mixreplay.errors.DatasetNotFoundError`),
:class:`~mixreplay.errors.MissingDependencyError` or ``FileExistsError``, with a
one-line message; the ``mixreplay`` command prints it and exits with status 2.
This module imports only the standard library at import time, so ``--help`` is fast.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mixreplay.errors import DatasetError, DatasetNotFoundError

__all__ = [
    "add_dataset_parsers",
    "describe_dataset",
    "episode_returns",
    "human_size",
    "run_convert",
    "run_inspect",
]


class _Progress:
    """A tqdm bar created on the first chunk (nothing is shown on a cache hit)."""

    def __init__(self, desc: str, unit: str = "rows"):
        self.desc, self.unit = desc, unit
        self.total: int | None = None
        self.bar: Any = None  # None: not started; False: no tqdm

    def set_total(self, total: int) -> None:
        self.total = total
        if self.bar:
            self.bar.total = total
            self.bar.refresh()

    def reset(self) -> None:
        if self.bar:
            self.bar.reset(total=self.total)

    def __call__(self, n: int) -> None:
        if self.bar is None:
            try:
                from tqdm import tqdm
            except ImportError:  # tqdm is optional: no bar
                self.bar = False
            else:
                self.bar = tqdm(
                    total=self.total,
                    unit="B" if self.unit == "bytes" else self.unit,
                    unit_scale=True,
                    unit_divisor=1024 if self.unit == "bytes" else 1000,
                    desc=self.desc,
                    file=sys.stderr,
                    leave=False,
                )
        if self.bar:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar:
            self.bar.close()


def _parse_key(text: str) -> str | tuple[str, ...]:
    parts = tuple(text.split("."))
    return parts[0] if len(parts) == 1 else parts


def _parse_rename(text: str) -> tuple[Any, Any]:
    old, sep, new = text.partition("=")
    if not sep or not old or not new:
        raise argparse.ArgumentTypeError(
            f"--rename takes OLD=NEW (nested keys as next.reward), got {text!r}"
        )
    return _parse_key(old), _parse_key(new)


#: command-line flag -> (argparse dest, the loader keyword it sets)
_FLAGS = {
    "--download/--no-download": ("download", "download"),
    "--keep-infos": ("keep_infos", "keep_infos"),
    "--keys": ("keys", "keys"),
    "--rename": ("rename", "rename"),
    "--dtype": ("dtype", "dtype"),
    "--refresh": ("refresh", "refresh"),
    "--dedup-next": ("dedup_next", "dedup_next"),
}


def in_flags(message: str, inspect_id: str | None = None) -> str:
    """A loader's message as the command line says it: its keyword ``download=True`` is the
    flag ``--download`` (``download=False``: ``--no-download``, ``keep_infos=True``:
    ``--keep-infos``, ...). ``inspect_id``: the command has no such flag (``demo``), so the
    message says which command fetches the dataset."""
    if inspect_id is not None:
        message = message.replace(
            "pass download=True", f"run `mixreplay inspect {inspect_id} --download`"
        )
    for flag, (_, keyword) in _FLAGS.items():
        on, _, off = flag.partition("/")
        message = message.replace(f"{keyword}=True", on)
        if off:
            message = message.replace(f"{keyword}=False", off)
    return message


@contextlib.contextmanager
def flags_in_errors(inspect_id: str | None = None) -> Iterator[None]:
    """A dataset that is not found is reported with the command line's flags (:func:`in_flags`)."""
    try:
        yield
    except DatasetNotFoundError as err:
        raise DatasetNotFoundError(in_flags(str(err), inspect_id)) from err


def _add_loader_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "loader options (each applies to the prefixes whose loader takes it)"
    )
    group.add_argument(
        "--download",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="download a dataset missing locally, or never (default: the loader's: d4rl: "
        "downloads, minari: does not)",
    )
    group.add_argument(
        "--keep-infos",
        action="store_true",
        default=None,
        help="keep step infos (minari: next.info.*, d4rl: info.*)",
    )
    group.add_argument(
        "--keys",
        nargs="+",
        metavar="KEY",
        type=_parse_key,
        help="keep only these keys (nested keys as next.reward)",
    )
    group.add_argument(
        "--rename", nargs="+", metavar="OLD=NEW", type=_parse_rename, help="rename keys"
    )
    group.add_argument(
        "--dtype",
        default=None,
        metavar="DTYPE",
        help="dtype of floating keys: float32 (default), float64, ..., or 'keep' for the stored dtypes",
    )
    group.add_argument(
        "--dedup-next",
        action="store_true",
        default=None,
        help="store each next value once, read from the following row of the same episode "
        "(the same rows; pixel datasets take about half the disk); a cache variant of its own",
    )


def _loader_kwargs(
    args: argparse.Namespace, entry: Any, skip: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The loader keywords the command line sets, each checked against the prefix's loader.

    Args:
        skip: loader keywords the command handles itself (not passed to the loader).

    Raises:
        DatasetError: an option the prefix's loader does not take.
    """
    kwargs: dict[str, Any] = {}
    for flag, (dest, keyword) in _FLAGS.items():
        if keyword in skip:
            continue
        value = getattr(args, dest, None)
        if value is None or value is False and dest != "download":
            continue
        if not entry.accepts(keyword):
            shown = flag.split("/")[0 if value is not False else 1]
            raise DatasetError(
                f"{shown} does not apply to {entry.prefix}: IDs (their loader, "
                f"{entry.describe()}, takes no {keyword!r} option)"
            )
        if dest == "rename":
            value = dict(value)
        elif dest == "dtype":
            value = None if value.lower() in ("keep", "none") else value
        kwargs[keyword] = value
    return kwargs


def add_dataset_parsers(subparsers: Any) -> None:
    """Add ``inspect`` and ``convert`` to the ``mixreplay`` command's subparsers."""
    inspect = subparsers.add_parser(
        "inspect",
        help="print a dataset's rows, episodes, schema, size on disk and returns",
        description="Open a dataset ID (converting a minari:/d4rl: source into the cache on "
        "first use, downloading a missing D4RL file) and describe it.",
    )
    inspect.add_argument(
        "dataset_id", help="e.g. minari:mujoco/hopper/expert-v0, d4rl:hopper-medium-v2, memmap:DIR"
    )
    inspect.add_argument(
        "--refresh", action="store_true", help="convert again even if the cache is current"
    )
    _add_loader_options(inspect)
    inspect.set_defaults(func=run_inspect)

    convert = subparsers.add_parser(
        "convert",
        help="write a dataset in mixreplay's memmap format",
        description="Write the rows of a dataset ID into DEST, readable as memmap:DEST.",
    )
    convert.add_argument(
        "dataset_id", help="e.g. minari:mujoco/hopper/expert-v0, d4rl:/data/hopper.hdf5"
    )
    convert.add_argument("dest", help="the directory to create")
    convert.add_argument(
        "--overwrite",
        action="store_true",
        help="replace DEST if it holds a mixreplay dataset (anything else is never replaced)",
    )
    _add_loader_options(convert)
    convert.set_defaults(func=run_convert)


# -- inspect -------------------------------------------------------------------------------------


def _column(ds: Any, key: tuple[str, ...], a: int, b: int) -> Any:
    storage = getattr(ds, "storage", None)
    column = getattr(storage, "column", None)
    if callable(column):
        return column(key)[a:b]
    return ds[a:b].get(key)


def _episode_starts(ds: Any, chunk: int = 1 << 20) -> Any:
    """``ds.episode_starts``, or where ``("next", "done")`` ends each episode, or None."""
    import torch

    starts = getattr(ds, "episode_starts", None)
    if isinstance(starts, torch.Tensor):
        return starts
    n = len(ds)
    if n == 0 or ("next", "done") not in _schema(ds):
        return None
    ends = [
        torch.nonzero(_column(ds, ("next", "done"), a, min(n, a + chunk)).reshape(-1)).reshape(-1)
        + a
        for a in range(0, n, chunk)
    ]
    after = torch.cat(ends) + 1
    return torch.cat([torch.zeros(1, dtype=torch.int64), after[after < n]])


def _schema(ds: Any) -> dict[tuple[str, ...], tuple[list[int], str]]:
    """``{key: (shape, dtype)}`` of the rows."""
    schema = getattr(ds, "schema", None)
    if schema is not None and hasattr(schema, "items"):
        return {k: (list(f.shape), str(f.dtype).removeprefix("torch.")) for k, f in schema.items()}
    if len(ds) == 0:
        return {}
    first = ds[0:1]
    return {
        (k,) if isinstance(k, str) else tuple(k): (
            list(v.shape[1:]),
            str(v.dtype).removeprefix("torch."),
        )
        for k, v in first.items(include_nested=True, leaves_only=True)
    }


def episode_returns(ds: Any, reward_key=("next", "reward"), chunk: int = 1 << 20) -> Any:
    """The return (sum of rewards, float64) of every episode of ``ds``, read chunk by chunk."""
    import torch

    starts = _episode_starts(ds)
    n = len(ds)
    if starts is None:
        starts = torch.zeros(1 if n else 0, dtype=torch.int64)
    ids = torch.zeros(n, dtype=torch.int64)
    if starts.numel() > 1:
        ids[starts[1:]] = 1
        ids = ids.cumsum(0)
    out = torch.zeros(max(1, int(starts.numel())), dtype=torch.float64)
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        r = _column(ds, tuple(reward_key), a, b).to(torch.float64).reshape(b - a, -1).sum(-1)
        out.index_add_(0, ids[a:b], r)
    return out[: int(starts.numel())]


def _size(path: Path | None) -> int | None:
    if path is None or not path.is_dir():
        return None
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def human_size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def describe_dataset(ds: Any, dataset_id: str | None = None) -> str:
    """A text report of a dataset: rows, episodes, schema, size on disk, returns.

    Reads a mixreplay dataset column by column, and anything else that has ``len()``
    and row slices (``ds[a:b]``, e.g. a TorchRL dataset) slice by slice.
    """
    from mixreplay.schema import format_key  # imports torch: not at module import (--help)

    lines = []
    if dataset_id:
        lines.append(f"dataset       {dataset_id}")
    path = getattr(ds, "path", None)
    if isinstance(path, Path):
        lines.append(f"path          {path}")
    else:
        path = None
    n = len(ds)
    schema = _schema(ds)
    starts = _episode_starts(ds)
    episodes = None if starts is None else int(starts.numel())
    lines.append(f"rows          {n:,}")
    if episodes is not None:
        lines.append(f"episodes      {episodes:,}")
    storage = getattr(ds, "storage", None)
    row_bytes = getattr(storage, "row_bytes", 0)
    size = _size(path)
    if size is not None:
        lines.append(
            f"size on disk  {human_size(size)} ({size:,} bytes; {row_bytes} bytes per row)"
        )
    elif row_bytes:
        lines.append(
            f"size          {human_size(n * row_bytes)} in memory ({row_bytes} bytes per row)"
        )
    metadata = getattr(ds, "metadata", None)
    once = metadata.get("dedup_next") if isinstance(metadata, dict) else None
    if once:
        keys = ", ".join(format_key(tuple(k)) for k in once)
        lines.append(f"stored once   {keys} (dedup_next: read from the following row)")
    if schema:
        width = max([len("key")] + [len(format_key(k)) for k in schema])
        lines.append("schema")
        lines.append(f"  {'key':<{width}}  {'shape':<10} dtype")
        for key, (shape, dtype) in schema.items():
            lines.append(f"  {format_key(key):<{width}}  {str(shape):<10} {dtype}")
    if ("next", "reward") in schema and episodes:
        returns = episode_returns(ds)
        std = returns.std().item() if returns.numel() > 1 else 0.0
        lines.append(
            f"returns       per episode over {returns.numel():,} episodes: mean {returns.mean().item():.4g}  "
            f"std {std:.4g}  min {returns.min().item():.4g}  max {returns.max().item():.4g}"
        )
        ends = []
        for flag in ("terminated", "truncated"):
            if ("next", flag) in schema:
                count = sum(
                    int(_column(ds, ("next", flag), a, min(n, a + (1 << 20))).sum())
                    for a in range(0, n, 1 << 20)
                )
                ends.append(f"{count:,} {flag}")
        if ends:
            lines.append(f"episode ends  {', '.join(ends)} (rows with the flag set)")
    else:
        lines.append("returns       n/a (no ('next', 'reward') key)")
    return "\n".join(lines)


def _with_progress(entry: Any, dataset_id: str, kwargs: dict[str, Any]) -> list[_Progress]:
    """Progress bars for what the prefix's loader reports (conversion rows, download bytes)."""
    bars = []
    if entry.accepts("progress"):
        bar = _Progress(f"converting {dataset_id}")
        kwargs["progress"] = bar
        bars.append(bar)
    if entry.accepts("download_progress"):
        bar = _Progress(f"downloading {dataset_id}", unit="bytes")
        kwargs["download_progress"] = bar
        bars.append(bar)
    return bars


def run_inspect(args: argparse.Namespace) -> int:
    from mixreplay.datasets import parse_dataset_id

    entry, name = parse_dataset_id(args.dataset_id)
    kwargs = _loader_kwargs(args, entry)
    bars = _with_progress(entry, args.dataset_id, kwargs)
    try:
        with flags_in_errors():
            ds = entry.open(name, **kwargs)
    finally:
        for bar in bars:
            bar.close()
    if not hasattr(ds, "__len__") or not hasattr(ds, "__getitem__"):
        raise DatasetError(
            f"{args.dataset_id} opened as a {type(ds).__name__}, which has no len() and row "
            "slices (ds[a:b]) to inspect"
        )
    print(describe_dataset(ds, args.dataset_id))
    return 0


# -- convert -------------------------------------------------------------------------------------


def _check_dest(dest: Path, overwrite: bool) -> None:
    """Refuse a destination that exists (without --overwrite) or that is not a dataset."""
    from mixreplay.datasets.memmap import FORMAT

    if not dest.exists() and not dest.is_symlink():
        return
    # advise --overwrite only where --overwrite would then be accepted
    if dest.is_dir() and FORMAT.owns(dest):
        if not overwrite:
            raise FileExistsError(
                f"{dest} holds a mixreplay dataset; pass --overwrite to replace it"
            )
        return
    if dest.is_dir() and not any(dest.iterdir()):
        if not overwrite:
            raise FileExistsError(
                f"{dest} exists (an empty directory); pass --overwrite to write into it"
            )
        return
    raise DatasetError(
        f"{dest} exists and is not a mixreplay dataset: --overwrite replaces only a dataset "
        "that mixreplay wrote, never other files; choose another DEST or remove it first"
    )


def _rows_of(ds: Any, chunk: int = 1 << 16) -> Iterator[Any]:
    from tensordict import TensorDictBase

    for a in range(0, len(ds), chunk):
        rows = ds[a : min(len(ds), a + chunk)]
        if not isinstance(rows, TensorDictBase):
            raise DatasetError(
                f"rows of a {type(ds).__name__} come as {type(rows).__name__}, not TensorDicts; "
                "convert copies TensorDict rows"
            )
        yield rows


def run_convert(args: argparse.Namespace) -> int:
    from mixreplay.datasets import parse_dataset_id
    from mixreplay.datasets.cache import convert
    from mixreplay.datasets.memmap import read_metadata, write_memmap_dataset

    dest = Path(args.dest).expanduser()
    _check_dest(dest, args.overwrite)
    entry, name = parse_dataset_id(args.dataset_id)
    # a source converts into DEST with the option; any other dataset's rows are copied,
    # and the flag goes to the writer
    kwargs = _loader_kwargs(
        args, entry, frozenset() if entry.converts else frozenset({"dedup_next"})
    )
    t0 = time.perf_counter()
    bars = _with_progress(entry, args.dataset_id, kwargs)
    try:
        if entry.converts:  # stream the source straight into DEST
            progress = kwargs.pop("progress")
            with flags_in_errors():
                source = entry.source(name, **kwargs)
            convert(source, dest, overwrite=args.overwrite, progress=progress)
        else:  # open it, then copy its rows
            with flags_in_errors():
                ds = entry.open(name, **kwargs)
            if not hasattr(ds, "__len__") or len(ds) == 0:
                raise DatasetError(f"{args.dataset_id} holds no rows to convert")
            bar = _Progress(f"converting {args.dataset_id}")
            bars.append(bar)
            bar.set_total(len(ds))
            write_memmap_dataset(
                dest,
                _rows_of(ds),
                episode_starts=_episode_starts(ds),
                dedup_next=bool(args.dedup_next),
                source_id=args.dataset_id,
                source_fingerprint=getattr(ds, "fingerprint", None),
                overwrite=args.overwrite,
                progress=bar,
            )
    finally:
        for bar in bars:
            bar.close()
    meta = read_metadata(dest)
    size = _size(dest) or 0
    once = " (next values stored once)" if meta.get("dedup_next") else ""
    print(
        f"wrote {meta['rows']:,} rows in {meta['episodes']:,} episodes to {dest}{once} "
        f"({human_size(size)}) in {time.perf_counter() - t0:.2f} s; open it with load_dataset('memmap:{dest}')"
    )
    return 0

"""``mixreplay inspect <id>`` and ``mixreplay convert <id> <dir>``.

``inspect`` opens any dataset ID (converting a ``minari:`` or ``d4rl:`` source
into the cache on first use, with a progress bar) and prints its rows, episodes,
schema, size on disk and per-episode return statistics. ``convert`` writes the
rows of any dataset ID into a new directory in mixreplay's memmap format,
readable as ``memmap:<dir>``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

import torch

from mixreplay.errors import MixreplayError
from mixreplay.schema import format_key

__all__ = ["add_dataset_parsers", "describe_dataset", "episode_returns"]

log = logging.getLogger(__name__)

_CONVERTIBLE = ("minari", "d4rl")


class _Progress:
    """A tqdm bar created on the first converted chunk (nothing is shown on a cache hit)."""

    def __init__(self, desc: str):
        self.desc = desc
        self.total: int | None = None
        self.bar: Any = None  # None: not started; False: no tqdm; else the tqdm bar

    def set_total(self, total: int) -> None:
        self.total = total

    def __call__(self, rows: int) -> None:
        if self.bar is None:
            try:
                from tqdm import tqdm
            except ImportError:  # tqdm is optional: convert silently
                self.bar = False
            else:
                self.bar = tqdm(
                    total=self.total,
                    unit="rows",
                    unit_scale=True,
                    desc=self.desc,
                    file=sys.stderr,
                    leave=False,
                )
        if self.bar is not False:
            self.bar.update(rows)

    def close(self) -> None:
        if self.bar is not None and self.bar is not False:
            self.bar.close()


def _parse_key(text: str) -> str | tuple[str, ...]:
    parts = tuple(text.split("."))
    return parts[0] if len(parts) == 1 else parts


def _parse_rename(text: str) -> tuple:
    old, sep, new = text.partition("=")
    if not sep or not old or not new:
        raise argparse.ArgumentTypeError(
            f"--rename takes OLD=NEW (nested keys as next.reward), got {text!r}"
        )
    return _parse_key(old), _parse_key(new)


def _add_loader_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("loader options (minari: and d4rl: IDs)")
    group.add_argument(
        "--download",
        action="store_true",
        help="minari: let Minari download a dataset missing locally",
    )
    group.add_argument(
        "--keep-infos",
        action="store_true",
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


def _loader_kwargs(args: argparse.Namespace) -> dict:
    """The loader options given on the command line.

    Raises:
        ValueError: an option the ID's loader does not take.
    """
    prefix = args.dataset_id.partition(":")[0]
    given = [
        name
        for name, flag in (
            ("--download", args.download),
            ("--keep-infos", args.keep_infos),
            ("--keys", args.keys),
            ("--rename", args.rename),
            ("--dtype", args.dtype is not None),
        )
        if flag
    ]
    if given and prefix not in _CONVERTIBLE:
        raise ValueError(
            f"{', '.join(given)} apply to minari: and d4rl: IDs only, not to {prefix}: IDs"
        )
    if args.download and prefix != "minari":
        raise ValueError(
            "--download applies to minari: IDs only (mixreplay never downloads D4RL files)"
        )
    kwargs: dict = {}
    if args.download:
        kwargs["download"] = True
    if args.keep_infos:
        kwargs["keep_infos"] = True
    if args.keys:
        kwargs["keys"] = args.keys
    if args.rename:
        kwargs["rename"] = dict(args.rename)
    if args.dtype is not None:
        kwargs["dtype"] = None if args.dtype.lower() in ("keep", "none") else args.dtype
    return kwargs


def add_dataset_parsers(subparsers) -> None:
    """Add ``inspect`` and ``convert`` to the ``mixreplay`` command's subparsers."""
    inspect = subparsers.add_parser(
        "inspect",
        help="print a dataset's rows, episodes, schema, size on disk and returns",
        description="Open a dataset ID (converting minari:/d4rl: sources into the cache on first use) "
        "and describe it.",
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
    convert.add_argument("--overwrite", action="store_true", help="replace DEST if it exists")
    _add_loader_options(convert)
    convert.set_defaults(func=run_convert)


def _fail(message: str) -> int:
    print(f"mixreplay: error: {message}", file=sys.stderr)
    return 1


# -- inspect -------------------------------------------------------------------------------------


def episode_returns(ds, reward_key=("next", "reward"), chunk: int = 1 << 20) -> torch.Tensor:
    """The return (sum of rewards, float64) of every episode of ``ds``, read chunk by chunk."""
    rewards = ds.storage.column(reward_key)
    ids = ds.episode_ids
    out = torch.zeros(max(1, ds.num_episodes), dtype=torch.float64)
    for a in range(0, len(ds), chunk):
        r = rewards[a : a + chunk].to(torch.float64).reshape(min(chunk, len(ds) - a), -1).sum(-1)
        out.index_add_(0, ids[a : a + chunk], r)
    return out[: ds.num_episodes]


def _size(path: Path | None) -> int | None:
    if path is None or not path.is_dir():
        return None
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def describe_dataset(ds, dataset_id: str | None = None) -> str:
    """A text report of a dataset: rows, episodes, schema, size on disk, returns."""
    lines = []
    if dataset_id:
        lines.append(f"dataset       {dataset_id}")
    path = getattr(ds, "path", None)
    if path is not None:
        lines.append(f"path          {path}")
    n = len(ds)
    episodes = getattr(ds, "num_episodes", None)
    lines.append(f"rows          {n:,}")
    if episodes is not None:
        lines.append(f"episodes      {episodes:,}")
    storage = getattr(ds, "storage", None)
    row_bytes = getattr(storage, "row_bytes", 0)
    size = _size(path)
    if size is not None:
        lines.append(f"size on disk  {_human(size)} ({size:,} bytes; {row_bytes} bytes per row)")
    else:
        lines.append(f"size          {_human(n * row_bytes)} in memory ({row_bytes} bytes per row)")
    schema = ds.schema
    if schema is not None:
        width = max([len("key")] + [len(format_key(k)) for k in schema])
        lines.append("schema")
        lines.append(f"  {'key':<{width}}  {'shape':<10} dtype")
        for key, f in schema.items():
            lines.append(
                f"  {format_key(key):<{width}}  {str(list(f.shape)):<10} {str(f.dtype).removeprefix('torch.')}"
            )
    if schema is not None and ("next", "reward") in schema and episodes:
        returns = episode_returns(ds)
        std = returns.std().item() if returns.numel() > 1 else 0.0
        lines.append(
            f"returns       per episode over {returns.numel():,} episodes: mean {returns.mean().item():.4g}  "
            f"std {std:.4g}  min {returns.min().item():.4g}  max {returns.max().item():.4g}"
        )
        ends = []
        for flag in ("terminated", "truncated"):
            if ("next", flag) in schema:
                ends.append(f"{int(ds.storage.column(('next', flag)).sum()):,} {flag}")
        if ends:
            lines.append(f"episode ends  {', '.join(ends)} (rows with the flag set)")
    else:
        lines.append("returns       n/a (no ('next', 'reward') key)")
    return "\n".join(lines)


def run_inspect(args: argparse.Namespace) -> int:
    from mixreplay.datasets import load_dataset

    try:
        kwargs = _loader_kwargs(args)
    except ValueError as err:
        return _fail(str(err))
    prefix = args.dataset_id.partition(":")[0]
    bar = _Progress(f"converting {args.dataset_id}")
    if prefix in _CONVERTIBLE:
        kwargs["progress"] = bar
        if args.refresh:
            kwargs["refresh"] = True
    try:
        ds = load_dataset(args.dataset_id, **kwargs)
    except (MixreplayError, TypeError) as err:
        return _fail(str(err))
    finally:
        bar.close()
    if not hasattr(ds, "schema") or not hasattr(getattr(ds, "storage", None), "column"):
        return _fail(
            f"{args.dataset_id} is a {type(ds).__name__}, which inspect cannot read row by row"
        )
    print(describe_dataset(ds, args.dataset_id))
    return 0


# -- convert -------------------------------------------------------------------------------------


def _source(prefix: str, rest: str, kwargs: dict):
    from mixreplay.datasets.transforms import RowPolicy

    policy = RowPolicy(
        keys=kwargs.pop("keys", None),
        rename=kwargs.pop("rename", None),
        dtype=kwargs.pop("dtype", "float32"),
    )
    if prefix == "minari":
        from mixreplay.datasets.minari import MinariSource

        return MinariSource(rest, policy=policy, **kwargs)
    from mixreplay.datasets.d4rl import D4RLSource

    return D4RLSource(rest, policy=policy, **kwargs)


def _rows_of(ds, chunk: int = 1 << 16):
    for a in range(0, len(ds), chunk):
        yield ds[a : min(len(ds), a + chunk)]


def run_convert(args: argparse.Namespace) -> int:
    from mixreplay.datasets import load_dataset
    from mixreplay.datasets.cache import convert
    from mixreplay.datasets.memmap import read_metadata, write_memmap_dataset

    dest = Path(args.dest).expanduser()
    if dest.exists() and not args.overwrite:
        return _fail(f"{dest} exists; pass --overwrite to replace it")
    try:
        kwargs = _loader_kwargs(args)
    except ValueError as err:
        return _fail(str(err))
    prefix, _, rest = args.dataset_id.partition(":")
    bar = _Progress(f"converting {args.dataset_id}")
    t0 = time.perf_counter()
    try:
        if prefix in _CONVERTIBLE and rest:
            convert(_source(prefix, rest, kwargs), dest, overwrite=args.overwrite, progress=bar)
        else:
            ds = load_dataset(args.dataset_id, **kwargs)
            if len(ds) == 0:
                return _fail(f"{args.dataset_id} holds no rows")
            bar.set_total(len(ds))
            write_memmap_dataset(
                dest,
                _rows_of(ds),
                episode_starts=getattr(ds, "episode_starts", None),
                source_id=args.dataset_id,
                source_fingerprint=getattr(ds, "fingerprint", None),
                overwrite=args.overwrite,
                progress=bar,
            )
    except (MixreplayError, TypeError, FileExistsError) as err:
        return _fail(str(err))
    finally:
        bar.close()
    meta = read_metadata(dest)
    size = _size(dest) or 0
    print(
        f"wrote {meta['rows']:,} rows in {meta['episodes']:,} episodes to {dest} "
        f"({_human(size)}) in {time.perf_counter() - t0:.2f} s; open it with load_dataset('memmap:{dest}')"
    )
    return 0

"""``mixreplay cache list|clean|verify``: the dataset cache (``$MIXREPLAY_DATA_DIR``).

``cache list`` shows the dataset cache (one entry per source and variant), ``cache clean``
frees it and ``cache verify`` reads every entry in full and checks its CRC-32s. A user's
mistake (nothing selected, no entry matching an ID) is raised as
:class:`~mixreplay.errors.DatasetError`; the ``mixreplay`` command prints it as one line and
exits with status 2. This module imports only the standard library at import time.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from mixreplay.cli.datasets import human_size
from mixreplay.errors import DatasetError

__all__ = ["add_cache_parser", "run_cache_clean", "run_cache_list", "run_cache_verify"]


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of days, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number of days >= 0, got {text}")
    return value


def add_cache_parser(subparsers: Any) -> None:
    """Add ``cache`` (``list``, ``clean``, ``verify``) to the ``mixreplay`` command's subparsers."""
    cache = subparsers.add_parser(
        "cache",
        help="list, clean or verify the dataset cache ($MIXREPLAY_DATA_DIR)",
        description="The dataset cache holds one converted copy per source and variant "
        "(--dtype, --keys, ...), under $MIXREPLAY_DATA_DIR (default ~/.cache/mixreplay).",
    )
    actions = cache.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list", help="show each entry: source ID, variant, rows, size, last used"
    )
    listing.add_argument("--cache-dir", help="the cache root (default: $MIXREPLAY_DATA_DIR)")
    listing.set_defaults(func=run_cache_list)
    clean = actions.add_parser(
        "clean",
        help="remove entries: all, by ID, or last used more than N days ago",
        description="Remove cache entries (never anything that is not a mixreplay cache "
        "entry). Say which: --all, one or more IDs, and/or --older-than DAYS.",
    )
    clean.add_argument(
        "ids",
        nargs="*",
        metavar="ID",
        help="a source ID as listed (minari:..., d4rl:NAME or its file), an entry's "
        "directory name, or a prefix ('d4rl:')",
    )
    clean.add_argument(
        "--older-than", type=_days, metavar="DAYS", help="entries last used over DAYS days ago"
    )
    clean.add_argument("--all", action="store_true", help="every entry")
    clean.add_argument("--dry-run", action="store_true", help="show what would be removed")
    clean.add_argument("--cache-dir", help="the cache root (default: $MIXREPLAY_DATA_DIR)")
    clean.set_defaults(func=run_cache_clean)
    verify = actions.add_parser(
        "verify",
        help="read every file of each entry in full and check its CRC-32",
        description="Read every file of the cache's entries (or of those named) in full and "
        "check its CRC-32, whatever was recorded when it was last checked: this finds damage "
        "that a load, which trusts a file whose size, mtime, ctime and inode are unchanged, "
        "cannot see. Exit status 1 when an entry is damaged.",
    )
    verify.add_argument(
        "ids",
        nargs="*",
        metavar="ID",
        help="a source ID as listed, an entry's directory name, or a prefix ('d4rl:'); "
        "default: every entry",
    )
    verify.add_argument("--cache-dir", help="the cache root (default: $MIXREPLAY_DATA_DIR)")
    verify.set_defaults(func=run_cache_verify)


def _ago(seconds: float) -> str:
    if seconds < 120:
        return "just now"
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size or unit == "minutes":
            return f"{seconds / size:.0f} {unit} ago"
    return "just now"  # pragma: no cover


def _root(args: argparse.Namespace) -> Path:
    from mixreplay.datasets.cache import data_root

    return Path(args.cache_dir).expanduser() if args.cache_dir else data_root()


def run_cache_list(args: argparse.Namespace) -> int:
    from mixreplay.datasets.cache import list_cache

    root = _root(args)
    entries = list_cache(root)
    if not entries:
        print(f"the dataset cache at {root} is empty")
        return 0
    now = time.time()
    rows = [
        (
            e.source_id or f"(damaged: {e.damaged})",
            e.variant,
            "?" if e.rows is None else f"{e.rows:,}",
            human_size(e.size),
            _ago(now - e.last_used),
            e.path.name,
        )
        for e in entries
    ]
    head = ("source", "variant", "rows", "size", "last used", "entry")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    print(f"dataset cache at {root}:")
    for r in [head, *rows]:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    total = sum(e.size for e in entries)
    print(f"{len(entries)} entries, {human_size(total)}; free space with: mixreplay cache clean")
    return 0


def run_cache_clean(args: argparse.Namespace) -> int:
    from mixreplay.datasets.cache import CacheEntry, clean_cache, older_than

    if not (args.all or args.ids or args.older_than is not None):
        raise DatasetError(
            "say which cache entries to remove: --all, one or more IDs (as 'mixreplay cache "
            "list' shows them), and/or --older-than DAYS"
        )
    old = None if args.older_than is None else older_than(args.older_than)

    def select(entry: CacheEntry) -> bool:
        if args.ids and not any(entry.matches(i) for i in args.ids):
            return False
        return old is None or old(entry)

    root = _root(args)
    removed = clean_cache(root, select=select, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for e in removed:
        print(f"{verb} {e.source_id or e.path.name} ({e.variant}, {human_size(e.size)})")
    if args.ids and not removed and args.older_than is None:
        raise DatasetError(
            f"no cache entry in {root} matches {', '.join(map(repr, args.ids))}; see "
            "'mixreplay cache list'"
        )
    freed = sum(e.size for e in removed)
    print(f"{verb} {len(removed)} entries, {human_size(freed)} from {root}")
    return 0


def run_cache_verify(args: argparse.Namespace) -> int:
    from mixreplay.datasets.cache import CacheEntry, list_cache, verify_cache

    root = _root(args)
    if not args.ids and not list_cache(root):
        print(f"the dataset cache at {root} is empty")
        return 0

    def select(entry: CacheEntry) -> bool:
        return not args.ids or any(entry.matches(i) for i in args.ids)

    checked = verify_cache(root, select=select)
    if args.ids and not checked:
        raise DatasetError(
            f"no cache entry in {root} matches {', '.join(map(repr, args.ids))}; see "
            "'mixreplay cache list'"
        )
    damaged = [e for e in checked if e.damaged is not None]
    for e in checked:
        name = e.source_id or e.path.name
        if e.damaged is None:
            print(f"ok       {name} ({e.variant}, {human_size(e.size)})  {e.path.name}")
        else:
            print(f"DAMAGED  {name}  {e.path.name}: {e.damaged}")
    print(
        f"{len(checked)} entries verified, {len(damaged) or 'none'} damaged"
        + (
            "; the next load converts it again, or remove it with: mixreplay cache clean "
            + " ".join(e.path.name for e in damaged)
            if damaged
            else ""
        )
    )
    return 1 if damaged else 0

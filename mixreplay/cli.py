"""The ``mixreplay`` command: ``demo``, ``inspect``, ``convert`` and ``example``.

``mixreplay --help`` lists the commands; ``mixreplay COMMAND --help`` explains one.
The same command runs as ``python -m mixreplay``.

How commands plug in (the contract for every module listed in :data:`COMMANDS`):

- a :class:`Command` names the command, its one-line help (shown by ``mixreplay
  --help``) and ``"module:function"``; ``function(subparsers)`` adds the module's
  parsers with ``subparsers.add_parser(name, ...)`` and sets ``func`` on each
  (``parser.set_defaults(func=run)``); one function may add several commands, each
  listed here under the same target;
- the module is imported only when one of its commands is named on the command
  line, and it must import nothing heavy at module level: no torch, tensordict,
  numpy, optional extras or mixreplay's core (``tests/test_cli.py`` checks
  ``sys.modules`` after ``--help``). ``run(args)`` imports what it needs;
- ``run(args)`` returns an exit status (``None`` means 0) and reports a mistake of
  the user's by raising one of :data:`USER_ERRORS`, with a message that says what
  was wrong and how to fix it; :func:`main` prints it as one line,
  ``mixreplay: error: <message>``, and exits with status 2. Anything else is a bug
  and keeps its traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import logging
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from mixreplay._version import __version__
from mixreplay.errors import (
    CheckpointError,
    DatasetError,
    MissingDependencyError,
    MixreplayError,
    SchemaMismatchError,
)

__all__ = ["COMMANDS", "USER_ERRORS", "Command", "UsageError", "build_parser", "main"]

#: exit status of a user error (argparse's own status for a bad command line)
USER_ERROR_STATUS = 2


class UsageError(MixreplayError, ValueError):
    """Command-line arguments that parse but cannot be used together (or at all)."""


#: What counts as the user's mistake: printed as one line, exit status 2. Everything else
#: raised by a command is a bug in mixreplay and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (
    UsageError,  # options that parse but do not fit together
    argparse.ArgumentError,  # a command re-checking an argument after parsing
    argparse.ArgumentTypeError,
    DatasetError,  # a bad ID, an unknown prefix, a missing or unreadable dataset
    SchemaMismatchError,  # keys/dtypes the user asked for that the data does not have
    CheckpointError,  # a missing, corrupt or mismatched checkpoint
    MissingDependencyError,  # an extra that is not installed (the message has the pip command)
    FileNotFoundError,  # paths given on the command line
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)


@dataclasses.dataclass(frozen=True)
class Command:
    """One ``mixreplay`` command: its name, its line in ``--help``, and where its parser lives."""

    name: str
    help: str
    target: str  # "module:function"; function(subparsers) adds the parser


#: Every command, in ``--help`` order: the one place a command name lives.
COMMANDS: tuple[Command, ...] = (
    Command(
        "demo",
        "SAC on MountainCarContinuous: online only vs offline/online mixed replay "
        "(needs mixreplay[demo])",
        "mixreplay.demo.cli:add_demo_parser",
    ),
    Command(
        "inspect",
        "print a dataset's rows, episodes, schema, size on disk and returns",
        "mixreplay.cli_datasets:add_dataset_parsers",
    ),
    Command(
        "convert",
        "write a dataset in mixreplay's memmap format",
        "mixreplay.cli_datasets:add_dataset_parsers",
    ),
    Command(
        "cache",
        "list or clean the dataset cache ($MIXREPLAY_DATA_DIR)",
        "mixreplay.cli_datasets:add_cache_parser",
    ),
    Command(
        "example",
        "print how a small mixed buffer splits three batches (checks an install; no extras)",
        "mixreplay.cli:add_example_parser",
    ),
)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors (``mixreplay demo: error: ...; see mixreplay demo --help``)
    and no abbreviated options: ``--seed 3`` is an error, never ``--seeds 3``.

    Every subparser is of this class too (argparse builds subparsers with the parent's class),
    so no command of ``mixreplay`` takes an abbreviation.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(USER_ERROR_STATUS, f"{self.prog}: error: {message}; see {self.prog} --help\n")


def _command_named(argv: Sequence[str]) -> str | None:
    """The command word of ``argv``: its first token that is not an option (none take values)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The ``mixreplay`` parser, with the real parser of the command named in ``argv``.

    Other commands get a placeholder that only shows their line in ``--help``, so
    ``mixreplay --help`` imports no command module at all.

    Raises:
        SystemExit: an unknown command (status 2, one line naming the closest command).
    """
    parser = ArgumentParser(
        prog="mixreplay",
        description="Offline-to-online replay for PyTorch: exact, scheduled mixing of offline "
        "and online data.",
        epilog="Run 'mixreplay COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"mixreplay {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    names = [c.name for c in COMMANDS]
    wanted = _command_named(argv)
    if wanted is not None and wanted not in names:
        close = difflib.get_close_matches(wanted, names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        parser.error(f"unknown command {wanted!r}; {hint}commands: {', '.join(names)}")
    loaded: set[str] = set()
    if wanted is not None:  # its module may add other commands too (inspect and convert)
        loaded = _load(next(c for c in COMMANDS if c.name == wanted), sub)
    for command in COMMANDS:
        if command.name not in loaded:
            sub.add_parser(command.name, help=command.help, add_help=False)
    return parser


def _load(command: Command, sub) -> set[str]:
    """Let the command's module add its parsers; return the names it added."""
    module_name, _, function = command.target.partition(":")
    before = set(sub.choices)
    getattr(importlib.import_module(module_name), function)(sub)
    added = set(sub.choices) - before
    expected = {c.name for c in COMMANDS if c.target == command.target}
    if added != expected:  # a programming error: COMMANDS and the module disagree
        raise RuntimeError(
            f"{command.target} added the commands {sorted(added)}, but COMMANDS lists "
            f"{sorted(expected)} for it; update mixreplay.cli.COMMANDS"
        )
    return added


def _one_line(err: BaseException) -> str:
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        return f"{err.strerror}: {err.filename}"
    text = str(err) or type(err).__name__
    return re.sub(r"\s*\n\s*", " ", text.strip())


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``mixreplay`` with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    A bad command line exits through argparse (``SystemExit`` with status 2); an
    error in :data:`USER_ERRORS` raised by a command prints one line to stderr and
    returns 2; Ctrl-C returns 130.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return USER_ERROR_STATUS
    try:
        return int(func(args) or 0)
    except USER_ERRORS as err:
        print(f"mixreplay: error: {_one_line(err)}", file=sys.stderr)
        return USER_ERROR_STATUS
    except KeyboardInterrupt:
        print("mixreplay: interrupted", file=sys.stderr)
        return 130


# -- example -------------------------------------------------------------------------------------


def add_example_parser(subparsers) -> None:
    """``mixreplay example``: the core library at work, nothing but torch and tensordict needed."""
    example = subparsers.add_parser(
        "example",
        help=next(c.help for c in COMMANDS if c.name == "example"),
        description="Build an OfflineToOnlineReplayBuffer over 10,000 random offline rows, add "
        "100 online rows, and print how three sampled batches split between the two: "
        "round(fraction x batch size) offline rows in each. A check that the core install "
        "works; it needs none of the extras.",
    )
    example.add_argument(
        "--fraction", type=_fraction, default=0.25, help="offline fraction (default 0.25)"
    )
    example.add_argument(
        "--batch-size", type=positive_int, default=256, help="rows per batch (default 256)"
    )
    example.set_defaults(func=run_example)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(
            f"expected a fraction strictly between 0 and 1, got {text}"
        )
    return value


def positive_int(text: str) -> int:
    """An argparse ``type=`` for counts: a clear one-line error for ``0``, ``-1`` or ``x``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def run_example(args: argparse.Namespace) -> int:
    import torch
    from tensordict import TensorDict

    from mixreplay import OfflineDataset, OfflineToOnlineReplayBuffer

    g = torch.Generator().manual_seed(0)
    n = 10_000
    offline = OfflineDataset.from_tensordict(
        TensorDict({"observation": torch.randn(n, 4, generator=g), "tag": torch.zeros(n, 1)}, [n])
    )
    rb = OfflineToOnlineReplayBuffer(
        offline,
        online_capacity=1000,
        offline_fraction=args.fraction,
        batch_size=args.batch_size,
        generator=0,
        source_key="source",
    )
    rb.extend(
        TensorDict(
            {"observation": torch.randn(100, 4, generator=g), "tag": torch.ones(100, 1)}, [100]
        )
    )
    print(rb)
    expected = round(args.fraction * args.batch_size)
    for step in range(3):
        batch = rb.sample()
        off, on = batch["source"].bincount(minlength=2).tolist()
        print(
            f"batch {step}: {off} offline rows + {on} online rows "
            f"(round({args.fraction} * {args.batch_size}) = {expected})"
        )
    return 0


if __name__ == "__main__":  # pragma: no cover
    # run the imported module's main, not this __main__ copy's: one UsageError class for all
    from mixreplay.cli import main as _main

    sys.exit(_main())

"""The ``mixreplay`` command: ``demo``, ``inspect``, ``convert`` and ``example``.

``mixreplay --help`` lists the commands; ``mixreplay COMMAND --help`` explains one.
The same command runs as ``python -m mixreplay``.

This package is the command line: this module parses and dispatches; each command lives in
a module of its own (``mixreplay.cli.datasets``: ``inspect`` and ``convert``;
``mixreplay.cli.cache``: ``cache``; ``mixreplay.cli.example``: ``example``;
``mixreplay.demo.cli``: ``demo``).

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

__all__ = [
    "COMMANDS",
    "USER_ERRORS",
    "Command",
    "UsageError",
    "build_parser",
    "main",
    "nonnegative_int",
    "positive_int",
]

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
        "mixreplay.cli.datasets:add_dataset_parsers",
    ),
    Command(
        "convert",
        "write a dataset in mixreplay's memmap format",
        "mixreplay.cli.datasets:add_dataset_parsers",
    ),
    Command(
        "cache",
        "list or clean the dataset cache ($MIXREPLAY_DATA_DIR)",
        "mixreplay.cli.cache:add_cache_parser",
    ),
    Command(
        "example",
        "print how a small mixed buffer splits three batches (checks an install; no extras)",
        "mixreplay.cli.example:add_example_parser",
    ),
)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors (``mixreplay demo: error: ...; see mixreplay demo --help``)
    and no abbreviated options: ``--seed 3`` is an error, never ``--seeds 3``.

    Every subparser is of this class too (argparse builds subparsers with the parent's class),
    so no command of ``mixreplay`` takes an abbreviation.
    """

    #: the parser of the command named on the command line (set by :func:`build_parser`):
    #: the options an unrecognized one is compared with
    command_parser: argparse.ArgumentParser | None = None

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        prog = self.prog
        unknown = "unrecognized arguments: "
        if message.startswith(unknown) and self.command_parser is not None:
            # argparse reports a command's unknown options from the top parser: name the
            # parser the option was meant for, and the option (``--seeds`` for ``--seed``)
            parsers = [*_nested(self.command_parser), self]
            where, hint = _did_you_mean(message[len(unknown) :].split(), parsers)
            prog = (where or self.command_parser).prog
            message += hint
        self.exit(USER_ERROR_STATUS, f"{prog}: error: {message}; see {prog} --help\n")


def _nested(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and the parsers of its subcommands (``cache clean``), depth first."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _nested(sub)
    return found


def _did_you_mean(
    words: Sequence[str], parsers: Sequence[argparse.ArgumentParser]
) -> tuple[argparse.ArgumentParser | None, str]:
    """The parser that takes an option close to an unknown one in ``words``, and the hint
    `` (did you mean --seeds?)`` (``--seeds for --sed, --quick for --quik`` for several)."""
    given = [w.split("=", 1)[0] for w in words if w.startswith("--")]
    where, hints = None, []
    for name in given:
        for parser in parsers:
            options = [o for action in parser._actions for o in action.option_strings]
            close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
            if close:
                where = where or parser
                hints.append(f"{close[0]} for {name}" if len(given) > 1 else close[0])
                break
    return where, f" (did you mean {', '.join(hints)}?)" if hints else ""


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
        parser.command_parser = sub.choices[wanted]
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


def _int_at_least(text: str, low: int, expected: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse ``type=`` for counts: a clear one-line error for ``0``, ``-1`` or ``x``."""
    return _int_at_least(text, 1, "a positive integer")


def nonnegative_int(text: str) -> int:
    """An argparse ``type=`` for a first index (``--first-seed``): an integer ``>= 0``."""
    return _int_at_least(text, 0, "an integer >= 0")

"""The parser ``tablecast`` and ``tablecast-ops`` share.

- A mistyped option is one line naming it, a pointer to ``--help`` and exit
  64 (:class:`CommandParser`), never argparse's usage block and exit 2, which
  is an integrity violation here.
- Each command's help says what it does, shows examples and ends with the
  exit codes (:func:`add_command`, :func:`app.errors.exit_code_table`).
- ``--version`` on both tools (:func:`add_version`); old spellings of renamed
  options still accepted, out of sight (:func:`hidden_alias`).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from app.errors import ExitCode, exit_code_table

Commands = argparse._SubParsersAction  # what add_subparsers returns


class CommandParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line and exit 64 (bad usage)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        line = " ".join(message.split())
        self.exit(ExitCode.USAGE, f"{self.prog}: {line} (see `{self.prog} --help`)\n")


def epilog(examples: Sequence[str]) -> str:
    """The end of a ``--help``: examples, then the exit codes."""
    shown = "\n".join(f"  {example}" for example in examples)
    return f"examples:\n{shown}\n\n{exit_code_table()}"


def add_command(
    commands: Commands[CommandParser],
    name: str,
    *,
    summary: str,
    description: str,
    examples: Sequence[str],
) -> CommandParser:
    """A subcommand: its one-line ``summary`` in the tool's list; in its own ``--help``,
    what it does, then its examples and the exit codes."""
    parser: CommandParser = commands.add_parser(
        name, help=summary, description=description, epilog=epilog(examples)
    )
    return parser


def add_version(parser: argparse.ArgumentParser, describe: Callable[[], str]) -> None:
    """``--version``: prints ``describe()`` (asked only then: it may run git)."""

    class _Version(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
            print(describe())
            parser.exit()

    parser.add_argument(
        "--version", nargs=0, action=_Version, help="print the version and commit, then exit"
    )


def hidden_alias(
    parser: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup,
    old: str,
    dest: str,
    **kwargs: Any,
) -> None:
    """``old``, a spelling of the option whose value is ``dest``, still accepted (for a
    release after a rename) but no longer shown in ``--help``."""
    parser.add_argument(old, dest=dest, help=argparse.SUPPRESS, default=argparse.SUPPRESS, **kwargs)


def positive(text: str) -> int:
    """An option's value that must be a whole number above zero."""
    value = natural(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def rate(text: str) -> float:
    """An option's value that must be a number of things a second, zero or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text} is not a rate (a number, zero or more)")
    return value


def natural(text: str) -> int:
    """An option's value that must be a whole number, zero or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is below zero")
    return value

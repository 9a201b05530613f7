"""``tablecast``: the job and its tools on the command line.

Every failure the operator can act on is printed as one line that names what
was wrong and where, with an exit code from the one table in
:class:`app.errors.ExitCode`; a mistyped option too (64). Each command's
``--help`` teaches it: what it does, an example, every option's default.

Each command imports its own modules when it runs: pyspark, pyiceberg,
duckdb and confluent-kafka cost seconds that ``--help``, ``generate`` or a
mistyped option should not pay.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence

from app import logs
from app.durations import parse_duration_ms
from app.errors import ExitCode, TablecastError
from app.logs import LogFormat
from app.spark.session import spark_log_path

from . import options, rewrites, run, tools
from .outcome import leave, outcome, root_cause
from .parser import build_parser
from .parsing import positive

__all__ = [
    "UNEXPECTED_EXIT_CODE",
    "build_parser",
    "command_line",
    "main",
    "parse_duration_ms",
    "positive",
    "root_cause",
    "topic_pattern",
]

UNEXPECTED_EXIT_CODE = ExitCode.UNEXPECTED
topic_pattern = options.topic_pattern

_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": run.run,
    "generate": tools.generate,
    "verify": tools.verify,
    "inspect": tools.inspect,
    "repair": rewrites.repair,
    "replay": rewrites.replay,
    "correct": rewrites.correct,
    "table": rewrites.table,
    "compact": rewrites.compact,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    log_format = LogFormat(getattr(args, "log_format", LogFormat.TEXT))
    logs.configure(log_format, logging.INFO if log_format is LogFormat.JSON else logging.WARNING)

    def command() -> int:
        options.check_paths(args)  # an unknown scheme creates nothing anywhere
        return _COMMANDS[args.command](args)

    return outcome(
        f"tablecast {args.command}",
        command,
        report=_json_line if log_format is LogFormat.JSON else None,
        traceback_file=spark_log_path,
    )


def command_line() -> None:
    """The ``tablecast`` command (and ``python -m app``): :func:`main`, then the exit."""
    leave(main())


def _json_line(prog: str, exc: TablecastError) -> None:
    """One of our errors as one JSON log line, its facts as fields (on the cluster)."""
    logging.getLogger("tablecast").error("%s: %s", prog, exc, extra={logs.FACTS: exc.facts})

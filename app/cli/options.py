"""Option values read and checked before a command does anything.

Each check fails with one line naming the option, the value and what it
takes (:class:`~app.errors.ConfigurationError`, exit 64), before Spark starts
and before anything is written.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import TYPE_CHECKING, Any

from app import storage
from app.contract.offsets import is_topic_name
from app.durations import EXAMPLES, parse_duration_ms
from app.engine.machine import IntegrityMode
from app.errors import ConfigurationError
from app.sink import ledger as ledger_mod
from app.sources.kafka_client import KafkaAuth, KafkaEndpoint, parse_option
from app.storage import Location, resolve

if TYPE_CHECKING:
    from app.contract.processor import Processor
    from app.contract.schema import TableSchema
    from app.recompute.plan import GivenRules
    from app.sink.rewrite import Retirement
    from app.table.live import TableSettings

# The path options and the schemes each takes: the archive and the output are read with
# pyarrow (local or S3), the checkpoint with Spark's Hadoop filesystems (local or HDFS).
PATHS: dict[str, tuple[str, tuple[str, ...]]] = {
    "archive": ("--archive", (storage.LOCAL, storage.S3)),
    "output": ("--output", (storage.LOCAL, storage.S3)),
    "checkpoint": ("--checkpoint", (storage.LOCAL, storage.HDFS)),
    "schema": ("--schema", (storage.LOCAL, storage.S3)),
}


def check_paths(args: argparse.Namespace) -> None:
    """Every path option given, refused in one line if its scheme is not one it takes."""
    for dest, (option, schemes) in PATHS.items():
        value = getattr(args, dest, None)
        if value is not None:
            storage.require_scheme(option, value, schemes)
    checkpoint = getattr(args, "checkpoint", None)
    if checkpoint and "://" not in checkpoint and ":" in checkpoint.split("/", 1)[0]:
        # Hadoop's paths read "c-1:2" as the URI scheme "c-1" and fail deep inside Spark.
        raise ConfigurationError(
            f"--checkpoint {checkpoint!r}: Spark reads the part before ':' as a URI scheme; "
            f"give it as ./{checkpoint}"
        )
    given = [(PATHS[d][0], v) for d in _APART if (v := getattr(args, d, None)) is not None]
    for i, (option, value) in enumerate(given):
        for other, other_value in given[i + 1 :]:
            a, b = _place(value), _place(other_value)
            if a == b or a.startswith(b + "/") or b.startswith(a + "/"):
                raise ConfigurationError(
                    f"{option} {value} and {other} {other_value} overlap: "
                    f"{_APART_WHY[option, other]}"
                )


# The folders a command's files live in, each a folder of its own: the output's checks would
# find an archive's or a checkpoint's files as strays to delete, a checkpoint moved aside (as
# the start-up refusals advise) would take an output inside it along, and the archive's
# listing would refuse a checkpoint's files as out of its layout.
_APART = ("output", "archive", "checkpoint")
_APART_WHY = {
    ("--output", "--archive"): "the output is a folder of its own, never inside the archive",
    ("--output", "--checkpoint"): "the output and the checkpoint are folders of their own, "
    "never one inside the other",
    ("--archive", "--checkpoint"): "the archive and the checkpoint are folders of their own, "
    "never one inside the other",
}


def _place(uri: str) -> str:
    """Where a path option points, comparable with another's (local paths made absolute)."""
    if "://" in uri and not uri.startswith("file://"):
        return uri.rstrip("/")
    return os.path.realpath(uri.removeprefix("file://"))


def existing_output(uri: str, *, ledger: bool = True) -> Location:
    """An output a command reads: refused, creating nothing, if it is missing or (with
    ``ledger``) is not one: a folder ``tablecast run`` never wrote, such as the archive."""
    location = resolve(uri)
    if not location.exists(location.path):
        raise ConfigurationError(f"output {uri} does not exist")
    if ledger and not location.exists(location.child(ledger_mod.LEDGER_DIR)):
        raise ConfigurationError(
            f"{uri} is not a tablecast output (it has no {ledger_mod.LEDGER_DIR}/): give the "
            "--output that `tablecast run` writes"
        )
    return location


def missing_locally(checkpoint: str) -> bool:
    """A local checkpoint path with nothing there (an hdfs:// one is Spark's to look at)."""
    if "://" in checkpoint and not checkpoint.startswith("file://"):
        return False
    return not os.path.exists(checkpoint.removeprefix("file://"))


def seconds(args: argparse.Namespace, dest: str, *, low: float = 0.0, high: float = 0.0) -> float:
    """A duration option in seconds, refused if not from ``low`` to ``high`` (0: no bound)."""
    option = "--" + dest.replace("_", "-")
    text = str(getattr(args, dest))
    value = parse_duration_ms(text, option) / 1000
    if value < low or (high and value > high):
        bounds = f"from {low:g} s to {high:g} s" if high else f"at least {low:g} s"
        raise ConfigurationError(f"{option} {text!r} must be {bounds}, like {EXAMPLES}")
    return value


def topic_pattern(topics: str | None, pattern: str) -> str:
    """``--topics a,b`` as the pattern that matches exactly them, else ``--topic-pattern``."""
    if topics is None:
        return checked_pattern(pattern)
    names = [t.strip() for t in topics.split(",") if t.strip()]
    bad = [t for t in names if not is_topic_name(t)]
    if not names or bad:
        raise ConfigurationError(
            f"--topics {topics!r}: give Kafka topic names separated by commas"
            + (f" ({bad[0]!r} is not one)" if bad else "")
        )
    return "(?:" + "|".join(re.escape(t) for t in sorted(set(names))) + ")"


def checked_pattern(text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise ConfigurationError(
            f"--topic-pattern {text!r} is not a regular expression: {exc}"
        ) from None
    return text


def topics_of(args: argparse.Namespace) -> str:
    """The topics a command reads, as one pattern (``--topics`` or ``--topic-pattern``)."""
    return topic_pattern(getattr(args, "topics", None), args.topic_pattern)


def writer_lease(args: argparse.Namespace) -> float:
    """``--writer-lease`` in seconds: from 1 second to 1 hour."""
    return seconds(args, "writer_lease", low=1, high=3600)


def retire_grace(args: argparse.Namespace) -> float | None:
    """``--retire-grace`` in seconds (None: the default), within its bounds."""
    from app.sink import rewrite as rewrite_mod

    if args.retire_grace is None:
        return None
    return rewrite_mod.check_grace(seconds(args, "retire_grace"))


def retirement(args: argparse.Namespace) -> Retirement:
    from app.sink.rewrite import Retirement

    return Retirement(grace_s=retire_grace(args), wait=not args.no_wait, notice=say)


def kafka_timeout(args: argparse.Namespace) -> float:
    """``--kafka-timeout`` in seconds, above zero."""
    timeout_s = seconds(args, "kafka_timeout")
    if timeout_s <= 0:
        raise ConfigurationError(f"--kafka-timeout {args.kafka_timeout!r} must be positive")
    return timeout_s


def region(args: argparse.Namespace) -> str:
    """``--region``, else the environment's (AWS_REGION, AWS_DEFAULT_REGION), else ""."""
    given = getattr(args, "region", None)
    return given or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or ""


def endpoint(args: argparse.Namespace) -> KafkaEndpoint:
    """The brokers of ``--bootstrap-servers`` with their sign-in and, for ``run``, rack."""
    return KafkaEndpoint(
        args.bootstrap_servers,
        KafkaAuth(args.kafka_auth),
        region=region(args),
        client_rack=getattr(args, "kafka_client_rack", ""),
        secret_arn=getattr(args, "kafka_secret_arn", ""),
        options=tuple(parse_option(o) for o in getattr(args, "kafka_option", [])),
    )


def recompute_rules(args: argparse.Namespace) -> GivenRules:
    """The rules given on the command line (None: the live job's, from the ledger)."""
    from app.recompute.plan import GivenRules

    timeout = args.session_timeout
    return GivenRules(
        integrity=None if args.integrity is None else IntegrityMode(args.integrity),
        session_timeout_ms=None
        if timeout is None
        else parse_duration_ms(timeout, "--session-timeout"),
    )


def table_settings(args: argparse.Namespace) -> TableSettings:
    """``run``'s options for the output's Iceberg table (app/table/live.py)."""
    from app.table import compact as table_compact
    from app.table.live import TableSettings

    every = "" if args.compact_every.strip().lower() in ("", "off") else args.compact_every
    every_s = parse_duration_ms(every, "--compact-every") / 1000 if every else 0.0
    if every and every_s <= 0:
        raise ConfigurationError(f"--compact-every {args.compact_every!r} must be positive")
    return TableSettings(
        glue_database=args.glue_database,
        glue_table=args.glue_table,
        region=region(args),
        compact_every_s=every_s,
        compact_target_bytes=table_compact.parse_size(
            args.compact_target_size, option="--compact-target-size"
        ),
        retire_grace_s=retire_grace(args),
        history_s=parse_duration_ms(args.table_history, "--table-history") / 1000,
    )


def schema(args: argparse.Namespace) -> TableSchema:
    """``--schema``: the table schema in the file (CONTRACT.md section 1a), or the default."""
    from app.contract.schema import DEFAULT_SCHEMA, load_schema

    return DEFAULT_SCHEMA if args.schema is None else load_schema(args.schema)


def processor(args: argparse.Namespace) -> Processor[Any]:
    """``--processor`` (the built-in without it), reading messages with ``--schema``."""
    from app.contract import loader

    return loader.load(args.processor, schema(args), schema_given=args.schema is not None)


def recorded_processor(args: argparse.Namespace) -> Processor[Any] | None:
    """A user's processor for a command on ``--output``: ``--processor``, else the one the
    output's ledger names; None for the built-in."""
    from app.contract import loader
    from app.sink import processors

    location = resolve(args.output)
    if args.processor is None:
        found = processors.current(location)
    else:
        found = processor(args)
        held = processors.current_record(location)
        if held is not None and held.name != found.name:
            raise ConfigurationError(
                f"--processor {args.processor}: output {args.output} was written by processor "
                f"{held.name}; leave --processor out"
            )
    return None if found is None or found.name == loader.BUILT_IN else found


def say(line: str) -> None:
    """A line for the operator beside the command's output (standard error)."""
    print(line, file=sys.stderr, flush=True)

"""``tablecast``: the job and its tools on the command line.

Every failure the operator can act on is printed as one line that names what
was wrong and where, with a distinct exit code (see :mod:`app.errors`).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app import defaults, handoff, logs, storage
from app.engine.machine import IntegrityMode
from app.errors import ConfigurationError, TablecastError
from app.logs import LogFormat
from app.metrics.publisher import PublisherKind
from app.sources import archive
from app.sources.kafka_client import Isolation, KafkaAuth, KafkaEndpoint, parse_option
from app.sources.starting import StartingPosition
from app.spark.session import spark_log_path, spark_session
from app.storage import resolve
from app.tools import generate as gen

# Each command imports its own modules when it runs, not here: pyspark, pyiceberg,
# duckdb and confluent-kafka cost seconds that `--help`, `generate` or a mistyped
# option should not pay.
if TYPE_CHECKING:
    from app.contract.offsets import TopicPartition
    from app.contract.processor import Processor
    from app.contract.schema import TableSchema
    from app.metrics.consumer_group import GroupCommitter
    from app.recompute.plan import PartitionWork
    from app.recompute.run import Planned, RecomputeReport
    from app.sink.rewrite import Retirement
    from app.table.live import TableSettings

_UNITS_MS = {
    "ms": 1,
    "millisecond": 1,
    "milliseconds": 1,
    "s": 1000,
    "sec": 1000,
    "second": 1000,
    "seconds": 1000,
    "m": 60_000,
    "min": 60_000,
    "minute": 60_000,
    "minutes": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "hours": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
    "days": 86_400_000,
}


def parse_duration_ms(text: str) -> int:
    """``1 hour``, ``30 minutes``, ``90s`` -> milliseconds."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]+)\s*", text.lower())
    if match is None or match.group(2) not in _UNITS_MS:
        raise ConfigurationError(f"duration {text!r} is not like '1 hour', '30 minutes' or '90s'")
    return int(match.group(1)) * _UNITS_MS[match.group(2)]


def parse_positive(text: str) -> int:
    """An argument that must be a whole number above zero."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tablecast", description="Ordered, stateful reconstruction of capture sessions."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the streaming job")
    run.add_argument(
        "--archive",
        help="read the raw archive (local path or s3://); with "
        "--bootstrap-servers, for the offsets Kafka no longer holds",
    )
    run.add_argument("--bootstrap-servers", help="read Kafka (HOST:PORT,...)")
    run.add_argument(
        "--kafka-auth",
        choices=[a.value for a in KafkaAuth],
        default="none",
        help="with --bootstrap-servers: none (plaintext), iam (MSK: IAM over "
        "TLS, tokens signed in --region), tls (TLS only) or scram (SASL/SCRAM "
        "over TLS, the secret of --kafka-secret-arn) [none]",
    )
    run.add_argument(
        "--kafka-secret-arn",
        default="",
        metavar="ARN",
        help="with --kafka-auth scram: the Secrets Manager secret holding the "
        "user name and password (read in --region)",
    )
    run.add_argument(
        "--kafka-isolation-level",
        choices=[i.value for i in Isolation],
        default=Isolation.READ_COMMITTED.value,
        help="with --bootstrap-servers: read_committed (batches end at the last "
        "stable offset; aborted transactions are not read) or read_uncommitted "
        "[read_committed]",
    )
    run.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --bootstrap-servers: a librdkafka setting for every client "
        "of the source; one the source sets itself is refused, but a longer "
        "fetch.wait.max.ms and ssl.ca.location (docs/operations.md lists them); repeatable",
    )
    run.add_argument(
        "--kafka-client-rack",
        default="",
        metavar="ZONE_ID",
        help="with --bootstrap-servers: this node's availability zone id "
        "(librdkafka's client.rack), to fetch from a replica in its zone",
    )
    run.add_argument(
        "--kafka-timeout",
        default="30s",
        metavar="DURATION",
        help="with --bootstrap-servers: the longest a request to the brokers, "
        "or a read without a record, may take before the run fails, and how long "
        "a topic missing from the brokers' answers is asked for again [30s]",
    )
    run.add_argument("--output", required=True, help="output dataset (local path or s3://)")
    run.add_argument("--checkpoint", required=True, help="checkpoint (local path or hdfs://)")
    _schema_option(
        run, "the table schema (TOML, local path or s3://) [the default: row_id, value, status]"
    )
    _processor_option(
        run,
        "the processor: package.module:Class, a tablecast.Processor installed beside tablecast "
        "(docs/processors.md) [table: the built-in table rebuild]",
    )
    run.add_argument(
        "--trigger",
        default=defaults.TRIGGER,
        help=f"'available-now' or 'processing-time=<interval>' [{defaults.TRIGGER}]",
    )
    run.add_argument(
        "--integrity",
        choices=[m.value for m in IntegrityMode],
        default="strict",
        help="strict or resync (CONTRACT.md's rules), ordered (rising seqs; repeats dropped, "
        "gaps counted), once (each seq once, in arrival order) or none [strict]",
    )
    topics = run.add_mutually_exclusive_group()
    topics.add_argument(
        "--topic-pattern",
        default=defaults.TOPIC_PATTERN,
        help="read the topics whose whole name this regular expression "
        f"matches [{defaults.TOPIC_PATTERN}]",
    )
    topics.add_argument(
        "--topics",
        default=None,
        metavar="A,B",
        help="read these topics (instead of --topic-pattern)",
    )
    run.add_argument(
        "--starting-offsets",
        default="earliest",
        metavar="WHERE",
        help="where a fresh checkpoint starts: earliest, latest, or a time "
        "(ISO 8601, UTC, or milliseconds since the epoch; with Kafka) "
        "[earliest]",
    )
    run.add_argument(
        "--max-offsets-per-trigger", type=parse_positive, default=defaults.MAX_OFFSETS_PER_TRIGGER
    )
    run.add_argument(
        "--min-offsets-per-trigger",
        type=parse_positive,
        default=None,
        metavar="N",
        help="wait for at least N new offsets before a batch, at most "
        "--max-trigger-delay (Spark's minOffsetsPerTrigger)",
    )
    run.add_argument(
        "--max-trigger-delay",
        default=defaults.MAX_TRIGGER_DELAY,
        metavar="DURATION",
        help="with --min-offsets-per-trigger: the longest a "
        f"batch waits [{defaults.MAX_TRIGGER_DELAY}]",
    )
    run.add_argument("--session-timeout", default=defaults.SESSION_TIMEOUT)
    run.add_argument(
        "--trace",
        action="append",
        default=[],
        metavar="SESSION",
        help="log every message of this session as it is applied",
    )
    run.add_argument("--master", default=None, help="Spark master [local[2]]")
    run.add_argument(
        "--log-format",
        choices=[f.value for f in LogFormat],
        default="text",
        help="text, or JSON lines (on the cluster) [text]",
    )
    run.add_argument(
        "--metrics",
        choices=[k.value for k in PublisherKind],
        default="none",
        help="where per-batch metrics go: cloudwatch (on AWS), log (JSON lines) or none [none]",
    )
    run.add_argument(
        "--environment", default="local", help="the metrics' Environment dimension [local]"
    )
    run.add_argument(
        "--region",
        default=None,
        help="CloudWatch's region, and MSK's with --kafka-auth iam [AWS_REGION]",
    )
    run.add_argument(
        "--glue-database",
        default="",
        metavar="DATABASE",
        help="catalogue the output's Iceberg table in this Glue database "
        "(created before the first batch if missing; in --region)",
    )
    run.add_argument("--glue-table", default="output", help="the table's name in Glue [output]")
    run.add_argument(
        "--compact-every",
        default="",
        metavar="DURATION",
        help="between batches, compact the closed days once per DURATION "
        "(e.g. '1 day'), or 'off'; needs the output's table [off]",
    )
    run.add_argument(
        "--compact-target-size",
        default="128MiB",
        help="with --compact-every: merged files' size [128MiB]",
    )
    run.add_argument(
        "--retire-grace",
        default=None,
        metavar="DURATION",
        help="how long a compaction's inputs, and the table's files of expired snapshots, "
        "stay for Iceberg queries planned before; a later batch deletes them [2 minutes]",
    )
    run.add_argument(
        "--table-history",
        default=defaults.TABLE_HISTORY,
        metavar="DURATION",
        help="how far back the output's Iceberg table keeps snapshots for time travel: every "
        "one of the last hour, then one an hour; ledger entries older are folded "
        f"[{defaults.TABLE_HISTORY}]",
    )
    _writer_lease_option(run)
    run.add_argument(
        "--consumer-group",
        default=None,
        metavar="NAME",
        help="with --bootstrap-servers: also commit each batch's end offsets to this Kafka "
        "consumer group, for MSK's lag metrics (never read back)",
    )

    inspect = commands.add_parser(
        "inspect", help="print the sessions' state that a checkpoint holds"
    )
    inspect.add_argument("--checkpoint", required=True, help="checkpoint (local path or hdfs://)")
    inspect.add_argument(
        "--output",
        required=True,
        help="the output the checkpoint writes: its ledger names the state version of each batch",
    )
    inspect.add_argument("--session", default=None, help="print this session's table in full")
    inspect.add_argument(
        "--at-batch",
        type=int,
        default=None,
        metavar="N",
        help="the state after batch N [the last committed batch]",
    )
    inspect.add_argument(
        "--limit", type=parse_positive, default=50, help="sessions listed in the summary [50]"
    )
    inspect.add_argument("--master", default=None, help="Spark master [local[2]]")

    generate = commands.add_parser("generate", help="write a sample capture as a raw archive")
    generate.add_argument("--archive", required=True)
    generate.add_argument("--topics", type=parse_positive, default=2)
    generate.add_argument("--partitions", type=parse_positive, default=2)
    generate.add_argument("--sessions", type=parse_positive, default=8)
    generate.add_argument("--rows-min", type=parse_positive, default=5)
    generate.add_argument("--rows-max", type=parse_positive, default=20)
    generate.add_argument("--updates", type=int, default=40)
    generate.add_argument(
        "--resync-every",
        type=int,
        default=0,
        help="emit a resync snapshot every N messages of a session",
    )
    generate.add_argument(
        "--concurrent-sessions",
        type=parse_positive,
        default=4,
        help="sessions active at once in a partition",
    )
    generate.add_argument("--records-per-file", type=parse_positive, default=500)
    generate.add_argument("--prefix", default="sensor-")
    generate.add_argument("--seed", type=int, default=7)
    generate.add_argument(
        "--fault", action="append", default=[], choices=[f.value for f in gen.Fault]
    )
    _schema_option(generate, "the table schema the capture's rows follow [the default]")

    repair = commands.add_parser(
        "repair", help="realign output and checkpoint: restart from the last snapshots"
    )
    repair_source = repair.add_mutually_exclusive_group(required=True)
    repair_source.add_argument("--archive", help="read message headers from the raw archive")
    repair_source.add_argument("--bootstrap-servers", help="read message headers from Kafka")
    repair.add_argument("--kafka-auth", choices=[a.value for a in KafkaAuth], default="none")
    repair.add_argument(
        "--kafka-secret-arn",
        default="",
        metavar="ARN",
        help="with --kafka-auth scram: the Secrets Manager secret",
    )
    repair.add_argument(
        "--region", default=None, help="MSK's region for --kafka-auth iam [AWS_REGION]"
    )
    repair.add_argument("--output", required=True)
    repair.add_argument("--checkpoint", required=True)
    repair.add_argument("--topic-pattern", default=defaults.TOPIC_PATTERN)
    repair.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    _writer_lease_option(repair)
    repair.add_argument("--yes", action="store_true", help="apply the plan without asking")
    _retire_options(repair)

    replay = commands.add_parser(
        "replay", help="recompute the output's files for a window of time, from the archive"
    )
    replay.add_argument("--archive", required=True)
    replay.add_argument("--output", required=True)
    replay.add_argument("--since", required=True, help="ISO 8601 time, inclusive (UTC)")
    replay.add_argument("--until", required=True, help="ISO 8601 time, exclusive (UTC)")
    replay.add_argument("--topic-pattern", default=defaults.TOPIC_PATTERN)
    replay.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    _schema_option(
        replay,
        "into an output without a ledger: the table schema the rows follow [the default]; "
        "an output's ledger names its own",
    )
    _processor_option(
        replay, "into an output without a ledger: the processor [table]; a ledger names its own"
    )
    _recompute_options(replay)

    correct = commands.add_parser(
        "correct", help="recompute every range one job version published, in place"
    )
    correct.add_argument("--archive", required=True)
    correct.add_argument("--output", required=True)
    which = correct.add_mutually_exclusive_group(required=True)
    which.add_argument("--version", help="the faulty package version, as the ledger records it")
    which.add_argument("--commit", help="the faulty commit (7 or more hex digits)")
    which.add_argument(
        "--processor-version",
        help="the faulty version of the processor's package, as the ledger records it",
    )
    correct.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    _recompute_options(correct)

    verify = commands.add_parser("verify", help="compare an output with the archive's expectation")
    verify.add_argument("--archive", required=True)
    verify.add_argument("--output", required=True)
    verify.add_argument("--topic-pattern", default=defaults.TOPIC_PATTERN)
    verify.add_argument(
        "--integrity",
        choices=[m.value for m in IntegrityMode],
        default=None,
        help="the live job's --integrity [from the output's ledger; else strict]",
    )
    _schema_option(verify, "the table schema the job ran with [the one the output's ledger names]")
    _processor_option(verify, "the processor the job ran [the one the output's ledger names]")
    _table_commands(commands)
    return parser


def _schema_option(command: argparse.ArgumentParser, text: str) -> None:
    command.add_argument("--schema", default=None, metavar="FILE", help=text)


def _processor_option(command: argparse.ArgumentParser, text: str) -> None:
    command.add_argument("--processor", default=None, metavar="MODULE:CLASS", help=text)


def _processor(args: argparse.Namespace) -> Processor[Any]:
    """``--processor`` (the built-in without it), reading messages with ``--schema``."""
    from app.contract import loader

    return loader.load(args.processor, _schema(args), schema_given=args.schema is not None)


def _recorded_processor(args: argparse.Namespace) -> Processor[Any] | None:
    """A user's processor for a command on ``--output``: ``--processor``, else the one the
    output's ledger names; None for the built-in."""
    from app.contract import loader
    from app.sink import processors

    location = resolve(args.output)
    if args.processor is None:
        found = processors.current(location)
    else:
        found = _processor(args)
        held = processors.current_record(location)
        if held is not None and held.name != found.name:
            raise ConfigurationError(
                f"--processor {args.processor}: output {args.output} was written by processor "
                f"{held.name}; leave --processor out"
            )
    return None if found is None or found.name == loader.BUILT_IN else found


def _schema(args: argparse.Namespace) -> TableSchema:
    """``--schema``: the table schema in the file (CONTRACT.md section 1a), or the default."""
    from app.contract.schema import DEFAULT_SCHEMA, load_schema

    return DEFAULT_SCHEMA if args.schema is None else load_schema(args.schema)


def _table_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``table`` and ``compact``: the output's Iceberg table (app/table/)."""
    table = commands.add_parser(
        "table",
        help="print the output's Iceberg catalog and table (JSON for pyiceberg's load_catalog)",
    )
    table.add_argument("--output", required=True)
    table.add_argument(
        "--glue-database",
        help="catalogue the table in this Glue database "
        "(written beside the output; needed once for an s3:// output)",
    )
    table.add_argument("--glue-table", default="output", help="the table's name in Glue [output]")
    table.add_argument("--region", default=None, help="Glue's region [AWS_REGION]")
    table.add_argument(
        "--rebuild",
        action="store_true",
        help="make the table again from the ledger and the visible files (one that cannot "
        "be loaded, or that `tablecast verify` finds out of step with the output)",
    )
    compact = commands.add_parser(
        "compact",
        help="merge the small files of closed days (one replace snapshot of the Iceberg table)",
    )
    compact.add_argument("--output", required=True)
    compact.add_argument(
        "--before",
        default=None,
        metavar="DAY",
        help="compact days before this one (YYYY-MM-DD) [today, UTC]",
    )
    compact.add_argument("--target-size", default="128MiB", help="merged files' size [128MiB]")
    _retire_options(compact)


def _retire_options(command: argparse.ArgumentParser) -> None:
    """When a rewriting command deletes the files its Iceberg snapshot replaced."""
    command.add_argument(
        "--retire-grace",
        default=None,
        metavar="DURATION",
        help="how long the replaced files stay after the table's snapshot, for Iceberg "
        "queries planned before it (0s to 1 hour) [2 minutes]",
    )
    command.add_argument(
        "--no-wait",
        action="store_true",
        help="return after the snapshot; the replaced files go after the grace, deleted by "
        "the live job or the next rewriting command (plain readers see them until then)",
    )


def _recompute_options(command: argparse.ArgumentParser) -> None:
    """What replay and correct share with ``run``: the rules the live job applied."""
    # The live job's rules come from its ledger; these confirm them (another value is
    # refused) or stand in for ledger entries older than that record.
    command.add_argument(
        "--integrity",
        choices=[m.value for m in IntegrityMode],
        default=None,
        help="the live job's --integrity [from the ledger; else strict]",
    )
    command.add_argument(
        "--session-timeout",
        default=None,
        help=f"the live job's --session-timeout [from the ledger; else {defaults.SESSION_TIMEOUT}]",
    )
    command.add_argument("--master", default=None, help="Spark master [local[2]]")
    _retire_options(command)


def _writer_lease_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--writer-lease",
        default=defaults.WRITER_LEASE,
        metavar="DURATION",
        help="how long this writer may go without renewing its hold on the output before "
        "another may take it over; a start after a writer that died on another host waits "
        f"this long [{defaults.WRITER_LEASE}]",
    )


def _writer_lease(args: argparse.Namespace) -> float:
    """``--writer-lease`` in seconds, or a one-line error."""
    try:
        seconds = parse_duration_ms(args.writer_lease) / 1000
    except ConfigurationError:
        seconds = 0.0
    if not 1 <= seconds <= 3600:
        raise ConfigurationError(
            f"--writer-lease {args.writer_lease!r} must be a duration from 1 second to 1 hour, "
            "like '30 seconds'"
        )
    return seconds


def _retire_grace(args: argparse.Namespace) -> float | None:
    """``--retire-grace`` in seconds (None: the default), or a one-line error."""
    from app.sink import rewrite as rewrite_mod

    if args.retire_grace is None:
        return None
    try:
        seconds = parse_duration_ms(args.retire_grace) / 1000
    except ConfigurationError:
        raise ConfigurationError(
            f"--retire-grace {args.retire_grace!r} is not a duration like '2 minutes' or '500ms'"
        ) from None
    return rewrite_mod.check_grace(seconds)


def _retirement(args: argparse.Namespace) -> Retirement:
    from app.sink.rewrite import Retirement

    return Retirement(grace_s=_retire_grace(args), wait=not args.no_wait, notice=_say)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    log_format = LogFormat(getattr(args, "log_format", LogFormat.TEXT))
    logs.configure(log_format, logging.INFO if log_format is LogFormat.JSON else logging.WARNING)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "generate":
            return _generate(args)
        if args.command == "verify":
            return _verify(args)
        if args.command == "inspect":
            return _inspect(args)
        if args.command == "repair":
            return _repair(args)
        if args.command == "replay":
            return _replay(args)
        if args.command == "correct":
            return _correct(args)
        if args.command == "table":
            return _table(args)
        if args.command == "compact":
            return _compact(args)
    except TablecastError as exc:
        if log_format is LogFormat.JSON:
            logging.getLogger("tablecast").error(
                "tablecast %s: %s", args.command, exc, extra={logs.FACTS: exc.facts}
            )
        else:
            print(f"tablecast {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"tablecast {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, or a failure nothing above knows: one line, details kept
        cause = storage.refusal(exc)
        if cause is not None:  # a write our storage layer did not make (the table's catalog)
            error = storage.access_error(storage.refused_path(exc), cause)
            print(f"tablecast {args.command}: {error}", file=sys.stderr)
            return error.exit_code
        where = _keep_traceback(args.command, exc)
        print(
            f"tablecast {args.command}: unexpected error {root_cause(exc)} (traceback in {where})",
            file=sys.stderr,
        )
        return UNEXPECTED_EXIT_CODE
    raise AssertionError(args.command)


UNEXPECTED_EXIT_CODE = 70  # EX_SOFTWARE
_TRACEBACK = "Traceback (most recent call last):"


def root_cause(exc: BaseException) -> str:
    """``Name: message`` of the innermost Python exception behind ``exc``, on one line.

    Our own errors come back from Spark's workers typed (:mod:`app.worker_errors`);
    this is for the rest, which Spark hands over as text: the last Python traceback
    in it (the worker's: Spark's wrappers come first) ends, after its indented frames,
    with the exception's own line, as :mod:`traceback` prints it.
    """
    text = str(exc)
    if _TRACEBACK in text:
        for line in text.rpartition(_TRACEBACK)[2].splitlines()[1:]:
            if line and not line[0].isspace():
                name, _, message = line.partition(": ")
                return f"{name.rsplit('.', 1)[-1]}: {message.strip()[:300]}"
    first = (text.strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:300]}"


def _keep_traceback(command: str, exc: BaseException) -> Path:
    """Append the traceback to Spark's log (or a file of its own); return where."""
    import traceback

    path = (
        spark_log_path() or Path(tempfile.gettempdir()) / "tablecast" / f"error-{os.getpid()}.log"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(f"\n=== tablecast {command}: unexpected error at {time.strftime('%c')}\n")
        traceback.print_exception(exc, file=out)
    return path


def _run(args: argparse.Namespace) -> int:
    from app.sink import crash_points
    from app.spark import job

    # Test seam: a test that starts `tablecast run` as a process names the commit step
    # to die at in the environment (app.sink.crash_points); unset, the run dies nowhere.
    crash_points.install_from_environment()

    source: job.Source
    if not args.archive and not args.bootstrap_servers:
        raise ConfigurationError(
            "give --bootstrap-servers (Kafka), --archive (the raw archive), or both (Kafka, "
            "and the archive for the offsets Kafka no longer holds)"
        )
    for given, name in (
        (args.kafka_client_rack, "--kafka-client-rack"),
        (args.kafka_option, "--kafka-option"),
        (args.kafka_secret_arn, "--kafka-secret-arn"),
    ):
        if given and not args.bootstrap_servers:
            raise ConfigurationError(f"{name} needs --bootstrap-servers")
    starting_position = StartingPosition.parse(args.starting_offsets)
    max_trigger_delay_s = parse_duration_ms(args.max_trigger_delay) / 1000
    if args.archive:
        archive.require_root(args.archive)  # a typo stops here, before anything is created
    if args.bootstrap_servers:
        timeout_s = parse_duration_ms(args.kafka_timeout) / 1000
        if timeout_s <= 0:
            raise ConfigurationError(f"--kafka-timeout {args.kafka_timeout!r} must be positive")
        kafka = job.KafkaSource(_endpoint(args), timeout_s, Isolation(args.kafka_isolation_level))
        kafka.endpoint.config()  # IAM without its signer or region fails here, before Spark
        # Both: Kafka, and the archive for the offsets Kafka no longer holds.
        source = job.TieredSource(kafka, job.ArchiveSource(args.archive)) if args.archive else kafka
    else:
        source = job.ArchiveSource(args.archive)
    config = job.JobConfig(
        source=source,
        output=args.output,
        checkpoint=args.checkpoint,
        trigger=job.Trigger.parse(args.trigger),
        integrity=IntegrityMode(args.integrity),
        topic_pattern=topic_pattern(args.topics, args.topic_pattern),
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        min_offsets_per_trigger=args.min_offsets_per_trigger or 0,
        max_trigger_delay_s=max_trigger_delay_s,
        starting_position=starting_position,
        session_timeout_ms=parse_duration_ms(args.session_timeout),
        trace=frozenset(args.trace),
        table=_table_settings(args),
        schema=_schema(args),
        schema_document=args.schema or "(default)",
        writer_lease_s=_writer_lease(args),
    )
    # A processor that cannot load costs no JVM start.
    processor = _processor(args)
    config = dataclasses.replace(config, processor=processor.name)
    from app.metrics.listener import MetricsListener
    from app.metrics.progress import Console, ProgressDisplay
    from app.metrics.publisher import make_publisher
    from app.sink import processors

    # A processor or schema the output cannot take costs no JVM start (the job checks
    # again, and records them).
    processors.check(resolve(config.output), processor, config.schema_document)

    console = Console()
    publisher = make_publisher(
        PublisherKind(args.metrics),
        environment=args.environment,
        region=args.region,
        write=console.line,
    )
    committer = _group_committer(args)  # a refused group costs no JVM start
    from app.sink import fencing

    # A job holding the output refuses this one before a JVM starts.
    gone = fencing.refuse_if_held(resolve(args.output), console.line)
    spark = spark_session(args.master)
    display = ProgressDisplay(console)
    listener = MetricsListener(publisher, [display.on_metrics] + ([committer] if committer else []))
    finished = False
    try:
        job.run(
            spark,
            config,
            display.on_report,
            processor=processor,
            listener=listener,
            notice=console.line,
            gone=gone,
        )
        finished = True
    finally:
        stats = publisher.close()  # bounded: what CloudWatch does not take in time is dropped
        display.finish(publisher.description, stats, finished=finished)
        if committer is not None:
            group = committer.close()
            console.line(
                f"consumer group {committer.group}: {group.committed} of {group.requested} "
                f"commits acknowledged, {group.failed} failed"
            )
    return 0


def _group_committer(args: argparse.Namespace) -> GroupCommitter | None:
    """``--consumer-group``: the observer that commits offsets, or None."""
    if args.consumer_group is None:
        return None
    if not args.bootstrap_servers:
        raise ConfigurationError("--consumer-group needs a Kafka source (--bootstrap-servers)")
    if not args.consumer_group.startswith(handoff.CONSUMER_GROUP_PREFIX):
        # The nodes' IAM role may describe and alter only these groups (infra/).
        raise ConfigurationError(
            f"--consumer-group {args.consumer_group!r} must start with "
            f"{handoff.CONSUMER_GROUP_PREFIX!r} "
            "(the only groups the cluster's IAM role may commit to)"
        )
    from app.metrics.consumer_group import GroupCommitter

    return GroupCommitter(args.consumer_group, _endpoint(args).config())


def _endpoint(args: argparse.Namespace) -> KafkaEndpoint:
    """The brokers of ``--bootstrap-servers`` with their sign-in and, for ``run``, rack."""
    region = args.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    return KafkaEndpoint(
        args.bootstrap_servers,
        KafkaAuth(args.kafka_auth),
        region=region or "",
        client_rack=getattr(args, "kafka_client_rack", ""),
        secret_arn=getattr(args, "kafka_secret_arn", ""),
        options=tuple(parse_option(o) for o in getattr(args, "kafka_option", [])),
    )


def _inspect(args: argparse.Namespace) -> int:
    from app.recovery import inspect as inspect_mod

    spark = spark_session(args.master)
    snapshot = inspect_mod.read_state(
        spark,
        args.checkpoint,
        args.output,
        at_batch=args.at_batch,
        session=args.session,
        limit=None if args.session else args.limit,
    )
    if args.session:
        print(inspect_mod.format_session(snapshot, snapshot.sessions[0]))
    else:
        print(inspect_mod.format_summary(snapshot))
    return 0


def topic_pattern(topics: str | None, pattern: str) -> str:
    """``--topics a,b`` as the pattern that matches exactly them, else ``--topic-pattern``."""
    if topics is None:
        return _pattern(pattern)
    names = [t.strip() for t in topics.split(",") if t.strip()]
    bad = [t for t in names if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", t)]
    if not names or bad:
        raise ConfigurationError(
            f"--topics {topics!r}: give Kafka topic names separated by commas"
            + (f" ({bad[0]!r} is not one)" if bad else "")
        )
    return "(?:" + "|".join(re.escape(t) for t in sorted(set(names))) + ")"


def _pattern(text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise ConfigurationError(
            f"--topic-pattern {text!r} is not a regular expression: {exc}"
        ) from None
    return text


def _generate(args: argparse.Namespace) -> int:
    spec = gen.CaptureSpec(
        topics=args.topics,
        partitions=args.partitions,
        sessions=args.sessions,
        rows_min=args.rows_min,
        rows_max=max(args.rows_min, args.rows_max),
        updates=args.updates,
        resync_every=args.resync_every,
        concurrent=args.concurrent_sessions,
        records_per_file=args.records_per_file,
        prefix=args.prefix,
        seed=args.seed,
        faults=tuple(gen.Fault(f) for f in args.fault),
        schema=_schema(args),
    )
    capture = gen.generate(spec)
    progress = _Progress("writing archive")
    gen.write_archive(capture, args.archive, spec, progress.update)
    progress.finish()
    print(
        f"wrote {capture.messages:,} messages of {spec.sessions} sessions in "
        f"{len(capture.partitions)} topic-partitions to {args.archive}"
    )
    for fault in capture.faults:
        print(
            f"injected {fault.fault.value} at topic {fault.topic} partition {fault.partition} "
            f"offset {fault.offset}" + (f", session {fault.session}" if fault.session else "")
        )
    return 0


def _verify(args: argparse.Namespace) -> int:
    from app.table.check import check_table
    from app.tools import verify as verify_mod  # duckdb and pyarrow.dataset: only for verify

    # A user's processor runs over all of it; the built-in reads each range with the schema
    # given, or each range's as the output's ledger records it.
    processor = _recorded_processor(args)
    changes: dict[TopicPartition, list[tuple[int, TableSchema]]] = {}
    if processor is not None:
        first, last = processor.output, processor.output
    else:
        first, changes = (
            (_schema(args), {}) if args.schema else verify_mod.recorded_schemas(args.output)
        )
        last = first if args.schema else verify_mod.output_table_schema(args.output)
    actual = verify_mod.read_output(args.output, required=True, schema=last, archive=args.archive)
    # A damaged table, or a data file gone from under it, stops here: exit 8.
    table = check_table(resolve(args.output), archive=args.archive)
    rules = verify_mod.recorded_rules(
        args.output, None if args.integrity is None else IntegrityMode(args.integrity)
    )
    expected = verify_mod.expected_output(
        args.archive,
        args.topic_pattern,
        rules.mode,
        timeout_ms=rules.timeout_ms,
        schema=first,
        changes=changes,
        processor=processor,
    )
    comparison = verify_mod.compare(expected.rows, actual)
    print(f"archive: {expected.messages:,} messages in {expected.sessions:,} sessions")
    print(f"rules: {rules.describe()}")
    if processor is not None:
        print(f"processor: {processor.name} (state version {processor.state_version})")
    if expected.repeats or expected.gaps:
        print(f"integrity class: {expected.repeats:,} dropped, {expected.gaps:,} seqs missing")
    if table is not None:
        print(f"table: {table}")
    print(comparison.report())
    return 0 if comparison.ok else 1


def _repair(args: argparse.Namespace) -> int:
    from app.recovery import repair
    from app.sink import fencing

    retirement = _retirement(args)
    writer_lease_s = _writer_lease(args)
    fencing.refuse_if_held(resolve(args.output), _say)  # before the source is read
    reader = (
        repair.archive_reader(args.archive, args.topic_pattern)
        if args.archive
        else repair.kafka_reader(_endpoint(args), args.topic_pattern)
    )
    plan = repair.plan_repair(args.output, reader, archive=args.archive)
    if not plan.partitions:
        print(f"output {args.output} holds nothing: a run from the earliest offsets rebuilds it")
    print(plan.describe())
    if args.dry_run:
        print("dry run: nothing was changed")
        return 0
    repair.confirm(plan, args.yes)
    moved = repair.apply_repair(
        args.output,
        args.checkpoint,
        plan,
        retirement,
        writer_lease_s=writer_lease_s,
        notice=_say,
        archive=args.archive,
    )
    if moved:
        print(f"moved the old checkpoint to {moved}")
    print(
        f"repaired: the next `tablecast run --checkpoint {args.checkpoint}` starts at "
        f"{repair.restart_summary(plan)}"
    )
    return 0


def _replay(args: argparse.Namespace) -> int:
    from app.recompute import replay

    since, until = replay.parse_time(args.since), replay.parse_time(args.until)
    retirement = _retirement(args)
    archive.require_root(args.archive)  # a typo stops here, before Spark starts
    # Every refusal comes from the plan, before Spark starts.
    planned = replay.plan_replay(
        args.archive,
        args.output,
        since,
        until,
        topic_pattern=_pattern(args.topic_pattern),
        schema=_schema(args),
        processor=_recorded_processor(args),
        **_recompute_rules(args),
    )
    return _carry_out(args, planned, retirement, "replaying partitions")


def _carry_out(
    args: argparse.Namespace, planned: Planned, retirement: Retirement, label: str
) -> int:
    """A planned recompute: its plan printed (``--dry-run``), or run on Spark and reported."""
    from app.recompute.run import recompute

    if args.dry_run:
        _print_plan(planned.works)
        return 0
    report = recompute(
        spark_session(args.master), planned, progress=_Progress(label).update, retirement=retirement
    )
    _print_recompute(report)
    return 0


def _print_plan(works: Sequence[PartitionWork]) -> None:
    for work in works:
        ranges = ", ".join(f"{a}-{b - 1}" for a, b in work.ranges)
        print(
            f"{work.tp.key()}: read offsets {work.begin:,} to {work.read_end - 1:,}; "
            f"recompute {ranges}"
        )
    if not works:
        print("nothing to recompute")
    print("dry run: nothing was changed")


def _recompute_rules(args: argparse.Namespace) -> dict[str, Any]:
    """The rules given on the command line (None: the live job's, from the ledger)."""
    timeout = args.session_timeout
    return {
        "integrity": None if args.integrity is None else IntegrityMode(args.integrity),
        "session_timeout_ms": None if timeout is None else parse_duration_ms(timeout),
    }


def _correct(args: argparse.Namespace) -> int:
    from app.recompute import correct

    retirement = _retirement(args)
    archive.require_root(args.archive)  # a typo stops here, before Spark starts
    # Every refusal comes from the plan, before Spark starts.
    planned = correct.planned_correction(
        args.archive,
        args.output,
        version=args.version,
        commit=args.commit,
        processor_version=args.processor_version,
        **_recompute_rules(args),
    )
    return _carry_out(args, planned, retirement, "correcting partitions")


def _print_recompute(report: RecomputeReport) -> None:
    record = report.record
    for key, ranges in sorted(record.ranges.items()):
        print(f"{key}: recomputed " + ", ".join(f"{a}-{b - 1}" for a, b in ranges))
    print(
        f"{record.kind} of {record.selector}: {report.tasks} partition tasks read "
        f"{record.messages:,} messages into {record.rows:,} rows; "
        f"{len(record.rewritten)} files rewritten under new names, "
        f"{len(record.kept)} identical (kept), {len(record.removed)} old names retired"
    )


def _table_settings(args: argparse.Namespace) -> TableSettings:
    """``run``'s options for the output's Iceberg table (app/table/live.py)."""
    from app.table import compact as table_compact
    from app.table.live import TableSettings

    every = "" if args.compact_every.strip().lower() in ("", "off") else args.compact_every
    every_s = parse_duration_ms(every) / 1000 if every else 0.0
    if every and every_s <= 0:
        raise ConfigurationError(f"--compact-every {args.compact_every!r} must be positive")
    region = args.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    return TableSettings(
        glue_database=args.glue_database,
        glue_table=args.glue_table,
        region=region or "",
        compact_every_s=every_s,
        compact_target_bytes=table_compact.parse_size(
            args.compact_target_size, option="--compact-target-size"
        ),
        retire_grace_s=_retire_grace(args),
        history_s=_table_history(args),
    )


def _table_history(args: argparse.Namespace) -> float:
    """``--table-history`` in seconds, or a one-line error."""
    try:
        return parse_duration_ms(args.table_history) / 1000
    except ConfigurationError:
        raise ConfigurationError(
            f"--table-history {args.table_history!r} is not a duration like '5 days' or '12 hours'"
        ) from None


def _table(args: argparse.Namespace) -> int:
    from app.table import catalog as table_catalog

    location = resolve(args.output)
    if args.glue_database:
        region = args.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if not region:
            raise ConfigurationError("--glue-database needs --region (or AWS_REGION)")
        config = table_catalog.glue_config(
            location, database=args.glue_database, region=region, table=args.glue_table
        )
        table_catalog.save_config(location, config)
    found = table_catalog.config_for(location)
    if found is None:
        raise ConfigurationError(
            f"output {args.output} has no Iceberg catalog: run `tablecast table --output "
            f"{args.output} --glue-database DATABASE` once"
        )
    if args.rebuild:
        from app.table import commit as table_commit

        files = table_commit.rebuild(location)
        print(f"made the table {found.table} again: {files:,} data files", file=sys.stderr)
    with (
        location.refusing(location.child(table_catalog.TABLE_DIR)),
        table_catalog.threads_released(),
    ):
        table_catalog.open_table(location, found)  # made now, so that load_table finds it
    print(found.to_json().decode())
    return 0


def _compact(args: argparse.Namespace) -> int:
    from app.table import compact as table_compact

    try:
        before = date.fromisoformat(args.before) if args.before else None
    except ValueError:
        raise ConfigurationError(f"--before {args.before!r} is not a day like 2026-01-31") from None
    target = table_compact.parse_size(args.target_size)
    retirement = _retirement(args)
    report = table_compact.compact(
        resolve(args.output), before=before, target_bytes=target, retirement=retirement
    )
    print(
        f"compacted {report.inputs:,} files into {report.outputs:,} ({report.rows:,} rows, "
        f"{report.bytes_before:,} bytes into {report.bytes_after:,})"
    )
    return 0


class _Progress:
    """A progress line: redrawn on a terminal, a few plain lines otherwise."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def update(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last < (0.2 if self.tty else 5.0) and done < total:
            return
        self.last = now
        line = f"{self.label}: {done:,}/{total:,} ({100 * done // max(total, 1)}%)"
        print(("\r" + line) if self.tty else line, end="" if self.tty else "\n", file=sys.stderr)

    def finish(self) -> None:
        if self.tty:
            print(file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())

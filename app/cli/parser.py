"""``tablecast``'s commands and options: what each does, its examples, every default.

Every option has help and names its default in brackets; every command has a
description and examples, and ends with the exit codes (``tests/test_cli_help.py``
holds them to it). Options mean the same in every command that takes them:
``--topics`` names topics (``--topic-count`` counts generated ones), and every
duration takes :mod:`app.durations`' syntax.
"""

from __future__ import annotations

import argparse

from app import defaults
from app.cli.capture import Shape, add_capture_options
from app.cli.parsing import (
    CommandParser,
    Commands,
    add_command,
    add_version,
    epilog,
    positive,
)
from app.code_version import job_version
from app.engine.machine import IntegrityMode
from app.logs import LogFormat
from app.metrics.publisher import PublisherKind
from app.sources.kafka_client import Isolation, KafkaAuth
from app.tools import generate as gen


def build_parser() -> CommandParser:
    parser = CommandParser(
        prog="tablecast",
        description="Rebuild capture sessions' tables in strict order from Kafka or the raw "
        "archive, enforce their integrity rules, and write every row exactly once to a "
        "Parquet dataset (with an Iceberg table over it). `tablecast COMMAND --help` says "
        "more of each command.",
        epilog=epilog(
            [
                "tablecast generate --archive .demo/archive --topic-count 3",
                "tablecast run --archive .demo/archive --output .demo/output "
                "--checkpoint .demo/checkpoint --trigger available-now",
                "tablecast verify --archive .demo/archive --output .demo/output",
            ]
        ),
    )
    add_version(parser, lambda: job_version().describe())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _run(commands)
    _inspect(commands)
    _generate(commands)
    _verify(commands)
    _repair(commands)
    _replay(commands)
    _correct(commands)
    _table(commands)
    _compact(commands)
    return parser


def _run(commands: Commands[CommandParser]) -> None:
    run = add_command(
        commands,
        "run",
        summary="run the streaming job",
        description="Read Kafka (--bootstrap-servers), the raw archive (--archive), or both, "
        "rebuild every session's table in order, and write each row exactly once to --output. "
        "The checkpoint keeps the job's position: run again with the same --output and "
        "--checkpoint and it carries on where it stopped (Ctrl-C included).",
        examples=[
            "tablecast run --archive .demo/archive --output .demo/output "
            "--checkpoint .demo/checkpoint --trigger available-now",
            "tablecast run --bootstrap-servers b-1:9098 --kafka-auth iam --region eu-west-1 "
            "--output s3://bucket/output --checkpoint hdfs://driver:8020/checkpoint "
            "--trigger 'processing-time=1 minute' --metrics cloudwatch",
        ],
    )
    where = run.add_argument_group("source, output and checkpoint")
    where.add_argument(
        "--archive",
        help="read the raw archive (local path or s3://bucket/prefix); with "
        "--bootstrap-servers, for the offsets Kafka no longer holds [not read]",
    )
    where.add_argument(
        "--bootstrap-servers", metavar="HOST:PORT,...", help="read Kafka's brokers [not read]"
    )
    where.add_argument(
        "--output", required=True, help="the output dataset (local path or s3://bucket/prefix)"
    )
    where.add_argument(
        "--checkpoint",
        required=True,
        help="the job's position and state (local path or hdfs://namenode/path); one per output",
    )
    _schema_option(
        where, "the table schema (TOML, local path or s3://) [the default: row_id, value, status]"
    )
    _processor_option(
        where,
        "the processor: a tablecast.Processor installed beside tablecast (docs/processors.md) "
        "[table: the built-in table rebuild]",
    )
    _topic_options(where)

    batches = run.add_argument_group("batches and rules")
    batches.add_argument(
        "--trigger",
        default=defaults.TRIGGER,
        metavar="WHEN",
        help="'available-now' (read what is there, then stop) or "
        f"'processing-time=DURATION' (a batch every DURATION, forever) [{defaults.TRIGGER}]",
    )
    _integrity_option(
        batches,
        IntegrityMode.STRICT.value,
        "strict: the first violation stops the run (exit 2) and nothing of its batch "
        "is written; resync: a violating session's messages go to <output>/_quarantine/ "
        "until a snapshot re-establishes it; ordered: rising seqs only (repeats and late "
        "ones dropped, gaps counted); once: each seq once, in arrival order; none: every "
        "message [strict]",
    )
    batches.add_argument(
        "--starting-offsets",
        default="earliest",
        metavar="WHERE",
        help="where a new checkpoint starts: earliest, latest, or a time (ISO 8601, UTC, or "
        "milliseconds since the epoch; with Kafka) [earliest]",
    )
    batches.add_argument(
        "--max-offsets-per-trigger",
        type=positive,
        default=defaults.MAX_OFFSETS_PER_TRIGGER,
        metavar="N",
        help="the most offsets one batch reads, shared between partitions by backlog "
        f"[{defaults.MAX_OFFSETS_PER_TRIGGER}]",
    )
    batches.add_argument(
        "--min-offsets-per-trigger",
        type=positive,
        default=None,
        metavar="N",
        help="wait for at least N new offsets before a batch, at most --max-trigger-delay "
        "(Spark's minOffsetsPerTrigger) [no wait]",
    )
    batches.add_argument(
        "--max-trigger-delay",
        default=defaults.MAX_TRIGGER_DELAY,
        metavar="DURATION",
        help="with --min-offsets-per-trigger: the longest a batch waits "
        f"[{defaults.MAX_TRIGGER_DELAY}]",
    )
    batches.add_argument(
        "--session-timeout",
        default=defaults.SESSION_TIMEOUT,
        metavar="DURATION",
        help="a session without a message for this long, in its partition's own time, is "
        f"dropped from state [{defaults.SESSION_TIMEOUT}]",
    )
    _writer_lease_option(batches)
    batches.add_argument(
        "--master", default=None, help="Spark's master [local[2]; under spark-submit, its own]"
    )

    kafka = _kafka_options(run)
    kafka.add_argument(
        "--kafka-isolation-level",
        choices=[i.value for i in Isolation],
        default=Isolation.READ_COMMITTED.value,
        help="read_committed (batches end at the last stable offset; aborted transactions are "
        "not read) or read_uncommitted [read_committed]",
    )
    kafka.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka setting for every client of the source; one the source sets itself "
        "is refused, but a longer fetch.wait.max.ms and ssl.ca.location (docs/operations.md "
        "lists them); repeatable [none]",
    )
    kafka.add_argument(
        "--kafka-client-rack",
        default="",
        metavar="ZONE_ID",
        help="this node's availability zone id (librdkafka's client.rack), to fetch from a "
        "replica in its zone [none]",
    )
    kafka.add_argument(
        "--consumer-group",
        default=None,
        metavar="NAME",
        help="also commit each batch's end offsets to this consumer group, for MSK's lag "
        "metrics (never read back; must start with 'tablecast-') [none]",
    )

    table = run.add_argument_group("the output's Iceberg table")
    _glue_options(table)
    table.add_argument(
        "--compact-every",
        default="",
        metavar="DURATION",
        help="between batches, compact the closed days once per DURATION (e.g. '1 day'), "
        "or 'off' [off]",
    )
    table.add_argument(
        "--compact-target-size",
        default="128MiB",
        metavar="SIZE",
        help="with --compact-every: merged files' size [128MiB]",
    )
    table.add_argument(
        "--retire-grace",
        default=None,
        metavar="DURATION",
        help="how long a compaction's inputs, and the table's files of expired snapshots, "
        "stay for Iceberg queries planned before; a later batch deletes them [2 minutes]",
    )
    table.add_argument(
        "--table-history",
        default=defaults.TABLE_HISTORY,
        metavar="DURATION",
        help="how far back the output's Iceberg table keeps snapshots for time travel: every "
        "one of the last hour, then one an hour; ledger entries older are folded "
        f"[{defaults.TABLE_HISTORY}]",
    )

    seeing = run.add_argument_group("seeing it")
    seeing.add_argument(
        "--trace",
        action="append",
        default=[],
        metavar="SESSION",
        help="print every message of this session as it is applied; repeatable [none]",
    )
    seeing.add_argument(
        "--log-format",
        choices=[f.value for f in LogFormat],
        default=LogFormat.TEXT.value,
        help="text, or JSON lines (on the cluster) [text]",
    )
    seeing.add_argument(
        "--metrics",
        choices=[k.value for k in PublisherKind],
        default=PublisherKind.NONE.value,
        help="where per-batch metrics go: cloudwatch (on AWS), log (JSON lines) or none [none]",
    )
    seeing.add_argument(
        "--environment", default="local", help="the metrics' Environment dimension [local]"
    )
    seeing.add_argument(
        "--job",
        default=None,
        metavar="NAME",
        help="a declared job's name: the metrics' Job dimension beside the environment [none]",
    )
    seeing.add_argument(
        "--region",
        default=None,
        help="AWS region: CloudWatch's, Glue's, and MSK's with --kafka-auth iam "
        "[AWS_REGION, else the AWS configuration's]",
    )


def _inspect(commands: Commands[CommandParser]) -> None:
    inspect = add_command(
        commands,
        "inspect",
        summary="print the sessions' state that a checkpoint holds",
        description="Print what the job remembers after a batch: each session's status, "
        "last seq and offset, and with --session its whole table. Reads the state version "
        "the output's ledger records for that batch; changes nothing, and the job need not "
        "be stopped.",
        examples=[
            "tablecast inspect --checkpoint .demo/checkpoint --output .demo/output",
            "tablecast inspect --checkpoint .demo/checkpoint --output .demo/output "
            "--session s-0-0-3 --at-batch 2",
        ],
    )
    inspect.add_argument(
        "--checkpoint", required=True, help="the checkpoint (local path or hdfs://namenode/path)"
    )
    inspect.add_argument(
        "--output",
        required=True,
        help="the output the checkpoint writes: its ledger names each batch's state version",
    )
    inspect.add_argument(
        "--session", default=None, help="print this session's table in full [a summary]"
    )
    inspect.add_argument(
        "--at-batch",
        type=int,
        default=None,
        metavar="N",
        help="the state after batch N [the last committed batch]",
    )
    inspect.add_argument(
        "--limit", type=positive, default=50, help="sessions listed in the summary [50]"
    )
    inspect.add_argument("--master", default=None, help="Spark's master [local[2]]")


def _generate(commands: Commands[CommandParser]) -> None:
    generate = add_command(
        commands,
        "generate",
        summary="write a sample capture as a raw archive",
        description="Write generated capture sessions (snapshot, updates, end) as a raw archive "
        "that `tablecast run --archive` reads as it reads Kafka; --fault injects a violation "
        "of each kind. The archive must be new or empty: --add-topics writes new topics "
        "beside those it holds.",
        examples=[
            "tablecast generate --archive .demo/archive --topic-count 3 --sessions 24 "
            "--resync-every 50",
            "tablecast generate --archive .demo/archive --prefix plant- --add-topics",
            "tablecast generate --archive /tmp/bad --fault seq-gap --fault archive-hole",
        ],
    )
    generate.add_argument(
        "--archive", required=True, help="where to write (local path or s3://bucket/prefix)"
    )
    generate.add_argument(
        "--add-topics",
        action="store_true",
        help="write into an archive that holds other topics; each topic written must be new "
        "there (choose another --prefix) [the archive must be empty]",
    )
    add_capture_options(generate, gen.CaptureSpec(), shapes=(Shape.FAULTS, Shape.LAYOUT))
    _schema_option(generate, "the table schema the capture's rows follow [the default]")


def _verify(commands: Commands[CommandParser]) -> None:
    verify = add_command(
        commands,
        "verify",
        summary="compare an output with what the archive implies",
        description="Recompute the expected rows from the archive with the plain-Python "
        "processor, under the rules the output's ledger records, and compare them with the "
        "output as pyarrow reads it; check the Iceberg table against the files too. Exit 0 "
        "when exact, 1 when rows are missing, unexpected or duplicated.",
        examples=["tablecast verify --archive .demo/archive --output .demo/output"],
    )
    verify.add_argument("--archive", required=True, help="the raw archive the job read")
    _output_option(verify)
    _topic_options(verify)
    _integrity_option(
        verify, None, "the live job's --integrity [the output's ledger's; else strict]"
    )
    _schema_option(verify, "the table schema the job ran with [the one the output's ledger names]")
    _processor_option(verify, "the processor the job ran [the one the output's ledger names]")


def _repair(commands: Commands[CommandParser]) -> None:
    repair = add_command(
        commands,
        "repair",
        summary="realign output and checkpoint after a lost checkpoint",
        description="When the checkpoint was lost, find per partition the latest offset from "
        "which every session can be rebuilt from one of its snapshots, remove the output's "
        "rows at or after it, move the old checkpoint aside (never delete it) and record "
        "where the next run starts. --dry-run prints the plan and changes nothing.",
        examples=[
            "tablecast repair --archive .demo/archive --output .demo/output "
            "--checkpoint .demo/checkpoint --dry-run",
            "tablecast repair --bootstrap-servers b-1:9098 --kafka-auth iam --output "
            "s3://bucket/output --checkpoint hdfs://driver:8020/checkpoint --yes",
        ],
    )
    source = repair.add_mutually_exclusive_group(required=True)
    source.add_argument("--archive", help="read the messages from the raw archive")
    source.add_argument(
        "--bootstrap-servers", metavar="HOST:PORT,...", help="read the messages from Kafka"
    )
    _output_option(repair)
    repair.add_argument("--checkpoint", required=True, help="the checkpoint the next run uses")
    _topic_options(repair)
    _dry_run_option(repair)
    repair.add_argument("--yes", action="store_true", help="apply the plan without asking")
    _kafka_options(repair)
    repair.add_argument(
        "--region", default=None, help="MSK's region for --kafka-auth iam [AWS_REGION]"
    )
    repair.add_argument(
        "--master",
        default=None,
        help="Spark's master, to move an hdfs:// checkpoint aside [local[2]]",
    )
    _writer_lease_option(repair)
    _retire_options(repair)


def _replay(commands: Commands[CommandParser]) -> None:
    replay = add_command(
        commands,
        "replay",
        summary="recompute the output's files for a window of time, from the archive",
        description="Recompute, on Spark, every published range whose records have a "
        "timestamp in [--since, --until), with the rules the live job recorded; changed files "
        "are published under new names and the old ones retired after the grace. The live "
        "job keeps running. --dry-run prints the ranges.",
        examples=[
            "tablecast replay --archive .demo/archive --output .demo/output "
            "--since 2026-01-01T00:00:00Z --until 2026-01-02T00:00:00Z --dry-run",
        ],
    )
    replay.add_argument("--archive", required=True, help="the raw archive to read")
    _output_option(replay)
    replay.add_argument("--since", required=True, help="ISO 8601 time, inclusive (UTC)")
    replay.add_argument("--until", required=True, help="ISO 8601 time, exclusive (UTC)")
    _topic_options(replay)
    _dry_run_option(replay)
    _schema_option(
        replay,
        "into an output without a ledger: the table schema the rows follow [the default]; "
        "an output's ledger names its own",
    )
    _processor_option(
        replay, "into an output without a ledger: the processor [table]; a ledger names its own"
    )
    _recompute_options(replay)


def _correct(commands: Commands[CommandParser]) -> None:
    correct = add_command(
        commands,
        "correct",
        summary="recompute every range one job version published",
        description="Recompute, on Spark, every range the ledger says the faulty version (or "
        "commit, or processor version) published, with this version's code; refused while "
        "the newest batch is "
        "still from it (deploy the fix first). --dry-run prints the ranges.",
        examples=[
            "tablecast correct --archive s3://bucket/archive --output s3://bucket/output "
            "--version 1.4.0 --dry-run",
        ],
    )
    correct.add_argument("--archive", required=True, help="the raw archive to read")
    _output_option(correct)
    which = correct.add_mutually_exclusive_group(required=True)
    which.add_argument("--version", help="the faulty package version, as the ledger records it")
    which.add_argument("--commit", help="the faulty commit (7 or more hex digits)")
    which.add_argument(
        "--processor-version",
        metavar="VERSION",
        help="the faulty version of the processor's package (--processor), as the ledger "
        "records it",
    )
    _dry_run_option(correct)
    _recompute_options(correct)


def _table(commands: Commands[CommandParser]) -> None:
    table = add_command(
        commands,
        "table",
        summary="print how to read the output's Iceberg table",
        description="Print, as JSON, what each reader needs of the output's Iceberg table: "
        "pyiceberg's catalog properties (load_catalog), the table's name, and its current "
        "metadata file (DuckDB's iceberg_scan, Spark). --rebuild makes the table again from "
        "the ledger and the visible files.",
        examples=[
            "tablecast table --output .demo/output",
            "tablecast table --output s3://bucket/output --glue-database tablecast "
            "--region eu-west-1",
        ],
    )
    _output_option(table)
    _glue_options(table)
    table.add_argument(
        "--region", default=None, help="Glue's region [AWS_REGION, else the AWS configuration's]"
    )
    table.add_argument(
        "--rebuild",
        action="store_true",
        help="make the table again from the ledger and the visible files (one that cannot be "
        "loaded, or that `tablecast verify` finds out of step with the output)",
    )


def _compact(commands: Commands[CommandParser]) -> None:
    compact = add_command(
        commands,
        "compact",
        summary="merge the small files of closed days",
        description="Merge each closed day's files into files of --target-size, as one replace "
        "snapshot of the Iceberg table; the merged inputs go after the grace. The live job "
        "may keep running.",
        examples=["tablecast compact --output .demo/output --before 2026-01-31"],
    )
    _output_option(compact)
    compact.add_argument(
        "--before",
        default=None,
        metavar="DAY",
        help="compact the days before this one (YYYY-MM-DD) [today, UTC]",
    )
    compact.add_argument(
        "--target-size", default="128MiB", metavar="SIZE", help="merged files' size [128MiB]"
    )
    _retire_options(compact)


def _output_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--output", required=True, help="the job's output")


def _dry_run_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")


def _integrity_option(group: argparse._ActionsContainer, default: str | None, text: str) -> None:
    group.add_argument(
        "--integrity", choices=[m.value for m in IntegrityMode], default=default, help=text
    )


def _schema_option(group: argparse._ActionsContainer, text: str) -> None:
    group.add_argument("--schema", default=None, metavar="FILE", help=text)


def _processor_option(group: argparse._ActionsContainer, text: str) -> None:
    group.add_argument("--processor", default=None, metavar="MODULE:CLASS", help=text)


def _topic_options(command: argparse._ActionsContainer) -> None:
    """``--topic-pattern`` or ``--topics``: which topics a command reads."""
    group = command.add_mutually_exclusive_group()
    group.add_argument(
        "--topic-pattern",
        default=defaults.TOPIC_PATTERN,
        metavar="REGEX",
        help="the topics whose whole name this regular expression matches "
        f"[{defaults.TOPIC_PATTERN}]",
    )
    group.add_argument(
        "--topics",
        default=None,
        metavar="A,B",
        help="these topics, by name (instead of --topic-pattern) [the pattern's]",
    )


def _kafka_options(command: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """How a command that reads Kafka signs in to the brokers and how long it waits for them:
    the group, for a command's own Kafka options."""
    group = command.add_argument_group("Kafka (with --bootstrap-servers)")
    group.add_argument(
        "--kafka-auth",
        choices=[a.value for a in KafkaAuth],
        default=KafkaAuth.NONE.value,
        help="none (plaintext), iam (MSK: IAM over TLS, tokens signed in --region), tls (TLS "
        "only) or scram (SASL/SCRAM over TLS, the secret of --kafka-secret-arn) [none]",
    )
    group.add_argument(
        "--kafka-secret-arn",
        default="",
        metavar="ARN",
        help="with --kafka-auth scram: the Secrets Manager secret holding the user name and "
        "password (read in --region) [none]",
    )
    group.add_argument(
        "--kafka-timeout",
        default="30s",
        metavar="DURATION",
        help="the longest a request to the brokers, or a read without a record, may take "
        "before the command fails (exit 5), and how long a topic missing from the brokers' "
        "answers is asked for again [30s]",
    )
    return group


def _glue_options(group: argparse._ActionsContainer) -> None:
    group.add_argument(
        "--glue-database",
        default="",
        metavar="DATABASE",
        help="catalogue the table in this Glue database (in --region; needed once for an "
        "s3:// output) [a SQLite catalog beside a local output]",
    )
    group.add_argument(
        "--glue-table", default="output", metavar="NAME", help="the table's name in Glue [output]"
    )


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
    _integrity_option(command, None, "the live job's --integrity [the ledger's; else strict]")
    command.add_argument(
        "--session-timeout",
        default=None,
        metavar="DURATION",
        help=f"the live job's --session-timeout [the ledger's; else {defaults.SESSION_TIMEOUT}]",
    )
    command.add_argument("--master", default=None, help="Spark's master [local[2]]")
    _retire_options(command)


def _writer_lease_option(group: argparse._ActionsContainer) -> None:
    group.add_argument(
        "--writer-lease",
        default=defaults.WRITER_LEASE,
        metavar="DURATION",
        help="how long this writer may go without renewing its hold on the output before "
        "another may take it over; a start after a writer that died on another host waits "
        f"this long [{defaults.WRITER_LEASE}]",
    )

"""The commands that change what an output holds, and ``table``: ``repair``, ``replay``,
``correct``, ``compact``, ``table``. Each refuses a missing output, creating nothing."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import date
from typing import TYPE_CHECKING

import orjson

from app.errors import ConfigurationError
from app.sink.rewriter import Claimant
from app.sources import archive
from app.spark.session import spark_session

from . import options
from .progress import Progress

if TYPE_CHECKING:
    from app.recompute.plan import PartitionWork
    from app.recompute.run import Planned, RecomputeReport
    from app.sink.rewrite import Retirement
    from app.storage import Location


def repair(args: argparse.Namespace) -> int:
    from app.recovery import repair as repair_mod
    from app.sink import fencing

    retirement = options.retirement(args)
    writer_lease_s = options.writer_lease(args)
    topics = options.topics_of(args)
    if args.archive:
        archive.require_root(args.archive)  # a typo stops here, before anything is read
    location = options.existing_output(args.output, ledger=False)
    fencing.refuse_if_held(location, options.say)  # before the source is read
    reader = (
        repair_mod.archive_reader(args.archive, topics)
        if args.archive
        else repair_mod.kafka_reader(
            options.endpoint(args), topics, timeout_s=options.kafka_timeout(args)
        )
    )
    plan = repair_mod.plan_repair(args.output, reader, archive=args.archive)
    if not plan.partitions:
        print(f"output {args.output} holds nothing: a run from the earliest offsets rebuilds it")
    print(plan.describe())
    if args.dry_run:
        print("dry run: nothing was changed")
        return 0
    repair_mod.confirm(plan, args.yes)
    moved = repair_mod.apply_repair(
        args.output,
        args.checkpoint,
        plan,
        retirement,
        writer_lease_s=writer_lease_s,
        notice=options.say,
        archive=args.archive,
        master=args.master,
    )
    if moved:
        print(f"moved the old checkpoint to {moved}")
    print(
        f"repaired: the next `tablecast run --checkpoint {args.checkpoint}` starts at "
        f"{repair_mod.restart_summary(plan)}"
    )
    return 0


def replay(args: argparse.Namespace) -> int:
    from app.recompute import replay as replay_mod

    since, until = replay_mod.parse_time(args.since), replay_mod.parse_time(args.until)
    retirement = options.retirement(args)
    archive.require_root(args.archive)  # a typo stops here, before Spark starts
    options.existing_output(args.output, ledger=False)
    # Every refusal comes from the plan, before Spark starts.
    planned = replay_mod.plan_replay(
        args.archive,
        args.output,
        since,
        until,
        topic_pattern=options.topics_of(args),
        schema=options.schema(args),
        processor=options.recorded_processor(args),
        rules=options.recompute_rules(args),
    )
    return _carry_out(args, planned, retirement, "replaying partitions")


def correct(args: argparse.Namespace) -> int:
    from app.recompute import correct as correct_mod

    retirement = options.retirement(args)
    archive.require_root(args.archive)  # a typo stops here, before Spark starts
    # Every refusal comes from the plan, before Spark starts.
    planned = correct_mod.planned_correction(
        args.archive,
        args.output,
        version=args.version,
        commit=args.commit,
        processor_version=args.processor_version,
        rules=options.recompute_rules(args),
    )
    return _carry_out(args, planned, retirement, "correcting partitions")


def _carry_out(
    args: argparse.Namespace, planned: Planned, retirement: Retirement, label: str
) -> int:
    """A planned recompute: its plan printed (``--dry-run``), or run on Spark and reported."""
    from app.recompute.run import recompute

    if args.dry_run:
        _print_plan(planned.works)
        return 0
    spark = spark_session(args.master, notice=options.say)
    claimant = Claimant(str(args.command), notice=options.say)
    report = recompute(
        spark, planned, progress=Progress(label).update, retirement=retirement, claimant=claimant
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


def table(args: argparse.Namespace) -> int:
    from app.table import catalog as table_catalog

    location = options.existing_output(args.output)
    if args.glue_database:
        region = options.region(args)
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
        files = _rebuilt(location)
        print(f"made the table {found.table} again: {files:,} data files", file=sys.stderr)
    with (
        location.refusing(location.child(table_catalog.TABLE_DIR)),
        table_catalog.threads_released(),
    ):
        opened = table_catalog.open_table(location, found)  # made now, if it was not yet
    # pyiceberg: load_catalog(name, **catalog).load_table(table). DuckDB's iceberg_scan and
    # Spark read the metadata file itself: the table as of now.
    doc = {
        "name": found.name,
        "catalog": dict(found.catalog),
        "table": found.table,
        "metadata_location": opened.metadata_location,
    }
    print(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode())
    return 0


def _rebuilt(location: Location) -> int:
    """``table --rebuild`` as the output's writer and its one rewriter, refused beside a
    running job: a batch it published between the table's listing and its ledger entry
    would be in the table twice, once its own commit came; and beside a compaction or a
    recompute, whose commit the rebuild would drop."""
    from app.sink import fencing
    from app.sink import rewriter as rewriter_mod
    from app.table import commit as table_commit

    claimant = Claimant("table --rebuild", notice=options.say)
    with rewriter_mod.holding_output(location, claimant, fencing.new_writer("table", None)) as held:
        return table_commit.rebuild(location, held.fence)


def compact(args: argparse.Namespace) -> int:
    from app.table import compact as table_compact

    try:
        before = date.fromisoformat(args.before) if args.before else None
    except ValueError:
        raise ConfigurationError(f"--before {args.before!r} is not a day like 2026-01-31") from None
    target = table_compact.parse_size(args.target_size)
    retirement = options.retirement(args)
    location = options.existing_output(args.output)
    report = table_compact.compact(
        location,
        before=before,
        target_bytes=target,
        retirement=retirement,
        claimant=Claimant("compact", notice=options.say),
    )
    print(
        f"compacted {report.inputs:,} files into {report.outputs:,} ({report.rows:,} rows, "
        f"{report.bytes_before:,} bytes into {report.bytes_after:,})"
    )
    return 0

"""``tablecast generate``, ``verify`` and ``inspect``: sample captures, the check, the state."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from app.engine.machine import IntegrityMode
from app.errors import ConfigurationError
from app.spark.session import spark_session
from app.storage import resolve
from app.tools import generate as gen

from . import options
from .capture import capture_spec

if TYPE_CHECKING:
    from app.contract.offsets import TopicPartition
    from app.contract.schema import TableSchema
from .progress import Progress


def generate(args: argparse.Namespace) -> int:
    spec = capture_spec(args, gen.CaptureSpec(), schema=options.schema(args))
    _refuse_overlap(args.archive, [f"{spec.prefix}{n}" for n in range(spec.topics)], args)
    capture = gen.generate(spec)
    progress = Progress("writing archive")
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


def _refuse_overlap(uri: str, topics: list[str], args: argparse.Namespace) -> None:
    """A new capture goes into an empty archive, or (``--add-topics``) beside other topics:
    written over an archive's own files it would leave overlapping ranges, unreadable."""
    location = resolve(uri)
    held = sorted(
        info.base_name
        for info in location.list_dir(location.path)
        if not info.base_name.startswith((".", "_"))
    )
    if not held:
        return
    if not args.add_topics:
        raise ConfigurationError(
            f"archive {uri} is not empty (it holds {', '.join(held[:3])}"
            f"{' ...' if len(held) > 3 else ''}): give a new --archive, or --add-topics with "
            "a --prefix whose topics it does not hold"
        )
    clash = sorted(set(held) & set(topics))
    if clash:
        raise ConfigurationError(
            f"archive {uri} already holds topic {clash[0]}: --add-topics writes new topics "
            f"only; give a --prefix other than {args.prefix!r}"
        )


def verify(args: argparse.Namespace) -> int:
    from app.table.check import check_table
    from app.tools import verify as verify_mod  # duckdb and pyarrow.dataset: only for verify

    # A user's processor runs over all of it; the built-in reads each range with the schema
    # given, or each range's as the output's ledger records it.
    processor = options.recorded_processor(args)
    changes: dict[TopicPartition, list[tuple[int, TableSchema]]] = {}
    adopted: list[verify_mod.AdoptedSnapshot] = []
    if processor is not None:
        first, last = processor.output, processor.output
    elif args.schema:
        first = last = options.schema(args)
    else:
        recorded = verify_mod.recorded_schemas(args.output)
        first, changes, adopted = recorded.first, recorded.changes, recorded.adopted
        last = verify_mod.output_table_schema(args.output)
    actual = verify_mod.read_output(args.output, required=True, schema=last, archive=args.archive)
    # A damaged table, or a data file gone from under it, stops here: exit 8.
    table = check_table(resolve(args.output), archive=args.archive)
    rules = verify_mod.recorded_rules(
        args.output, None if args.integrity is None else IntegrityMode(args.integrity)
    )
    expected = verify_mod.expected_output(
        args.archive,
        options.topics_of(args),
        rules.mode,
        timeout_ms=rules.timeout_ms,
        schema=first,
        changes=changes,
        processor=processor,
        adopted=adopted,
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


def inspect(args: argparse.Namespace) -> int:
    from app.recovery import inspect as inspect_mod
    from app.sink import guard

    options.existing_output(args.output)
    recorded = guard.recorded_checkpoint(args.output)
    elsewhere = (
        f": output {args.output} was written with checkpoint {recorded}"
        if recorded and not guard.same_place(recorded, args.checkpoint)
        else ""
    )
    if options.missing_locally(args.checkpoint):
        raise ConfigurationError(f"checkpoint {args.checkpoint} does not exist{elsewhere}")
    try:
        snapshot = inspect_mod.read_state(
            spark_session(args.master, notice=options.say),
            args.checkpoint,
            args.output,
            at_batch=args.at_batch,
            session=args.session,
            limit=None if args.session else args.limit,
        )
    except ConfigurationError as exc:
        if not elsewhere:  # a mistyped --checkpoint is the likeliest cause: say which it was
            raise
        raise ConfigurationError(f"{exc}{elsewhere}") from None
    if args.session:
        print(inspect_mod.format_session(snapshot, snapshot.sessions[0]))
    else:
        print(inspect_mod.format_summary(snapshot))
    return 0

"""``tablecast repair``: the seeds' six-step runbook, automated and checked.

When output and checkpoint disagree (a lost, deleted or swapped checkpoint,
or a run that must restart earlier), repair realigns them without losing or
repeating a row:

1. Read the offsets the output holds (its ledger) and each partition's
   message headers from the source, up to those offsets. A running job
   holding the output refuses the repair (:mod:`app.sink.fencing`).
2. Find each partition's restart offset (:mod:`app.recovery.restart`): the latest
   offset from which every session that goes on past it can be rebuilt from
   one of its snapshots (under a user's processor, from its first message).
3. Print the plan; with ``--dry-run`` stop here.
4. Claim the output (a job that held it can change nothing after this; the
   ledger must still end where the plan read it), tidy what earlier writers
   left, and move the old checkpoint aside (never delete it).
5. Rewrite the output files that hold rows at or after the restart offsets
   without those rows, in the dataset and in its quarantine: each file's
   remaining rows are published under a new name and the old name retired
   (:mod:`app.sink.rewrite`; a published file is never written in place),
   after finishing any rewrite a crash interrupted.
6. Append a repair entry to the ledger under the claim: the next
   ``tablecast run`` with a fresh checkpoint starts at exactly the restart
   offsets, and the sessions that restart from a resync snapshot (``seq`` >
   0) are named there.

Repair is safe to run again if it is interrupted: the plan depends only on
the source and the ledger, which step 6 changes last.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

from app.contract import loader
from app.contract import offsets as offsets_mod
from app.contract.envelope import Record
from app.contract.offsets import Offsets, TopicPartition
from app.engine.writer import write_data_file
from app.errors import ConfigurationError, DataLossError, OutputStateError
from app.recovery.restart import CannotRebuildError, RestartPoint, headers, restart_point
from app.sink import fencing, processors
from app.sink import ledger as ledger_mod
from app.sink import rewrite as rewrite_mod
from app.sink import rewriter as rewriter_mod
from app.sink.checkpoint import CheckpointLog
from app.sink.guard import tidy_older_writers
from app.sink.ledger import Ledger, LedgerEntry
from app.sink.visible import visible_files
from app.sources import archive
from app.sources.backend import Bounds
from app.sources.kafka_client import KafkaEndpoint
from app.sources.records import typed_records
from app.spark.session import spark_session
from app.storage import Location, resolve
from app.table import commit as table_commit
from app.table.damage import read_published

RecordReader = Callable[[TopicPartition, int], Iterator[Record]]
REPAIR_DIR = posixpath.join(ledger_mod.CONTROL_DIR, "repair")  # rewritten files, staged


@dataclass(frozen=True)
class PartitionPlan:
    tp: TopicPartition
    committed_end: int
    restart: RestartPoint
    rows_to_remove: int


@dataclass(frozen=True)
class RepairPlan:
    partitions: tuple[PartitionPlan, ...]
    end: Offsets  # restart offsets for every partition the output knows
    files_to_rewrite: tuple[str, ...]
    head: int | None = None  # the ledger entry the plan was made from

    @property
    def adopt(self) -> dict[str, int]:
        return {s: o for p in self.partitions for s, o in p.restart.adopt.items()}

    def kept_offsets(self) -> dict[TopicPartition, set[int]]:
        """Messages at or after the restart whose rows stay: the adopted snapshots."""
        return {p.tp: set(p.restart.adopt.values()) for p in self.partitions}

    def describe(self) -> str:
        lines = [
            f"{'partition':<28} {'committed end':>14} {'restart at':>12} {'rows to remove':>15}"
        ]
        for p in self.partitions:
            lines.append(
                f"{p.tp.key():<28} {p.committed_end:>14,} {p.restart.offset:>12,} "
                f"{p.rows_to_remove:>15,}"
            )
            rebuilt = sorted(p.restart.rebuilt)
            if rebuilt:
                shown = ", ".join(rebuilt[:8]) + (
                    f" and {len(rebuilt) - 8} more" if len(rebuilt) > 8 else ""
                )
                lines.append(f"    sessions rebuilt ({len(rebuilt)}): {shown}")
            adopt = sorted(p.restart.adopt)
            if adopt:
                shown = ", ".join(adopt[:8]) + (
                    f" and {len(adopt) - 8} more" if len(adopt) > 8 else ""
                )
                lines.append(f"    restart from a resync snapshot ({len(adopt)}): {shown}")
        lines.append(f"files to rewrite: {len(self.files_to_rewrite)}")
        return "\n".join(lines)


class RepairSteps:
    """Hooks between the steps (tests hold a repair here; they do nothing by default)."""

    def staged(self) -> None:
        """Inside step 5: the rewritten files staged, before the rewriter claim's check
        that guards recording the rewrite."""


def archive_reader(uri: str, topic_pattern: str) -> RecordReader:
    location = archive.require_root(uri)
    index = archive.scan(location, topic_pattern)

    def read(tp: TopicPartition, end: int) -> Iterator[Record]:
        if tp not in index.files:
            raise DataLossError(
                f"the archive holds nothing of {tp}, which the output holds",
                source="the archive",
                topic=tp.topic,
                partition=tp.partition,
            )
        first = index.earliest(tp)
        yield from archive.iter_records(location, index.covering(tp, first, end), first, end)

    return read


def plan_repair(output_uri: str, read: RecordReader, *, archive: str | None = None) -> RepairPlan:
    """Steps 1 and 2: nothing is changed. A published file that cannot be read is named,
    with the replay that mends it (``archive``: the replay's, where known)."""
    location = resolve(output_uri)
    head = Ledger(location).head()
    if head is None:
        return RepairPlan((), {}, ())
    partitions: list[PartitionPlan] = []
    end: Offsets = {}
    # A snapshot rebuilds a session of the built-in processor; a user's, its first message.
    snapshots = processors.recorded(head).name == loader.BUILT_IN
    for tp in sorted(head.end):
        committed = head.end[tp]
        try:
            point = restart_point(headers(read(tp, committed)), committed, snapshots=snapshots)
        except CannotRebuildError as exc:
            raise OutputStateError(
                f"cannot repair {tp}: {exc}",
                output=output_uri,
                topic=tp.topic,
                partition=tp.partition,
                **exc.facts,
            ) from None
        end[tp] = point.offset
        partitions.append(PartitionPlan(tp, committed, point, 0))
    kept = {p.tp: set(p.restart.adopt.values()) for p in partitions}
    counts, files = _rows_at_or_after(location, end, kept, archive)
    return RepairPlan(
        tuple(
            PartitionPlan(p.tp, p.committed_end, p.restart, counts.get(p.tp, 0)) for p in partitions
        ),
        end,
        tuple(files),
        head.number,
    )


def apply_repair(
    output_uri: str,
    checkpoint_uri: str,
    plan: RepairPlan,
    retirement: rewrite_mod.Retirement | None = None,
    *,
    writer_lease_s: float | None = None,
    notice: Callable[[str], None] | None = None,
    archive: str | None = None,
    master: str | None = None,
    steps: RepairSteps | None = None,
) -> str | None:
    """Steps 4 to 6; returns where the old checkpoint went (None if there was none).
    ``master``: Spark's, which moves an ``hdfs://`` checkpoint aside. ``steps``: where a
    test holds it."""
    location = resolve(output_uri)
    ledger = Ledger(location)
    # Step 4: the output's writer, and beside no other rewriter (a compaction, a
    # recompute) from here to its end.
    writer = fencing.new_writer("repair", checkpoint_uri, writer_lease_s)
    with rewriter_mod.holding_output(
        location, rewriter_mod.Claimant("repair", notice=notice), writer
    ) as held:
        rewriting, fence = held.rewriting, held.fence
        head = ledger.head()
        if (head.number if head is not None else None) != plan.head:
            raise OutputStateError(
                f"output {output_uri} changed while the repair was planned (its ledger ends at "
                f"entry {head.number if head else None}, the plan read entry {plan.head}): "
                "run the repair again",
                output=output_uri,
            )
        tidy_older_writers(fence, redo_key=None)
        moved = move_checkpoint_aside(checkpoint_uri, master)
        # Step 5
        fence.check("rewriting the output's files")
        # A crashed rewrite changed which files hold rows:
        if rewrite_mod.finish_open(
            location, snapshot=table_commit.snapshot_rewrite, retirement=retirement
        ):
            files = _rows_at_or_after(location, plan.end, plan.kept_offsets(), archive)[1]
        else:
            files = list(plan.files_to_rewrite)
        location.delete_dir(location.child(REPAIR_DIR))  # an earlier attempt's staging
        rewrite = _rewrite(location, files, plan.end, plan.kept_offsets(), archive)
        (steps or RepairSteps()).staged()
        rewriting.check("recording its rewrite")
        rewrite_mod.carry_out(
            location,
            dataclasses.replace(rewrite, kind=str(ledger_mod.REPAIR), note=restart_summary(plan)),
            snapshot=table_commit.snapshot_rewrite,
            retirement=retirement,
        )
        location.delete_dir(location.child(REPAIR_DIR))
        # Step 6
        if head is not None:
            fence.append(
                LedgerEntry(
                    number=-1,  # the fence numbers it
                    kind=ledger_mod.REPAIR,
                    end=plan.end,
                    checkpoint=checkpoint_uri,
                    adopt=plan.adopt,
                    # Its files keep the schema their rows were computed with.
                    schema=head.schema,
                    processor=head.processor,
                ),
                doing="recording the repair",
            )
        # The rewrite committed the table's overwrite (step 5); its snapshot at the repair's
        # entry follows the ledger (app.table).
        table_commit.catch_up(location)
    return moved


def move_checkpoint_aside(uri: str, master: str | None = None) -> str | None:
    suffix = "before-repair-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    if "://" not in uri or uri.startswith("file://"):
        path = uri.removeprefix("file://").rstrip("/")
        if not os.path.exists(path):
            return None
        target = f"{path}.{suffix}"
        os.rename(path, target)
        return target
    log = CheckpointLog(spark_session(master), uri)
    return log.move_aside(suffix) if log.exists() else None


def _keep_mask(
    table: pa.Table, end: Offsets, kept: dict[TopicPartition, set[int]]
) -> pa.ChunkedArray:
    keep = pa.array([True] * len(table))
    for tp, offset in end.items():
        drop = pc.and_(
            pc.and_(pc.equal(table["topic"], tp.topic), pc.equal(table["partition"], tp.partition)),
            pc.greater_equal(table["offset"], offset),
        )
        if kept.get(tp):
            adopted = pc.is_in(table["offset"], pa.array(sorted(kept[tp]), pa.int64()))
            drop = pc.and_(drop, pc.invert(adopted))
        keep = pc.and_(keep, pc.invert(drop))
    return keep


def _rows_at_or_after(
    location: Location, end: Offsets, kept: dict[TopicPartition, set[int]], archive: str | None
) -> tuple[dict[TopicPartition, int], list[str]]:
    counts: dict[TopicPartition, int] = {}
    files: list[str] = []
    for relative in visible_files(location):
        table = read_published(
            location, relative, columns=["topic", "partition", "offset"], archive=archive
        )
        dropped = table.filter(pc.invert(_keep_mask(table, end, kept)))
        if len(dropped):
            files.append(relative)
            if not relative.startswith("_quarantine/"):
                for row in (
                    dropped.group_by(["topic", "partition"])
                    .aggregate([([], "count_all")])
                    .to_pylist()
                ):
                    tp = TopicPartition(row["topic"], row["partition"])
                    counts[tp] = counts.get(tp, 0) + row["count_all"]
    return counts, files


def _rewrite(
    location: Location,
    files: list[str],
    end: Offsets,
    kept: dict[TopicPartition, set[int]],
    archive: str | None,
) -> rewrite_mod.Rewrite:
    """Each file's rows before the restart offsets, staged for a new name; the file retires."""
    name = "repair-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    publish: list[tuple[str, str]] = []
    retire: list[str] = []
    for relative in files:
        path = location.child(relative)
        if not location.exists(path):
            continue
        table = read_published(location, relative, archive=archive)
        remaining = table.filter(_keep_mask(table, end, kept))
        retire.append(relative)
        if len(remaining):
            staged = posixpath.join(REPAIR_DIR, name, relative)
            # The file's own schema: the one its rows were computed with.
            write_data_file(location, location.child(staged), remaining, table.schema)
            publish.append((staged, rewrite_mod.renamed(relative, name)))
    return rewrite_mod.Rewrite(name, tuple(publish), tuple(retire))


def kafka_reader(
    endpoint: KafkaEndpoint, topic_pattern: str, *, timeout_s: float | None = None
) -> RecordReader:
    """Read a partition from Kafka's earliest retained offset, with the job's range reader
    (``timeout_s``: how long the brokers may take to answer; None: the source's default)."""
    from app.sources.kafka import DEFAULT_TIMEOUT_S, KafkaBackend  # confluent-kafka: only here

    backend = KafkaBackend(endpoint, topic_pattern, timeout_s or DEFAULT_TIMEOUT_S)
    listed: dict[TopicPartition, Bounds] = {}

    def read(tp: TopicPartition, end: int) -> Iterator[Record]:
        if not listed:
            listed.update(backend.bounds())
        if tp not in listed:
            raise DataLossError(
                f"{endpoint.description} holds nothing of {tp}, which the output holds",
                source=endpoint.description,
                topic=tp.topic,
                partition=tp.partition,
            )
        for batch in backend.reader(tp, listed[tp].earliest, end).read():
            yield from typed_records(batch)

    return read


def confirm(plan: RepairPlan, yes: bool, ask: Callable[[str], str] = input) -> None:
    if yes:
        return
    if not os.isatty(0):
        raise ConfigurationError(
            "repair changes the output and the checkpoint: pass --yes to go ahead"
        )
    if ask("Apply this plan? [y/N] ").strip().lower() not in ("y", "yes"):
        raise ConfigurationError("repair cancelled; nothing was changed")


def restart_summary(plan: RepairPlan) -> str:
    return offsets_mod.describe(plan.end)

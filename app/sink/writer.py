"""Task-side half of the sink: write one task's rows as hidden, staged files.

Runs inside each Spark task of a micro-batch (``mapInArrow`` right after the
stateful operator, so the task is the state partition). File names derive
from the batch's end offsets and the task's partition number, and rows are
sorted before they are cut into files, so a micro-batch that is redone after
a crash stages exactly the same files under exactly the same names.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from app.stateful import QUARANTINE, ROW, TRACE, VIOLATION
from app.storage import Location, resolve

# The output dataset's file schema (CONTRACT.md section 3).
OUTPUT_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("session", pa.string()),
        pa.field("seq", pa.int64()),
        pa.field("type", pa.string()),
        pa.field("ts", pa.timestamp("ms", tz="UTC")),
        pa.field("row_id", pa.string()),
        pa.field("value", pa.float64()),
        pa.field("status", pa.string()),
        pa.field("deleted", pa.bool_()),
    ]
)
QUARANTINE_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("session", pa.string()),
        pa.field("seq", pa.int64()),
        pa.field("type", pa.string()),
        pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
        pa.field("reason", pa.string()),
        pa.field("value", pa.binary()),
    ]
)
# What each task reports back to the driver.
REPORT_DDL = (
    "kind string, path string, rows long, bytes long, topic string, partition int, "
    "offset long, session string, detail string"
)
REPORT_SCHEMA = pa.schema(
    [
        pa.field("kind", pa.string()),
        pa.field("path", pa.string()),
        pa.field("rows", pa.int64()),
        pa.field("bytes", pa.int64()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("session", pa.string()),
        pa.field("detail", pa.string()),
    ]
)
FILE = "file"
QUARANTINE_DIR = "_quarantine"


@dataclass(frozen=True)
class StagingWriter:
    """The ``mapInArrow`` function of one micro-batch."""

    output_uri: str
    staging_dir: str  # relative to the output
    batch_key: str
    max_rows_per_file: int
    compression: str = "snappy"

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        task = context.partitionId() if context is not None else 0
        received = list(batches)
        report: list[dict[str, Any]] = []
        events = pa.Table.from_batches(received) if received else None
        if events is not None and len(events):
            kinds = events.column("kind")
            rows = events.filter(pc.equal(kinds, ROW))
            quarantined = events.filter(pc.equal(kinds, QUARANTINE))
            report += self._write(task, "", _output_table(rows), "ts")
            report += self._write(task, QUARANTINE_DIR, _quarantine_table(quarantined), "timestamp")
            for kind in (VIOLATION, TRACE):
                for event in events.filter(pc.equal(kinds, kind)).to_pylist():
                    report.append(
                        {
                            "kind": kind, "path": None, "rows": 0, "bytes": 0,
                            "topic": event["topic"], "partition": event["partition"],
                            "offset": event["offset"], "session": event["session"],
                            "detail": event["detail"] if kind == VIOLATION else orjson.dumps(
                                {"seq": event["seq"], "type": event["type"],
                                 "outcome": event["detail"]}
                            ).decode(),
                        }
                    )  # fmt: skip
        if report:
            yield pa.RecordBatch.from_pylist(report, schema=REPORT_SCHEMA)

    def _write(
        self, task: int, subdir: str, table: pa.Table, time_column: str
    ) -> list[dict[str, Any]]:
        return stage_table(
            resolve(self.output_uri), self.staging_dir, subdir, table, time_column,
            f"{self.batch_key}-{task:05d}", self.max_rows_per_file, self.compression,
        )  # fmt: skip


def stage_table(
    location: Location,
    staging_dir: str,
    subdir: str,
    table: pa.Table,
    time_column: str,
    name: str,
    max_rows_per_file: int,
    compression: str = "snappy",
) -> list[dict[str, Any]]:
    """Write ``table`` under ``staging_dir`` as ``<subdir>/date=<day>/part-<name>-<n>``.

    Rows are sorted by (topic, partition, offset), keeping each message's
    rows in order, so the same rows always give the same files.
    """
    if not len(table):
        return []
    ordinal = pa.array(range(len(table)), pa.int64())
    table = table.append_column("_ordinal", ordinal)
    table = table.sort_by([("topic", "ascending"), ("partition", "ascending"),
                           ("offset", "ascending"), ("_ordinal", "ascending")])  # fmt: skip
    table = table.drop_columns(["_ordinal"])
    dates = pc.strftime(table.column(time_column), format="%Y-%m-%d")
    report: list[dict[str, Any]] = []
    for date in sorted(pc.unique(dates).to_pylist()):
        day = table.filter(pc.equal(dates, date))
        for chunk, start in enumerate(range(0, len(day), max_rows_per_file)):
            part = day.slice(start, max_rows_per_file)
            relative = posixpath.join(subdir, f"date={date}", f"part-{name}-{chunk:03d}.parquet")
            staged = location.child(staging_dir, relative)
            location.fs.create_dir(posixpath.dirname(staged), recursive=True)
            pq.write_table(
                part, staged, filesystem=location.fs, compression=compression,
                row_group_size=256 * 1024,
            )  # fmt: skip
            size = location.fs.get_file_info(staged).size
            report.append({"kind": FILE, "path": relative, "rows": len(part), "bytes": size})
    return report


def _output_table(events: pa.Table) -> pa.Table:
    return pa.table(
        {
            "topic": events.column("topic"),
            "partition": events.column("partition").cast(pa.int32()),
            "offset": events.column("offset"),
            "session": events.column("session"),
            "seq": events.column("seq"),
            "type": events.column("type"),
            "ts": events.column("ts_ms").cast(pa.timestamp("ms", tz="UTC")),
            "row_id": events.column("row_id"),
            "value": events.column("value"),
            "status": events.column("status"),
            "deleted": events.column("deleted"),
        },
        schema=OUTPUT_SCHEMA,
    )


def _quarantine_table(events: pa.Table) -> pa.Table:
    return pa.table(
        {
            "topic": events.column("topic"),
            "partition": events.column("partition").cast(pa.int32()),
            "offset": events.column("offset"),
            "session": events.column("session"),
            "seq": events.column("seq"),
            "type": events.column("type"),
            "timestamp": events.column("ts_ms").cast(pa.timestamp("ms", tz="UTC")),
            "reason": events.column("detail"),
            "value": events.column("raw"),
        },
        schema=QUARANTINE_SCHEMA,
    )

"""The output dataset's rows and the quarantine's records, built as columns.

The schemas here are the one definition of CONTRACT.md section 3 (and of
the quarantine dataset beside it); every writer and reader derives from
them. :class:`RowColumns` collects a partition's output while the engine
runs: the columns of each message that produced rows are kept once and
repeated by row count when the Arrow table is built, so no per-row Python
object is made.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa

from app.contract.envelope import TableRow
from app.contract.offsets import TopicPartition
from app.contract.processor import Changes
from app.engine.gc_pause import cyclic_gc_paused

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
OUTPUT_COLUMNS: tuple[str, ...] = tuple(OUTPUT_SCHEMA.names)

# The quarantine dataset (``<output>/_quarantine/``): records set aside in
# resync mode, with the reason, and the raw value as it arrived.
QUARANTINE_SCHEMA = pa.schema(
    [
        *(OUTPUT_SCHEMA.field(i) for i in range(6)),  # topic, partition, offset, session, seq, type
        pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
        pa.field("reason", pa.string()),
        pa.field("value", pa.binary()),
    ]
)

_MS_UTC = pa.timestamp("ms", tz="UTC")
# A row's own columns, as the processor gives them: (row_id, value, status).
_ROW = pa.struct([OUTPUT_SCHEMA.field(name) for name in ("row_id", "value", "status")])
# What RowColumns keeps of a message with rows: its columns, its rows and deletions.
_MESSAGE = pa.struct(
    [
        *(OUTPUT_SCHEMA.field(name) for name in ("offset", "session", "seq", "type")),
        pa.field("ts_ms", pa.int64()),
        pa.field("rows", pa.int64()),
        pa.field("deleted_rows", pa.int64()),
    ]
)


class QuarantinedRecord(NamedTuple):
    """A record set aside in resync mode, with the reason (quarantine dataset)."""

    topic: str
    partition: int
    offset: int
    session: str
    seq: int | None
    type: str | None
    timestamp_ms: int
    reason: str
    value: bytes | None


class RowColumns:
    """One topic-partition's output rows, in the order they were produced."""

    __slots__ = ("_messages", "_rows", "tp")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        # (offset, session, seq, type, ts, rows, deleted rows): one per message with rows.
        self._messages: list[tuple[int, str, int, str, int, int, int]] = []
        self._rows: list[TableRow] = []  # deleted rows as (id, None, None)

    def __len__(self) -> int:
        return len(self._rows)

    def emit(
        self, offset: int, session: str, seq: int, kind: str, ts: int, changes: Changes
    ) -> int:
        """Add a message's rows: its deletions, then its upserts. Returns the row count."""
        deleted, upserted = changes
        count = len(deleted) + len(upserted)
        if count:
            self._messages.append((offset, session, seq, kind, ts, count, len(deleted)))
            if deleted:
                self._rows.extend([(row_id, None, None) for row_id in deleted])
            self._rows.extend(upserted)
        return count

    def to_table(self) -> pa.Table:
        """The rows as an Arrow table of :data:`OUTPUT_SCHEMA`."""
        with cyclic_gc_paused():
            return self._table()

    def _table(self) -> pa.Table:
        n = len(self._rows)
        if not n:
            return OUTPUT_SCHEMA.empty_table()
        # One conversion each of the message and row tuples as structs: unzipping
        # millions of tuples in Python cost several times the conversions.
        offsets, sessions, seqs, kinds, stamps, counts, deleted_counts = pa.array(
            self._messages, _MESSAGE
        ).flatten()
        ids, values, statuses = pa.array(self._rows, _ROW).flatten()
        repeat = counts.to_numpy()
        per_row = np.repeat(np.arange(len(repeat)), repeat)
        # Each message's rows start with its deletions.
        firsts = np.repeat(np.cumsum(repeat) - repeat, repeat)
        deleted = (np.arange(n) - firsts) < np.repeat(deleted_counts.to_numpy(), repeat)
        return pa.table(
            [
                pa.repeat(pa.scalar(self.tp.topic, pa.string()), n),
                pa.repeat(pa.scalar(self.tp.partition, pa.int32()), n),
                offsets.take(per_row),
                sessions.take(per_row),
                seqs.take(per_row),
                kinds.take(per_row),
                stamps.take(per_row).cast(_MS_UTC),
                ids,
                values,
                statuses,
                pa.array(deleted, pa.bool_()),
            ],
            schema=OUTPUT_SCHEMA,
        )


def quarantine_table(records: list[QuarantinedRecord]) -> pa.Table:
    """Quarantined records as an Arrow table of :data:`QUARANTINE_SCHEMA`."""
    columns = list(zip(*records, strict=True)) if records else [()] * len(QuarantinedRecord._fields)
    arrays = [
        pa.array(values, field.type if name != "timestamp" else pa.int64()).cast(field.type)
        for name, field, values in zip(
            QUARANTINE_SCHEMA.names, QUARANTINE_SCHEMA, columns, strict=True
        )
    ]
    return pa.table(arrays, schema=QUARANTINE_SCHEMA)

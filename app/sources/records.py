"""The records every source gives: the columns of Spark's Kafka source.

The raw archive stores exactly these columns (:data:`SCHEMA`, CONTRACT.md
section 4), the Kafka backend builds them from librdkafka's messages, and
the engine reads them (:meth:`app.engine.machine.RecordColumns.from_arrow`).
``headers`` (since version 1.1 of the contract) holds each record's headers
in order, an empty list where it has none; files written before it lack the
column and read as empty lists (:func:`conform`).

The job's source adds one column of its own, ``served_by``: the tier that
served each record (:class:`Tier`, ``archive`` or ``kafka``), so that a
source reading both (:mod:`app.sources.tiered`) can say which one served
what. Each range reader appends it (:func:`served_by`); the archive's files
never hold it.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from typing import Final

import numpy as np
import pyarrow as pa

from app import metric_names
from app.contract.envelope import Position, Record

HEADERS = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
"""Spark's ``includeHeaders`` shape: ``array<struct<key: string, value: binary>>``."""
SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
        pa.field("headers", HEADERS),
    ]
)


class Tier(StrEnum):
    """Where a record was read from: the values of the ``served_by`` column."""

    ARCHIVE = metric_names.SOURCE_ARCHIVE
    KAFKA = metric_names.SOURCE_KAFKA


SERVED_BY: Final = "served_by"
# What the job's source gives: the Kafka columns, then the tier that served each record.
SOURCE_SCHEMA = SCHEMA.append(pa.field(SERVED_BY, pa.string()))
SPARK_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int, "
    f"headers array<struct<key: string, value: binary>>, {SERVED_BY} string"
)


def no_headers(count: int) -> pa.Array:
    """A ``headers`` column of ``count`` empty lists."""
    offsets = pa.array(np.zeros(count + 1, np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array([], HEADERS.value_type), type=HEADERS)


def conform(table: pa.Table) -> pa.Table:
    """``table``'s columns as :data:`SCHEMA`, with empty ``headers`` where it lacks them.

    Raises ``KeyError`` for another missing column, and pyarrow's errors for
    a column that does not cast.
    """
    if "headers" not in table.schema.names:
        table = table.append_column("headers", no_headers(table.num_rows))
    return table.select(SCHEMA.names).cast(SCHEMA)


def served_by(batch: pa.RecordBatch, tier: Tier) -> pa.RecordBatch:
    """``batch`` (of :data:`SCHEMA`) with the ``served_by`` column: every record from ``tier``."""
    column = pa.repeat(pa.scalar(tier.value, pa.string()), batch.num_rows)
    return pa.RecordBatch.from_arrays([*batch.columns, column], schema=SOURCE_SCHEMA)


def served_counts(table: pa.Table | pa.RecordBatch) -> dict[str, int]:
    """Records per tier (``{}`` for records without the ``served_by`` column)."""
    if SERVED_BY not in table.schema.names or not table.num_rows:
        return {}
    counts = table.column(SERVED_BY).value_counts()
    return {
        str(value): int(count)
        for value, count in zip(
            counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True
        )
        if value is not None
    }


def typed_records(batch: pa.RecordBatch) -> Iterator[Record]:
    """A batch's rows as typed records (the plain-Python tools: repair, replay, verify)."""
    micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
    for key, value, topic, partition, offset, ts in zip(
        batch.column("key").to_pylist(),
        batch.column("value").to_pylist(),
        batch.column("topic").to_pylist(),
        batch.column("partition").to_pylist(),
        batch.column("offset").to_pylist(),
        micros,
        strict=True,
    ):
        yield Record(Position(topic, partition, offset), key, value, ts // 1000)

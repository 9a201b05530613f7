"""The records every source gives: the columns of Spark's Kafka source.

The raw archive stores exactly these columns (CONTRACT.md section 4), the
Kafka backend builds them from librdkafka's messages, and the engine reads
them (:meth:`app.engine.machine.RecordColumns.from_arrow`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from app.contract import Position, Record

SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
)
SPARK_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)


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

"""The records every source gives: the columns of Spark's Kafka source.

The raw archive stores exactly these columns (CONTRACT.md section 4), the
Kafka backend builds them from librdkafka's messages, and the engine reads
them (:meth:`app.engine.machine.RecordColumns.from_arrow`).
"""

from __future__ import annotations

import pyarrow as pa

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

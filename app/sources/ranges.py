"""Ranges in place of records: what the job's source gives Spark.

Each Spark partition of a micro-batch reads one topic-partition's range.
With the source's ``deliver`` option set to :data:`RANGES` it gives one row
per range, not its records: the topic-partition, the offsets ``[start, end)``
and the :class:`~app.sources.backend.RangeReader` the driver planned for it,
pickled. The job's task (:class:`app.engine.task.PartitionTask`) reads the
range itself with that reader, in the Python worker that processes it, so
the records never cross into Spark's JVM and back: only the plan does.
Spark still plans the offsets and keeps them in its checkpoint, exactly as
for a source that gives records.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import pyarrow as pa

from app.contract.offsets import TopicPartition
from app.sources.backend import RangeReader

RECORDS: Final = "records"
RANGES: Final = "ranges"
DELIVER_OPTION: Final = "deliver"
"""The source's option: :data:`RECORDS` (Spark's Kafka source's rows) or :data:`RANGES`."""

READER: Final = "reader"
SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("start", pa.int64()),
        pa.field("end", pa.int64()),
        pa.field(READER, pa.binary()),
    ]
)
SPARK_DDL = "topic string, partition int, start long, end long, reader binary"


@dataclass(frozen=True)
class PlannedRange:
    """One topic-partition's offsets ``[start, end)`` and how to read them."""

    tp: TopicPartition
    start: int
    end: int
    reader: RangeReader

    def to_batch(self) -> pa.RecordBatch:
        """The range as the source's one row."""
        return pa.RecordBatch.from_pydict(
            {
                "topic": [self.tp.topic],
                "partition": [self.tp.partition],
                "start": [self.start],
                "end": [self.end],
                READER: [pickle.dumps(self.reader, protocol=pickle.HIGHEST_PROTOCOL)],
            },
            schema=SCHEMA,
        )


def is_ranges(batch: pa.RecordBatch) -> bool:
    """Whether ``batch`` holds ranges (:data:`SCHEMA`), not records."""
    return READER in batch.schema.names


def planned(batch: pa.RecordBatch) -> Iterator[PlannedRange]:
    """The ranges of a batch of the source's range rows."""
    columns = batch.to_pydict()
    for topic, partition, start, end, reader in zip(
        columns["topic"],
        columns["partition"],
        columns["start"],
        columns["end"],
        columns[READER],
        strict=True,
    ):
        yield PlannedRange(TopicPartition(topic, partition), start, end, pickle.loads(reader))

"""Which topic-partitions of a micro-batch share a task (app.sources.stream.task_groups)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyspark.sql.streaming.datasource import ReadAllAvailable

from app.contract.offsets import TopicPartition
from app.sources import archive, stream
from app.sources.archive import ArchiveBackend
from app.sources.stream import GroupPartition, OffsetStreamReader, task_groups
from app.storage import resolve


def tp(topic: str, partition: int = 0) -> TopicPartition:
    return TopicPartition(topic, partition)


def test_small_ranges_share_a_task_in_name_order_and_a_large_one_is_a_task_alone() -> None:
    start = {tp("a"): 0, tp("b"): 100, tp("c"): 0, tp("d"): 0, tp("e"): 5}
    end = {tp("a"): 30, tp("b"): 100, tp("c"): 500, tp("d"): 40, tp("e"): 20, tp("f"): 25}
    # b has nothing to read; f is new (from offset 0); c holds the bound or more.
    assert task_groups(start, end, 100) == [
        (tp("a"),),
        (tp("c"),),
        (tp("d"), tp("e"), tp("f")),  # 40 + 15 + 25 < 100
    ]
    assert task_groups(start, end, 80) == [(tp("a"),), (tp("c"),), (tp("d"), tp("e")), (tp("f"),)]
    # Without a bound: one each, the checkpoint's partitions first, then the new ones.
    assert task_groups(start, end, 0) == [
        (tp("a"),),
        (tp("c"),),
        (tp("d"),),
        (tp("e"),),
        (tp("f"),),
    ]


def test_the_source_reads_a_groups_ranges_whole_and_in_order_in_one_spark_partition(
    tmp_path: Path,
) -> None:
    for topic, count in [("sensor-a", 6), ("sensor-b", 4), ("sensor-c", 300)]:
        n = count
        table = pa.table(
            {
                "key": [b"s"] * n,
                "value": [b"{}"] * n,
                "topic": [topic] * n,
                "partition": pa.array([0] * n, pa.int32()),
                "offset": pa.array(range(n), pa.int64()),
                "timestamp": pa.array([1_000_000] * n, pa.timestamp("us", tz="UTC")),
                "timestampType": pa.array([0] * n, pa.int32()),
            }
        )
        archive.write_file(resolve(str(tmp_path)), tp(topic), 0, n, table)
    reader = OffsetStreamReader(
        ArchiveBackend(str(tmp_path), "^sensor-.+"),
        max_offsets=0,
        starting={},
        group_offsets=100,
    )
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    parts = reader.partitions(start, end)
    assert all(isinstance(p, GroupPartition) for p in parts)
    assert [[r.tp.topic for r in p.ranges] for p in parts] == [  # type: ignore[attr-defined]
        ["sensor-a", "sensor-b"],
        ["sensor-c"],
    ]
    read = pa.Table.from_batches(list(reader.read(parts[0])))
    assert list(zip(read["topic"].to_pylist(), read["offset"].to_pylist(), strict=True)) == [
        *(("sensor-a", n) for n in range(6)),
        *(("sensor-b", n) for n in range(4)),
    ]
    # The job's option sets the bound.
    options = {
        "backend": "archive",
        "path": str(tmp_path),
        "topicPattern": "^sensor-.+",
        stream.GROUP_OFFSETS_OPTION: "7",
    }
    source = stream.TablecastSource(options)
    assert source.streamReader(source.schema()).group_offsets == 7  # type: ignore[attr-defined,arg-type]

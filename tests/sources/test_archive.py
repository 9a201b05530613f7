"""The raw archive: layout rules, holes, and Kafka-like offsets and limits."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from app.contract.offsets import TopicPartition
from app.errors import ArchiveLayoutError, ConfigurationError, DataLossError
from app.sources import archive, ranges, records, retired
from app.sources.archive import ArchiveBackend, ArchiveRange
from app.sources.stream import OffsetStreamReader, RangePartition, TablecastSource
from app.storage import resolve


def _records(tp: TopicPartition, offsets: range) -> pa.Table:
    n = len(offsets)
    return pa.table(
        {
            "key": [b"s"] * n,
            "value": [b"{}"] * n,
            "topic": [tp.topic] * n,
            "partition": pa.array([tp.partition] * n, pa.int32()),
            "offset": pa.array(list(offsets), pa.int64()),
            "timestamp": pa.array([1_000_000] * n, pa.timestamp("us", tz="UTC")),
            "timestampType": pa.array([0] * n, pa.int32()),
        }
    )


def _write(
    root: Path, tp: TopicPartition, start: int, end: int, offsets: range | None = None
) -> None:
    archive.write_file(
        resolve(str(root)), tp, start, end, _records(tp, offsets or range(start, end))
    )


A0 = TopicPartition("sensor-a", 0)
A1 = TopicPartition("sensor-a", 1)
B0 = TopicPartition("sensor-b", 0)


def _reader(root: Path, max_offsets: int = 0, pattern: str = "^sensor-.+") -> OffsetStreamReader:
    return OffsetStreamReader(
        ArchiveBackend(str(root), pattern), max_offsets=max_offsets, starting={}
    )


def test_scan_lists_matching_topics_in_offset_order(tmp_path: Path) -> None:
    _write(tmp_path, A0, 10, 20)
    _write(tmp_path, A0, 0, 10)
    _write(tmp_path, B0, 0, 5)
    _write(tmp_path, TopicPartition("other", 0), 0, 5)
    index = archive.scan(resolve(str(tmp_path)), "^sensor-.+")
    assert sorted(index.files) == [A0, B0]
    assert [(f.start, f.end) for f in index.files[A0]] == [(0, 10), (10, 20)]
    # The pattern must match the whole topic, as Kafka's subscribePattern does.
    assert archive.scan(resolve(str(tmp_path)), "sensor").files == {}


def test_a_hole_between_files_is_data_loss(tmp_path: Path) -> None:
    _write(tmp_path, A0, 0, 10)
    _write(tmp_path, A0, 12, 20)
    with pytest.raises(
        DataLossError, match="sensor-a partition 0 offsets 10 to 11 are missing"
    ) as lost:
        archive.scan(resolve(str(tmp_path)), "^sensor-.+")
    after = tmp_path / "sensor-a" / "0" / archive.file_name(12, 20)
    assert lost.value.facts == {
        "source": "the archive",
        "topic": "sensor-a",
        "partition": 0,
        "first_missing": 10,
        "last_missing": 11,
        "path": str(after),
    }
    # An index listed with its holes: a range over one is data loss, from where it starts.
    index = archive.scan(resolve(str(tmp_path)), "^sensor-.+", holes=True)
    with pytest.raises(DataLossError) as lost:
        index.covering(A0, 5, 15)
    assert (lost.value.facts["first_missing"], lost.value.facts["last_missing"]) == (10, 11)
    with pytest.raises(
        DataLossError, match="offsets from 11 are needed but the earliest file starts at 12"
    ) as lost:
        index.covering(A0, 11, 15)
    assert lost.value.facts == {
        "source": "the archive",
        "topic": "sensor-a",
        "partition": 0,
        "offset": 11,
        "earliest": 12,
    }


def test_badly_named_and_overlapping_files_are_layout_errors(tmp_path: Path) -> None:
    _write(tmp_path, A0, 0, 10)
    misnamed = tmp_path / "sensor-a" / "0" / "0-10.parquet"
    misnamed.write_bytes(b"x")
    with pytest.raises(ArchiveLayoutError, match=r"0-10\.parquet is not named") as bad:
        archive.scan(resolve(str(tmp_path)), "^sensor-.+")
    assert bad.value.facts == {"path": str(misnamed), "topic": "sensor-a", "partition": 0}
    misnamed.unlink()
    backwards = tmp_path / "sensor-a" / "0" / archive.file_name(20, 20)
    backwards.write_bytes(b"x")
    with pytest.raises(ArchiveLayoutError, match="ends at or before its start") as bad:
        archive.scan(resolve(str(tmp_path)), "^sensor-.+")
    assert bad.value.facts == {"path": str(backwards), "topic": "sensor-a", "partition": 0}
    backwards.unlink()
    _write(tmp_path, A0, 5, 15)
    with pytest.raises(ArchiveLayoutError, match="overlap") as bad:
        archive.scan(resolve(str(tmp_path)), "^sensor-.+")
    assert bad.value.facts == {
        "path": str(tmp_path / "sensor-a" / "0" / archive.file_name(5, 15)),
        "topic": "sensor-a",
        "partition": 0,
        "overlaps": str(tmp_path / "sensor-a" / "0" / archive.file_name(0, 10)),
    }
    (tmp_path / "sensor-b" / "x").mkdir(parents=True)
    (tmp_path / "sensor-a" / "0" / archive.file_name(5, 15)).unlink()
    with pytest.raises(ArchiveLayoutError, match="is not a partition number") as bad:
        archive.scan(resolve(str(tmp_path)), "^sensor-.+")
    assert bad.value.facts == {"path": str(tmp_path / "sensor-b" / "x"), "topic": "sensor-b"}


def test_hidden_files_being_written_are_ignored(tmp_path: Path) -> None:
    _write(tmp_path, A0, 0, 10)
    (
        tmp_path / "sensor-a" / "0" / ".00000000000000000010-00000000000000000020.parquet.tmp"
    ).write_bytes(b"")
    assert archive.scan(resolve(str(tmp_path)), "^sensor-.+").latest(A0) == 10


def test_a_file_may_skip_offsets_inside_its_range(tmp_path: Path) -> None:
    _write(tmp_path, A0, 0, 10, range(0, 10, 2))  # e.g. transaction markers
    location = resolve(str(tmp_path))
    files = archive.scan(location, "^sensor-.+").files[A0]
    read = pa.Table.from_batches(list(archive.read_range(location, files, 3, 9)))
    assert read.column("offset").to_pylist() == [4, 6, 8]


def test_records_outside_the_named_range_are_rejected(tmp_path: Path) -> None:
    _write(tmp_path, A0, 0, 5, range(0, 6))
    location = resolve(str(tmp_path))
    files = archive.scan(location, "^sensor-.+").files[A0]
    with pytest.raises(ArchiveLayoutError, match="outside its name's range") as bad:
        list(archive.read_range(location, files, 0, 5))
    assert bad.value.facts == {"path": files[0].path, "topic": "sensor-a", "partition": 0}


def test_files_without_the_kafka_columns_or_out_of_order_are_layout_errors(
    tmp_path: Path,
) -> None:
    _write(tmp_path, A0, 0, 5, range(4, -1, -1))
    location = resolve(str(tmp_path))
    [unsorted] = archive.scan(location, "^sensor-.+").files[A0]
    with pytest.raises(ArchiveLayoutError, match="is not sorted by offset") as bad:
        list(archive.read_range(location, [unsorted], 0, 5))
    assert bad.value.facts == {"path": unsorted.path, "topic": "sensor-a", "partition": 0}
    location.write_bytes_atomic(unsorted.path, _parquet(pa.table({"offset": [0, 1]})))
    with pytest.raises(ArchiveLayoutError, match="does not have the Kafka columns") as bad:
        list(archive.read_range(location, [unsorted], 0, 5))
    assert bad.value.facts == {"path": unsorted.path, "topic": "sensor-a", "partition": 0}


def _broken(column: str, fault: str, tp: TopicPartition) -> pa.Table:
    """Two records of ``tp`` whose ``column`` is null, or names another topic or partition."""
    table = _records(tp, range(2))
    if fault == "null":
        value = pa.nulls(2, table.schema.field(column).type)
    elif column == "topic":
        value = pa.array([tp.topic, "sensor-b"])
    else:
        value = pa.array([tp.partition, tp.partition + 1], pa.int32())
    return table.set_column(table.schema.get_field_index(column), column, value)


_NULLS = ["offset", "timestamp", "topic", "partition", "timestampType"]


@pytest.mark.parametrize(
    ("column", "fault", "says", "rows"),
    [
        *((name, "null", f"a null {name}", rows) for name in _NULLS for rows in (1, 2)),
        ("topic", "another", "a record of topic 'sensor-b' at offset 1", 2),
        ("partition", "another", "a record of partition 1 at offset 1", 2),
    ],
)
def test_a_file_whose_records_are_not_whole_records_of_its_partition_is_a_layout_error(
    tmp_path: Path, column: str, fault: str, says: str, rows: int
) -> None:
    """Spark's Kafka source never gives these null, and a record naming another partition is
    outside the file's range (CONTRACT.md 4). Before, a null offset alone in its file raised
    TypeError, a null timestamp failed the engine's conversion, and the others passed: the
    tools (verify, replay) took the record's own topic and partition, the job its folder's."""
    _write(tmp_path, A0, 0, 2)
    location = resolve(str(tmp_path))
    [damaged] = archive.scan(location, "^sensor-.+").files[A0]
    location.write_bytes_atomic(damaged.path, _parquet(_broken(column, fault, A0).slice(0, rows)))
    with pytest.raises(ArchiveLayoutError) as bad:
        list(archive.read_range(location, [damaged], 0, 2))
    assert str(bad.value).startswith(f"archive file {damaged.path} holds {says}"), str(bad.value)
    assert bad.value.facts == {"path": damaged.path, "topic": "sensor-a", "partition": 0}


def _parquet(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


def test_offsets_start_at_the_earliest_and_pick_up_new_partitions(tmp_path: Path) -> None:
    _write(tmp_path, A0, 100, 110)
    reader = _reader(tmp_path)
    start = reader.initialOffset()
    assert start == {"sensor-a:0": 100}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"sensor-a:0": 110}
    _write(tmp_path, A1, 0, 7)
    _write(tmp_path, A0, 110, 120)
    # A new partition is read in the trigger that finds it, from offset 0.
    later = reader.latestOffset(end, ReadAllAvailable())
    assert later == {"sensor-a:0": 120, "sensor-a:1": 7}
    assert reader.partitions(end, later)[0] == RangePartition(
        A0,
        110,
        120,
        ArchiveRange(
            str(tmp_path),
            tuple(archive.scan(resolve(str(tmp_path)), "^sensor-.+").files[A0][1:]),
            110,
            120,
        ),
    )
    assert reader.latestOffset(later, ReadAllAvailable()) == later
    parts = reader.partitions(end, later)
    assert all(isinstance(p, RangePartition) for p in parts)
    assert [(p.tp, p.start, p.end) for p in parts] == [  # type: ignore[attr-defined]
        (A0, 110, 120),
        (A1, 0, 7),
    ]
    # One found after the start whose first offsets are gone lost them before it was read.
    _write(tmp_path, B0, 4, 9)
    with pytest.raises(DataLossError) as lost:
        reader.latestOffset(later, ReadAllAvailable())
    assert str(lost.value) == (
        f"data loss in the archive {tmp_path}: topic sensor-b partition 0, found after the "
        f"job started, must be read from offset 0 but the archive {tmp_path} holds offsets "
        "4 to 8: offsets 0 to 3 are gone"
    )
    assert (lost.value.facts["first_missing"], lost.value.facts["last_missing"]) == (0, 3)
    parts = parts[1:]
    batches = list(reader.read(parts[0]))
    assert batches[0].schema == records.SOURCE_SCHEMA  # the archive's columns, and served_by
    assert set(batches[0].column(records.SERVED_BY).to_pylist()) == {"archive"}


def test_max_offsets_per_trigger_is_shared_by_backlog(tmp_path: Path) -> None:
    _write(tmp_path, A0, 0, 300)
    _write(tmp_path, B0, 0, 100)
    reader = _reader(tmp_path, max_offsets=100)
    assert reader.getDefaultReadLimit() == ReadMaxRows(100)
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadMaxRows(100)) == {"sensor-a:0": 75, "sensor-b:0": 25}
    # Available-now still reads everything the engine asks for.
    assert reader.latestOffset(start, ReadAllAvailable()) == {"sensor-a:0": 300, "sensor-b:0": 100}


def test_available_now_stops_at_the_offsets_seen_when_it_started(tmp_path: Path) -> None:
    _write(tmp_path, A0, 0, 10)
    reader = _reader(tmp_path)
    reader.prepareForTriggerAvailableNow()
    _write(tmp_path, A0, 10, 20)
    assert reader.latestOffset(reader.initialOffset(), ReadAllAvailable()) == {"sensor-a:0": 10}


def test_offsets_that_are_gone_are_data_loss(tmp_path: Path) -> None:
    _write(tmp_path, A0, 50, 60)
    reader = _reader(tmp_path)
    where = f"the archive {tmp_path}"
    with pytest.raises(
        DataLossError,
        match=r"must continue at offset 10 but the archive .* "
        r"holds offsets 50 to 59",
    ) as lost:
        reader.latestOffset({"sensor-a:0": 10}, ReadAllAvailable())
    assert lost.value.facts == {
        "source": where,
        "topic": "sensor-a",
        "partition": 0,
        "offset": 10,
        "earliest": 50,
        "latest": 60,
        "first_missing": 10,
        "last_missing": 49,
    }
    with pytest.raises(DataLossError) as lost:
        reader.latestOffset({"sensor-a:0": 70}, ReadAllAvailable())  # past the end: no range
    assert str(lost.value).endswith(
        f"must continue at offset 70 but the archive {tmp_path} holds offsets 50 to 59"
    )
    assert "first_missing" not in lost.value.facts and lost.value.facts["offset"] == 70
    with pytest.raises(
        DataLossError, match="topic sensor-b is gone: the job read it up to"
    ) as lost:
        reader.latestOffset({"sensor-a:0": 50, "sensor-b:0": 3}, ReadAllAvailable())
    assert lost.value.facts == {"source": where, "topic": "sensor-b", "partition": 0, "offset": 3}


def test_an_archive_topic_of_another_identity_is_refused_as_data_loss(tmp_path: Path) -> None:
    """The archive keeps a topic's identity in ``<topic>/_topic-id``, outside section 4's layout."""
    location = resolve(str(tmp_path))
    _write(tmp_path, A0, 0, 10)
    archive.write_identity(location, "sensor-a", "id-1")
    assert sorted(archive.scan(location, "^sensor-.+").files) == [A0]  # not a partition
    reader = _reader(tmp_path)
    read = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert read == {"sensor-a:0": 10, "@topic-ids": {"sensor-a": "id-1"}}
    # The topic was archived afresh from another topic of the same name, past the offsets read.
    (tmp_path / "sensor-a" / "0" / archive.file_name(0, 10)).unlink()
    _write(tmp_path, A0, 0, 30)
    archive.write_identity(location, "sensor-a", "id-2")
    with pytest.raises(DataLossError) as lost:
        _reader(tmp_path).latestOffset(read, ReadAllAvailable())
    assert str(lost.value) == (
        f"data loss in the archive {tmp_path}: its topic sensor-a is not the one the "
        "checkpoint's offsets were read from (its identity was id-1, is id-2): the archive was "
        "swapped, or the topic deleted and archived again; give --archive the archive the job "
        "read, or start a new run with a new --output and --checkpoint"
    )
    # An archive without identities (written before them) reads as before.
    assert _reader(tmp_path).latestOffset({"sensor-a:0": 10}, ReadAllAvailable()) == {
        "sensor-a:0": 30,
        "@topic-ids": {"sensor-a": "id-2"},
    }


def test_a_topic_that_left_the_pattern_or_was_retired_is_dropped_one_just_removed_is_loss(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _write(tmp_path, A0, 0, 10)
    _write(tmp_path, B0, 0, 5)
    reader = _reader(tmp_path)
    read = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert read == {"sensor-a:0": 10, "sensor-b:0": 5}
    with caplog.at_level("WARNING", logger="app.sources.stream"):
        assert _reader(tmp_path, pattern="^sensor-a").latestOffset(read, ReadAllAvailable()) == {
            "sensor-a:0": 10
        }
    assert "topic sensor-b no longer matches the source's topics" in caplog.text
    (tmp_path / "sensor-b" / "0" / archive.file_name(0, 5)).unlink()
    with pytest.raises(DataLossError, match="topic sensor-b is gone: the job read it to"):
        reader.latestOffset(read, ReadAllAvailable())
    # Retired on purpose (at the end the job read), it leaves.
    output = tmp_path / "out"
    retired.write(
        retired.retired_uri(str(output)),
        retired.RetiredTopic(
            topic="sensor-b", identity="", ends={0: 5}, ends_from=retired.EndsFrom.LEDGER
        ),
    )
    retiring = OffsetStreamReader(
        ArchiveBackend(str(tmp_path), "^sensor-.+"),
        max_offsets=0,
        starting={},
        retired_uri=retired.retired_uri(str(output)),
    )
    with caplog.at_level("WARNING", logger="app.sources.stream"):
        assert retiring.latestOffset(read, ReadAllAvailable()) == {"sensor-a:0": 10}
    assert "topic sensor-b was retired" in caplog.text


class _CountedListing:
    """Counts the archive's directory listings (the calls a trigger makes to S3)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from app.storage import Location

        self.calls = 0
        real = Location.list_dir

        def counted(location: Location, path: str) -> list[object]:
            self.calls += 1
            return real(location, path)

        monkeypatch.setattr(Location, "list_dir", counted)


def test_a_trigger_lists_the_archive_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """latestOffset, reportLatestOffset and the ranges of 4 partitions share one listing."""
    for topic in ("sensor-a", "sensor-b"):
        for partition in (0, 1):
            _write(tmp_path, TopicPartition(topic, partition), 0, 10)
    reader = _reader(tmp_path)
    start = {f"sensor-{t}:{p}": 0 for t in "ab" for p in (0, 1)}
    counted = _CountedListing(monkeypatch)
    end = reader.latestOffset(start, ReadAllAvailable())
    reader.reportLatestOffset()
    parts = reader.partitions(start, end)
    assert len(parts) == 4
    # One scan: the root, 2 topics, 4 partitions (was 3 scans, one per call and one per range).
    assert counted.calls == 1 + 2 + 4
    print(f"\narchive LIST calls for a trigger of 4 partitions: {counted.calls}")


def test_a_fresh_checkpoint_starts_at_the_latest_offsets_when_asked(tmp_path: Path) -> None:
    from app.sources.starting import StartingPosition

    _write(tmp_path, A0, 0, 10)
    latest = StartingPosition.parse("latest")
    reader = OffsetStreamReader(
        ArchiveBackend(str(tmp_path), "^sensor-.+"),
        max_offsets=0,
        starting={},
        starting_position=latest,
    )
    assert reader.initialOffset() == {"sensor-a:0": 10}
    at_time = StartingPosition.parse("1000")
    by_time = OffsetStreamReader(
        ArchiveBackend(str(tmp_path), "^sensor-.+"),
        max_offsets=0,
        starting={},
        starting_position=at_time,
    )
    with pytest.raises(ConfigurationError, match="with a time needs Kafka"):
        by_time.initialOffset()


def test_min_offsets_per_trigger_waits_at_most_the_max_trigger_delay(tmp_path: Path) -> None:
    _write(tmp_path, A0, 0, 10)
    now = [0.0]
    reader = OffsetStreamReader(
        ArchiveBackend(str(tmp_path), "^sensor-.+"),
        max_offsets=0,
        starting={},
        min_offsets=50,
        max_trigger_delay_s=60,
        clock=lambda: now[0],
    )
    start = reader.initialOffset()
    first = reader.latestOffset(start, ReadAllAvailable())
    assert first == {"sensor-a:0": 10}  # the first trigger reads what there is
    _write(tmp_path, A0, 10, 30)
    now[0] = 30.0
    assert reader.latestOffset(first, ReadAllAvailable()) == first  # 20 < 50: wait
    _write(tmp_path, A0, 30, 80)
    now[0] = 40.0
    enough = reader.latestOffset(first, ReadAllAvailable())
    assert enough == {"sensor-a:0": 80}  # 70 >= 50
    _write(tmp_path, A0, 80, 85)
    now[0] = 90.0
    assert reader.latestOffset(enough, ReadAllAvailable()) == enough  # 50 s < 60 s
    now[0] = 100.0
    assert reader.latestOffset(enough, ReadAllAvailable()) == {"sensor-a:0": 85}  # waited enough


def test_archives_written_before_headers_read_as_records_without_headers(tmp_path: Path) -> None:
    """Contract 1.1: files without the ``headers`` column read as empty lists, beside new ones."""
    location = resolve(str(tmp_path))
    old = _records(A0, range(0, 3))  # the columns of contract 1.0
    assert "headers" not in old.schema.names
    path = location.child(A0.topic, str(A0.partition), archive.file_name(0, 3))
    location.write_bytes_atomic(path, _parquet(old))
    new = _records(A0, range(3, 5)).append_column(
        "headers", pa.array([[("trace", b"t")], []], records.HEADERS)
    )
    _write_table(tmp_path, A0, 3, 5, new)
    files = archive.scan(location, "^sensor-.+").files[A0]
    batches = list(ArchiveRange(str(tmp_path), tuple(files), 0, 5).read())
    assert all(b.schema == records.SOURCE_SCHEMA for b in batches)
    table = pa.Table.from_batches(batches)
    assert table.column("offset").to_pylist() == [0, 1, 2, 3, 4]
    assert table.column("headers").to_pylist() == [
        [],
        [],
        [],
        [{"key": "trace", "value": b"t"}],
        [],
    ]


def _write_table(root: Path, tp: TopicPartition, start: int, end: int, table: pa.Table) -> None:
    archive.write_file(resolve(str(root)), tp, start, end, table)


def test_the_source_delivers_records_or_ranges_and_refuses_anything_else(tmp_path: Path) -> None:
    options = {"backend": "archive", "path": str(tmp_path), "topicPattern": "^sensor-.+"}
    assert TablecastSource(options).schema() == records.SPARK_DDL
    assert TablecastSource(options | {"deliver": "ranges"}).schema() == ranges.SPARK_DDL
    with pytest.raises(ConfigurationError, match="option deliver is 'rows': it must be"):
        TablecastSource(options | {"deliver": "rows"}).schema()

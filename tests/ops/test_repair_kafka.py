"""``tablecast repair --bootstrap-servers``: Kafka gives repair what the archive gives.

Against a real Kafka-protocol broker (tansu on loopback): the same load is
published and archived, and repair's Kafka reader must hand the restart
planner exactly the records the archive reader does.
"""

from __future__ import annotations

from pathlib import Path

from app.ops.archiver import Archiver, ArchiverConfig
from app.ops.produce import LoadSpec, publish
from app.recovery.repair import archive_reader, kafka_reader
from app.recovery.restart import headers, restart_point
from app.sources import archive
from app.sources.kafka_client import KafkaEndpoint
from app.storage import resolve
from app.tools.generate import CaptureSpec
from tests.ops.kafka_helpers import create_topics


def test_kafka_and_archive_readers_agree_and_so_do_the_restart_points(
    broker: KafkaEndpoint, tmp_path: Path
) -> None:
    create_topics(broker, ["sensor-r1-0"], partitions=2)
    spec = CaptureSpec(
        topics=1,
        partitions=2,
        sessions=4,
        updates=30,
        resync_every=8,
        concurrent=1,
        prefix="sensor-r1-",
    )
    publish(broker, LoadSpec(spec, run_id="repair"))
    config = ArchiverConfig(
        archive_uri=str(tmp_path / "archive"),
        topic_pattern="^sensor-r1-.+",
        max_records=50,
        max_wait_s=3600,
    )
    with Archiver(broker, config) as archiver:
        assert archiver.catch_up(timeout_s=60).caught_up

    index = archive.scan(resolve(str(tmp_path / "archive")), "^sensor-r1-.+")
    from_archive = archive_reader(str(tmp_path / "archive"), "^sensor-r1-.+")
    from_kafka = kafka_reader(broker, "^sensor-r1-.+")
    assert index.files
    for tp in index.files:
        end = index.latest(tp) - 5  # as if the output ended a little before the end
        via_archive = list(from_archive(tp, end))
        via_kafka = list(from_kafka(tp, end))
        assert [(r.position, r.key, r.value) for r in via_kafka] == [
            (r.position, r.key, r.value) for r in via_archive
        ]
        assert via_kafka and via_kafka[-1].position.offset < end
        point = restart_point(headers(via_kafka), end)
        assert point == restart_point(headers(via_archive), end)
        assert 0 < point.offset <= end  # bounded by the periodic resyncs

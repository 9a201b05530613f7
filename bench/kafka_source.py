"""Benchmark: the Kafka source against the archive source, on the same records.

Starts tansu (the Kafka-protocol broker of the tests) on loopback, publishes a
capture of ``job.py``'s shape with the operator's load generator
(scaled down: 40 of its 400 sessions by default, about 75k messages, because
tansu needs one message per record batch to report a partition's end right,
about 2,000 messages a second here), copies the same topics to a raw archive
with the operator's archiver, then reads each source stateless (the
``tablecast`` source into Spark's ``noop`` sink, available-now, one
micro-batch) in its own process on local[2].

Prints messages per second for both, timed from the query's start to its
end inside each process (JVM start excluded): the first read (cold Python
workers, as a job's first micro-batch) and the same read again (warm, as
every later micro-batch), and the whole process's time.
Figures, not assertions: run ``make bench`` (or ``python -m bench.kafka_source``
from the repository's root, which holds the tests' tansu launcher).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from app.sources.kafka_client import KafkaEndpoint
from app.tools import generate as gen

OUT = Path("bench/out/kafka")
PREFIX = "sensor-"
PATTERN = f"^{PREFIX}.+"


def read_main(source: str, location: str, checkpoint: str) -> None:
    """Two stateless reads of ``source`` (archive path or bootstrap servers); prints JSON.

    The first pays for the Python workers' start (and the Kafka clients'
    connections), as a job's first micro-batch does; the second runs on warm
    workers, as every later micro-batch of a running job does.
    """
    from app.sources import backends, stream
    from app.spark.session import spark_session

    spark = spark_session("local[2]")
    spark.dataSource.register(stream.TablecastSource)
    options = backends.common_options(PATTERN, 0, None) | (
        backends.archive_options(location)
        if source == "archive"
        else backends.kafka_options(KafkaEndpoint(location))
    )
    figures: dict[str, float] = {}
    for run in ("cold", "warm"):
        frame = spark.readStream.format(stream.FORMAT).options(**options).load()
        started = time.monotonic()
        query = (
            frame.writeStream.format("noop")
            .option("checkpointLocation", f"{checkpoint}-{run}")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        figures[run] = time.monotonic() - started
        figures["rows"] = sum(progress["numInputRows"] for progress in query.recentProgress)
    print(json.dumps(figures), flush=True)


@dataclass(frozen=True)
class Measured:
    rows: int
    cold_s: float  # the first read, as a job's first micro-batch
    warm_s: float  # the same read again on warm workers
    process_s: float  # the whole process, JVM start included


def measure(source: str, location: str, work: Path) -> Measured:
    """Both reads of one source, in a process of its own."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "bench.kafka_source", "--read", source, location,
         str(work / f"{source}-ckpt")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"the {source} read failed: {done.stderr.strip()[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return Measured(int(figures["rows"]), figures["cold"], figures["warm"], elapsed)


def publish_and_archive(broker: KafkaEndpoint, spec: gen.CaptureSpec, archive: Path) -> int:
    """The capture to tansu with the load generator, then to ``archive``; the messages."""
    from app.ops.archiver import Archiver, ArchiverConfig
    from app.ops.produce import LoadSpec, publish
    from app.ops.topics import TopicPolicy, Topics

    names = [f"{PREFIX}{i}" for i in range(spec.topics)]
    Topics(broker).create(names, TopicPolicy(72, 1, spec.partitions), topic_pattern=PATTERN)
    report = publish(broker, LoadSpec(spec, one_message_per_batch=True))
    rate = report.messages / report.seconds
    print(f"published {report.messages:,} messages to tansu in {report.seconds:.1f} s "
          f"({rate:,.0f}/s, one per batch)", flush=True)  # fmt: skip
    started = time.monotonic()
    config = ArchiverConfig(archive_uri=str(archive), topic_pattern=PATTERN, max_wait_s=3600)
    with Archiver(broker, config) as archiver:
        archived = archiver.catch_up(timeout_s=3600)
    print(f"archived {archived.records:,} records in {len(archived.files)} files in "
          f"{time.monotonic() - started:.1f} s", flush=True)  # fmt: skip
    return report.messages


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--updates", type=int, default=1875)
    parser.add_argument("--rows-min", type=int, default=100)
    parser.add_argument("--rows-max", type=int, default=200)
    parser.add_argument("--read", nargs=3, metavar=("SOURCE", "LOCATION", "CHECKPOINT"))
    args = parser.parse_args()
    if args.read:
        read_main(*args.read)
        return 0

    from tests.tansu import running_broker

    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    spec = gen.CaptureSpec(
        topics=8, partitions=4, sessions=args.sessions, rows_min=args.rows_min,
        rows_max=args.rows_max, updates=args.updates, prefix=PREFIX, seed=1,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as logs, running_broker(Path(logs) / "tansu.log") as tansu:
        messages = publish_and_archive(tansu.endpoint, spec, OUT / "archive")
        before = tansu.cpu_seconds()
        results = {"kafka": measure("kafka", tansu.endpoint.bootstrap_servers, OUT)}
        broker_cpu_s = tansu.cpu_seconds() - before
        results["archive"] = measure("archive", str(OUT / "archive"), OUT)
    print(f"{'source':8} {'messages':>9} {'first s':>8} {'messages/s':>11} "
          f"{'again s':>8} {'messages/s':>11} {'process s':>10}")  # fmt: skip
    for name, m in results.items():
        print(f"{name:8} {m.rows:>9,} {m.cold_s:>8.1f} {m.rows / m.cold_s:>11,.0f} "
              f"{m.warm_s:>8.1f} {m.rows / m.warm_s:>11,.0f} {m.process_s:>10.1f}")  # fmt: skip
    kafka, archive = results["kafka"], results["archive"]
    if kafka.rows != messages or archive.rows != messages:
        print(f"warning: read {kafka.rows:,} (kafka) and {archive.rows:,} (archive) of "
              f"{messages:,} messages")  # fmt: skip
    print(
        f"ratio kafka/archive speed: first read {archive.cold_s / kafka.cold_s:.2f}, "
        f"again {archive.warm_s / kafka.warm_s:.2f}"
    )
    # tansu runs on the same cores and keeps every one-message batch as an
    # object of its own: what it spent serving the reads is not the source's.
    print(f"tansu's CPU time during the Kafka reads: {broker_cpu_s:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

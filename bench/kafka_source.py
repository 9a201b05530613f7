"""Benchmark: the Kafka source against the archive source, on the same records.

Starts tansu (the Kafka-protocol broker of the tests) on loopback, publishes a
capture of ``job.py``'s shape (scaled down: 40 of its 400 sessions by
default, about 75k messages) in ordinary lz4 batches, each partition's last
message in a batch of its own (tansu reports a partition's end from its last
batch's first offset), or with ``--one-message-per-batch`` through the
operator's load generator one message a batch (tansu's dearest case: it
keeps every batch as an object of its own), copies the same topics to a raw
archive with the operator's archiver, then reads each source stateless (the
``tablecast`` source into Spark's ``noop`` sink, available-now, one
micro-batch) in its own process on local[2].

Prints messages per second for both, timed from the query's start to its
end inside each process (JVM start excluded): the first read (cold Python
workers, as a job's first micro-batch) and the same read again (warm, as
every later micro-batch), and the whole process's time.

Before that, the range reader alone (no Spark), in a process of its own:
one partition of the same kind of records, published in ordinary batches
(``--partition-messages``), read into Arrow by ``KafkaRange`` as a task
reads it. It prints the cold task's cost (the import of the source, then a
small range on a new consumer, against the same on the pooled one), the
read speed of one partition (messages a second of wall clock and of the
process's CPU, librdkafka's threads included), and the prefetch: what
librdkafka fetched of the partition (its statistics' ``rxmsgs`` and
``rxbytes``, key and value bytes) against what the range used, with more
records on the broker past the range's end. Then a new worker's first task
(``--cold-task-runs``): a process forked, as Spark's daemon forks a worker,
from a fresh parent that imported nothing or, as ``tablecast_preload``'s
daemon, the workers' libraries; in it the imports (PySpark's worker, the
source, the engine), then the engine's task over 20,000 records a new
consumer reads, with the partition's state (the first half's) loaded after
the records, as before the overlap, or while they come, as Spark's task
does: when the first and last batches came, when the state's load began and
ended, and the task's time.
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from app.sources.kafka_client import Isolation, KafkaEndpoint
from app.tools import generate as gen

OUT = Path("bench/out/kafka")
PREFIX = "sensor-"
PATTERN = f"^{PREFIX}.+"


def partition_main(bootstrap_servers: str, topic: str, count: int) -> None:
    """The range reader alone on one partition of ``count`` records; prints JSON figures."""
    from confluent_kafka import Consumer

    from app.contract.offsets import TopicPartition
    from app.sources import kafka

    pa.array([b""], pa.binary())  # pyarrow's first conversion imports pandas: not the read's
    endpoint = KafkaEndpoint(bootstrap_servers)
    tp = TopicPartition(topic, 0)
    stats: list[dict[str, int]] = []

    def on_stats(text: str) -> None:
        partition = json.loads(text)["topics"].get(topic, {}).get("partitions", {}).get("0")
        if partition is not None:
            stats.append({"msgs": partition["rxmsgs"], "bytes": partition["rxbytes"]})

    # The pool's consumer, as the source makes it, with librdkafka's statistics on.
    settings = kafka.consumer_settings(Isolation.READ_COMMITTED) | {
        "statistics.interval.ms": 100,
        "stats_cb": on_stats,
    }
    consumers: list[Any] = []

    def fetched() -> dict[str, int]:
        """The partition's counters after what was read so far (the next statistics)."""
        if not consumers:
            return {"msgs": 0, "bytes": 0}
        seen = len(stats)
        deadline = time.monotonic() + 5
        while len(stats) <= seen + 1 and time.monotonic() < deadline:
            consumers[0].poll(0.05)
        return stats[-1] if stats else {"msgs": 0, "bytes": 0}

    def read(start: int, end: int) -> dict[str, float]:
        before = fetched()
        wall, cpu = time.perf_counter(), time.process_time()
        if not consumers:  # the first read makes the consumer, as a new worker's first task
            consumers.append(Consumer(endpoint.config(**settings)))
        kafka._CONSUMERS.give_back(
            endpoint, Isolation.READ_COMMITTED, consumers[0]
        )  # the pool's only consumer
        batches = list(kafka.KafkaRange(endpoint, tp, start, end).read())
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        kafka._CONSUMERS.take(endpoint, Isolation.READ_COMMITTED)
        table = pa.Table.from_batches(batches)
        after = fetched()
        used = sum(pc.sum(pc.binary_length(table.column(c))).as_py() or 0 for c in ("key", "value"))
        return {
            "rows": table.num_rows,
            "wall_s": wall,
            "cpu_s": cpu,
            "used_bytes": used,
            "fetched_msgs": after["msgs"] - before["msgs"],
            "fetched_bytes": after["bytes"] - before["bytes"],
        }

    small = min(1000, count // 8)
    figures = {
        "cold": read(0, small),  # a new consumer: connections, metadata, first fetch
        "warm": read(small, 2 * small),  # the same consumer again, as the pool gives it
        # One partition's range, about as many records left past its end.
        "long": read(2 * small, count // 2),
    }
    consumers[0].close()
    print(json.dumps(figures), flush=True)


def publish_partition(broker: KafkaEndpoint, spec: gen.CaptureSpec, topic: str) -> int:
    """The capture's messages to one partition of ``topic``, in ordinary batches; the count."""
    from confluent_kafka import Producer

    from app.ops.topics import TopicPolicy, Topics

    Topics(broker).create([topic], TopicPolicy(72, 1, 1), topic_pattern=None)
    # Batches of 64 KiB, as a producer that lingers a little makes them (librdkafka
    # caps them at 1 MB): a fetch returns whole batches, the prefetch bound is finer.
    producer = Producer(
        broker.config(
            **{"linger.ms": 20, "batch.size": 65_536, "queue.buffering.max.messages": 1_000_000}
        )
    )
    count = 0
    for messages in gen.generate(spec).partitions.values():
        for message in messages:
            producer.produce(
                topic,
                key=message.session.encode(),
                value=message.value,
                partition=0,
                timestamp=message.ts,
            )
            count += 1
            producer.poll(0)
    assert producer.flush(60) == 0
    return count


# What a new Python worker imports before its first range (pyarrow's first
# conversion imports pandas, which Spark's workers import anyway).
IMPORT = """
import time
started = time.perf_counter()
import pyarrow as pa
import app.sources.kafka
pa.array([b""], pa.binary())
print(time.perf_counter() - started)
"""


def measure_partition(broker: KafkaEndpoint, topic: str, count: int) -> None:
    """The range reader alone, in a fresh process; prints its figures."""
    imported = float(
        subprocess.run(
            [sys.executable, "-c", IMPORT], capture_output=True, text=True, check=True
        ).stdout
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.kafka_source",
            "--partition-read",
            broker.bootstrap_servers,
            topic,
            str(count),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the partition read failed: {done.stderr.strip()[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    print(
        f"range reader alone, one partition of {count:,} records "
        f"(a new process imports the source in {imported:.2f} s):"
    )
    print(
        f"  {'read':6} {'records':>9} {'wall s':>7} {'msg/s':>9} {'cpu s':>7} {'msg/cpu-s':>10} "
        f"{'fetched':>9} {'fetched MB':>10} {'used MB':>8} {'fetched/used':>12}"
    )
    for name in ("cold", "warm", "long"):
        f = figures[name]
        print(
            f"  {name:6} {f['rows']:>9,} {f['wall_s']:>7.3f} {f['rows'] / f['wall_s']:>9,.0f} "
            f"{f['cpu_s']:>7.3f} {f['rows'] / max(f['cpu_s'], 1e-9):>10,.0f} "
            f"{f['fetched_msgs']:>9,} {f['fetched_bytes'] / 1e6:>10.2f} "
            f"{f['used_bytes'] / 1e6:>8.2f} "
            f"{f['fetched_bytes'] / max(f['used_bytes'], 1):>12.2f}"
        )
    cold, warm = figures["cold"], figures["warm"]
    print(
        f"  a cold task's cost: {cold['wall_s'] - warm['wall_s']:.3f} s more than a warm one "
        f"for {cold['rows']:,} records, and {imported:.2f} s of imports in a new worker",
        flush=True,
    )


# A new Python worker as Spark's daemon makes it: a parent that imported nothing
# (pyspark.daemon) or the workers' libraries (tablecast_preload) forks the worker,
# which imports what it needs and runs the cold task, timed from the fork.
FORKED_COLD_TASK = """
import os, sys, time
if sys.argv[1] == "yes":
    import tablecast_preload
    tablecast_preload.preload()
pid = os.fork()
if pid == 0:
    forked = time.perf_counter()
    from bench.kafka_source import cold_task_main
    cold_task_main(*sys.argv[2:], forked_at=forked)
    sys.stdout.flush()
    os._exit(0)
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def cold_task_main(
    servers: str, topic: str, work: str, overlap: str, forked_at: float | None = None
) -> None:
    """A new Python worker's first task, as Spark runs it; prints JSON figures.

    Imports PySpark's worker, the source and the engine (timed from ``forked_at``,
    the worker's fork, when given), then runs the engine's task over a range that
    a new consumer reads from the brokers, loading the partition's state from ``work``
    (written by :func:`prepare_cold_task`). ``overlap`` "yes": as Spark's task of the
    batch's first partition, which loads its state while the records come; "no": as
    a task that loads it after its last record (the code before the overlap).
    """
    started = time.perf_counter() if forked_at is None else forked_at
    import pyspark.worker  # noqa: F401  (a forked worker's first import)
    from pyspark import TaskContext

    from app.contract.offsets import TopicPartition
    from app.engine import task as task_mod
    from app.sources.kafka import KafkaRange

    pa.array([b""], pa.binary())  # pyarrow's first conversion imports pandas: a worker's too
    imported = time.perf_counter() - started
    plan = _cold_plan(work)
    tp = TopicPartition(topic, 0)
    events: dict[str, float] = {}
    load = task_mod.PartitionTask._load

    def timed_load(self: Any, store: Any, at: TopicPartition, start: int) -> Any:
        events["load_start"] = time.perf_counter()
        try:
            return load(self, store, at, start)
        finally:
            events["load_end"] = time.perf_counter()

    task_mod.PartitionTask._load = timed_load  # type: ignore[method-assign,assignment]

    def records() -> Any:
        events["read_start"] = time.perf_counter()
        for batch in KafkaRange(KafkaEndpoint(servers), tp, plan.start[tp], plan.end[tp]).read():
            events.setdefault("first_batch", time.perf_counter())
            yield batch
        events["last_batch"] = time.perf_counter()

    if overlap == "yes":
        TaskContext(
            stageId=1,
            partitionId=0,
            attemptNumber=0,
            taskAttemptId=1,
            cpus=1,
            resources={},
            localProperties={},
        )
    begin = time.perf_counter()
    rows = [r for b in task_mod.PartitionTask(plan)(records()) for r in b.to_pylist()]
    done = time.perf_counter()
    relative = {name: at - begin for name, at in events.items()}
    print(
        json.dumps(
            {
                "imported_s": imported,
                "task_s": done - begin,
                "rows": len(rows),
                "total_s": done - started,
                **relative,
            }
        ),
        flush=True,
    )


def _cold_plan(work: str) -> Any:
    from app.contract.offsets import TopicPartition
    from app.contract.table_processor import TableProcessor
    from app.engine.machine import Rules
    from app.engine.state import StateVersion
    from app.engine.task import BatchPlan

    saved = json.loads((Path(work) / "plan.json").read_text())
    tp = TopicPartition(saved["topic"], 0)
    version = StateVersion(saved["offset"], saved["digest"])
    return BatchPlan(
        processor=TableProcessor(),
        rules=Rules(),
        state_root=str(Path(work) / "state"),
        output_uri=str(Path(work) / "out"),
        staging_dir="_tablecast/staging/bench",
        start={tp: saved["offset"]},
        end={tp: saved["end"]},
        versions={tp: version},
    )


def prepare_cold_task(broker: KafkaEndpoint, topic: str, count: int, work: Path) -> None:
    """The state of the partition's first half, as the batch before the cold task saved it."""
    from app.contract.offsets import TopicPartition
    from app.contract.table_processor import TableProcessor
    from app.engine.machine import Rules
    from app.engine.reports import BatchOutcome
    from app.engine.task import BatchPlan, PartitionTask
    from app.sources.kafka import KafkaRange

    tp = TopicPartition(topic, 0)
    middle, end = count // 2, min(count, count // 2 + 20_000)
    plan = BatchPlan(
        processor=TableProcessor(),
        rules=Rules(),
        state_root=str(work / "state"),
        output_uri=str(work / "out"),
        staging_dir="_tablecast/staging/first",
        start={},
        end={tp: middle},
        versions={},
    )
    rows = PartitionTask(plan)(KafkaRange(broker, tp, 0, middle).read())
    outcome = BatchOutcome.parse(r for b in rows for r in b.to_pylist())
    version = outcome.partitions[tp].version
    assert version is not None
    (work / "plan.json").write_text(
        json.dumps({"topic": topic, "offset": version.offset, "digest": version.digest, "end": end})
    )


# The cold task's variants: (name, state loaded while the records come, daemon preloads).
COLD_VARIANTS = (
    ("state after the records", "no", "no"),
    ("state while they come", "yes", "no"),
    ("and a preloading daemon", "yes", "yes"),
)


def measure_cold_task(broker: KafkaEndpoint, topic: str, count: int, runs: int) -> None:
    """A new worker's first task: with and without the early load, and the preload."""
    with tempfile.TemporaryDirectory() as work:
        prepare_cold_task(broker, topic, count, Path(work))
        state_bytes = sum(
            f.stat().st_size for f in (Path(work) / "state").rglob("*") if f.is_file()
        )
        figures: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in COLD_VARIANTS}
        for _ in range(runs):
            for name, overlap, preload in COLD_VARIANTS:
                done = subprocess.run(
                    [
                        sys.executable,
                        "-c",
                        FORKED_COLD_TASK,
                        preload,
                        broker.bootstrap_servers,
                        topic,
                        work,
                        overlap,
                    ],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if done.returncode != 0:
                    raise SystemExit(f"the cold task failed: {done.stderr.strip()[-2000:]}")
                figures[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    first = figures[COLD_VARIANTS[0][0]][0]
    print(
        f"a new worker's first task: {first['rows']:,} report rows, a range of "
        f"20,000 records, a state of {state_bytes:,} bytes, median of {runs} runs each "
        "(seconds; imports and the end from the worker's fork, the rest from the task's "
        "start):"
    )
    print(
        f"  {'worker':24} {'imports':>8} {'1st batch':>9} {'last batch':>10} "
        f"{'load from':>9} {'load to':>8} {'task':>7} {'end':>7}"
    )
    for name, _, _ in COLD_VARIANTS:
        runs_of = figures[name]

        def median(key: str, of: list[dict[str, float]] = runs_of) -> float:
            return sorted(r[key] for r in of)[len(of) // 2]

        print(
            f"  {name:24} {median('imported_s'):>8.3f} {median('first_batch'):>9.3f} "
            f"{median('last_batch'):>10.3f} {median('load_start'):>9.3f} "
            f"{median('load_end'):>8.3f} {median('task_s'):>7.3f} "
            f"{median('total_s'):>7.3f}",
            flush=True,
        )


def read_main(source: str, location: str, checkpoint: str) -> None:
    """Two stateless reads of ``source`` (archive path or bootstrap servers); prints JSON.

    The first pays for the Python workers' start (and the Kafka clients'
    connections), as a job's first micro-batch does; the second runs on warm
    workers, as every later micro-batch of a running job does.
    """
    from app.sources import backend_options, stream
    from app.spark.session import spark_session

    spark = spark_session("local[2]")
    spark.dataSource.register(stream.TablecastSource)
    options = backend_options.common_options(PATTERN, 0, None) | (
        backend_options.archive_options(location)
        if source == "archive"
        else backend_options.kafka_options(KafkaEndpoint(location))
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
        [
            sys.executable,
            "-m",
            "bench.kafka_source",
            "--read",
            source,
            location,
            str(work / f"{source}-ckpt"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"the {source} read failed: {done.stderr.strip()[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return Measured(int(figures["rows"]), figures["cold"], figures["warm"], elapsed)


def publish_batched(broker: KafkaEndpoint, spec: gen.CaptureSpec) -> int:
    """The capture in ordinary batches (lz4, as the load generator), each partition's last alone.

    tansu reports a partition's end from its last batch's first offset: with
    a last batch of one message, the end is right.
    """
    from confluent_kafka import Producer

    capture = gen.generate(spec)
    batched = Producer(
        broker.config(
            **{
                "linger.ms": 20,
                "compression.type": "lz4",
                "queue.buffering.max.messages": 1_000_000,
            }
        )
    )
    single = Producer(broker.config(**{"linger.ms": 0, "batch.num.messages": 1}))
    for producer, messages_of in ((batched, slice(None, -1)), (single, slice(-1, None))):
        for tp, messages in capture.partitions.items():
            for message in messages[messages_of]:
                producer.produce(
                    tp.topic,
                    key=message.session.encode(),
                    value=message.value,
                    partition=tp.partition,
                    timestamp=message.ts,
                )
                producer.poll(0)
        assert producer.flush(120) == 0
    return capture.messages


def publish_and_archive(
    broker: KafkaEndpoint, spec: gen.CaptureSpec, archive: Path, *, one_per_batch: bool
) -> int:
    """The capture to tansu, then to ``archive`` with the archiver; the messages."""
    from app.ops.archiver import Archiver, ArchiverConfig
    from app.ops.produce import LoadSpec, publish
    from app.ops.topics import TopicPolicy, Topics

    names = [f"{PREFIX}{i}" for i in range(spec.topics)]
    Topics(broker).create(names, TopicPolicy(72, 1, spec.partitions), topic_pattern=PATTERN)
    started = time.monotonic()
    if one_per_batch:
        messages = publish(broker, LoadSpec(spec, one_message_per_batch=True)).messages
    else:
        messages = publish_batched(broker, spec)
    print(
        f"published {messages:,} messages to tansu in {time.monotonic() - started:.1f} s "
        f"({'one per batch' if one_per_batch else 'in batches'})",
        flush=True,
    )
    started = time.monotonic()
    config = ArchiverConfig(archive_uri=str(archive), topic_pattern=PATTERN, max_wait_s=3600)
    with Archiver(broker, config) as archiver:
        archived = archiver.catch_up(timeout_s=3600)
    print(
        f"archived {archived.records:,} records in {len(archived.files)} files in "
        f"{time.monotonic() - started:.1f} s",
        flush=True,
    )
    return messages


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--updates", type=int, default=1875)
    parser.add_argument("--rows-min", type=int, default=100)
    parser.add_argument("--rows-max", type=int, default=200)
    parser.add_argument(
        "--partition-messages",
        type=int,
        default=300_000,
        help="records of the one-partition read (0: skip it)",
    )
    parser.add_argument(
        "--only-partition",
        action="store_true",
        help="only the one-partition read, not the Spark reads",
    )
    parser.add_argument(
        "--one-message-per-batch",
        action="store_true",
        help="publish the Spark reads' topics one message a batch (tansu's "
        "dearest case) instead of in ordinary batches",
    )
    parser.add_argument("--read", nargs=3, metavar=("SOURCE", "LOCATION", "CHECKPOINT"))
    parser.add_argument("--partition-read", nargs=3, metavar=("SERVERS", "TOPIC", "COUNT"))
    parser.add_argument("--cold-task", nargs=4, metavar=("SERVERS", "TOPIC", "WORK", "OVERLAP"))
    parser.add_argument(
        "--cold-task-runs", type=int, default=5, help="runs of the cold task each way (0: skip it)"
    )
    args = parser.parse_args()
    if args.cold_task:
        cold_task_main(*args.cold_task)
        return 0
    if args.read:
        read_main(*args.read)
        return 0
    if args.partition_read:
        servers, topic, count = args.partition_read
        partition_main(servers, topic, int(count))
        return 0

    from tests.tansu import running_broker

    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    spec = gen.CaptureSpec(
        topics=8,
        partitions=4,
        sessions=args.sessions,
        rows_min=args.rows_min,
        rows_max=args.rows_max,
        updates=args.updates,
        prefix=PREFIX,
        seed=1,
    )
    with tempfile.TemporaryDirectory() as logs, running_broker(Path(logs) / "tansu.log") as tansu:
        if args.partition_messages:
            # The same kind of records, as many as the option asks, in one partition.
            sessions = max(1, args.partition_messages // (args.updates + 2))
            one = replace(spec, topics=1, partitions=1, sessions=sessions)
            count = publish_partition(tansu.endpoint, one, "bench-partition")
            measure_partition(tansu.endpoint, "bench-partition", count)
            if args.cold_task_runs:
                measure_cold_task(tansu.endpoint, "bench-partition", count, args.cold_task_runs)
        if args.only_partition:
            return 0
        messages = publish_and_archive(
            tansu.endpoint, spec, OUT / "archive", one_per_batch=args.one_message_per_batch
        )
        before = tansu.cpu_seconds()
        results = {"kafka": measure("kafka", tansu.endpoint.bootstrap_servers, OUT)}
        broker_cpu_s = tansu.cpu_seconds() - before
        results["archive"] = measure("archive", str(OUT / "archive"), OUT)
    print(
        f"{'source':8} {'messages':>9} {'first s':>8} {'messages/s':>11} "
        f"{'again s':>8} {'messages/s':>11} {'process s':>10}"
    )
    for name, m in results.items():
        print(
            f"{name:8} {m.rows:>9,} {m.cold_s:>8.1f} {m.rows / m.cold_s:>11,.0f} "
            f"{m.warm_s:>8.1f} {m.rows / m.warm_s:>11,.0f} {m.process_s:>10.1f}"
        )
    kafka, archive = results["kafka"], results["archive"]
    if kafka.rows != messages or archive.rows != messages:
        print(
            f"warning: read {kafka.rows:,} (kafka) and {archive.rows:,} (archive) of "
            f"{messages:,} messages"
        )
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

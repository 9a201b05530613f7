"""The streaming query: source, ordered stateful transformation, exactly-once sink.

``main()`` stays thin: read (a source), a pure transformation per session
(:class:`app.stateful.SessionProcessor`), write (:class:`ExactlyOnceSink`).
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app.checkpoint import CheckpointLog
from app.errors import ArchiveLayoutError, ConfigurationError, DataLossError, TablecastError
from app.metrics.listener import MetricsListener
from app.offsets import Offsets
from app.processor import Processor, TableProcessor
from app.session import IntegrityMode
from app.sink.commit import BatchReport, ExactlyOnceSink
from app.sink.guard import check_before_start
from app.sources import archive_stream, kafka
from app.stateful import OUTPUT_DDL, SessionLogic, SessionProcessor, current_time_ms

log = logging.getLogger(__name__)

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
QUERY_NAME = "tablecast"


class TriggerKind(StrEnum):
    AVAILABLE_NOW = "available-now"
    PROCESSING_TIME = "processing-time"


@dataclass(frozen=True)
class Trigger:
    kind: TriggerKind
    interval: str = ""  # e.g. "15 minutes" for processing-time

    @classmethod
    def parse(cls, text: str) -> Trigger:
        if text == TriggerKind.AVAILABLE_NOW:
            return cls(TriggerKind.AVAILABLE_NOW)
        given = text
        if not text.strip().startswith(TriggerKind.PROCESSING_TIME):
            text = f"{TriggerKind.PROCESSING_TIME}={text.strip()}"  # a bare "1 minute"
        match = re.fullmatch(
            r"processing-time=(\d+\s*(?:ms|milliseconds?|seconds?|minutes?|hours?))", text.strip()
        )
        if match is None:
            raise ConfigurationError(
                f"--trigger {given!r} is neither 'available-now' nor "
                "'processing-time=<n> seconds|minutes|hours'"
            )
        return cls(TriggerKind.PROCESSING_TIME, match.group(1))

    def __str__(self) -> str:
        return self.kind.value if not self.interval else f"{self.kind.value}={self.interval}"


@dataclass(frozen=True)
class ArchiveSource:
    uri: str


@dataclass(frozen=True)
class KafkaSource:
    bootstrap_servers: str
    auth: kafka.KafkaAuth = kafka.KafkaAuth.NONE


@dataclass(frozen=True)
class JobConfig:
    source: ArchiveSource | KafkaSource
    output: str
    checkpoint: str
    trigger: Trigger = field(default_factory=lambda: Trigger.parse("processing-time=1 minute"))
    integrity: IntegrityMode = IntegrityMode.STRICT
    topic_pattern: str = "^sensor-.+"
    max_offsets_per_trigger: int = 500_000
    session_timeout_ms: int = 3_600_000
    trace: frozenset[str] = frozenset()
    max_rows_per_file: int = 2_000_000


def spark_session(master: str | None = None, state_partitions: int | None = None) -> Any:
    """A SparkSession for the job; under spark-submit the master is already set."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # pandas' FutureWarnings from inside PySpark's worker are noise to an operator.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    conf = SparkConf()
    builder = SparkSession.builder.appName(QUERY_NAME)
    if not conf.contains("spark.master"):
        builder = builder.master(master or "local[2]")
    is_local = (master or conf.get("spark.master", "local")).startswith("local")
    partitions = state_partitions or (4 if is_local else 32)
    builder = (
        builder.config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executorEnv.PYTHONWARNINGS", "ignore::FutureWarning")
    )
    if is_local:
        builder = builder.config("spark.ui.enabled", "false").config(
            "spark.driver.memory", os.environ.get("TABLECAST_DRIVER_MEMORY", "2g")
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def source_frame(spark: Any, config: JobConfig, starting: Offsets | None) -> Any:
    if isinstance(config.source, ArchiveSource):
        spark.dataSource.register(archive_stream.ArchiveDataSource)
        reader = (
            spark.readStream.format(archive_stream.FORMAT)
            .option("path", config.source.uri)
            .option("topicPattern", config.topic_pattern)
            .option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
        )
        if starting:
            reader = reader.option(
                "startingOffsets", archive_stream.starting_offsets_option(starting)
            )
        return reader.load()
    options = kafka.source_options(
        bootstrap_servers=config.source.bootstrap_servers,
        topic_pattern=config.topic_pattern,
        max_offsets_per_trigger=config.max_offsets_per_trigger,
        auth=config.source.auth,
        starting_offsets=starting,
    )
    return spark.readStream.format(kafka.FORMAT).options(**options).load()


def sessions_frame(records: Any, logic: SessionLogic) -> Any:
    """The ordered stateful transformation: records in, output events out."""
    from pyspark.sql import functions as sf

    return (
        records.select(
            "key",
            "value",
            "topic",
            "partition",
            "offset",
            sf.unix_millis("timestamp").alias("timestamp_ms"),
        )
        .groupBy("key")
        .transformWithStateInPandas(
            statefulProcessor=SessionProcessor(logic),
            outputStructType=OUTPUT_DDL,
            outputMode="Append",
            timeMode="ProcessingTime",
        )
    )


def run(
    spark: Any,
    config: JobConfig,
    on_batch: Callable[[BatchReport], None] | None = None,
    processor: Processor[Any] | None = None,
    listener: MetricsListener | None = None,
    transform: Callable[[Any, SessionLogic], Any] | None = None,
) -> None:
    """Run the job until an available-now run is done (or forever); raise on failure.

    ``listener`` (optional) publishes every batch's metrics; it is attached
    for this run only.
    """
    checkpoint = CheckpointLog(spark, config.checkpoint)
    plan = check_before_start(config.output, checkpoint)
    logic = SessionLogic(
        processor or TableProcessor(),
        config.integrity,
        config.session_timeout_ms,
        current_time_ms(),
        plan.adopt,
        config.trace,
    )
    # `transform` swaps the stateful operator (bench/job_vs_copy.py measures another).
    events = (transform or sessions_frame)(
        source_frame(spark, config, plan.starting_offsets), logic
    )
    sink = ExactlyOnceSink(
        config.output, checkpoint, config.integrity, config.max_rows_per_file,
        _reporting(on_batch, listener),
    )  # fmt: skip
    writer = (
        events.writeStream.queryName(QUERY_NAME)
        .foreachBatch(sink)
        .option("checkpointLocation", config.checkpoint)
    )
    # With processing-time timers Spark runs a no-data batch after every
    # batch to fire them; under available-now that never ends. There, idle
    # sessions expire in the data batches instead (timers fire after the
    # batch's input).
    spark.conf.set(
        "spark.sql.streaming.noDataMicroBatches.enabled",
        str(config.trigger.kind is not TriggerKind.AVAILABLE_NOW).lower(),
    )
    if config.trigger.kind is TriggerKind.AVAILABLE_NOW:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=config.trigger.interval)
    if listener is not None:
        spark.streams.addListener(listener)  # before start(): it sees the first event
    failure: Exception | None = None
    try:
        query = writer.start()
        try:
            if listener is not None:
                listener.bind(str(query.runId))
            query.awaitTermination()
        except Exception as exc:
            failure = sink.failure if sink.failure is not None else _known_error(exc)
            raise failure from None
        finally:
            if query.isActive:
                query.stop()
    finally:
        if listener is not None:
            listener.finish(failure)  # waits (bounded) for the query's last event
            spark.streams.removeListener(listener)


def _reporting(
    on_batch: Callable[[BatchReport], None] | None, listener: MetricsListener | None
) -> Callable[[BatchReport], None] | None:
    """The sink's callback: the listener first (it merges), then the caller's."""
    if listener is None:
        return on_batch

    def report(batch: BatchReport) -> None:
        listener.on_batch(batch)
        if on_batch is not None:
            on_batch(batch)

    return report


_KNOWN = {"DataLossError": DataLossError, "ArchiveLayoutError": ArchiveLayoutError}


def _known_error(exc: Exception) -> Exception:
    """Our own error raised in a Spark worker, recovered from Spark's wrapping."""
    text = str(exc)
    found = re.findall(r"(DataLossError|ArchiveLayoutError): ([^\n]+)", text)
    if found:
        name, message = found[-1]
        error: TablecastError = _KNOWN[name](message.strip())
        return error
    return exc

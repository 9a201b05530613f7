"""The streaming query: a source, the partition engine, the exactly-once sink.

Spark plans each micro-batch's offset ranges, one Spark partition per
topic-partition, and checkpoints the offsets; ``foreachBatch`` hands the
batch to the sink (:class:`ExactlyOnceSink`), which runs the engine's
partition tasks over it (``mapInArrow``: each task reads its range where it
processes it, :mod:`app.sources.ranges`, with no shuffle) and publishes what
they staged.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from app import defaults
from app.contract import loader
from app.contract.envelope import native_decoder_built
from app.contract.offsets import Offsets
from app.contract.processor import Processor
from app.contract.schema import DEFAULT_SCHEMA, TableSchema
from app.durations import EXAMPLES as DURATION_EXAMPLES
from app.durations import parse_duration_ms, spark_interval
from app.engine import segments
from app.engine.driver import EngineDriver
from app.engine.machine import IntegrityMode, Rules
from app.engine.output import native_converter_built
from app.engine.store import state_root
from app.errors import ConfigurationError, OwnershipLostError
from app.metrics.listener import MetricsListener
from app.sink import fencing, processors
from app.sink import rewrite as rewrite_mod
from app.sink.checkpoint import CheckpointLog
from app.sink.commit import BatchReport, ExactlyOnceSink
from app.sink.fencing import Fence, LeaseKeeper
from app.sink.guard import StartPlan, check_before_start
from app.sink.ledger import staging_dir as ledger_staging_dir
from app.sources import backend_options, ranges, stream
from app.sources.kafka import DEFAULT_TIMEOUT_S
from app.sources.kafka_client import Isolation, KafkaEndpoint
from app.sources.records import Tier
from app.sources.starting import StartingPosition
from app.spark import planning
from app.spark.warm import warm_workers
from app.storage import resolve
from app.table import catalog as table_catalog
from app.table import commit as table_commit
from app.table import live as table_live
from app.worker_errors import worker_error

log = logging.getLogger(__name__)

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
        """``available-now``, ``processing-time=<duration>`` or a bare duration (what SSM's
        ``trigger`` parameter holds): the interval in Spark's spelling."""
        if text.strip() == TriggerKind.AVAILABLE_NOW:
            return cls(TriggerKind.AVAILABLE_NOW)
        kind, equals, interval = text.strip().partition("=")
        if not equals:
            kind, interval = TriggerKind.PROCESSING_TIME, kind  # a bare "1 minute"
        try:
            if kind.strip() != TriggerKind.PROCESSING_TIME:
                raise ConfigurationError(kind)
            ms = parse_duration_ms(interval)
            if ms <= 0:
                raise ConfigurationError(interval)
        except ConfigurationError:
            raise ConfigurationError(
                f"--trigger {text!r} is neither 'available-now' nor 'processing-time=<duration>' "
                f"with a duration like {DURATION_EXAMPLES}"
            ) from None
        return cls(TriggerKind.PROCESSING_TIME, spark_interval(ms))

    def __str__(self) -> str:
        return self.kind.value if not self.interval else f"{self.kind.value}={self.interval}"


@dataclass(frozen=True)
class ArchiveSource:
    uri: str


@dataclass(frozen=True)
class KafkaSource:
    endpoint: KafkaEndpoint
    timeout_s: float = DEFAULT_TIMEOUT_S
    """How long a request to the brokers, or a read without a record, may take."""
    isolation: Isolation = Isolation.READ_COMMITTED


@dataclass(frozen=True)
class TieredSource:
    """Kafka, and the archive for the offsets Kafka no longer holds (app/sources/tiered.py)."""

    kafka: KafkaSource
    archive: ArchiveSource


Source = ArchiveSource | KafkaSource | TieredSource


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    source: Source
    output: str
    checkpoint: str
    trigger: Trigger = field(default_factory=lambda: Trigger.parse(defaults.TRIGGER))
    integrity: IntegrityMode = IntegrityMode.STRICT
    topic_pattern: str = defaults.TOPIC_PATTERN
    max_offsets_per_trigger: int = defaults.MAX_OFFSETS_PER_TRIGGER
    min_offsets_per_trigger: int = 0
    max_trigger_delay_s: float = defaults.MAX_TRIGGER_DELAY_S
    starting_position: StartingPosition = field(default_factory=StartingPosition)
    session_timeout_ms: int = defaults.SESSION_TIMEOUT_MS
    trace: frozenset[str] = frozenset()
    table: table_live.TableSettings = field(default_factory=table_live.TableSettings)
    schema: TableSchema = DEFAULT_SCHEMA  # the table schema (CONTRACT.md section 1a)
    schema_document: str = "(default)"  # where it was read from, for the operator's eyes
    # The processor (``--processor``): "table", the built-in, or "package.module:Class".
    processor: str = loader.BUILT_IN
    # How long this job may go without renewing its hold on the output (app.sink.fencing).
    writer_lease_s: float = defaults.WRITER_LEASE_S


def register_source(spark: Any) -> Future[None]:
    """Register the job's source (:class:`~app.spark.planning.FencedSource`) on a thread.

    Spark's first Python data source starts two Python processes, a check of the
    interpreter and a lookup of the installed sources: 0.6 s, which the job's checks run
    beside. Where ``tablecast run`` launched the JVM, the lookup began beside the session's
    creation (``spark_session(data_sources=True)``), and the registration waits only for
    what is left of it. The future holds what the registration raised."""
    registered: Future[None] = Future()

    def run() -> None:
        try:
            spark.dataSource.register(planning.FencedSource)
        except BaseException as exc:  # the query's start raises it
            registered.set_exception(exc)
        else:
            registered.set_result(None)

    threading.Thread(target=run, name="tablecast-register-source", daemon=True).start()
    return registered


def source_frame(
    spark: Any,
    config: JobConfig,
    starting: Offsets | None,
    fence: Fence,
    registered: Future[None],
) -> Any:
    """The job's stream: its source, which checks ``fence`` as Spark plans each batch, once
    ``registered`` (:func:`register_source`) is done."""
    registered.result()
    options = backend_options.common_options(
        config.topic_pattern,
        config.max_offsets_per_trigger,
        starting,
        starting_position=config.starting_position,
        min_offsets_per_trigger=config.min_offsets_per_trigger,
        max_trigger_delay_s=config.max_trigger_delay_s,
    )
    source = config.source
    if isinstance(source, ArchiveSource):
        options |= backend_options.archive_options(source.uri)
    elif isinstance(source, KafkaSource):
        options |= backend_options.kafka_options(
            source.endpoint, source.timeout_s, source.isolation
        )
    else:
        options |= backend_options.tiered_options(
            source.kafka.endpoint,
            source.archive.uri,
            source.kafka.timeout_s,
            source.kafka.isolation,
        )
    options |= backend_options.retired_options(config.output)
    # Ranges, not records: each task reads the range it processes (app.sources.ranges).
    options[ranges.DELIVER_OPTION] = ranges.RANGES
    # Small topic-partitions share a task (app.sources.stream.task_groups).
    options[stream.GROUP_OFFSETS_OPTION] = str(group_offsets())
    options |= planning.fence_options(fence)
    return spark.readStream.format(stream.FORMAT).options(**options).load()


def run(
    spark: Any,
    config: JobConfig,
    on_batch: Callable[[BatchReport], None] | None = None,
    processor: Processor[Any] | None = None,
    listener: MetricsListener | None = None,
    notice: Callable[[str], None] | None = None,
    gone: fencing.Holder | None = None,
) -> None:
    """Run the job until an available-now run is done (or forever); raise on failure.

    ``listener`` (optional) publishes every batch's metrics; it is attached
    for this run only. ``notice``: a line for the operator while the start
    waits to see whether a previous holder of the output is still running;
    ``gone``: the holder the command line already found quiet, before Spark started.
    """
    processor = processor or loader.load(
        config.processor, config.schema, schema_given=config.schema_document != "(default)"
    )
    # A processor or schema the output cannot take is refused before anything is written
    # (a claim too).
    processors.check(resolve(config.output), processor, config.schema_document)
    warm_workers(spark)  # while the checks, the table and the query start
    registered = register_source(spark)  # likewise
    checkpoint = CheckpointLog(spark, config.checkpoint)
    writer = fencing.new_writer("run", config.checkpoint, config.writer_lease_s)
    table = table_live.LiveTable(config.table)
    plan = check_before_start(config.output, checkpoint, table, writer, notice, gone)
    assert plan.fence is not None  # check_before_start claims the output
    lease = LeaseKeeper(plan.fence).start()
    try:
        _run_query(
            spark, config, plan, checkpoint, table, lease, on_batch, processor, listener, registered
        )
    except Exception as exc:
        raise _ownership_lost(plan.fence, exc) from None
    finally:
        lease.stop(release=True)  # unless another writer holds it by now


def _ownership_lost(fence: Fence, exc: Exception) -> Exception:
    """``exc``, or the ownership this run lost if that is why it failed: a stale driver's
    Spark may fail first, writing a checkpoint log entry another driver wrote."""
    if isinstance(exc, OwnershipLostError):
        return exc
    try:
        fence.check("going on")
    except OwnershipLostError as lost:
        return lost
    except Exception:  # the storage cannot say: the original error stands
        return exc
    return exc


def _say_compiled_parts() -> None:
    """Which compiled parts this process has (``make setup`` builds them; the job's wheel
    is pure Python, so a cluster node has none): without them, the same output, slower."""
    missing = [
        source
        for source, built in (
            ("app/contract/_envelope.c", native_decoder_built()),
            ("app/engine/_columns.c", native_converter_built()),
        )
        if not built
    ]
    if missing:
        log.info("compiled parts not built here (%s): the Python paths run", ", ".join(missing))
    else:
        log.info("compiled parts in use: the envelope's decoder and the rows' converter")


def _run_query(
    spark: Any,
    config: JobConfig,
    plan: StartPlan,
    checkpoint: CheckpointLog,
    table: table_live.LiveTable,
    lease: LeaseKeeper,
    on_batch: Callable[[BatchReport], None] | None,
    processor: Processor[Any],
    listener: MetricsListener | None,
    registered: Future[None],
) -> None:
    assert plan.fence is not None
    # The output is this run's now: its processor's schemas are recorded, and Glue's table
    # evolved to its output schema (made, with --glue-database), before the first batch.
    processors.check_start(resolve(config.output), processor, config.schema_document)
    table_live.prepare(config.output, config.table, processor.output, plan.fence)
    table_catalog.open_in_background(resolve(config.output))  # while the query starts
    _say_compiled_parts()
    rules = Rules(config.integrity, config.session_timeout_ms, plan.adopt, config.trace)
    engine = EngineDriver(
        processor,
        rules,
        state_root(config.checkpoint),
        config.output,
        group_offsets=group_offsets(),
    )
    sink = ExactlyOnceSink(
        output_uri=config.output,
        checkpoint=checkpoint,
        engine=engine,
        mode=config.integrity,
        table=table,
        fence=plan.fence,
        history_s=config.table.history_s,
        lease=lease,
        on_batch=_reporting(on_batch, listener),
    )
    writer = (
        source_frame(spark, config, plan.starting_offsets, plan.fence, registered)
        .writeStream.queryName(QUERY_NAME)
        .foreachBatch(_handed_back(sink, table_live.scheduled(sink, config.output, config.table)))
        .option("checkpointLocation", config.checkpoint)
    )
    if config.trigger.kind is TriggerKind.AVAILABLE_NOW:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=config.trigger.interval)
    if listener is not None:
        if isinstance(config.source, TieredSource):  # which tier served each batch
            listener.tiers = (Tier.ARCHIVE.value, Tier.KAFKA.value)
        spark.streams.addListener(listener)  # before start(): it sees the first event
    failure: Exception | None = None
    try:
        query = writer.start()
        try:
            if listener is not None:
                listener.bind(str(query.runId), lambda: _last_progress(query))
            query.awaitTermination()
            plan.fence.check("removing the last batch's old state versions")
            engine.collect_garbage()
            # A rewrite whose owner died while this run worked: finished now, not next run.
            rewrite_mod.finish_abandoned(
                resolve(config.output), snapshot=table_commit.snapshot_rewrite
            )
            location = resolve(config.output)
            location.delete_dir(location.child(ledger_staging_dir(plan.fence.claim)))
        except Exception as exc:
            # The sink's own error first (a worker's, rebuilt there), then the source
            # reader's, from the planner; anything else is unexpected.
            failure = sink.failure or worker_error(exc) or exc
            raise failure from None
        finally:
            _cleanup(lambda: query.stop() if query.isActive else None, sys.exc_info()[1])
    finally:
        if listener is not None:
            listener.finish(failure)  # waits (bounded) for the query's last event
            _cleanup(lambda: spark.streams.removeListener(listener), sys.exc_info()[1])


def _handed_back(
    sink: ExactlyOnceSink, batch: Callable[[Any, int], None]
) -> Callable[[Any, int], None]:
    """``batch`` (the sink's commit, then the scheduled compaction), then the sink's fence:
    the last check before Spark writes the checkpoint's logs."""

    def run(frame: Any, batch_id: int) -> None:
        batch(frame, batch_id)
        sink.hand_back(batch_id)

    return run


def _cleanup(step: Callable[[], object], unwinding: BaseException | None) -> None:
    """Run a cleanup ``step`` that calls the JVM (stop the query, remove the listener). While
    a failure or a Ctrl-C unwinds, the JVM may be gone or its connection cut by the
    interrupt: what the step raises then is logged, and the failure (or the interrupt, exit
    130) stays the one the user sees. After a Ctrl-C it is logged at debug level only: the
    interrupt's one line is the whole answer (the JVM ends with this process), and whether
    the interrupt cut py4j's connection mid-call is timing, not news."""
    try:
        step()
    except Exception as exc:
        if unwinding is None:
            raise
        level = logging.DEBUG if isinstance(unwinding, KeyboardInterrupt) else logging.WARNING
        log.log(level, "cleaning up after %r: %s", unwinding, exc)


def _last_progress(query: Any) -> str | None:
    """The query's last progress as JSON (an idle trigger's too), or None before the first."""
    progress = query.lastProgress
    return None if progress is None else str(progress.json)


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


def group_offsets() -> int:
    """The bound of a task's small topic-partitions (:func:`app.sources.stream.task_groups`):
    each range of a group is one block of the output's files."""
    return max(0, min(stream.GROUP_OFFSETS, segments.OFFSETS_PER_FILE))

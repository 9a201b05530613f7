"""Spark's progress events, turned into the job's per-batch metrics.

Spark reports each finished micro-batch to every ``StreamingQueryListener``
on the driver: input rows, duration, and the source's start, end and latest
offsets. The job's sink reports what it wrote and the size and session count
of the partitions' state (:class:`app.sink.commit.BatchReport`) from inside
the batch, so before Spark's event for the same batch arrives. The listener
merges the two by batch id into one :class:`BatchMetrics`, publishes it
through a :class:`~app.metrics.publisher.MetricsPublisher` and hands it to its
observers (the progress display).

A job that reads Kafka and the archive (:mod:`app.sources.tiered`) also
publishes the records each of them served (``RecordsServed`` by ``Source``),
from the counts the sink reports; :attr:`MetricsListener.tiers` names them.

Records behind are computed here, not by Kafka: the job commits no consumer
group offsets, so MSK's lag metrics know nothing of the job. The newest
offsets come from the source (``latestOffset``, which it reports from Kafka
and from the archive alike) and the processed ones from ``endOffset``.
The source reports two newest offsets per partition
(:class:`~app.contract.offsets.SourceReport`): the readable end, where a
batch may read up to (the last stable offset under ``read_committed``), and
the high watermark; and since when a last stable offset has stayed behind
its high watermark. Records behind each, and the longest such stay, are
published: a transaction left open holds the readable end back (behind it
the job is caught up) while records pile up behind the high watermark.
An idle trigger (no batch) is reported from the query's last progress,
which Spark updates at idle triggers too.

The listener runs on Spark's listener thread. Nothing in it blocks for
long or raises into Spark: a publisher only queues, and a failing observer is
logged and skipped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, ClassVar

import orjson
from pyspark.sql.streaming.listener import StreamingQueryListener

from app import metric_names as names
from app.contract import offsets as offsets_mod
from app.contract.offsets import Offsets, SourceReport, TopicPartition
from app.errors import IntegrityViolationError
from app.metrics.publisher import Datum, MetricsPublisher, Unit, now
from app.sink.commit import BatchReport

__all__ = [
    "BatchMetrics",
    "Lag",
    "MetricsListener",
    "SourceLag",
    "batch_metrics",
    "records_behind",
    "source_lag",
]

log = logging.getLogger(__name__)

REPORTS_KEPT = 16  # batches' reports waiting for their progress event, at most

Observer = Callable[["BatchMetrics"], None]


@dataclass(frozen=True, slots=True)
class Lag:
    """How far the processed offsets are behind the newest available ones."""

    total: int
    worst: TopicPartition | None  # None when no partition is behind
    worst_behind: int


def records_behind(end: Offsets, latest: Offsets) -> Lag:
    """Records between ``end`` and ``latest``, summed and for the worst partition.

    A partition the batch has no end for yet counts from offset 0: an upper
    bound where retention removed the oldest records.
    """
    behind = {tp: max(0, latest[tp] - end.get(tp, 0)) for tp in sorted(latest)}
    worst = max(behind, key=lambda tp: behind[tp], default=None)
    if worst is None or behind[worst] == 0:
        return Lag(0, None, 0)
    return Lag(sum(behind.values()), worst, behind[worst])


@dataclass(frozen=True, slots=True)
class SourceLag:
    """How far the processed offsets are behind what the source reported, at one trigger."""

    readable: Lag  # to the readable ends (the last stable offsets under read_committed)
    high: Lag | None  # to the high watermarks; None from a source that reports none
    stable_stalled_s: float  # the longest a last stable offset stayed behind its high watermark

    def datums(self, at: datetime) -> list[Datum]:
        count = Unit.COUNT
        high = self.readable if self.high is None else self.high
        return [
            Datum(names.RECORDS_BEHIND, float(self.readable.total), count, at),
            Datum(
                names.RECORDS_BEHIND_WORST_PARTITION, float(self.readable.worst_behind), count, at
            ),
            Datum(names.RECORDS_BEHIND_HIGH_WATERMARK, float(high.total), count, at),
            Datum(names.STABLE_OFFSET_STALLED_SECONDS, self.stable_stalled_s, Unit.SECONDS, at),
        ]


def source_lag(progress: Mapping[str, Any]) -> SourceLag | None:
    """The lag a progress (a batch's, or an idle trigger's) shows; None without newest offsets."""
    sources = progress.get("sources") or []
    source = sources[0] if sources else {}
    latest = source.get("latestOffset")
    if latest is None:
        return None
    end = _offsets(source.get("endOffset")) or {}
    report = SourceReport.from_json(latest)
    at_ms = _timestamp(progress.get("timestamp")).timestamp() * 1000
    stalled = max((at_ms - since for since in report.stable_since.values()), default=0.0)
    return SourceLag(
        readable=records_behind(end, report.readable),
        high=None
        if report.high_watermarks is None
        else records_behind(end, report.high_watermarks),
        stable_stalled_s=max(0.0, stalled / 1000),
    )


@dataclass(frozen=True, slots=True)
class BatchMetrics:
    """One committed micro-batch, as Spark and the sink saw it."""

    batch_id: int
    started: datetime
    input_messages: int
    duration_ms: int
    sessions_in_state: int
    state_bytes: int
    end: Offsets
    lag: SourceLag | None  # None when the source reports no latest offsets
    rows_written: int = 0
    output_files: int = 0
    output_bytes: int = 0
    violations: int = 0
    quarantined: int = 0
    dropped: int = 0  # integrity classes ordered, once: messages dropped for their seq
    missing: int = 0  # seqs that never arrived (ordered: skipped; once: at an end or timeout)
    published: bool = True  # False: the sink found the batch published before a restart
    # Records read per source tier ("archive", "kafka"), for a job reading both; else empty.
    served: Mapping[str, int] = field(default_factory=dict)

    @property
    def messages_per_second(self) -> float:
        return 1000.0 * self.input_messages / self.duration_ms if self.duration_ms > 0 else 0.0

    def datums(self, at: datetime) -> list[Datum]:
        """Every metric of the batch, all at time ``at``."""
        count, ms, size = Unit.COUNT, Unit.MILLISECONDS, Unit.BYTES
        values: list[tuple[str, float, Unit]] = [
            (names.HEARTBEAT, 1, count),
            (names.INPUT_MESSAGES, self.input_messages, count),
            (names.ROWS_WRITTEN, self.rows_written, count),
            (names.BATCH_DURATION_MS, self.duration_ms, ms),
            (names.SESSIONS_IN_STATE, self.sessions_in_state, count),
            (names.STATE_BYTES, self.state_bytes, size),
            (names.INTEGRITY_VIOLATIONS, self.violations, count),
            (names.QUARANTINED_MESSAGES, self.quarantined, count),
            (names.DROPPED_MESSAGES, self.dropped, count),
            (names.MISSING_SEQS, self.missing, count),
            (names.OUTPUT_FILES, self.output_files, count),
            (names.OUTPUT_BYTES, self.output_bytes, size),
        ]
        datums = [Datum(name, float(value), unit, at) for name, value, unit in values]
        if self.lag is not None:
            datums += self.lag.datums(at)
        for tier, records in self.served.items():
            source = ((names.SOURCE_DIMENSION, tier),)
            datums.append(Datum(names.RECORDS_SERVED, float(records), count, at, source))
        return datums


def batch_metrics(
    progress: Mapping[str, Any], report: BatchReport | None, tiers: Sequence[str] = ()
) -> BatchMetrics:
    """Merge Spark's progress (its JSON form, parsed) with the sink's report.

    The messages are the report's: the job's source gives Spark one row per
    range (:mod:`app.sources.ranges`), so Spark's ``numInputRows`` counts
    ranges; it stands only where no report came (a source that gives records).

    ``tiers``: the source tiers whose records are counted apart (each one,
    0 included), for a job that reads Kafka and the archive.
    """
    sources = progress.get("sources") or []
    source = sources[0] if sources else {}
    end = _offsets(source.get("endOffset")) or {}
    metrics = BatchMetrics(
        batch_id=int(progress["batchId"]),
        started=_timestamp(progress.get("timestamp")),
        input_messages=int(progress.get("numInputRows") or 0),
        duration_ms=int(progress.get("batchDuration") or 0),
        sessions_in_state=0,
        state_bytes=0,
        end=end,
        lag=source_lag(progress),
        served={tier: 0 for tier in tiers},
    )
    if report is None:
        return metrics
    return replace(
        metrics,
        input_messages=report.messages,
        rows_written=report.rows,
        output_files=report.files,
        output_bytes=report.bytes,
        violations=report.violations,
        quarantined=report.quarantined,
        dropped=report.dropped,
        missing=report.missing,
        published=report.published,
        sessions_in_state=report.sessions,
        state_bytes=report.state_bytes,
        served={tier: report.served.get(tier, 0) for tier in tiers},
    )


class MetricsListener(StreamingQueryListener):
    """Publishes every micro-batch of one run of the job.

    :func:`app.spark.job.run` adds it before starting the query, feeds it the
    sink's reports (:meth:`on_batch`), binds it to the query's run id
    (:meth:`bind`; events of any other query are ignored), and at the end
    waits for the query's last event (:meth:`finish`) before removing it.
    """

    def __init__(
        self,
        publisher: MetricsPublisher,
        observers: Sequence[Observer] = (),
        clock: Callable[[], datetime] = now,
    ) -> None:
        super().__init__()
        self.publisher = publisher
        self.observers = tuple(observers)
        self.clock = clock
        self._dispatch_lock = threading.Lock()
        self._reports_lock = threading.Lock()
        self._reports: dict[int, BatchReport] = {}
        self._run_id: str | None = None
        self._last_progress: Callable[[], str | None] | None = None
        self._early: list[tuple[str, Callable[[], None]]] = []
        self._terminated = threading.Event()
        # The source tiers whose records each batch counts apart (RecordsServed):
        # both, for a job reading Kafka and the archive (set by app.spark.job.run).
        self.tiers: tuple[str, ...] = ()
        self.batches = 0  # batches published
        self.slowest_event_s = 0.0  # the longest the listener held Spark's listener thread
        self._json_events: Any = None  # what the JVM holds of it (_jlistener), once made

    # -- fed by app.spark.job.run -------------------------------------------------

    def on_batch(self, report: BatchReport) -> None:
        """The sink's report of a batch it just committed (Spark's event follows)."""
        with self._reports_lock:
            self._reports[report.batch_id] = report
            # A batch whose progress event never came (Spark drops events when its
            # listener bus is full): forgotten, so a job of months holds a few at most.
            for stale in [b for b in self._reports if b < report.batch_id - REPORTS_KEPT]:
                del self._reports[stale]

    @property
    def waiting_reports(self) -> int:
        """Batches' reports still waiting for their progress event."""
        with self._reports_lock:
            return len(self._reports)

    def bind(self, run_id: str, last_progress: Callable[[], str | None] | None = None) -> None:
        """Follow the query run ``run_id`` only (and replay its early events).

        ``last_progress``: the query's last progress as JSON (None before the
        first), which an idle trigger updates without an event of its own: the
        idle events publish the lag it shows.
        """
        with self._dispatch_lock:
            self._run_id = run_id
            self._last_progress = last_progress
            early, self._early = self._early, []
            for event_run, action in early:
                if event_run == run_id:
                    self._guarded(action)

    def finish(self, failure: BaseException | None = None, timeout_s: float = 10.0) -> bool:
        """Wait for the query's termination event; publish a strict-mode violation.

        In strict mode a violation fails its batch, so no batch ever reports
        it; it is published here, so that the violation alarm fires too.
        Returns whether the termination event arrived in time.
        """
        if isinstance(failure, IntegrityViolationError):
            at = self.clock()
            self.publisher.publish([Datum(names.INTEGRITY_VIOLATIONS, 1.0, Unit.COUNT, at)])
        if self._run_id is None:  # the query never started: no event will come
            return False
        return self._terminated.wait(timeout_s)

    # -- Spark's callbacks (listener thread) --------------------------------

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        """Nothing to publish: the first batch's heartbeat says the job is up."""

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        self.progress(event.progress.json)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        self.idle(str(event.runId))

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        self.terminated(str(event.runId))

    # -- the events as Spark's JVM gives them (_JsonEvents) -------------------

    def progress(self, text: str) -> None:
        """A batch's progress, as its JSON."""
        progress = orjson.loads(text)
        self._dispatch(str(progress["runId"]), lambda: self._progress(progress))

    def idle(self, run_id: str) -> None:
        # No new data: the job is alive and has caught up. Without this an idle
        # job would look dead to the heartbeat alarm.
        self._dispatch(run_id, self._idle)

    def terminated(self, run_id: str) -> None:
        self._dispatch(run_id, self._terminated.set)

    @property
    def _jlistener(self) -> Any:
        """What ``spark.streams.addListener`` (and ``removeListener``) hands the JVM:
        :class:`_JsonEvents` of this listener, made once."""
        if self._json_events is None:
            from pyspark import SparkContext

            jvm: Any = SparkContext._jvm
            self._json_events = jvm.PythonStreamingQueryListenerWrapper(_JsonEvents(self))
        return self._json_events

    # -- internals ----------------------------------------------------------

    def _dispatch(self, run_id: str, action: Callable[[], None]) -> None:
        with self._dispatch_lock:
            if self._run_id is None:
                self._early.append((run_id, action))
            elif run_id == self._run_id:
                self._guarded(action)

    def _guarded(self, action: Callable[[], None]) -> None:
        started = time.monotonic()
        try:
            action()
        except Exception:  # a listener must never take Spark's listener bus down
            log.exception("metrics listener failed on a progress event")
        self.slowest_event_s = max(self.slowest_event_s, time.monotonic() - started)

    def _progress(self, progress: Mapping[str, Any]) -> None:
        with self._reports_lock:
            report = self._reports.pop(int(progress["batchId"]), None)
        metrics = batch_metrics(progress, report, self.tiers)
        self.batches += 1
        self.publisher.publish(metrics.datums(self.clock()))
        for observer in self.observers:
            try:
                observer(metrics)
            except Exception:
                log.exception("metrics observer %r failed", observer)

    def _idle(self) -> None:
        at = self.clock()
        datums = [Datum(names.HEARTBEAT, 1.0, Unit.COUNT, at)]
        text = None if self._last_progress is None else self._last_progress()
        lag = None if text is None else source_lag(orjson.loads(text))
        if lag is not None:
            datums += lag.datums(at)
        else:  # an idle trigger planned nothing: nothing readable is left behind
            datums += [
                Datum(names.RECORDS_BEHIND, 0.0, Unit.COUNT, at),
                Datum(names.RECORDS_BEHIND_WORST_PARTITION, 0.0, Unit.COUNT, at),
            ]
        self.publisher.publish(datums)


def _offsets(doc: Any) -> Offsets | None:
    if doc is None:
        return None
    return offsets_mod.from_json(doc)


def _timestamp(text: Any) -> datetime:
    if not isinstance(text, str):
        return datetime.now(UTC)
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class _JsonEvents:
    """A :class:`MetricsListener` as Spark's interface for a Python query listener, given
    each progress as its JSON, read in one call into the JVM.

    PySpark's own adapter (``JStreamingQueryListener``, which implements the same
    interface) makes each progress a Python object field by field, dozens of calls into
    the JVM: 0.17 s a batch on the listener's thread, which the end of every run waited
    for (:meth:`MetricsListener.finish`). The listener reads only the JSON and the run id.
    """

    def __init__(self, listener: MetricsListener) -> None:
        self._listener = listener

    def onQueryStarted(self, jevent: Any) -> None:  # noqa: N802 (Spark's name)
        """Nothing to publish (:meth:`MetricsListener.onQueryStarted`)."""

    def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802 (Spark's name)
        self._listener.progress(str(jevent.progress().json()))

    def onQueryIdle(self, jevent: Any) -> None:  # noqa: N802 (Spark's name)
        self._listener.idle(str(jevent.runId().toString()))

    def onQueryTerminated(self, jevent: Any) -> None:  # noqa: N802 (Spark's name)
        self._listener.terminated(str(jevent.runId().toString()))

    class Java:
        implements: ClassVar[list[str]] = [
            "org.apache.spark.sql.streaming.PythonStreamingQueryListener"
        ]

"""Where the job's metrics go: CloudWatch, JSON log lines, or nowhere.

A publisher receives :class:`Datum` values from the driver (the streaming query
listener's thread) and must never hold that thread up or raise into it: a
slow or unreachable CloudWatch costs metrics, never a micro-batch.
:class:`CloudWatchPublisher` therefore only puts datums on a bounded queue; a
background thread drains it in ``PutMetricData`` calls of up to
:data:`MAX_DATUMS_PER_CALL` datums. A datum that finds the queue full, or
whose call fails, is counted as dropped (:class:`PublishStats`).

Every datum carries the ``Environment`` dimension (and its own, such as
``Source``) and goes to the namespace in :mod:`app.metric_names`, the module
the infrastructure's alarms import.
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final, Protocol

import orjson

from app import metric_names
from app.errors import ConfigurationError

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient
    from mypy_boto3_cloudwatch.type_defs import DimensionTypeDef, MetricDatumTypeDef

__all__ = [
    "MAX_DATUMS_PER_CALL",
    "CloudWatchPublisher",
    "Datum",
    "LogPublisher",
    "MetricsPublisher",
    "NullPublisher",
    "PublishStats",
    "PublisherKind",
    "Timeouts",
    "Unit",
    "make_publisher",
]

log = logging.getLogger(__name__)

# PutMetricData takes up to 1,000 datums (and 1 MB) per request.
MAX_DATUMS_PER_CALL: Final = 1000


class Unit(StrEnum):
    """The CloudWatch units the job uses."""

    COUNT = "Count"
    SECONDS = "Seconds"
    MILLISECONDS = "Milliseconds"
    BYTES = "Bytes"


@dataclass(frozen=True, slots=True)
class Datum:
    """One value of one metric at one time; publishers add namespace and the Environment."""

    name: str
    value: float
    unit: Unit
    timestamp: datetime
    dimensions: tuple[tuple[str, str], ...] = ()  # besides Environment: (name, value) pairs


@dataclass(frozen=True, slots=True)
class PublishStats:
    """What a publisher did with the datums it was given."""

    accepted: int = 0  # handed to publish()
    sent: int = 0  # delivered (CloudWatch acknowledged, or the line written)
    dropped: int = 0  # lost: queue full, call failed, or still queued at close
    failed_calls: int = 0


class MetricsPublisher(Protocol):
    """What the listener publishes through. ``publish`` never blocks or raises."""

    @property
    def description(self) -> str: ...

    def publish(self, datums: Sequence[Datum]) -> None: ...

    def stats(self) -> PublishStats: ...

    def close(self, timeout_s: float = 5.0) -> PublishStats: ...


class PublisherKind(StrEnum):
    """``tablecast run --metrics``."""

    CLOUDWATCH = "cloudwatch"
    LOG = "log"
    NONE = "none"


class NullPublisher:
    """Discards everything (``--metrics none``)."""

    description = "none"

    def __init__(self) -> None:
        self._accepted = 0

    def publish(self, datums: Sequence[Datum]) -> None:
        self._accepted += len(datums)

    def stats(self) -> PublishStats:
        return PublishStats(accepted=self._accepted)

    def close(self, timeout_s: float = 5.0) -> PublishStats:
        return self.stats()


class LogPublisher:
    """One JSON line per publish call (``--metrics log``, the laptop's default).

    ``write`` receives each line without its newline; by default it goes to
    standard error. A metric with dimensions of its own is an object keyed
    by their values: ``"RecordsServed": {"archive": 120.0, "kafka": 30.0}``.
    """

    def __init__(
        self,
        *,
        environment: str,
        write: Callable[[str], None] | None = None,
        namespace: str = metric_names.NAMESPACE,
        job: str | None = None,
    ) -> None:
        self.environment = environment
        self.job = job
        self.namespace = namespace
        self._write = write or _stderr_line
        self._lock = threading.Lock()
        self._stats = PublishStats()

    @property
    def description(self) -> str:
        return "log"

    def publish(self, datums: Sequence[Datum]) -> None:
        if not datums:
            return
        line = orjson.dumps(
            {
                "time": max(d.timestamp for d in datums).isoformat(timespec="milliseconds"),
                "event": "metrics",
                "namespace": self.namespace,
                metric_names.ENVIRONMENT_DIMENSION: self.environment,
                **({metric_names.JOB_DIMENSION: self.job} if self.job is not None else {}),
                "metrics": _by_name(datums),
            }
        ).decode()
        try:
            self._write(line)
        except Exception:  # a closed pipe must not fail a batch
            self._count(accepted=len(datums), dropped=len(datums), failed_calls=1)
            return
        self._count(accepted=len(datums), sent=len(datums))

    def _count(self, **add: int) -> None:
        with self._lock:
            s = self._stats
            self._stats = replace(s, **{name: getattr(s, name) + n for name, n in add.items()})

    def stats(self) -> PublishStats:
        with self._lock:
            return self._stats

    def close(self, timeout_s: float = 5.0) -> PublishStats:
        return self.stats()


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long one PutMetricData call may take: short, the queue absorbs the rest."""

    connect_s: float = 2.0
    read_s: float = 5.0
    max_attempts: int = 2  # botocore's count: the first try included


class _Stop:
    """Tells the drain thread to finish what is queued and exit."""


_STOP: Final = _Stop()


class CloudWatchPublisher:
    """Batched, asynchronous PutMetricData with the ``Environment`` dimension."""

    def __init__(
        self,
        *,
        environment: str,
        region: str | None = None,
        endpoint_url: str | None = None,
        client: CloudWatchClient | None = None,
        namespace: str = metric_names.NAMESPACE,
        capacity: int = 10_000,
        timeouts: Timeouts = Timeouts(),
        job: str | None = None,
    ) -> None:
        self.environment = environment
        self.job = job
        self.namespace = namespace
        self._client = client or _client(region, endpoint_url, timeouts)
        self._queue: queue.Queue[Datum | _Stop] = queue.Queue(maxsize=capacity)
        self._lock = threading.Lock()
        self._accepted = 0
        self._sent = 0
        self._dropped = 0
        self._failed_calls = 0
        self._in_flight = 0
        self._closed = False
        self._abandoned = False
        self._thread = threading.Thread(
            target=self._drain, name="tablecast-cloudwatch", daemon=True
        )
        self._thread.start()

    @property
    def description(self) -> str:
        return f"cloudwatch {self._client.meta.endpoint_url}"

    def publish(self, datums: Sequence[Datum]) -> None:
        dropped = 0
        for datum in datums:
            if self._closed:
                dropped += 1
                continue
            try:
                self._queue.put_nowait(datum)
            except queue.Full:
                dropped += 1
        with self._lock:
            self._accepted += len(datums)
            self._dropped += dropped

    def stats(self) -> PublishStats:
        with self._lock:
            return PublishStats(
                accepted=self._accepted,
                sent=self._sent,
                dropped=self._dropped,
                failed_calls=self._failed_calls,
            )

    def close(self, timeout_s: float = 5.0) -> PublishStats:
        """Send what is queued within ``timeout_s``; count the rest as dropped."""
        deadline = time.monotonic() + timeout_s
        self._closed = True
        with contextlib.suppress(queue.Full):
            self._queue.put(_STOP, timeout=max(0.0, timeout_s))
        self._thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            if self._thread.is_alive():
                self._abandoned = True
                self._dropped += self._in_flight
            # What is still queued (or raced in behind the stop) is never sent.
            self._dropped += self._discard_queued()
            if self._thread.is_alive():
                self._queue.put_nowait(_STOP)  # it exits once its call returns
        return self.stats()

    def _discard_queued(self) -> int:
        count = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return count
            if not isinstance(item, _Stop):
                count += 1

    def _drain(self) -> None:
        while True:
            first = self._queue.get()
            if isinstance(first, _Stop):
                return
            chunk = [first]
            stop = False
            while len(chunk) < MAX_DATUMS_PER_CALL:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if isinstance(item, _Stop):
                    stop = True
                    break
                chunk.append(item)
            self._send(chunk)
            if stop:
                return

    def _send(self, chunk: list[Datum]) -> None:
        with self._lock:
            self._in_flight = len(chunk)
        ok = True
        try:
            self._client.put_metric_data(
                Namespace=self.namespace, MetricData=[self._datum(d) for d in chunk]
            )
        except Exception as exc:  # never let the drain thread die
            ok = False
            error = exc
        with self._lock:
            self._in_flight = 0
            if self._abandoned:
                return
            if ok:
                self._sent += len(chunk)
                return
            self._dropped += len(chunk)
            self._failed_calls += 1
            failures = self._failed_calls
        if failures == 1 or failures % 100 == 0:
            log.warning(
                "CloudWatch PutMetricData failed (%d failed calls so far; %d datums dropped "
                "in this one): %s",
                failures,
                len(chunk),
                error,
            )

    def _datum(self, datum: Datum) -> MetricDatumTypeDef:
        dimensions: list[DimensionTypeDef] = [
            {"Name": metric_names.ENVIRONMENT_DIMENSION, "Value": self.environment}
        ]
        if self.job is not None:
            dimensions.append({"Name": metric_names.JOB_DIMENSION, "Value": self.job})
        dimensions += [{"Name": name, "Value": value} for name, value in datum.dimensions]
        return {
            "MetricName": datum.name,
            "Dimensions": dimensions,
            "Timestamp": datum.timestamp,
            "Value": _plain(datum.value),
            "Unit": datum.unit.value,
        }


def make_publisher(
    kind: PublisherKind,
    *,
    environment: str,
    region: str | None = None,
    write: Callable[[str], None] | None = None,
    job: str | None = None,
) -> MetricsPublisher:
    """The publisher ``tablecast run --metrics KIND`` publishes through; ``job`` (``run
    --job``): a declared job's name, its metrics' ``Job`` dimension beside the environment."""
    if not environment.strip():
        raise ConfigurationError("--environment must not be empty")
    if job is not None and not job.strip():
        raise ConfigurationError("--job must not be empty")
    if kind is PublisherKind.CLOUDWATCH:
        return CloudWatchPublisher(environment=environment, region=region, job=job)
    if kind is PublisherKind.LOG:
        return LogPublisher(environment=environment, write=write, job=job)
    return NullPublisher()


def now() -> datetime:
    return datetime.now(UTC)


def _client(region: str | None, endpoint_url: str | None, timeouts: Timeouts) -> CloudWatchClient:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import NoRegionError

    config = Config(
        connect_timeout=timeouts.connect_s,
        read_timeout=timeouts.read_s,
        retries={"max_attempts": timeouts.max_attempts, "mode": "standard"},
    )
    try:
        return boto3.client(
            "cloudwatch", region_name=region, endpoint_url=endpoint_url, config=config
        )
    except NoRegionError:
        raise ConfigurationError(
            "--metrics cloudwatch needs a region: pass --region or set AWS_REGION"
        ) from None


def _by_name(datums: Sequence[Datum]) -> dict[str, Any]:
    """The log line's metrics: a value by name, or by dimension values for dimensioned ones."""
    metrics: dict[str, Any] = {}
    for d in datums:
        if d.dimensions:
            key = "/".join(value for _, value in d.dimensions)
            metrics.setdefault(d.name, {})[key] = _plain(d.value)
        else:
            metrics[d.name] = _plain(d.value)
    return metrics


def _plain(value: float) -> float:
    """CloudWatch rejects NaN and infinities; they never describe a batch anyway."""
    return value if math.isfinite(value) else 0.0


def _stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)

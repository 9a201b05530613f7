"""Each batch's end offsets, committed to a Kafka consumer group for others to see.

The job's Kafka source is assigned its partitions and commits no
consumer-group offsets, so MSK's consumer lag metrics and Kafka's own tools
(``kafka-consumer-groups``) do not see the job. With ``tablecast run
--consumer-group NAME`` the job commits the end offsets of every batch it
published to that group as well.

The group is a window, never a source of truth: the job always resumes from
its checkpoint (and the output's ledger), never from these offsets. A commit
is asynchronous and may fail (the group's coordinator is away, the role may
not alter the group); failures are counted and logged, never raised.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from app.metrics.listener import BatchMetrics

__all__ = ["CommitStats", "GroupCommitter"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CommitStats:
    requested: int = 0  # batches whose offsets were handed to the client
    committed: int = 0  # commits the group's coordinator acknowledged
    failed: int = 0


class GroupCommitter:
    """An observer of :class:`~app.metrics.listener.MetricsListener`.

    ``settings`` are librdkafka's (``bootstrap.servers`` and, on MSK, the
    IAM sign-in: :meth:`app.sources.kafka_client.KafkaEndpoint.config`).
    """

    def __init__(self, group: str, settings: dict[str, Any]) -> None:
        from confluent_kafka import Consumer

        self.group = group
        self._lock = threading.Lock()
        self._stats = CommitStats()
        self._closing: threading.Thread | None = None
        self._consumer = Consumer(
            {
                **settings,
                "group.id": group,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "on_commit": self._on_commit,
                # Failures surface as failed commits (logged above); librdkafka's own
                # reconnect errors would repeat every few seconds while a broker is away.
                "log_level": 2,
                "logger": log,
            }
        )

    def __call__(self, metrics: BatchMetrics) -> None:
        if not metrics.end:
            return
        from confluent_kafka import TopicPartition

        offsets = [
            TopicPartition(tp.topic, tp.partition, offset)
            for tp, offset in sorted(metrics.end.items())
        ]
        try:
            self._consumer.commit(offsets=offsets, asynchronous=True)
            self._add(requested=1)
            self._consumer.poll(0)  # serves the callbacks of earlier commits
        except Exception as exc:  # never let the group fail a batch
            self._failed(f"batch {metrics.batch_id}: {exc}")

    def stats(self) -> CommitStats:
        with self._lock:
            return self._stats

    def close(self, timeout_s: float = 5.0) -> CommitStats:
        """Wait (bounded) for outstanding commits, then leave.

        librdkafka's ``close`` waits for the group's coordinator, for as long
        as ``session.timeout.ms`` when it is away; it gets what is left of
        ``timeout_s`` on a daemon thread, and the job's exit never waits longer.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            s = self.stats()
            if s.committed + s.failed >= s.requested:
                break
            self._consumer.poll(0.1)
        self._closing = threading.Thread(
            target=self._consumer.close, name="tablecast-group-close", daemon=True
        )
        self._closing.start()
        self._closing.join(max(0.0, deadline - time.monotonic()))
        return self.stats()

    def wait_closed(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the client's close that :meth:`close` left running.

        The job's exit does not wait for it (a daemon thread); whoever lives on
        after ``close``, as a test does, waits here so that nothing of the
        client (its log callbacks) outlives it. True when it has ended.
        """
        if self._closing is None:
            return True
        self._closing.join(timeout_s)
        return not self._closing.is_alive()

    def _on_commit(self, error: Any, partitions: Any) -> None:
        errors = [str(p.error) for p in partitions or () if p.error is not None]
        if error is not None or errors:
            self._failed(str(error) if error is not None else "; ".join(errors))
        else:
            self._add(committed=1)

    def _failed(self, reason: str) -> None:
        self._add(failed=1)
        failures = self.stats().failed
        if failures == 1 or failures % 100 == 0:
            log.warning(
                "consumer group %s: commit failed (%d so far): %s", self.group, failures, reason
            )

    def _add(self, requested: int = 0, committed: int = 0, failed: int = 0) -> None:
        with self._lock:
            s = self._stats
            self._stats = CommitStats(
                requested=s.requested + requested,
                committed=s.committed + committed,
                failed=s.failed + failed,
            )

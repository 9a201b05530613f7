"""An environment at a glance: job version, the job's processor and integrity class, last
heartbeat and batch, lag, the archiver's heartbeat and lag, alarms in ALARM."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from app import metric_names
from app.ops import metrics
from app.ops.aws import AwsClients
from app.ops.environment import job_parameters, read_handoff
from app.ops.processors import RecordedProcessor

# How far back the status looks for the job's metrics.
WINDOW = timedelta(hours=3)
_METRICS = (
    (metric_names.HEARTBEAT, "Sum"),
    (metric_names.INPUT_MESSAGES, "Sum"),
    (metric_names.ROWS_WRITTEN, "Sum"),
    (metric_names.BATCH_DURATION_MS, "Maximum"),
    (metric_names.RECORDS_BEHIND, "Maximum"),
    (metric_names.RECORDS_BEHIND_WORST_PARTITION, "Maximum"),
    (metric_names.RECORDS_BEHIND_HIGH_WATERMARK, "Maximum"),
    (metric_names.STABLE_OFFSET_STALLED_SECONDS, "Maximum"),
    (metric_names.INTEGRITY_VIOLATIONS, "Sum"),
)
# The environment's archiver's, whichever job is asked about.
_ARCHIVER_METRICS = (
    (metric_names.ARCHIVER_HEARTBEAT, "Sum"),
    (metric_names.ARCHIVER_RECORDS_BEHIND, "Maximum"),
)


@dataclass(frozen=True, slots=True)
class JobStatus:
    environment: str
    job_version: str
    driver_instance_id: str
    now: datetime
    latest: dict[str, metrics.Datapoint | None]
    alarms: list[metrics.Alarm]
    job: str | None = None
    """A declared job's name; ``None``: the environment's one job."""
    processor: RecordedProcessor = field(default_factory=lambda: RecordedProcessor.of({}))
    """What it runs, as SSM records it (run-job's reading)."""

    @property
    def last_heartbeat(self) -> metrics.Datapoint | None:
        return self.latest[metric_names.HEARTBEAT]

    @property
    def healthy(self) -> bool:
        """A heartbeat in the window and no alarm firing."""
        return self.last_heartbeat is not None and not self.alarms

    def lines(self) -> list[str]:
        heartbeat = self.last_heartbeat
        batch = self.latest[metric_names.INPUT_MESSAGES]
        archiver = self.latest[metric_names.ARCHIVER_HEARTBEAT]
        lines = [
            f"environment:     {self.environment}",
            *([f"job:             {self.job}"] if self.job is not None else []),
            f"job version:     {self.job_version}",
            *self.processor.lines(),
            f"driver:          {self.driver_instance_id}",
            "last heartbeat:  "
            + (self._ago(heartbeat.timestamp) if heartbeat else "none: the job is not running"),
            f"last batch:      {self._value(metric_names.INPUT_MESSAGES)} messages in, "
            f"{self._value(metric_names.ROWS_WRITTEN)} rows out, "
            f"{self._value(metric_names.BATCH_DURATION_MS)} ms"
            + (f" (minute of {self._ago(batch.timestamp)})" if batch else ""),
            f"records behind:  {self._value(metric_names.RECORDS_BEHIND)} "
            f"(worst partition {self._value(metric_names.RECORDS_BEHIND_WORST_PARTITION)}), "
            f"{self._value(metric_names.RECORDS_BEHIND_HIGH_WATERMARK)} to the high watermark, "
            "a last stable offset stalled "
            f"{self._value(metric_names.STABLE_OFFSET_STALLED_SECONDS)} s",
            f"violations:      {self._value(metric_names.INTEGRITY_VIOLATIONS)}",
            "archiver:        "
            + (
                f"last heartbeat {self._ago(archiver.timestamp)}, "
                f"{self._value(metric_names.ARCHIVER_RECORDS_BEHIND)} records behind Kafka"
                if archiver
                else "no heartbeat: Kafka is not being archived"
            ),
            f"alarms in ALARM: {len(self.alarms)}",
        ]
        lines += [
            f"  {alarm.name} since {self._ago(alarm.since)}: {alarm.reason}"
            for alarm in self.alarms
        ]
        return lines

    def _value(self, name: str) -> str:
        """The newest datapoint's value; ``-`` when there is none in the window."""
        point = self.latest[name]
        return "-" if point is None else f"{point.value:,.0f}"

    def _ago(self, moment: datetime) -> str:
        seconds = max(0, int((self.now - moment).total_seconds()))
        return f"{moment.isoformat(timespec='seconds')}, {seconds // 60} min {seconds % 60} s ago"


def read_status(clients: AwsClients, environment: str, job: str | None = None) -> JobStatus:
    """The environment's one job's status, or the declared job ``job``'s (its metrics by
    its ``Job`` dimension; the archiver and the alarms are the environment's)."""
    found = read_handoff(clients.ssm, environment)
    now = datetime.now(UTC)
    latest: dict[str, metrics.Datapoint | None] = {}
    for wanted, whose in ((_METRICS, job), (_ARCHIVER_METRICS, None)):
        latest |= metrics.latest(
            clients.cloudwatch,
            namespace=found.metric_namespace,
            environment=environment,
            metrics=wanted,
            since=now - WINDOW,
            until=now + timedelta(minutes=1),
            job=whose,
        )
    return JobStatus(
        job=job,
        processor=RecordedProcessor.of(
            {} if job is None else job_parameters(clients.ssm, environment, job)
        ),
        environment=environment,
        job_version=found.job_version,
        driver_instance_id=found.driver_instance_id,
        now=now,
        latest=latest,
        alarms=metrics.alarms_in_alarm(clients.cloudwatch, environment),
    )

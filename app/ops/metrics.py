"""The job's CloudWatch metrics and alarms, as the deploy and status tools read them.

The job publishes :mod:`app.metric_names` with the ``Environment`` dimension;
the alarms ``infra/`` creates are named ``tablecast-<env>-...``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from app import metric_names
from app.ops.errors import HeartbeatTimeoutError

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient
    from mypy_boto3_cloudwatch.type_defs import DimensionTypeDef, MetricDataQueryTypeDef

# Standard-resolution metrics are stored per minute.
PERIOD_S = 60


@dataclass(frozen=True, slots=True)
class Datapoint:
    timestamp: datetime
    value: float


@dataclass(frozen=True, slots=True)
class Alarm:
    name: str
    reason: str
    since: datetime


def alarm_prefix(environment: str) -> str:
    """Every alarm of the environment is named with this prefix (infra's resource prefix)."""
    return f"tablecast-{environment}-"


def latest(
    cloudwatch: CloudWatchClient,
    *,
    namespace: str,
    environment: str,
    metrics: Sequence[tuple[str, str]],
    since: datetime,
    until: datetime,
    job: str | None = None,
) -> dict[str, Datapoint | None]:
    """The newest datapoint of each ``(metric name, statistic)`` in ``[since, until]``: of
    the environment's one job, or of the declared job ``job`` (its ``Job`` dimension)."""
    dimensions: list[DimensionTypeDef] = [
        {"Name": metric_names.ENVIRONMENT_DIMENSION, "Value": environment}
    ]
    if job is not None:
        dimensions.append({"Name": metric_names.JOB_DIMENSION, "Value": job})
    queries: list[MetricDataQueryTypeDef] = [
        {
            "Id": f"m{index}",
            "MetricStat": {
                "Metric": {
                    "Namespace": namespace,
                    "MetricName": name,
                    "Dimensions": dimensions,
                },
                "Period": PERIOD_S,
                "Stat": statistic,
            },
            "ReturnData": True,
        }
        for index, (name, statistic) in enumerate(metrics)
    ]
    found: dict[str, Datapoint | None] = {name: None for name, _ in metrics}
    pages = cloudwatch.get_paginator("get_metric_data").paginate(
        MetricDataQueries=queries,
        StartTime=since,
        EndTime=until,
        ScanBy="TimestampDescending",
    )
    for page in pages:
        for result in page["MetricDataResults"]:
            name = metrics[int(result["Id"][1:])][0]
            for stamp, value in zip(result["Timestamps"], result["Values"], strict=True):
                point = Datapoint(stamp.astimezone(UTC), value)
                current = found[name]
                if current is None or point.timestamp > current.timestamp:
                    found[name] = point
    return found


def wait_for_heartbeat(
    cloudwatch: CloudWatchClient,
    *,
    namespace: str,
    environment: str,
    after: datetime,
    timeout_s: float,
    poll_s: float = 20.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    job: str | None = None,
) -> Datapoint:
    """Wait for a ``Heartbeat`` datapoint stamped at or after ``after``.

    CloudWatch stamps a per-minute datapoint with the start of its minute,
    never later than the heartbeat itself, so a stamp at or after ``after``
    proves a heartbeat after it (at worst one trigger later than needed).
    Stamps have whole seconds: ``after`` is rounded up to one.
    """
    if after.microsecond:
        after = after.replace(microsecond=0) + timedelta(seconds=1)
    started = clock()
    last: Datapoint | None = None
    while True:
        now = datetime.now(UTC)
        point = latest(
            cloudwatch,
            namespace=namespace,
            environment=environment,
            metrics=[(metric_names.HEARTBEAT, "Sum")],
            since=min(after, now) - timedelta(hours=3),
            until=now + timedelta(minutes=1),
            job=job,
        )[metric_names.HEARTBEAT]
        if point is not None:
            last = point
            if point.timestamp >= after:
                return point
        waited = clock() - started
        if waited >= timeout_s:
            raise HeartbeatTimeoutError(
                environment,
                after.isoformat(timespec="seconds"),
                waited,
                last.timestamp.isoformat(timespec="seconds") if last else "none in 3 hours",
                job=job,
            )
        sleep(min(poll_s, max(0.0, timeout_s - waited)))


def arm_alarms(
    cloudwatch: CloudWatchClient, environment: str, jobs: Sequence[str] = ()
) -> tuple[str, ...]:
    """Turn on the actions of the environment's alarms that wait for the first deploy
    (:data:`app.metric_names.ARMED_BY_DEPLOY`; with declared ``jobs``, each job's
    heartbeat's instead of the one job's); the names of those that were off."""
    each: Sequence[str | None] = list(jobs) or [None]
    wanted = {name for job in each for name in metric_names.armed_by_deploy(job)}
    names = [alarm_prefix(environment) + name for name in sorted(wanted)]
    found = cloudwatch.describe_alarms(AlarmNames=names, AlarmTypes=["MetricAlarm"])
    off = tuple(a["AlarmName"] for a in found["MetricAlarms"] if not a["ActionsEnabled"])
    if off:
        cloudwatch.enable_alarm_actions(AlarmNames=list(off))
    return off


def alarms_in_alarm(cloudwatch: CloudWatchClient, environment: str) -> list[Alarm]:
    """The environment's alarms whose state is ALARM, oldest first."""
    alarms: list[Alarm] = []
    pages = cloudwatch.get_paginator("describe_alarms").paginate(
        AlarmNamePrefix=alarm_prefix(environment),
        StateValue="ALARM",
        AlarmTypes=["MetricAlarm", "CompositeAlarm"],
    )
    for page in pages:
        for alarm in [*page.get("MetricAlarms", []), *page.get("CompositeAlarms", [])]:
            alarms.append(
                Alarm(
                    name=alarm["AlarmName"],
                    reason=alarm.get("StateReason", ""),
                    since=alarm["StateUpdatedTimestamp"].astimezone(UTC),
                )
            )
    return sorted(alarms, key=lambda a: a.since)

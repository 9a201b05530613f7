"""The CloudWatch dashboard's body: the job's metrics, the brokers', the nodes', and the alarms."""

import json
from collections.abc import Mapping, Sequence
from typing import Any

from app import metric_names

MSK_NAMESPACE = "AWS/Kafka"
EC2_NAMESPACE = "AWS/EC2"
EBS_NAMESPACE = "AWS/EBS"  # DLM's snapshot metrics
SNS_NAMESPACE = "AWS/SNS"
WIDTH = 12
HEIGHT = 6

Widget = dict[str, Any]


def dashboard_body(
    *,
    environment: str,
    region: str,
    cluster_name: str,
    broker_count: int,
    trigger_ms: int,
    nodes: Mapping[str, str],
    alarm_arns: Sequence[str],
    jobs: Sequence[str | None] = (None,),
) -> str:
    """The dashboard as CloudWatch's JSON; token values resolve inside it.

    :param nodes: instance ids by node name.
    :param alarm_arns: alarms shown in the status widget.
    :param jobs: the declared jobs, each with rows of its own; ``None``: the environment's
        one job.
    """

    def environment_metrics(*names: str, stat: str = "Sum") -> list[list[Any]]:
        return [
            [
                metric_names.NAMESPACE,
                name,
                metric_names.ENVIRONMENT_DIMENSION,
                environment,
                {"stat": stat},
            ]
            for name in names
        ]

    def brokers(metric: str, stat: str) -> list[list[Any]]:
        return [
            [
                MSK_NAMESPACE,
                metric,
                "Cluster Name",
                cluster_name,
                "Broker ID",
                str(broker),
                {"stat": stat},
            ]
            for broker in range(1, broker_count + 1)
        ]

    def cluster(metric: str, stat: str) -> list[Any]:
        return [MSK_NAMESPACE, metric, "Cluster Name", cluster_name, {"stat": stat}]

    def instances(metric: str, stat: str) -> list[list[Any]]:
        return [
            [EC2_NAMESPACE, metric, "InstanceId", instance_id, {"stat": stat, "label": name}]
            for name, instance_id in nodes.items()
        ]

    widgets = [
        _alarms("Alarms", alarm_arns),
        *(widget for job in jobs for widget in _job_widgets(environment, region, job, trigger_ms)),
        _metrics(
            "Archiver: heartbeat and records Kafka holds that the archive does not yet",
            region,
            [
                *environment_metrics(metric_names.ARCHIVER_HEARTBEAT),
                *environment_metrics(metric_names.ARCHIVER_RECORDS_BEHIND, stat="Maximum"),
            ],
        ),
    ]
    widgets += [
        _metrics(
            "Kafka: data disk used (%)",
            region,
            brokers("KafkaDataLogsDiskUsed", "Maximum"),
            annotation=("alarm", 85),
        ),
        _metrics("Kafka: broker CPU user (%)", region, brokers("CpuUser", "Average")),
        _metrics(
            "Kafka: partitions and controller",
            region,
            [
                cluster("OfflinePartitionsCount", "Maximum"),
                cluster("ActiveControllerCount", "Sum"),
                *brokers("UnderReplicatedPartitions", "Maximum"),
            ],
        ),
        _metrics("Spark nodes: CPU (%)", region, instances("CPUUtilization", "Average")),
        _metrics(
            "Spark nodes: failed status checks", region, instances("StatusCheckFailed", "Maximum")
        ),
    ]
    for index, widget in enumerate(widgets):
        widget.update(x=(index % 2) * WIDTH, y=(index // 2) * HEIGHT, width=WIDTH, height=HEIGHT)
    return json.dumps({"widgets": widgets})


def _job_widgets(environment: str, region: str, job: str | None, trigger_ms: int) -> list[Widget]:
    """One job's rows: its metrics carry the environment and, for a declared job, its name."""
    dimensions: list[str] = [metric_names.ENVIRONMENT_DIMENSION, environment]
    if job is not None:
        dimensions += [metric_names.JOB_DIMENSION, job]
    title = "Job" if job is None else f"Job {job}"

    def job_metrics(*names: str, stat: str = "Sum") -> list[list[Any]]:
        return [[metric_names.NAMESPACE, name, *dimensions, {"stat": stat}] for name in names]

    def by_source(name: str) -> list[list[Any]]:
        return [
            [
                metric_names.NAMESPACE,
                name,
                *dimensions,
                metric_names.SOURCE_DIMENSION,
                source,
                {"stat": "Sum", "label": source},
            ]
            for source in metric_names.SOURCES
        ]

    return [
        _metrics(
            f"{title}: heartbeat and throughput",
            region,
            job_metrics(
                metric_names.HEARTBEAT, metric_names.INPUT_MESSAGES, metric_names.ROWS_WRITTEN
            ),
        ),
        _metrics(
            f"{title}: records served, by source (the archive: what Kafka no longer holds)",
            region,
            [line for name in metric_names.BY_SOURCE for line in by_source(name)],
        ),
        _metrics(
            f"{title}: records behind the newest offsets",
            region,
            job_metrics(
                metric_names.RECORDS_BEHIND,
                metric_names.RECORDS_BEHIND_WORST_PARTITION,
                metric_names.RECORDS_BEHIND_HIGH_WATERMARK,
                stat="Maximum",
            ),
        ),
        _metrics(
            f"{title}: a last stable offset stalled behind its high watermark (s)",
            region,
            job_metrics(metric_names.STABLE_OFFSET_STALLED_SECONDS, stat="Maximum"),
        ),
        _metrics(
            f"{title}: batch duration (ms)",
            region,
            job_metrics(metric_names.BATCH_DURATION_MS, stat="Maximum"),
            annotation=("trigger interval", trigger_ms),
        ),
        _metrics(
            f"{title}: integrity",
            region,
            # Under ordered and once, what the integrity class dropped and skipped.
            job_metrics(
                metric_names.INTEGRITY_VIOLATIONS,
                metric_names.QUARANTINED_MESSAGES,
                metric_names.DROPPED_MESSAGES,
                metric_names.MISSING_SEQS,
            ),
        ),
        _metrics(
            f"{title}: state",
            region,
            job_metrics(metric_names.SESSIONS_IN_STATE, metric_names.STATE_BYTES, stat="Maximum"),
        ),
        _metrics(
            f"{title}: output",
            region,
            job_metrics(metric_names.OUTPUT_FILES, metric_names.OUTPUT_BYTES),
        ),
    ]


def _metrics(
    title: str,
    region: str,
    metrics: list[Any],
    *,
    annotation: tuple[str, int] | None = None,
) -> Widget:
    properties: dict[str, Any] = {
        "title": title,
        "region": region,
        "view": "timeSeries",
        "stacked": False,
        "period": 60,
        "metrics": metrics,
    }
    if annotation is not None:
        label, value = annotation
        properties["annotations"] = {"horizontal": [{"label": label, "value": value}]}
    return {"type": "metric", "properties": properties}


def _alarms(title: str, alarm_arns: Sequence[str]) -> Widget:
    return {"type": "alarm", "properties": {"title": title, "alarms": list(alarm_arns)}}

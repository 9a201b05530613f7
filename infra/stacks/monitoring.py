"""Alarms on the brokers, the job and the nodes, the topic they notify, and a dashboard."""

import math
from collections.abc import Mapping

from cdktf_cdktf_provider_aws.cloudwatch_dashboard import CloudwatchDashboard
from cdktf_cdktf_provider_aws.cloudwatch_metric_alarm import (
    CloudwatchMetricAlarmMetricQuery,
    CloudwatchMetricAlarmMetricQueryMetric,
)
from cdktf_cdktf_provider_aws.sns_topic import SnsTopic
from cdktf_cdktf_provider_aws.sns_topic_subscription import SnsTopicSubscription
from constructs import Construct

from app import metric_names
from infra.config import EnvironmentConfig
from infra.config.settings import EndpointKind
from infra.constructs import EncryptionKey, TopicAlarms
from infra.constructs.dashboard import EC2_NAMESPACE, MSK_NAMESPACE, dashboard_body
from infra.stacks.base import EnvironmentStack

DISK_USED_PERCENT = 85
BROKER_CPU_PERCENT = 60
# The job should publish a heartbeat every trigger; alarm after three missed
# triggers, but never sooner than five minutes (a restart takes that long).
HEARTBEAT_MIN_WINDOW_SECONDS = 300
HEARTBEAT_MISSED_TRIGGERS = 3
FIVE_MINUTES = 300
ONE_MINUTE = 60


def heartbeat_window_seconds(trigger_seconds: int) -> int:
    """Period of the heartbeat alarm: a whole number of minutes."""
    window = max(HEARTBEAT_MIN_WINDOW_SECONDS, HEARTBEAT_MISSED_TRIGGERS * trigger_seconds)
    return math.ceil(window / ONE_MINUTE) * ONE_MINUTE


class MonitoringStack(EnvironmentStack):
    """``tablecast-<env>-monitoring``: SNS topic, alarms, dashboard."""

    def __init__(
        self,
        scope: Construct,
        *,
        config: EnvironmentConfig,
        cluster_name: str,
        nodes: Mapping[str, str],
    ) -> None:
        """Create the alarms.

        :param config: the environment.
        :param cluster_name: the MSK cluster's name (the kafka stack's).
        :param nodes: Spark instance ids by node name (the spark stack's).
        """
        super().__init__(scope, config=config, component="monitoring")
        prefix = config.resource_prefix
        key = EncryptionKey(
            self,
            "alarms-key",
            alias=f"{prefix}-alarms",
            description=f"{prefix} alarm topic",
            region=config.region,
            allow_cloudwatch_alarms=True,
        )
        self.topic = SnsTopic(self, "alarms", name=f"{prefix}-alarms", kms_master_key_id=key.arn)
        self.topic_arn: str = self.topic.arn
        endpoints = config.deployment.alarm_endpoints
        for index, endpoint in enumerate(endpoints):
            if endpoint.kind is not EndpointKind.TOPIC:
                SnsTopicSubscription(
                    self,
                    f"alarm-{endpoint.kind.value}-{index}",
                    topic_arn=self.topic.arn,
                    protocol=endpoint.kind.value,
                    endpoint=endpoint.address,
                )
        existing_topics = [e.address for e in endpoints if e.kind is EndpointKind.TOPIC]
        self._alarms = TopicAlarms(
            self, name_prefix=prefix, topic_arns=[self.topic_arn, *existing_topics]
        )
        self._kafka_alarms(cluster_name)
        self._job_alarms()
        self._node_alarms(nodes)
        CloudwatchDashboard(
            self,
            "dashboard",
            dashboard_name=prefix,
            dashboard_body=dashboard_body(
                environment=config.name,
                region=config.region,
                cluster_name=cluster_name,
                broker_count=config.broker_count,
                trigger_ms=config.trigger_seconds * 1000,
                nodes=nodes,
                alarm_arns=[alarm.arn for alarm in self._alarms.alarms],
            ),
        )

    def _kafka_alarms(self, cluster_name: str) -> None:
        cluster = {"Cluster Name": cluster_name}
        for broker in range(1, self.config.broker_count + 1):
            broker_dimensions = {**cluster, "Broker ID": str(broker)}
            self._alarms.alarm(
                f"kafka-disk-used-{broker}",
                name=f"kafka-disk-used-broker-{broker}",
                description=f"Broker {broker}'s data disk is over {DISK_USED_PERCENT}% full",
                namespace=MSK_NAMESPACE,
                metric_name="KafkaDataLogsDiskUsed",
                dimensions=broker_dimensions,
                statistic="Maximum",
                period=FIVE_MINUTES,
                evaluation_periods=1,
                comparison_operator="GreaterThanOrEqualToThreshold",
                threshold=DISK_USED_PERCENT,
            )
            self._alarms.alarm(
                f"kafka-cpu-{broker}",
                name=f"kafka-cpu-broker-{broker}",
                description=f"Broker {broker}'s CPU (user + system) is over {BROKER_CPU_PERCENT}%",
                metric_query=[
                    _query("cpu_user", "CpuUser", broker_dimensions, "Average"),
                    _query("cpu_system", "CpuSystem", broker_dimensions, "Average"),
                    CloudwatchMetricAlarmMetricQuery(
                        id="cpu_total", expression="cpu_user + cpu_system", return_data=True
                    ),
                ],
                evaluation_periods=3,
                comparison_operator="GreaterThanThreshold",
                threshold=BROKER_CPU_PERCENT,
            )
        brokers = range(1, self.config.broker_count + 1)
        self._alarms.alarm(
            "kafka-under-replicated",
            name="kafka-under-replicated-partitions",
            description="Partitions have fewer in-sync replicas than they should",
            metric_query=[
                *(
                    _query(
                        f"urp_{broker}",
                        "UnderReplicatedPartitions",
                        {**cluster, "Broker ID": str(broker)},
                        "Maximum",
                    )
                    for broker in brokers
                ),
                CloudwatchMetricAlarmMetricQuery(
                    id="urp_total",
                    expression="SUM([" + ", ".join(f"urp_{broker}" for broker in brokers) + "])",
                    return_data=True,
                ),
            ],
            evaluation_periods=3,
            comparison_operator="GreaterThanThreshold",
            threshold=0,
        )
        self._alarms.alarm(
            "kafka-offline-partitions",
            name="kafka-offline-partitions",
            description="Partitions without a leader: writes and reads to them fail",
            namespace=MSK_NAMESPACE,
            metric_name="OfflinePartitionsCount",
            dimensions=cluster,
            statistic="Maximum",
            period=ONE_MINUTE,
            evaluation_periods=2,
            comparison_operator="GreaterThanThreshold",
            threshold=0,
        )
        self._alarms.alarm(
            "kafka-active-controller",
            name="kafka-active-controller-count",
            description="The cluster does not have exactly one active controller",
            metric_query=[
                _query("controllers", "ActiveControllerCount", cluster, "Sum", ONE_MINUTE),
                CloudwatchMetricAlarmMetricQuery(
                    id="off_by", expression="ABS(controllers - 1)", return_data=True
                ),
            ],
            evaluation_periods=3,
            comparison_operator="GreaterThanThreshold",
            threshold=0,
        )

    def _job_alarms(self) -> None:
        config = self.config
        job = {metric_names.ENVIRONMENT_DIMENSION: config.name}
        self._alarms.alarm(
            "job-heartbeat",
            name="job-heartbeat-missing",
            description="The job published no heartbeat: it is not running or not progressing",
            namespace=metric_names.NAMESPACE,
            metric_name=metric_names.HEARTBEAT,
            dimensions=job,
            statistic="Sum",
            period=heartbeat_window_seconds(config.trigger_seconds),
            evaluation_periods=1,
            comparison_operator="LessThanThreshold",
            threshold=1,
            # No data at all is exactly what a dead job looks like.
            treat_missing_data="breaching",
        )
        self._alarms.alarm(
            "job-integrity",
            name="job-integrity-violations",
            description="The job found messages that break a session's integrity",
            namespace=metric_names.NAMESPACE,
            metric_name=metric_names.INTEGRITY_VIOLATIONS,
            dimensions=job,
            statistic="Sum",
            period=ONE_MINUTE,
            evaluation_periods=1,
            comparison_operator="GreaterThanThreshold",
            threshold=0,
        )
        self._alarms.alarm(
            "job-records-behind",
            name="job-records-behind",
            description=(
                f"The job is more than {config.records_behind_alarm_threshold} records "
                "behind the newest offsets"
            ),
            namespace=metric_names.NAMESPACE,
            metric_name=metric_names.RECORDS_BEHIND,
            dimensions=job,
            statistic="Maximum",
            period=FIVE_MINUTES,
            evaluation_periods=3,
            comparison_operator="GreaterThanThreshold",
            threshold=config.records_behind_alarm_threshold,
        )
        self._alarms.alarm(
            "job-batch-duration",
            name="job-batch-duration",
            description=(
                f"Micro-batches take longer than the {config.trigger_interval} trigger: "
                "the job falls behind"
            ),
            namespace=metric_names.NAMESPACE,
            metric_name=metric_names.BATCH_DURATION_MS,
            dimensions=job,
            statistic="Average",
            period=FIVE_MINUTES,
            evaluation_periods=3,
            comparison_operator="GreaterThanThreshold",
            threshold=config.trigger_seconds * 1000,
        )

    def _node_alarms(self, nodes: Mapping[str, str]) -> None:
        region = self.config.region
        for name, instance_id in nodes.items():
            instance = {"InstanceId": instance_id}
            self._alarms.alarm(
                f"{name}-system-check",
                name=f"{name}-system-status-check",
                description=f"{name}'s host failed its system status check: EC2 recovers it",
                namespace=EC2_NAMESPACE,
                metric_name="StatusCheckFailed_System",
                dimensions=instance,
                statistic="Maximum",
                period=ONE_MINUTE,
                evaluation_periods=2,
                comparison_operator="GreaterThanOrEqualToThreshold",
                threshold=1,
                # Same instance id, private address and volumes on new hardware.
                extra_alarm_actions=[f"arn:aws:automate:{region}:ec2:recover"],
            )
            self._alarms.alarm(
                f"{name}-instance-check",
                name=f"{name}-instance-status-check",
                description=f"{name} failed its instance status check: EC2 reboots it",
                namespace=EC2_NAMESPACE,
                metric_name="StatusCheckFailed_Instance",
                dimensions=instance,
                statistic="Maximum",
                period=ONE_MINUTE,
                evaluation_periods=3,
                comparison_operator="GreaterThanOrEqualToThreshold",
                threshold=1,
                extra_alarm_actions=[f"arn:aws:automate:{region}:ec2:reboot"],
            )


def _query(
    id_: str,
    metric_name: str,
    dimensions: Mapping[str, str],
    stat: str,
    period: int = FIVE_MINUTES,
) -> CloudwatchMetricAlarmMetricQuery:
    """One MSK metric inside a metric-math alarm; only the expression returns data."""
    return CloudwatchMetricAlarmMetricQuery(
        id=id_,
        metric=CloudwatchMetricAlarmMetricQueryMetric(
            namespace=MSK_NAMESPACE,
            metric_name=metric_name,
            dimensions=dict(dimensions),
            stat=stat,
            period=period,
        ),
        return_data=False,
    )

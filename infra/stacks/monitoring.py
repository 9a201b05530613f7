"""Alarms on the brokers, the job and the nodes, the topic they notify, and a dashboard."""

import math
from collections.abc import Mapping

from cdktf_cdktf_provider_aws.cloudwatch_dashboard import CloudwatchDashboard
from cdktf_cdktf_provider_aws.data_aws_partition import DataAwsPartition
from cdktf_cdktf_provider_aws.sns_topic import SnsTopic
from cdktf_cdktf_provider_aws.sns_topic_subscription import SnsTopicSubscription
from constructs import Construct

from app import metric_names
from infra.config import EnvironmentConfig, layout
from infra.config.settings import EndpointKind
from infra.config.test_pipelines import destroy_command
from infra.constructs import EncryptionKey, TopicAlarms
from infra.constructs.alarm_specs import AT_LEAST, GREATER, LESS, AlarmSpec, Metric, Missing
from infra.constructs.dashboard import (
    EBS_NAMESPACE,
    EC2_NAMESPACE,
    MSK_NAMESPACE,
    SNS_NAMESPACE,
    dashboard_body,
)
from infra.constructs.expiry_notice import ExpiryNotice
from infra.stacks.base import EnvironmentStack

DISK_USED_PERCENT = 85
BROKER_CPU_PERCENT = 60
# MSK's guidance: heap after GC above 60 % for long means the broker needs
# more memory (or fewer partitions) before it stalls in GC.
BROKER_HEAP_AFTER_GC_PERCENT = 60
NODE_DISK_USED_PERCENT = 80
NODE_MEMORY_USED_PERCENT = 90
HDFS_CAPACITY_USED_PERCENT = 80
# The secondary NameNode checkpoints the edit log hourly or after 100,000
# transactions (the image's hdfs-site.xml); three times either means it has
# stopped, and every NameNode start replays what has piled up.
CHECKPOINT_TXNS = 100_000
CHECKPOINT_PERIOD_MINUTES = 60
MISSED_CHECKPOINTS = 3
NAME_DIRS_USED_PERCENT = 80
# The job should publish a heartbeat every trigger; alarm after three missed
# triggers, but never sooner than five minutes (a restart takes that long).
HEARTBEAT_MIN_WINDOW_SECONDS = 300
HEARTBEAT_MISSED_TRIGGERS = 3
FIVE_MINUTES = 300
ONE_MINUTE = 60
ONE_HOUR = 3600
# Kafka's transaction.max.timeout.ms (15 minutes by default): no transaction may
# stay open longer, its coordinator aborts it. A last stable offset that stays
# put with records beyond it for longer is a transaction left open (hung).
STABLE_OFFSET_STALLED_SECONDS = 900
# The driver copies the checkpoint hourly; three missed copies alarm.
BACKUP_WINDOW_HOURS = 3
# The archiver publishes its heartbeat every minute; five silent minutes alarm (a restart
# of its service takes 30 s and a few for the catalog of topics).
ARCHIVER_WINDOW_SECONDS = 300
# The CloudWatch agent's file systems: the root (Debian's ext4) and the HDFS
# data volume (XFS, formatted by node-bootstrap), by path and type.
NODE_FILE_SYSTEMS = (("root", "/", "ext4"), ("data", "/data", "xfs"))
HDFS_METRICS = (
    "HdfsLiveDataNodes",
    "HdfsDeadDataNodes",
    "HdfsMissingBlocks",
    "HdfsUnderReplicatedBlocks",
    "HdfsCorruptBlocks",
    "HdfsCapacityUsedPercent",
    "HdfsTransactionsSinceCheckpoint",
    "HdfsMinutesSinceCheckpoint",
    "HdfsNameDirsUsedPercent",
)
"""What ami/files/bin/hdfs-health publishes (tests/infra checks the script)."""
CHECKPOINT_BACKUPS = "CheckpointBackups"
"""What ami/files/bin/hdfs-checkpoint-backup publishes after each copy."""


def heartbeat_window_seconds(trigger_seconds: int) -> int:
    """Period of the heartbeat alarm: a whole number of minutes."""
    window = max(HEARTBEAT_MIN_WINDOW_SECONDS, HEARTBEAT_MISSED_TRIGGERS * trigger_seconds)
    return math.ceil(window / ONE_MINUTE) * ONE_MINUTE


def kafka_alarms(config: EnvironmentConfig, cluster_name: str) -> list[AlarmSpec]:
    """Per broker: disk, CPU, heap after GC; per cluster: replicas, leaders, controller."""
    cluster = {"Cluster Name": cluster_name}
    brokers = range(1, config.broker_count + 1)

    def broker(number: int, name: str, statistic: str, period: int = FIVE_MINUTES) -> Metric:
        dimensions = {**cluster, "Broker ID": str(number)}
        return Metric(
            namespace=MSK_NAMESPACE,
            name=name,
            dimensions=dimensions,
            statistic=statistic,
            period=period,
        )

    def every_broker(name: str, statistic: str) -> dict[str, Metric]:
        return {f"b{number}": broker(number, name, statistic) for number in brokers}

    specs: list[AlarmSpec] = []
    for number in brokers:
        specs += [
            AlarmSpec(
                name=f"kafka-disk-used-broker-{number}",
                description=f"Broker {number}'s data disk is over {DISK_USED_PERCENT}% full "
                "(storage autoscaling should have grown it)",
                metric=broker(number, "KafkaDataLogsDiskUsed", "Maximum"),
                comparison=AT_LEAST,
                threshold=DISK_USED_PERCENT,
                evaluation_periods=1,
                # A broker that reports nothing is down or cut off.
                missing=Missing.BREACHING,
            ),
            AlarmSpec(
                name=f"kafka-cpu-broker-{number}",
                description=f"Broker {number}'s CPU (user + system) is over {BROKER_CPU_PERCENT}%",
                terms={
                    "user": broker(number, "CpuUser", "Average"),
                    "system": broker(number, "CpuSystem", "Average"),
                },
                expression="user + system",
                comparison=GREATER,
                threshold=BROKER_CPU_PERCENT,
                evaluation_periods=3,
                missing=Missing.BREACHING,
            ),
            AlarmSpec(
                name=f"kafka-heap-after-gc-broker-{number}",
                description=f"Broker {number}'s heap after GC is over "
                f"{BROKER_HEAP_AFTER_GC_PERCENT}%: it is running out of memory",
                metric=broker(number, "HeapMemoryAfterGC", "Maximum"),
                comparison=GREATER,
                threshold=BROKER_HEAP_AFTER_GC_PERCENT,
                evaluation_periods=3,
                missing=Missing.BREACHING,
            ),
        ]
    total = "SUM([" + ", ".join(f"b{number}" for number in brokers) + "])"
    specs += [
        AlarmSpec(
            name="kafka-under-replicated-partitions",
            description="Partitions have fewer in-sync replicas than they should",
            terms=every_broker("UnderReplicatedPartitions", "Maximum"),
            expression=total,
            comparison=GREATER,
            threshold=0,
            evaluation_periods=3,
            missing=Missing.BREACHING,
        ),
        AlarmSpec(
            name="kafka-under-min-isr-partitions",
            description="Partitions are below min.insync.replicas: acks=all writes to them fail",
            terms=every_broker("UnderMinIsrPartitionCount", "Maximum"),
            expression=total,
            comparison=GREATER,
            threshold=0,
            evaluation_periods=2,
            missing=Missing.BREACHING,
        ),
        AlarmSpec(
            name="kafka-offline-partitions",
            description="Partitions without a leader: writes and reads to them fail",
            metric=Metric(
                namespace=MSK_NAMESPACE,
                name="OfflinePartitionsCount",
                dimensions=cluster,
                statistic="Maximum",
            ),
            comparison=GREATER,
            threshold=0,
            evaluation_periods=2,
            # A controller's metric: with KRaft, MSK's own controllers may report none,
            # and every broker's disk, CPU and heap alarms already breach on silence.
            missing=Missing.BREACHING
            if config.kafka_metadata_mode == "zookeeper"
            else Missing.NOT_BREACHING,
        ),
    ]
    if config.kafka_metadata_mode == "zookeeper":
        # In KRaft mode MSK runs the controllers apart from the brokers and
        # watches them itself; the brokers report no active controller.
        specs.append(
            AlarmSpec(
                name="kafka-active-controller-count",
                description="The cluster does not have exactly one active controller",
                terms={
                    "controllers": Metric(
                        namespace=MSK_NAMESPACE,
                        name="ActiveControllerCount",
                        dimensions=cluster,
                        statistic="Sum",
                    )
                },
                expression="ABS(controllers - 1)",
                comparison=GREATER,
                threshold=0,
                evaluation_periods=3,
                missing=Missing.BREACHING,
            )
        )
    return specs


def job_alarms(config: EnvironmentConfig) -> list[AlarmSpec]:
    """The jobs' own metrics (``app.metric_names``): the environment's one job's, or each
    declared job's (``job-<name>-...``, its ``Job`` dimension)."""
    if not config.jobs:
        return _job_alarms(config, None)
    return [spec for job in config.jobs for spec in _job_alarms(config, job.name)]


def job_dimensions(environment: str, job: str | None) -> dict[str, str]:
    """The dimensions a job's metrics carry: its environment, and a declared job's name."""
    dimensions = {metric_names.ENVIRONMENT_DIMENSION: environment}
    if job is not None:
        dimensions[metric_names.JOB_DIMENSION] = job
    return dimensions


def _job_alarms(config: EnvironmentConfig, job_name: str | None) -> list[AlarmSpec]:
    job = job_dimensions(config.name, job_name)
    the_job = "The job" if job_name is None else f"Job {job_name}"

    def metric(name: str, statistic: str, period: int = FIVE_MINUTES) -> Metric:
        return Metric(
            namespace=metric_names.NAMESPACE,
            name=name,
            dimensions=job,
            statistic=statistic,
            period=period,
        )

    def named(alarm: str) -> str:
        return metric_names.job_alarm(alarm, job_name)

    return [
        AlarmSpec(
            name=named("job-heartbeat-missing"),
            description=f"{the_job} published no heartbeat: it is not running or not progressing",
            metric=metric(
                metric_names.HEARTBEAT, "Sum", heartbeat_window_seconds(config.trigger_seconds)
            ),
            comparison=LESS,
            threshold=1,
            evaluation_periods=1,
            # No data at all is exactly what a dead job looks like.
            missing=Missing.BREACHING,
            armed_by_deploy=True,
        ),
        AlarmSpec(
            name=named("job-integrity-violations"),
            description=f"{the_job} found messages that break a session's integrity",
            metric=metric(metric_names.INTEGRITY_VIOLATIONS, "Sum", ONE_MINUTE),
            comparison=GREATER,
            threshold=0,
            evaluation_periods=1,
            # Silence is a stopped job, which the heartbeat alarm reports.
            missing=Missing.NOT_BREACHING,
        ),
        AlarmSpec(
            name=named("job-records-behind"),
            description=f"{the_job} is more than {config.records_behind_alarm_threshold} records "
            "behind the newest offsets",
            metric=metric(metric_names.RECORDS_BEHIND, "Maximum"),
            comparison=GREATER,
            threshold=config.records_behind_alarm_threshold,
            evaluation_periods=3,
            # Covered by the heartbeat alarm when the job is silent.
            missing=Missing.NOT_BREACHING,
        ),
        AlarmSpec(
            name=named("job-stable-offset-stalled"),
            description="A partition's last stable offset has not moved for more than "
            f"{STABLE_OFFSET_STALLED_SECONDS // ONE_MINUTE} minutes with records beyond it: a "
            "transaction left open holds back every record after it (RecordsBehind stays 0, "
            "RecordsBehindHighWatermark grows)",
            metric=metric(metric_names.STABLE_OFFSET_STALLED_SECONDS, "Maximum"),
            comparison=GREATER,
            threshold=STABLE_OFFSET_STALLED_SECONDS,
            evaluation_periods=1,
            # Covered by the heartbeat alarm when the job is silent.
            missing=Missing.NOT_BREACHING,
        ),
        AlarmSpec(
            name=named("job-batch-duration"),
            description=f"Micro-batches take longer than the {config.trigger_interval} trigger: "
            "the job falls behind",
            metric=metric(metric_names.BATCH_DURATION_MS, "Average"),
            comparison=GREATER,
            threshold=config.trigger_seconds * 1000,
            evaluation_periods=3,
            # Covered by the heartbeat alarm when the job is silent.
            missing=Missing.NOT_BREACHING,
        ),
    ]


def archiver_alarms(config: EnvironmentConfig) -> list[AlarmSpec]:
    """The archiver's heartbeat and lag: once Kafka's retention passes, the archive is the
    only copy, so a stopped or stuck archiver is a loss in waiting."""
    archiver = {metric_names.ENVIRONMENT_DIMENSION: config.name}

    def metric(name: str, statistic: str) -> Metric:
        return Metric(
            namespace=metric_names.NAMESPACE,
            name=name,
            dimensions=archiver,
            statistic=statistic,
            period=ARCHIVER_WINDOW_SECONDS,
        )

    return [
        AlarmSpec(
            name="archiver-heartbeat-missing",
            description="The archiver published no heartbeat: Kafka is not being archived, and "
            "what retention drops meanwhile is lost",
            metric=metric(metric_names.ARCHIVER_HEARTBEAT, "Sum"),
            comparison=LESS,
            threshold=1,
            evaluation_periods=1,
            missing=Missing.BREACHING,
            armed_by_deploy=True,
        ),
        AlarmSpec(
            name="archiver-records-behind",
            description=f"The archive is more than {config.records_behind_alarm_threshold} "
            "records behind Kafka",
            metric=metric(metric_names.ARCHIVER_RECORDS_BEHIND, "Maximum"),
            comparison=GREATER,
            threshold=config.records_behind_alarm_threshold,
            evaluation_periods=3,
            # Covered by the heartbeat alarm when the archiver is silent.
            missing=Missing.NOT_BREACHING,
        ),
    ]


def delivery_alarms(*, topic_name: str, dlm_policy_id: str) -> list[AlarmSpec]:
    """What fails quietly: DLM's snapshots of the HDFS volumes, SNS's deliveries of alarms."""
    return [
        AlarmSpec(
            name="hdfs-snapshots-failed",
            description="DLM failed to snapshot HDFS data volumes",
            metric=Metric(
                namespace=EBS_NAMESPACE,
                name="SnapshotsCreateFailed",
                dimensions={"DLMPolicyId": dlm_policy_id},
                statistic="Sum",
                period=ONE_HOUR,
            ),
            comparison=GREATER,
            threshold=0,
            evaluation_periods=1,
            # DLM reports only the runs it makes; the data volumes' own alarms (disk,
            # the nodes) are not about it, so silence is no failure here.
            missing=Missing.NOT_BREACHING,
        ),
        AlarmSpec(
            name="alarm-deliveries-failed",
            description=f"SNS failed to deliver notifications of {topic_name} (an endpoint "
            "refuses them or was never confirmed)",
            metric=Metric(
                namespace=SNS_NAMESPACE,
                name="NumberOfNotificationsFailed",
                dimensions={"TopicName": topic_name},
                statistic="Sum",
                period=FIVE_MINUTES,
            ),
            comparison=GREATER,
            threshold=0,
            evaluation_periods=1,
            # SNS reports only when it delivers something.
            missing=Missing.NOT_BREACHING,
        ),
    ]


def node_alarms(
    config: EnvironmentConfig, nodes: Mapping[str, str], partition: str
) -> list[AlarmSpec]:
    """Per node: EC2 status checks (with recovery), disk and memory (CloudWatch agent)."""
    region = config.region

    def ec2(metric_name: str, instance: Mapping[str, str]) -> Metric:
        return Metric(
            namespace=EC2_NAMESPACE, name=metric_name, dimensions=instance, statistic="Maximum"
        )

    def agent(metric_name: str, instance: Mapping[str, str], **extra: str) -> Metric:
        return Metric(
            namespace=layout.NODE_METRICS_NAMESPACE,
            name=metric_name,
            dimensions={**instance, **extra},
            statistic="Maximum",
            period=FIVE_MINUTES,
        )

    specs: list[AlarmSpec] = []
    for name, instance_id in nodes.items():
        instance = {"InstanceId": instance_id}
        specs += [
            AlarmSpec(
                name=f"{name}-system-status-check",
                description=f"{name}'s host failed its system status check: EC2 recovers it",
                metric=ec2("StatusCheckFailed_System", instance),
                comparison=AT_LEAST,
                threshold=1,
                evaluation_periods=2,
                # Not breaching: a stopped instance reports nothing, and
                # recovering a stopped instance fails.
                missing=Missing.NOT_BREACHING,
                # Same instance id, private address and volumes on new hardware.
                extra_actions=(f"arn:{partition}:automate:{region}:ec2:recover",),
            ),
            AlarmSpec(
                name=f"{name}-instance-status-check",
                description=f"{name} failed its instance status check: EC2 reboots it",
                metric=ec2("StatusCheckFailed_Instance", instance),
                comparison=AT_LEAST,
                threshold=1,
                evaluation_periods=3,
                missing=Missing.NOT_BREACHING,
                extra_actions=(f"arn:{partition}:automate:{region}:ec2:reboot",),
            ),
            AlarmSpec(
                name=f"{name}-memory-used",
                description=f"{name} uses over {NODE_MEMORY_USED_PERCENT}% of its memory",
                metric=agent("mem_used_percent", instance),
                comparison=GREATER,
                threshold=NODE_MEMORY_USED_PERCENT,
                evaluation_periods=3,
                # The agent stopped reporting: nobody sees the node fill up.
                missing=Missing.BREACHING,
            ),
            *(
                AlarmSpec(
                    name=f"{name}-{label}-disk-used",
                    description=f"{name}'s {path} is over {NODE_DISK_USED_PERCENT}% full",
                    metric=agent("disk_used_percent", instance, path=path, fstype=fstype),
                    comparison=GREATER,
                    threshold=NODE_DISK_USED_PERCENT,
                    evaluation_periods=1,
                    missing=Missing.BREACHING,
                )
                for label, path, fstype in NODE_FILE_SYSTEMS
            ),
        ]
    return specs


def hdfs_alarms(config: EnvironmentConfig) -> list[AlarmSpec]:
    """HDFS as the driver's NameNode sees it, and the checkpoint's copies in S3."""
    environment = {"Environment": config.name}

    def hdfs(name: str, statistic: str = "Maximum", period: int = FIVE_MINUTES) -> Metric:
        return Metric(
            namespace=layout.NODE_METRICS_NAMESPACE,
            name=name,
            dimensions=environment,
            statistic=statistic,
            period=period,
        )

    return [
        AlarmSpec(
            name="hdfs-live-datanodes",
            description=f"Fewer than {config.spark_worker_count} DataNodes are alive, "
            "or the NameNode does not answer",
            metric=hdfs("HdfsLiveDataNodes", "Minimum"),
            comparison=LESS,
            threshold=config.spark_worker_count,
            evaluation_periods=2,
            # No data: the NameNode (or its driver) is down.
            missing=Missing.BREACHING,
        ),
        AlarmSpec(
            name="hdfs-missing-blocks",
            description="HDFS lost every copy of some blocks: the checkpoint is damaged",
            metric=hdfs("HdfsMissingBlocks"),
            comparison=GREATER,
            threshold=0,
            evaluation_periods=1,
            # Covered by hdfs-live-datanodes when silent.
            missing=Missing.NOT_BREACHING,
        ),
        AlarmSpec(
            name="hdfs-corrupt-blocks",
            description="HDFS holds corrupt blocks",
            metric=hdfs("HdfsCorruptBlocks"),
            comparison=GREATER,
            threshold=0,
            evaluation_periods=1,
            missing=Missing.NOT_BREACHING,
        ),
        AlarmSpec(
            name="hdfs-under-replicated-blocks",
            description=f"Blocks have fewer than {config.hdfs_replication} copies for 30 min",
            metric=hdfs("HdfsUnderReplicatedBlocks"),
            comparison=GREATER,
            threshold=0,
            evaluation_periods=6,
            missing=Missing.NOT_BREACHING,
        ),
        AlarmSpec(
            name="hdfs-capacity-used",
            description=f"HDFS is over {HDFS_CAPACITY_USED_PERCENT}% full",
            metric=hdfs("HdfsCapacityUsedPercent"),
            comparison=GREATER,
            threshold=HDFS_CAPACITY_USED_PERCENT,
            evaluation_periods=1,
            missing=Missing.NOT_BREACHING,
        ),
        AlarmSpec(
            name="hdfs-checkpoint-transactions",
            description=f"Over {MISSED_CHECKPOINTS * CHECKPOINT_TXNS:,} edits since the last "
            "checkpoint of the edit log: is the secondary NameNode down?",
            metric=hdfs("HdfsTransactionsSinceCheckpoint"),
            comparison=GREATER,
            threshold=MISSED_CHECKPOINTS * CHECKPOINT_TXNS,
            evaluation_periods=1,
            # Covered by hdfs-live-datanodes when silent.
            missing=Missing.NOT_BREACHING,
        ),
        AlarmSpec(
            name="hdfs-checkpoint-age",
            description=f"No checkpoint of the edit log for {MISSED_CHECKPOINTS} periods "
            f"({MISSED_CHECKPOINTS * CHECKPOINT_PERIOD_MINUTES} minutes)",
            metric=hdfs("HdfsMinutesSinceCheckpoint"),
            comparison=GREATER,
            threshold=MISSED_CHECKPOINTS * CHECKPOINT_PERIOD_MINUTES,
            evaluation_periods=1,
            missing=Missing.NOT_BREACHING,
        ),
        AlarmSpec(
            name="hdfs-name-dirs-used",
            description=f"A NameNode name directory's disk is over {NAME_DIRS_USED_PERCENT}% full",
            metric=hdfs("HdfsNameDirsUsedPercent"),
            comparison=GREATER,
            threshold=NAME_DIRS_USED_PERCENT,
            evaluation_periods=1,
            missing=Missing.NOT_BREACHING,
        ),
        AlarmSpec(
            name="checkpoint-backup-missing",
            description=f"No copy of the checkpoint reached S3 for {BACKUP_WINDOW_HOURS} hours",
            metric=hdfs(CHECKPOINT_BACKUPS, "Sum", BACKUP_WINDOW_HOURS * ONE_HOUR),
            comparison=LESS,
            threshold=1,
            evaluation_periods=1,
            missing=Missing.BREACHING,
            # No checkpoint to copy before the job's first run.
            armed_by_deploy=True,
        ),
    ]


class MonitoringStack(EnvironmentStack):
    """``tablecast-<env>-monitoring``: SNS topic, alarms, dashboard."""

    def __init__(
        self,
        scope: Construct,
        *,
        config: EnvironmentConfig,
        cluster_name: str,
        nodes: Mapping[str, str],
        dlm_policy_id: str,
    ) -> None:
        """Create the alarms.

        :param config: the environment.
        :param cluster_name: the MSK cluster's name (the kafka stack's).
        :param nodes: Spark instance ids by node name (the spark stack's).
        :param dlm_policy_id: the HDFS volumes' snapshot policy (the spark stack's).
        """
        super().__init__(scope, config=config, component="monitoring")
        prefix = config.resource_prefix
        partition = DataAwsPartition(self, "partition").partition
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
        if config.test_pipeline is not None:
            # The owner is one of the endpoints subscribed above.
            self.expiry_notice: ExpiryNotice | None = ExpiryNotice(
                self,
                "expiry-notice",
                name=config.name,
                declared=config.test_pipeline,
                topic_arn=self.topic_arn,
                key_arn=key.arn,
                destroy=destroy_command(config.name),
                instance_ids=list(nodes.values()),
                region=config.region,
                partition=partition,
            )
        else:
            self.expiry_notice = None
        existing_topics = [e.address for e in endpoints if e.kind is EndpointKind.TOPIC]
        self._alarms = TopicAlarms(
            self, name_prefix=prefix, topic_arns=[self.topic_arn, *existing_topics]
        )
        self.specs = [
            *kafka_alarms(config, cluster_name),
            *job_alarms(config),
            *archiver_alarms(config),
            *node_alarms(config, nodes, partition),
            *hdfs_alarms(config),
            *delivery_alarms(topic_name=f"{prefix}-alarms", dlm_policy_id=dlm_policy_id),
        ]
        """Every alarm of the environment, as data."""
        for spec in self.specs:
            self._alarms.alarm(spec)
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
                jobs=[job.name for job in config.jobs] or [None],
                nodes=nodes,
                alarm_arns=[alarm.arn for alarm in self._alarms.alarms],
            ),
        )

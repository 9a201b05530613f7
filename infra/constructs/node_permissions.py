"""The Spark nodes' least-privilege policies, one role per kind: driver, workers, archiver.

No statement allows an action with a wildcard; resources are the bucket's
prefixes, the cluster and its topics and groups as far as consuming needs
(``infra.constructs.kafka_access``), and the environment's SSM parameters.
``cloudwatch:PutMetricData`` has no resource type, so a condition limits it
to the job's and the nodes' namespaces instead; the SSM agent's message
actions have none either and are the only other ``"*"``.
"""

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Final

from app import handoff, metric_names
from infra.config import layout
from infra.constructs.iceberg_catalog import job_statements as iceberg_job_statements
from infra.constructs.kafka_access import KafkaResources, consume_statements, load_statements
from infra.constructs.policies import Statement, allow

# What each role may do under one prefix of the bucket. No role deletes under
# archive/ (repair's last resort once Kafka's retention has passed), and none
# writes artifacts/: the deploy tool (the operator's credentials) does.
S3_READ = ("s3:GetObject",)
S3_WRITE = (*S3_READ, "s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts")
S3_WRITE_DELETE = (*S3_WRITE, "s3:DeleteObject")


class NodeKind(StrEnum):
    """Who holds a role of its own: the driver node, the workers, the archiver."""

    DRIVER = "driver"
    """The driver node: Spark master, NameNode, the job's driver, the checkpoint copies."""
    WORKER = "worker"
    """A worker node: the job's executors, DataNode."""
    ARCHIVER = "archiver"
    """The archiver service (on the driver node, which assumes this role for it)."""


BUCKET_ACCESS: Final[Mapping[NodeKind, Mapping[str, tuple[str, ...]]]] = {
    NodeKind.DRIVER: {
        layout.ARTIFACTS_PREFIX: S3_READ,  # run-job fetches the wheel
        layout.OUTPUT_PREFIX: S3_WRITE_DELETE,  # the sink's commit protocol
        layout.ARCHIVE_PREFIX: S3_READ,  # offsets Kafka no longer holds
        layout.CHECKPOINT_BACKUPS_PREFIX: S3_WRITE,  # hdfs-checkpoint-backup
    },
    NodeKind.WORKER: {
        layout.OUTPUT_PREFIX: S3_WRITE_DELETE,
        layout.ARCHIVE_PREFIX: S3_READ,
    },
    NodeKind.ARCHIVER: {layout.ARCHIVE_PREFIX: S3_WRITE},
}
"""Per role, each prefix it may touch and how."""

S3_BUCKET_ACTIONS = ("s3:GetBucketLocation", "s3:ListBucket", "s3:ListBucketMultipartUploads")
# The archiver puts each archive file under Object Lock where the environment's archive is
# locked (production): governance retention it may set and read, never shorten or lift.
S3_RETENTION_ACTIONS = ("s3:GetObjectRetention", "s3:PutObjectRetention")
S3_ENDPOINT_ACTIONS = tuple(
    sorted(
        {
            *S3_BUCKET_ACTIONS,
            *S3_RETENTION_ACTIONS,
            *(
                a
                for access in BUCKET_ACCESS.values()
                for actions in access.values()
                for a in actions
            ),
        }
    )
)
"""Everything any node does in the bucket: what the S3 endpoint's policy lets through."""

LOG_SHIPPING_ACTIONS = ("logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents")
SSM_READ_ACTIONS = ("ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath")
# What the SSM agent needs for Run Command (the deploy tool restarts the job's
# service with it) and Session Manager, instead of AmazonSSMManagedInstanceCore,
# which also reads every parameter and document of the account. AWS defines no
# resource for these actions: they take "*".
SSM_AGENT_MESSAGE_ACTIONS = (
    "ec2messages:AcknowledgeMessage",
    "ec2messages:DeleteMessage",
    "ec2messages:FailMessage",
    "ec2messages:GetEndpoint",
    "ec2messages:GetMessages",
    "ec2messages:SendReply",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
)
# The agent registers its node; scoped to this account's instances.
SSM_AGENT_REGISTER_ACTIONS = ("ssm:UpdateInstanceInformation",)
ACTIONS_WITHOUT_RESOURCES = frozenset({"cloudwatch:PutMetricData", *SSM_AGENT_MESSAGE_ACTIONS})
"""The only actions a node's policy allows on ``"*"`` (AWS has no resource type for them)."""


def node_statements(
    *,
    kind: NodeKind,
    environment: str,
    region: str,
    account: str,
    partition: str,
    bucket_arn: str,
    data_key_arn: str,
    kafka: KafkaResources,
    metric_namespaces: Sequence[str],
    log_group_arns: Sequence[str],
    archiver_role_arn: str | None = None,
    kafka_secret_arn: str = "",
    kafka_secret_key_arn: str = "",
    archive_locked: bool = False,
    test_pipeline: bool = False,
    glue_tables: Sequence[str] = (layout.DEFAULT_GLUE_TABLE,),
) -> list[Statement]:
    """Every statement of the inline policy of ``kind``'s role.

    :param kind: the driver, the workers or the archiver.
    :param kafka: the cluster's ARNs; every role consumes (the job, the archiver).
    :param metric_namespaces: CloudWatch namespaces the nodes publish to: the job's and
        the CloudWatch agent's (the archiver publishes none).
    :param log_group_arns: the log groups the nodes' CloudWatch agent writes to.
    :param archiver_role_arn: the archiver's role, which the driver assumes for it.
    :param kafka_secret_arn: the secret of the SCRAM sign-in, if the job signs in so:
        every role reads Kafka (the driver plans, the workers' tasks read ranges, the
        archiver copies), so each may read exactly this secret.
    :param kafka_secret_key_arn: the secret's KMS key, used through Secrets Manager only.
    :param archive_locked: the archive is under Object Lock: the archiver puts each file's
        retention.
    :param glue_tables: the jobs' Iceberg tables in the environment's Glue database, which
        the driver commits.
    :param test_pipeline: a test pipeline's driver also creates and loads the pipeline's
        topics, so that ``tablecast-ops test-run`` runs there (it reaches the brokers).
    """
    parameters = f"arn:{partition}:ssm:{region}:{account}:parameter{handoff.PREFIX}/{environment}"
    access = BUCKET_ACCESS[kind]
    statements = [
        allow(
            "ListPipelinePrefixes",
            ["s3:ListBucket"],
            [bucket_arn],
            {"StringLike": {"s3:prefix": _prefix_patterns(sorted(access))}},
        ),
        allow(
            "BucketMetadata",
            [a for a in S3_BUCKET_ACTIONS if a != "s3:ListBucket"],
            [bucket_arn],
        ),
        *(
            allow(
                f"Objects{''.join(part.title() for part in prefix.split('-'))}",
                actions,
                # The prefix itself too: s3a probes "output" as a file before
                # treating it as a directory.
                [f"{bucket_arn}/{pattern}" for pattern in _prefix_patterns([prefix])],
            )
            for prefix, actions in sorted(access.items())
        ),
        allow(
            "UsePipelineDataKeyThroughS3",
            ["kms:Decrypt", "kms:GenerateDataKey"],
            [data_key_arn],
            {"StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"}},
        ),
        *consume_statements(kafka),
        *kafka_secret_statements(region, kafka_secret_arn, kafka_secret_key_arn),
    ]
    if kind is NodeKind.ARCHIVER:
        # It reads the hand-off (brokers, archive) and publishes its heartbeat and lag;
        # its logs and its node are the driver's.
        archiver = [
            *statements,
            _handoff_reads(parameters),
            _publish_metrics([metric_names.NAMESPACE]),
        ]
        if archive_locked:
            archive = [f"{bucket_arn}/{layout.ARCHIVE_PREFIX}/*"]
            archiver.append(allow("LockArchiveFiles", S3_RETENTION_ACTIONS, archive))
        return archiver
    statements += [
        _publish_metrics(metric_namespaces),
        allow("SsmAgentMessages", SSM_AGENT_MESSAGE_ACTIONS, ["*"]),
        allow(
            "SsmAgentRegisters",
            SSM_AGENT_REGISTER_ACTIONS,
            [f"arn:{partition}:ec2:{region}:{account}:instance/*"],
        ),
        allow(
            "ShipNodeLogs",
            LOG_SHIPPING_ACTIONS,
            [pattern for arn in log_group_arns for pattern in (arn, f"{arn}:*")],
        ),
    ]
    if kind is NodeKind.WORKER:
        return statements  # executors get their settings from the driver, not SSM
    if archiver_role_arn is None:
        raise ValueError("the driver's policy needs the archiver's role to assume")
    return [
        *statements,
        _handoff_reads(parameters),
        allow("BecomeTheArchiver", ["sts:AssumeRole"], [archiver_role_arn]),
        # The output's Iceberg table: the sink and the recomputes commit on the driver.
        *iceberg_job_statements(
            database=layout.glue_database(environment),
            region=region,
            account=account,
            partition=partition,
            tables=glue_tables,
        ),
        *(load_statements(kafka) if test_pipeline else []),
    ]


def _publish_metrics(namespaces: Sequence[str]) -> Statement:
    # PutMetricData has no resource type: the namespace condition is its scope.
    return allow(
        "PublishMetrics",
        ["cloudwatch:PutMetricData"],
        ["*"],
        {"StringEquals": {"cloudwatch:namespace": list(namespaces)}},
    )


def kafka_secret_statements(region: str, secret_arn: str, key_arn: str) -> list[Statement]:
    """Reading the SCRAM sign-in's secret (none without one)."""
    if not secret_arn:
        return []
    statements = [allow("ReadKafkaSecret", ["secretsmanager:GetSecretValue"], [secret_arn])]
    if key_arn:
        statements.append(
            allow(
                "DecryptKafkaSecret",
                ["kms:Decrypt"],
                [key_arn],
                {"StringEquals": {"kms:ViaService": f"secretsmanager.{region}.amazonaws.com"}},
            )
        )
    return statements


def _handoff_reads(parameters: str) -> Statement:
    return allow("ReadHandoffParameters", SSM_READ_ACTIONS, [parameters, f"{parameters}/*"])


def _prefix_patterns(prefixes: Sequence[str]) -> list[str]:
    return [pattern for prefix in prefixes for pattern in (prefix, f"{prefix}/*")]

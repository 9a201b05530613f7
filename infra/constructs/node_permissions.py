"""The Spark nodes' least-privilege policy: the pipeline's prefixes, its topics, its metrics.

No statement allows an action with a wildcard; resources are the bucket's
prefixes, the cluster and its topics and groups as far as consuming needs
(``infra.constructs.kafka_access``), and the environment's SSM parameters.
``cloudwatch:PutMetricData`` has no resource type, so a condition limits it
to the job's and the nodes' namespaces instead; the SSM agent's message
actions have none either and are the only other ``"*"``.
"""

from collections.abc import Sequence

from app import handoff
from infra.constructs.iceberg_catalog import job_statements as iceberg_job_statements
from infra.constructs.kafka_access import KafkaResources, consume_statements
from infra.constructs.policies import Statement, allow

S3_OBJECT_ACTIONS = (
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
)
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
    environment: str,
    region: str,
    account: str,
    partition: str,
    bucket_arn: str,
    bucket_prefixes: Sequence[str],
    data_key_arn: str,
    kafka: KafkaResources,
    metric_namespaces: Sequence[str],
    log_group_arns: Sequence[str],
) -> list[Statement]:
    """Every statement of the nodes' inline policy.

    :param bucket_prefixes: prefixes without slashes, e.g. ``("output", "archive")``.
    :param kafka: the cluster's ARNs; the nodes consume (the job, the archiver).
    :param metric_namespaces: CloudWatch namespaces the nodes publish to: the job's and
        the CloudWatch agent's.
    :param log_group_arns: the log groups the nodes' CloudWatch agent writes to.
    """
    parameters = f"arn:{partition}:ssm:{region}:{account}:parameter{handoff.PREFIX}/{environment}"
    return [
        allow(
            "ListPipelinePrefixes",
            ["s3:ListBucket"],
            [bucket_arn],
            {"StringLike": {"s3:prefix": _prefix_patterns(bucket_prefixes)}},
        ),
        allow(
            "BucketMetadata",
            ["s3:GetBucketLocation", "s3:ListBucketMultipartUploads"],
            [bucket_arn],
        ),
        allow(
            "ReadWritePipelineObjects",
            S3_OBJECT_ACTIONS,
            # The prefix itself too: s3a probes "output" as a file before
            # treating it as a directory.
            [f"{bucket_arn}/{pattern}" for pattern in _prefix_patterns(bucket_prefixes)],
        ),
        allow(
            "UsePipelineDataKeyThroughS3",
            ["kms:Decrypt", "kms:GenerateDataKey"],
            [data_key_arn],
            {"StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"}},
        ),
        allow(
            "PublishMetrics",
            ["cloudwatch:PutMetricData"],
            ["*"],
            {"StringEquals": {"cloudwatch:namespace": list(metric_namespaces)}},
        ),
        *consume_statements(kafka),
        *iceberg_job_statements(region=region, account=account, partition=partition),
        allow("ReadHandoffParameters", SSM_READ_ACTIONS, [parameters, f"{parameters}/*"]),
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


def _prefix_patterns(prefixes: Sequence[str]) -> list[str]:
    return [pattern for prefix in prefixes for pattern in (prefix, f"{prefix}/*")]

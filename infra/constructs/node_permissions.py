"""The Spark nodes' least-privilege policy: the pipeline's prefixes, its topics, its metrics.

No statement allows an action with a wildcard; resources are the bucket's
prefixes, the cluster and topics and groups under the topic prefix, and the
environment's SSM parameters. ``cloudwatch:PutMetricData`` has no resource
type, so a condition limits it to the job's namespace instead.
"""

from collections.abc import Sequence

from app import handoff, metric_names
from infra.constructs.policies import Statement, allow

S3_OBJECT_ACTIONS = (
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
)
KAFKA_CONSUMER_TOPIC_ACTIONS = ("kafka-cluster:DescribeTopic", "kafka-cluster:ReadData")
KAFKA_GROUP_ACTIONS = ("kafka-cluster:DescribeGroup", "kafka-cluster:AlterGroup")
# The operator's topic and produce tools run on the driver node (the only
# place inside the private network), with the nodes' role; they are limited
# to topics under the same prefix.
KAFKA_OPERATOR_TOPIC_ACTIONS = (
    "kafka-cluster:CreateTopic",
    "kafka-cluster:AlterTopic",
    "kafka-cluster:DescribeTopicDynamicConfiguration",
    "kafka-cluster:WriteData",
)
LOG_SHIPPING_ACTIONS = ("logs:CreateLogStream", "logs:DescribeLogStreams", "logs:PutLogEvents")
SSM_READ_ACTIONS = ("ssm:GetParameter", "ssm:GetParameters", "ssm:GetParametersByPath")
# Spark's Kafka source names its consumer groups so unless the job sets
# ``groupIdPrefix``; allowed beside the topic prefix so either works.
SPARK_DEFAULT_GROUP_PREFIX = "spark-kafka-source-"
# The job's optional consumer-group commits and the archiver (app/ops/archiver.py).
TABLECAST_GROUP_PREFIX = "tablecast-"


def node_statements(
    *,
    environment: str,
    region: str,
    account: str,
    partition: str,
    bucket_arn: str,
    bucket_prefixes: Sequence[str],
    data_key_arn: str,
    cluster_arn: str,
    cluster_name: str,
    cluster_uuid: str,
    topic_prefix: str,
    log_group_arns: Sequence[str],
) -> list[Statement]:
    """Every statement of the nodes' inline policy.

    :param bucket_prefixes: prefixes without slashes, e.g. ``("output", "archive")``.
    :param cluster_arn: ``arn:aws:kafka:<region>:<account>:cluster/<name>/<uuid>``.
    :param cluster_name: the cluster's name; with ``cluster_uuid`` it names topics and groups.
    :param cluster_uuid: the cluster's uuid (known after apply: a token).
    :param topic_prefix: the literal prefix of the job's topic pattern, e.g. ``"sensor-"``.
    :param log_group_arns: the log groups the nodes' CloudWatch agent writes to.
    """
    kafka = f"arn:{partition}:kafka:{region}:{account}"
    topic_arns = [f"{kafka}:topic/{cluster_name}/{cluster_uuid}/{topic_prefix}*"]
    group_arns = [
        f"{kafka}:group/{cluster_name}/{cluster_uuid}/{group_prefix}*"
        for group_prefix in (topic_prefix, SPARK_DEFAULT_GROUP_PREFIX, TABLECAST_GROUP_PREFIX)
    ]
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
            "PublishJobMetrics",
            ["cloudwatch:PutMetricData"],
            ["*"],
            {"StringEquals": {"cloudwatch:namespace": metric_names.NAMESPACE}},
        ),
        allow(
            "ConnectToCluster",
            ["kafka-cluster:Connect", "kafka-cluster:DescribeCluster"],
            [cluster_arn],
        ),
        allow("ReadPipelineTopics", KAFKA_CONSUMER_TOPIC_ACTIONS, topic_arns),
        allow("UseConsumerGroups", KAFKA_GROUP_ACTIONS, group_arns),
        allow("OperatePipelineTopics", KAFKA_OPERATOR_TOPIC_ACTIONS, topic_arns),
        allow("ReadHandoffParameters", SSM_READ_ACTIONS, [parameters, f"{parameters}/*"]),
        allow(
            "ShipNodeLogs",
            LOG_SHIPPING_ACTIONS,
            [pattern for arn in log_group_arns for pattern in (arn, f"{arn}:*")],
        ),
    ]


def _prefix_patterns(prefixes: Sequence[str]) -> list[str]:
    return [pattern for prefix in prefixes for pattern in (prefix, f"{prefix}/*")]

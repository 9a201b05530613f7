"""Who may do what on the MSK cluster: the job, the archiver, producers, topic administrators.

MSK authorizes IAM clients per action on the cluster, its topics, its groups
and its transactional ids; each ARN names the cluster's name and uuid. Three
sets, each the least its holder needs:

- **consume** (the Spark nodes' role: the job and the archiver): read topics
  under the topic prefix; ``DescribeGroup``/``AlterGroup`` only on groups
  named ``tablecast-*`` (``tablecast run --consumer-group`` commits there, and
  the archiver names its client ``tablecast-archiver``). The job's Kafka source
  assigns partitions itself and never joins a group, so Spark's
  ``spark-kafka-source-*`` groups need nothing.
- **produce** (a managed policy producers attach to their own roles): write
  topics under the prefix, idempotently; no topic or group administration.
- **administer topics** (the topic-admin role, for ``tablecast-ops topics``
  and ``produce``, and a test pipeline's driver, for ``test-run``): create and
  alter topics under the prefix, and the load tool's transactions
  (``tablecast-produce-*``).
"""

from dataclasses import dataclass

from app import handoff
from infra.constructs.policies import Statement, allow

CONNECT_ACTIONS = ("kafka-cluster:Connect", "kafka-cluster:DescribeCluster")
READ_TOPIC_ACTIONS = ("kafka-cluster:DescribeTopic", "kafka-cluster:ReadData")
GROUP_ACTIONS = ("kafka-cluster:DescribeGroup", "kafka-cluster:AlterGroup")
WRITE_TOPIC_ACTIONS = ("kafka-cluster:DescribeTopic", "kafka-cluster:WriteData")
# An idempotent producer (acks=all, ordered retries) asks the cluster for a producer id.
IDEMPOTENT_WRITE_ACTIONS = ("kafka-cluster:WriteDataIdempotently",)
ADMIN_TOPIC_ACTIONS = (
    "kafka-cluster:CreateTopic",
    "kafka-cluster:AlterTopic",
    "kafka-cluster:DescribeTopic",
    "kafka-cluster:DescribeTopicDynamicConfiguration",
    "kafka-cluster:AlterTopicDynamicConfiguration",
)
TRANSACTION_ACTIONS = (
    "kafka-cluster:DescribeTransactionalId",
    "kafka-cluster:AlterTransactionalId",
)
# The job's optional consumer-group commits and the archiver's client name.
TABLECAST_GROUP_PREFIX = handoff.CONSUMER_GROUP_PREFIX
# tablecast-ops produce --transaction-size names its transactions so.
PRODUCE_TOOL_TRANSACTION_PREFIX = "tablecast-produce-"


@dataclass(frozen=True, kw_only=True)
class KafkaResources:
    """ARNs of one cluster's resources, from its name and uuid (tokens until apply)."""

    partition: str
    region: str
    account: str
    cluster_arn: str
    cluster_name: str
    cluster_uuid: str
    topic_prefix: str
    """The literal prefix of the job's topic pattern, e.g. ``"sensor-"``."""

    def _arn(self, kind: str, name: str) -> str:
        return (
            f"arn:{self.partition}:kafka:{self.region}:{self.account}:"
            f"{kind}/{self.cluster_name}/{self.cluster_uuid}/{name}"
        )

    @property
    def pipeline_topics(self) -> str:
        """Every topic under the prefix."""
        return self._arn("topic", f"{self.topic_prefix}*")

    def groups(self, prefix: str) -> str:
        """Every consumer group under ``prefix``."""
        return self._arn("group", f"{prefix}*")

    def transactional_ids(self, prefix: str) -> str:
        """Every transactional id under ``prefix``."""
        return self._arn("transactional-id", f"{prefix}*")


def consume_statements(kafka: KafkaResources) -> list[Statement]:
    """The job and the archiver: connect, read the pipeline's topics, use tablecast groups."""
    return [
        allow("ConnectToCluster", CONNECT_ACTIONS, [kafka.cluster_arn]),
        allow("ReadPipelineTopics", READ_TOPIC_ACTIONS, [kafka.pipeline_topics]),
        allow("UseTablecastGroups", GROUP_ACTIONS, [kafka.groups(TABLECAST_GROUP_PREFIX)]),
    ]


def produce_statements(kafka: KafkaResources) -> list[Statement]:
    """Producers: connect and write the pipeline's topics, idempotently."""
    return [allow("ConnectToCluster", CONNECT_ACTIONS, [kafka.cluster_arn]), *_write(kafka)]


def topic_admin_statements(kafka: KafkaResources) -> list[Statement]:
    """``tablecast-ops topics`` and ``produce``: administer and load the pipeline's topics."""
    return [
        allow("ConnectToCluster", CONNECT_ACTIONS, [kafka.cluster_arn]),
        *load_statements(kafka),
    ]


def load_statements(kafka: KafkaResources) -> list[Statement]:
    """What the topic-admin role adds to connecting: create, alter and write the pipeline's
    topics, the load tool's transactions. A test pipeline's driver has it too (beside
    consuming), so that ``tablecast-ops test-run`` runs there with the pipeline's own roles."""
    return [
        *_write(kafka),
        allow("AdministerPipelineTopics", ADMIN_TOPIC_ACTIONS, [kafka.pipeline_topics]),
        allow(
            "LoadToolTransactions",
            TRANSACTION_ACTIONS,
            [kafka.transactional_ids(PRODUCE_TOOL_TRANSACTION_PREFIX)],
        ),
    ]


def _write(kafka: KafkaResources) -> list[Statement]:
    return [
        allow("WriteIdempotently", IDEMPOTENT_WRITE_ACTIONS, [kafka.cluster_arn]),
        allow("WritePipelineTopics", WRITE_TOPIC_ACTIONS, [kafka.pipeline_topics]),
    ]

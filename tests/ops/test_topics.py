"""Topics against a real Kafka-protocol broker (tansu on loopback).

tansu answers CreateTopics, Metadata and DescribeConfigs; DescribeConfigs
returns the settings a topic was created with (not the broker's defaults),
which is what these tests read back.
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from app.ops.aws import AwsClients
from app.ops.cli import main
from app.ops.environment import write_handoff
from app.ops.errors import TopicPolicyError
from app.ops.topics import HOUR_MS, MIN_RETENTION_HOURS, TopicPolicy, Topics
from app.sources.kafka_client import KafkaEndpoint
from tests.ops.conftest import REGION, Environment


def test_topics_get_the_policy_and_are_listed_with_their_retention(
    broker: KafkaEndpoint,
) -> None:
    admin = Topics(broker)
    policy = TopicPolicy(retention_hours=72, replication_factor=1, partitions=3)
    result = admin.create(["sensor-t1-a", "sensor-t1-b"], policy, topic_pattern="^sensor-.+")
    assert [t.name for t in result.created] == ["sensor-t1-a", "sensor-t1-b"]
    assert result.existing == []
    for info in result.created:
        assert info.partitions == 3 and info.replication_factor == 1
        assert info.retention_ms == 72 * HOUR_MS and info.cleanup_policy == "delete"
    listed = admin.list_topics("^sensor-t1-.+")
    assert [t.line() for t in listed] == [
        f"sensor-t1-{s}  partitions=3  replication=1  retention=72 h  cleanup.policy=delete"
        for s in "ab"
    ]
    # Again: nothing is created or altered, the existing topics are reported.
    again = admin.create(["sensor-t1-a", "sensor-t1-c"], policy, topic_pattern="^sensor-.+")
    assert [t.name for t in again.created] == ["sensor-t1-c"]
    assert [t.name for t in again.existing] == ["sensor-t1-a"]


@pytest.mark.parametrize(
    ("names", "policy", "message"),
    [
        (["sensor-t2-a"], TopicPolicy(71, 1, 1), "under the minimum of 72 h"),
        (["sensor-t2-a"], TopicPolicy(72, 2, 1), "the cluster has 1 brokers"),
        (["other-t2"], TopicPolicy(72, 1, 1), "does not match the job's pattern"),
        (["sensor t2"], TopicPolicy(72, 1, 1), "not a valid Kafka topic name"),
        (["sensor-t2-b\n"], TopicPolicy(72, 1, 1), "not a valid Kafka topic name"),
    ],
)
def test_a_request_against_the_policy_creates_nothing(
    broker: KafkaEndpoint, names: list[str], policy: TopicPolicy, message: str
) -> None:
    with pytest.raises(TopicPolicyError, match=message):
        Topics(broker).create(names, policy, topic_pattern="^sensor-.+")
    metadata = AdminClient(broker.config()).list_topics(timeout=10)
    assert not set(names) & set(metadata.topics)
    assert MIN_RETENTION_HOURS == 72


def test_the_cli_takes_brokers_and_policy_from_the_ssm_handoff(
    aws: AwsClients,
    environment: Environment,
    broker: KafkaEndpoint,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The environment's brokers are the loopback broker (plaintext: --kafka-auth none).
    write_handoff(aws.ssm, "dev", {"bootstrap-brokers-iam": broker.bootstrap_servers})
    base = ["--region", REGION, "topics"]
    in_dev = ["-e", "dev", "--kafka-auth", "none"]
    assert main([*base, "create", *in_dev, "--partitions", "2", "sensor-t3-x"]) == 0
    assert main([*base, "list", *in_dev]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "created sensor-t3-x  partitions=2  replication=1  retention=96 h  cleanup.policy=delete"
    )
    assert "sensor-t3-x  partitions=2  replication=1  retention=96 h  cleanup.policy=delete" in out
    # The environment's policy still refuses less than 72 hours.
    assert main([*base, "create", *in_dev, "--retention-hours", "48", "sensor-t3-y"]) == 64
    assert "under the minimum of 72 h" in capsys.readouterr().err

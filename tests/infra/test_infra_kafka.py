"""The MSK cluster: retention, durability, encryption, authentication, logs, monitoring.

checkov has no checks for ``aws_msk_configuration``: the broker settings are
asserted here, on what Terraform gets.
"""

import pytest

from app import defaults
from infra.config import MIN_RETENTION_HOURS, ConfigError, EnvironmentConfig, versions
from infra.config.model import DEFAULT_RETENTION_HOURS
from infra.testing import Document, SynthesizedEnvironment
from tests.infra.valid_config import valid


def server_properties(env: SynthesizedEnvironment) -> dict[str, str]:
    (configuration,) = env["kafka"].resources("aws_msk_configuration").values()
    lines = str(configuration["server_properties"]).splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip())


def cluster(env: SynthesizedEnvironment) -> Document:
    (msk,) = env["kafka"].resources("aws_msk_cluster").values()
    return msk


def test_retention_is_at_least_72_hours(env: SynthesizedEnvironment) -> None:
    properties = server_properties(env)
    assert int(properties["log.retention.hours"]) >= MIN_RETENTION_HOURS
    assert int(properties["log.retention.hours"]) == env.config.retention_hours


def test_no_unclean_leader_election_and_no_auto_created_topics(
    env: SynthesizedEnvironment,
) -> None:
    properties = server_properties(env)
    assert properties["unclean.leader.election.enable"] == "false"
    assert properties["auto.create.topics.enable"] == "false"


def test_replication_is_durable_with_three_or_more_brokers(env: SynthesizedEnvironment) -> None:
    properties = server_properties(env)
    brokers = cluster(env)["number_of_broker_nodes"]
    assert brokers == env.config.broker_count
    if brokers >= 3:
        assert properties["default.replication.factor"] == "3"
        assert properties["min.insync.replicas"] == "2"
    else:
        assert int(properties["default.replication.factor"]) == brokers
        assert int(properties["min.insync.replicas"]) < brokers
    assert (
        properties["offsets.topic.replication.factor"] == properties["default.replication.factor"]
    )


def test_prod_keeps_the_default_week(configs: dict[str, EnvironmentConfig]) -> None:
    assert configs["prod"].retention_hours == DEFAULT_RETENTION_HOURS == 168


def test_new_clusters_run_kraft_at_the_version_of_versions_toml(
    env: SynthesizedEnvironment,
) -> None:
    assert env.config.kafka_metadata_mode == "kraft"
    assert cluster(env)["kafka_version"] == f"{versions().msk_kafka}.kraft"
    (configuration,) = env["kafka"].resources("aws_msk_configuration").values()
    assert configuration["kafka_versions"] == [cluster(env)["kafka_version"]]
    assert cluster(env)["configuration_info"]["arn"].startswith("${aws_msk_configuration.")


def test_a_zookeeper_cluster_keeps_its_mode() -> None:
    config = valid(kafka_metadata_mode="zookeeper")
    assert config.msk_cluster_version == versions().msk_kafka
    with pytest.raises(ConfigError, match="must be one of kraft, zookeeper"):
        valid(kafka_metadata_mode="raft")


def test_consumers_fetch_from_a_replica_in_their_zone(env: SynthesizedEnvironment) -> None:
    assert server_properties(env)["replica.selector.class"] == (
        "org.apache.kafka.common.replica.RackAwareReplicaSelector"
    )


def test_producers_clocks_far_ahead_are_refused_by_the_brokers(
    env: SynthesizedEnvironment,
) -> None:
    """A CreateTime ahead moves a partition's idle clock: the brokers bound it well under the
    job's session timeout, on a Kafka that has the setting (3.6, KIP-937)."""
    ahead = int(server_properties(env)["log.message.timestamp.after.max.ms"])
    assert 0 < ahead <= defaults.SESSION_TIMEOUT_MS // 10
    major, minor = (int(part) for part in versions().msk_kafka.split(".")[:2])
    assert (major, minor) >= (3, 6)


def test_the_cluster_is_guarded_and_its_configuration_replaced_safely(
    env: SynthesizedEnvironment,
) -> None:
    guarded = cluster(env).get("lifecycle", {}).get("prevent_destroy", False)
    assert guarded is (not env.config.throwaway)
    (configuration,) = env["kafka"].resources("aws_msk_configuration").values()
    assert configuration["lifecycle"] == {"create_before_destroy": True}
    # Named after the version: a new version's configuration never clashes with the old.
    version = cluster(env)["kafka_version"].replace(".", "-")
    assert configuration["name"] == f"tablecast-{env.config.name}-brokers-{version}"


def test_encrypted_at_rest_with_our_key_and_tls_only_in_transit(
    env: SynthesizedEnvironment,
) -> None:
    encryption = cluster(env)["encryption_info"]
    assert encryption["encryption_at_rest_kms_key_arn"].startswith("${aws_kms_key.")
    assert encryption["encryption_in_transit"] == {"client_broker": "TLS", "in_cluster": True}
    assert env["kafka"].has_resource("aws_kms_key", {"enable_key_rotation": True})


def test_iam_authentication_only(env: SynthesizedEnvironment) -> None:
    assert env["kafka"].has_resource(
        "aws_msk_cluster",
        {"client_authentication": {"sasl": {"iam": True}, "unauthenticated": False}},
    )
    assert "tls" not in cluster(env)["client_authentication"]
    assert "scram" not in cluster(env)["client_authentication"]["sasl"]


def test_broker_logs_go_to_an_encrypted_log_group(env: SynthesizedEnvironment) -> None:
    logs = cluster(env)["logging_info"]["broker_logs"]["cloudwatch_logs"]
    assert logs["enabled"] is True
    (group,) = env["kafka"].resources("aws_cloudwatch_log_group").values()
    assert logs["log_group"].startswith("${aws_cloudwatch_log_group.")
    assert group["kms_key_id"].startswith("${aws_kms_key.")
    assert group["retention_in_days"] >= 365


def test_enhanced_monitoring(env: SynthesizedEnvironment) -> None:
    level = cluster(env)["enhanced_monitoring"]
    assert level in {"PER_BROKER", "PER_TOPIC_PER_BROKER", "PER_TOPIC_PER_PARTITION"}


def test_private_brokers_sized_for_retention_in_every_zone(env: SynthesizedEnvironment) -> None:
    group = cluster(env)["broker_node_group_info"]
    assert group["connectivity_info"]["public_access"]["type"] == "DISABLED"
    assert len(group["client_subnets"]) == len(env.config.availability_zones)
    assert env.config.broker_count % len(group["client_subnets"]) == 0
    volume = group["storage_info"]["ebs_storage_info"]["volume_size"]
    assert volume == env.config.effective_broker_volume_gib
    assert volume >= env.config.required_broker_volume_gib
    followed = [env.follow(subnet) for subnet in group["client_subnets"]]
    assert all(subnet.startswith("${aws_subnet.brokers-") for subnet in followed)

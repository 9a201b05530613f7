"""The environment configuration: validation messages, derived values, the address plan."""

import dataclasses
import ipaddress
import tomllib
from pathlib import Path
from typing import Any

import pytest

from infra.config import (
    ConfigError,
    EnvironmentConfig,
    plan_subnets,
    versions,
)
from infra.config.broker_settings import broker_properties
from infra.config.parsing import topic_prefix, trigger_seconds
from infra.config.sizing import required_broker_volume_gib
from tests.infra.valid_config import SHARED, valid


def test_every_defined_environment_is_valid(configs: dict[str, EnvironmentConfig]) -> None:
    assert set(configs) == {"dev", "staging", "prod", "sandbox", "resync-exp"}
    for name, config in configs.items():
        assert config.name == name
    # Only the sandbox and test pipelines may keep local state and page nobody.
    assert [name for name, config in configs.items() if config.throwaway] == [
        "sandbox",
        "resync-exp",
    ]


def test_a_team_can_add_an_environment() -> None:
    config = valid(name="perf-eu")
    assert config.stack_name("network") == "tablecast-perf-eu-network"
    assert config.retention_hours == 168
    assert config.topic_pattern == "^sensor-.+"


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"retention_hours": 48}, "retention_hours", "48 is under the minimum of 72 hours"),
        ({"retention_hours": 71}, "retention_hours", "under the minimum of 72 hours"),
        ({"broker_count": 4}, "broker_count", "4 is not a multiple of the 3 availability zones"),
        ({"broker_count": 2}, "broker_count", "not a multiple of the 3 availability zones"),
        (
            {"deployment": dataclasses.replace(SHARED, alarm_endpoints=())},
            "alarm_endpoints",
            "a shared environment needs someone to page",
        ),
        (
            {"deployment": dataclasses.replace(SHARED, state_backend=None)},
            "state_backend",
            "a shared environment keeps its Terraform state in S3",
        ),
        ({"throwaway": True, "production": True}, "throwaway", "never throwaway"),
        ({"name": "prod", "throwaway": True}, "throwaway", "never throwaway"),
        ({"deployment": None}, "deployment", "no deployment settings: set TABLECAST_SETTINGS"),
        ({"availability_zones": ("eu-west-1a",)}, "availability_zones", "needs 2 or 3 zones"),
        (
            {"availability_zones": ("eu-west-1a", "eu-west-1a")},
            "availability_zones",
            "zones repeat",
        ),
        (
            {"availability_zones": ("eu-west-1a", "us-east-1b", "eu-west-1c")},
            "availability_zones",
            "'us-east-1b' is not a zone of eu-west-1",
        ),
        ({"availability_zones": ["eu-west-1a", "eu-west-1b"]}, "availability_zones", "tuple"),
        ({"vpc_cidr": "8.8.0.0/16"}, "vpc_cidr", "not a private range"),
        ({"vpc_cidr": "10.0.0.0/8"}, "vpc_cidr", "/16 to /22"),
        ({"vpc_cidr": "not-a-cidr"}, "vpc_cidr", "not an IPv4 network"),
        ({"region": "mars"}, "region", "not an AWS region name"),
        ({"name": "Prod"}, "name", "must be 1-12 of a-z"),
        ({"name": "a-very-long-environment"}, "name", "must be 1-12"),
        ({"broker_instance_type": "m7g.large"}, "broker_instance_type", "not an MSK type"),
        ({"spark_worker_count": 0}, "spark_worker_count", "at least one worker"),
        ({"spark_worker_count": "2"}, "spark_worker_count", "must be an integer"),
        ({"spark_worker_instance_type": "t3.large"}, "spark_worker_instance_type", "burstable"),
        ({"driver_instance_type": "m6id.large"}, "driver_instance_type", "instance store"),
        ({"driver_instance_type": "i4i.large"}, "driver_instance_type", "instance store"),
        ({"trigger_interval": "1min"}, "trigger_interval", "is not '<n> seconds|minutes|hours'"),
        ({"trigger_interval": "2 hours"}, "trigger_interval", "1 second to 1 hour"),
        ({"topic_pattern": "sensor-.+"}, "topic_pattern", "must be anchored with '^'"),
        ({"topic_pattern": "^.+"}, "topic_pattern", "must start with a literal topic prefix"),
        ({"topic_pattern": "^a-.+|^b-.+"}, "topic_pattern", "top-level '|'"),
        ({"topic_pattern": "^sensor-(["}, "topic_pattern", "not a regular expression"),
        ({"enhanced_monitoring": "DEFAULT"}, "enhanced_monitoring", "must be one of PER_BROKER"),
        ({"broker_volume_gib": 10}, "broker_volume_gib", "10 GiB does not hold 168 h"),
        ({"peak_ingest_mib_per_s": 500.0}, "broker_count", "exceeds MSK's 16384 GiB"),
        (
            {"archive_infrequent_access_days": 10},
            "archive_infrequent_access_days",
            "after 30 days at the earliest",
        ),
        ({"archive_glacier_days": 30}, "archive_glacier_days", "must come after"),
        ({"records_behind_alarm_threshold": 0}, "records_behind_alarm_threshold", "positive"),
    ],
)
def test_invalid_configuration_fails_with_its_message(
    changes: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        valid(**changes)
    assert caught.value.field == field
    assert message in caught.value.problem
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith(f"environment {caught.value.environment!r}: {field}: ")


def test_configurations_are_frozen() -> None:
    config = valid()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.retention_hours = 1  # type: ignore[misc]
    with pytest.raises(ConfigError, match="retention_hours"):
        dataclasses.replace(config, retention_hours=24)


def test_durability_follows_the_broker_count() -> None:
    assert (valid().replication_factor, valid().min_insync_replicas) == (3, 2)
    six = valid(broker_count=6)
    assert (six.replication_factor, six.min_insync_replicas) == (3, 2)
    two = valid(availability_zones=("eu-west-1a", "eu-west-1b"), broker_count=2)
    assert (two.replication_factor, two.min_insync_replicas) == (2, 1)


def test_broker_properties_for_three_or_more_brokers() -> None:
    properties = broker_properties(valid(broker_count=3, retention_hours=96))
    assert properties["default.replication.factor"] == "3"
    assert properties["min.insync.replicas"] == "2"
    assert properties["unclean.leader.election.enable"] == "false"
    assert properties["auto.create.topics.enable"] == "false"
    assert properties["log.retention.hours"] == "96"


def test_broker_storage_is_sized_for_the_retention() -> None:
    # 1 MiB/s for 168 h, three copies over three brokers, kept under 70 % full.
    assert (
        required_broker_volume_gib(
            peak_ingest_mib_per_s=1.0, retention_hours=168, replication_factor=3, broker_count=3
        )
        == 844
    )
    config = valid(peak_ingest_mib_per_s=1.0)
    assert config.effective_broker_volume_gib == 844
    assert valid(broker_volume_gib=1000).effective_broker_volume_gib == 1000
    longer = valid(retention_hours=336)
    assert longer.required_broker_volume_gib > config.required_broker_volume_gib


def test_address_plan_puts_spark_in_its_own_subnet_of_the_first_zone() -> None:
    plan = plan_subnets("10.50.0.0/16", 3)
    assert plan.broker_subnets == ("10.50.0.0/20", "10.50.16.0/20", "10.50.32.0/20")
    assert plan.spark_subnet == "10.50.64.0/20"
    assert ipaddress.ip_address(plan.driver_private_ip) in ipaddress.ip_network(plan.spark_subnet)
    # Adding a zone later never moves the Spark subnet or the driver.
    assert plan_subnets("10.50.0.0/16", 2).spark_subnet == plan.spark_subnet
    assert plan.spark_subnets == ("10.50.64.0/20", "10.50.80.0/20", "10.50.96.0/20")
    moved = plan_subnets("10.50.0.0/16", 3, spark_zone_index=1)
    assert (moved.broker_subnets, moved.spark_subnets) == (plan.broker_subnets, plan.spark_subnets)
    assert moved.spark_subnet == "10.50.80.0/20"
    assert ipaddress.ip_address(moved.driver_private_ip) in ipaddress.ip_network("10.50.80.0/20")
    subnets = [ipaddress.ip_network(cidr) for cidr in [*plan.broker_subnets, *plan.spark_subnets]]
    for index, subnet in enumerate(subnets):
        assert all(not subnet.overlaps(other) for other in subnets[index + 1 :])


def test_spark_zone_is_a_broker_zone(configs: dict[str, EnvironmentConfig]) -> None:
    for config in configs.values():
        assert config.spark_availability_zone in config.availability_zones


@pytest.mark.parametrize(
    ("pattern", "prefix"),
    [
        ("^sensor-.+", "sensor-"),
        ("^sensor-[0-9]+$", "sensor-"),
        (r"^plant\.sensor-.*", "plant.sensor-"),
        ("^sensors?-.+", "sensor"),
        ("^raw_(a|b)", "raw_"),
    ],
)
def test_topic_prefix(pattern: str, prefix: str) -> None:
    assert topic_prefix(pattern) == prefix


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1 minute", 60), ("30 seconds", 30), ("5 minutes", 300), ("1 hour", 3600)],
)
def test_trigger_seconds(text: str, seconds: int) -> None:
    assert trigger_seconds(text) == seconds


def test_versions_come_from_versions_toml() -> None:
    with (Path(__file__).resolve().parents[2] / "versions.toml").open("rb") as handle:
        pins = tomllib.load(handle)
    assert versions().msk_kafka == pins["kafka"]["msk_version"]
    assert versions().spark == pins["spark"]["version"]


def test_a_throwaway_environment_may_keep_local_state_and_page_nobody() -> None:
    bare = dataclasses.replace(SHARED, alarm_endpoints=(), state_backend=None)
    config = valid(throwaway=True, deployment=bare)
    assert config.deployment.state_backend is None

"""A valid environment configuration, for each test to vary."""

from typing import Any

from infra.config import DeploymentSettings, EnvironmentConfig, StateBackend
from infra.config.handoff import handoff_values
from infra.config.settings import alarm_endpoint

SHARED = DeploymentSettings(
    account_id="111122223333",
    spark_image_id="ami-0123456789abcdef0",
    alarm_endpoints=(alarm_endpoint("oncall@tablecast-ops.net"),),
    state_backend=StateBackend(bucket="team-terraform-state"),
)


def valid(**changes: Any) -> EnvironmentConfig:
    """A valid three-zone environment with ``changes`` applied."""
    settings: dict[str, Any] = {
        "name": "team",
        "deployment": SHARED,
        "region": "eu-west-1",
        "availability_zones": ("eu-west-1a", "eu-west-1b", "eu-west-1c"),
        "vpc_cidr": "10.50.0.0/16",
        "broker_instance_type": "kafka.m7g.large",
        "broker_count": 3,
        "spark_worker_count": 2,
        "spark_worker_instance_type": "r7i.xlarge",
        "driver_instance_type": "m7i.large",
    } | changes
    return EnvironmentConfig(**settings)


def ssm_values(config: EnvironmentConfig) -> dict[str, str]:
    """The SSM values infra writes for ``config`` (made-up brokers, bucket and driver)."""
    return handoff_values(
        config=config,
        bootstrap_brokers_iam="b-1:9098",
        bucket_name="bucket",
        driver_private_ip="10.0.0.1",
        driver_instance_id="i-1",
    )

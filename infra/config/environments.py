"""The environments this repository deploys. Add one by adding a function to ``ENVIRONMENTS``.

Each function gives the environment's shape; the operator's deployment
settings (``infra/config/settings.py``) tie it to an account. Each is built
when asked for, not at import, so that one invalid environment fails
``make synth`` with its own one-line message instead of an import error.
"""

from collections.abc import Callable, Mapping, Sequence

from infra.config.errors import ConfigError
from infra.config.model import EnvironmentConfig
from infra.config.settings import HOW_TO_SUPPLY, DeploymentSettings

REGION = "eu-west-1"
ZONES_2 = ("eu-west-1a", "eu-west-1b")
ZONES_3 = ("eu-west-1a", "eu-west-1b", "eu-west-1c")


def dev(deployment: DeploymentSettings) -> EnvironmentConfig:
    """Smallest useful cluster: two zones, two brokers (replication 2), two workers."""
    return EnvironmentConfig(
        name="dev",
        deployment=deployment,
        region=REGION,
        availability_zones=ZONES_2,
        vpc_cidr="10.40.0.0/16",
        broker_instance_type="kafka.m7g.large",
        broker_count=2,
        spark_worker_count=2,
        spark_worker_instance_type="m7i.xlarge",
        driver_instance_type="m7i.large",
        retention_hours=72,
        peak_ingest_mib_per_s=0.5,
    )


def staging(deployment: DeploymentSettings) -> EnvironmentConfig:
    """Production's shape at a smaller size: three zones, durable replication."""
    return EnvironmentConfig(
        name="staging",
        deployment=deployment,
        region=REGION,
        availability_zones=ZONES_3,
        vpc_cidr="10.41.0.0/16",
        broker_instance_type="kafka.m7g.large",
        broker_count=3,
        spark_worker_count=3,
        spark_worker_instance_type="r7i.xlarge",
        driver_instance_type="m7i.xlarge",
        peak_ingest_mib_per_s=2.0,
        records_behind_alarm_threshold=500_000,
    )


def prod(deployment: DeploymentSettings) -> EnvironmentConfig:
    """Six brokers over three zones, a week of retention."""
    return EnvironmentConfig(
        name="prod",
        deployment=deployment,
        region=REGION,
        availability_zones=ZONES_3,
        vpc_cidr="10.42.0.0/16",
        broker_instance_type="kafka.m7g.xlarge",
        broker_count=6,
        spark_worker_count=6,
        spark_worker_instance_type="r7i.2xlarge",
        driver_instance_type="m7i.2xlarge",
        peak_ingest_mib_per_s=10.0,
        enhanced_monitoring="PER_TOPIC_PER_PARTITION",
        spark_data_volume_gib=500,
        production=True,
        records_behind_alarm_threshold=1_000_000,
        archive_glacier_days=365,
    )


def sandbox(deployment: DeploymentSettings) -> EnvironmentConfig:
    """Throwaway: the smallest cluster, local state, nobody paged. CI applies it to moto."""
    return EnvironmentConfig(
        name="sandbox",
        deployment=deployment,
        throwaway=True,
        region=REGION,
        availability_zones=ZONES_2,
        vpc_cidr="10.49.0.0/16",
        broker_instance_type="kafka.m7g.large",
        broker_count=2,
        spark_worker_count=1,
        spark_worker_instance_type="m7i.large",
        driver_instance_type="m7i.large",
        retention_hours=72,
        peak_ingest_mib_per_s=0.1,
        # One worker, nothing to spread (and moto, where CI applies it, has
        # no placement groups).
        spark_placement="none",
    )


EnvironmentFactory = Callable[[DeploymentSettings], EnvironmentConfig]

ENVIRONMENTS: dict[str, EnvironmentFactory] = {
    "dev": dev,
    "staging": staging,
    "prod": prod,
    "sandbox": sandbox,
}
"""Every environment ``make synth`` writes, by name."""


def configure(
    settings: Mapping[str, DeploymentSettings],
    names: Sequence[str] | None = None,
    environments: Mapping[str, EnvironmentFactory] = ENVIRONMENTS,
) -> list[EnvironmentConfig]:
    """The named environments (all by default) with their deployment settings.

    Raises ``ConfigError`` for an unknown name, for an environment without
    settings (naming how to supply them) and for invalid settings.
    """
    chosen = list(environments) if names is None else list(names)
    configs = []
    for name in chosen:
        if name not in environments:
            raise ConfigError(
                environment=name,
                field="TABLECAST_ENVIRONMENTS",
                problem=f"no such environment (defined: {', '.join(environments)})",
            )
        if name not in settings:
            raise ConfigError(
                environment=name,
                field="deployment settings",
                problem="none given: " + HOW_TO_SUPPLY.format(environment=name),
            )
        configs.append(environments[name](settings[name]))
    return configs

"""The environments this repository deploys. Add one by adding a function to ``ENVIRONMENTS``.

Each is built when asked for, not at import, so that one invalid environment
fails ``make synth`` with its own one-line message instead of an import error.
"""

from collections.abc import Callable

from infra.config.model import EnvironmentConfig

REGION = "eu-west-1"
ZONES_2 = ("eu-west-1a", "eu-west-1b")
ZONES_3 = ("eu-west-1a", "eu-west-1b", "eu-west-1c")


def dev() -> EnvironmentConfig:
    """Smallest useful cluster: two zones, two brokers (replication 2), two workers."""
    return EnvironmentConfig(
        name="dev",
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


def staging() -> EnvironmentConfig:
    """Production's shape at a smaller size: three zones, durable replication."""
    return EnvironmentConfig(
        name="staging",
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


def prod() -> EnvironmentConfig:
    """Six brokers over three zones, a week of retention, alarms paged by email."""
    return EnvironmentConfig(
        name="prod",
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
        # Placeholder: replace with the on-call list before the first deploy.
        alarm_emails=("tablecast-oncall@example.com",),
        production=True,
        records_behind_alarm_threshold=1_000_000,
        archive_glacier_days=365,
    )


ENVIRONMENTS: dict[str, Callable[[], EnvironmentConfig]] = {
    "dev": dev,
    "staging": staging,
    "prod": prod,
}
"""Every environment ``make synth`` writes, by name."""

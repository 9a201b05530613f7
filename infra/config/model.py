"""One environment's configuration: a frozen, validated value the stacks are built from."""

import ipaddress
import re
from dataclasses import dataclass, fields
from dataclasses import field as default_field

from app import handoff
from infra.config import layout, parsing
from infra.config.addressing import SubnetPlan, plan_subnets
from infra.config.declared import DeclaredPipeline
from infra.config.errors import ConfigError
from infra.config.jobs import JobSettings, jobs_problem
from infra.config.kafka_job import KafkaJobSettings
from infra.config.settings import HOW_TO_SUPPLY, DeploymentSettings, EndpointKind
from infra.config.sizing import MSK_MAX_VOLUME_GIB, required_broker_volume_gib
from infra.config.versions import versions

MIN_RETENTION_HOURS = 72
"""The seed's absolute minimum: data must survive a weekend without the job."""
DEFAULT_RETENTION_HOURS = 168
DEFAULT_TOPIC_PATTERN = handoff.DEFAULT_TOPIC_PATTERN  # the job's own default
KAFKA_METADATA_MODES = ("kraft", "zookeeper")
# MSK creates KRaft clusters from Kafka 3.7.x on.
MIN_KRAFT_VERSION = (3, 7)
ENHANCED_MONITORING_LEVELS = ("PER_BROKER", "PER_TOPIC_PER_BROKER", "PER_TOPIC_PER_PARTITION")
# S3 refuses a transition to STANDARD_IA before an object is 30 days old.
MIN_INFREQUENT_ACCESS_DAYS = 30
# HDFS's default: three copies, so two failed workers (or disks) lose nothing.
HDFS_REPLICATION = 3
# EC2 puts at most seven running instances of a spread placement group in a zone.
SPREAD_GROUP_MAX_NODES = 7
SPARK_PLACEMENTS = ("spread", "none")
DLM_INTERVALS_HOURS = (1, 2, 3, 4, 6, 8, 12, 24)
# S3 Object Lock retention: at most 100 years.
MAX_LOCK_DAYS = 36_500
# Kafka's durable default: three copies, a write needs two of them.
DURABLE_REPLICATION_FACTOR = 3

_NAME = re.compile(r"^[a-z][a-z0-9-]{0,10}[a-z0-9]$|^[a-z]$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
_EC2_TYPE = re.compile(r"^([a-z]+)(\d+)([a-z-]*)\.([a-z0-9]+)$")
# Instance families whose storage is instance store: EC2's recover action,
# which the status-check alarms use, only works on EBS-only instances.
_INSTANCE_STORE_FAMILIES = frozenset({"d", "h", "i", "im", "is"})


@dataclass(frozen=True, kw_only=True)
class EnvironmentConfig:
    """Everything that differs between environments; validated when constructed.

    Add an environment by adding one of these to ``infra/config/environments.py``.
    """

    name: str
    """Environment name, in every stack and resource name: 1-12 of ``a-z0-9-``."""
    region: str
    """AWS region, e.g. ``"eu-west-1"``."""
    availability_zones: tuple[str, ...]
    """Two or three zones of ``region``; Spark runs in the first."""
    vpc_cidr: str
    """Private IPv4 CIDR of the VPC, /16 to /22."""
    broker_instance_type: str
    """MSK broker type, e.g. ``"kafka.m7g.large"``."""
    broker_count: int
    """MSK brokers: a multiple of the number of zones."""
    spark_worker_count: int
    """Spark worker (and HDFS DataNode) instances, at least one."""
    spark_worker_instance_type: str
    """EC2 type of the workers: EBS-only (the EC2 recover action needs it), not burstable."""
    driver_instance_type: str
    """EC2 type of the driver node (Spark master, HDFS NameNode, the job's service)."""
    retention_hours: int = DEFAULT_RETENTION_HOURS
    """Kafka retention: at least 72 hours."""
    peak_ingest_mib_per_s: float = 1.0
    """Planned peak write rate over all topics, before replication; sizes broker storage."""
    broker_volume_gib: int | None = None
    """Per-broker EBS size; ``None`` derives it from retention and ingest, a value must hold it."""
    broker_volume_max_gib: int | None = None
    """Storage autoscaling's ceiling per broker; ``None``: four times the start, at most 16 TiB."""
    kafka_metadata_mode: str = "kraft"
    """``kraft``: MSK runs the controllers, no ZooKeeper. ``zookeeper`` only for a cluster
    created so: MSK never changes a cluster's mode, a change would replace the cluster."""
    enhanced_monitoring: str = "PER_BROKER"
    """MSK enhanced monitoring level (``DEFAULT`` is not enhanced and not allowed)."""
    spark_data_volume_gib: int = 100
    """Per-node EBS volume for HDFS data (checkpoints, NameNode metadata)."""
    spark_placement: str = "spread"
    """``spread``: each node on its own rack (at most 7 nodes per zone); ``none``: EC2's
    choice. Never ``cluster``: one rack's failure would take every HDFS copy."""
    hdfs_snapshot_interval_hours: int = 1
    """DLM snapshots every HDFS data volume this often: 1, 2, 3, 4, 6, 8, 12 or 24."""
    hdfs_snapshots_kept: int = 48
    """DLM keeps this many snapshots per volume."""
    checkpoint_backup_days: int = 7
    """Days S3 keeps the driver's hourly copies of the checkpoint (``checkpoint-backups/``)."""
    deployment: DeploymentSettings
    """The operator's settings: account, alarm endpoints, state backend, image, producers."""
    production: bool = False
    """Production keeps its bucket on destroy and guards more; ``prod`` always is one."""
    throwaway: bool = False
    """A throwaway environment (tests, experiments): state may stay in local files and
    nobody needs to be paged. Never production."""
    trigger_interval: str = "1 minute"
    """The job's processing-time trigger, e.g. ``"1 minute"``; bounds the batch-duration alarm."""
    compact_every: str = "1 day"
    """How often the job compacts the closed days of its Iceberg table (``"off"``: never)."""
    retire_grace: str = "2 minutes"
    """How long the files a compaction replaced stay for Iceberg queries planned before it
    (``run --retire-grace``; the job's default): ``"0 seconds"`` to ``"1 hour"``."""
    table_history: str = "5 days"
    """How far back the output's Iceberg table keeps snapshots for time travel
    (``run --table-history``; the job's default), e.g. ``"5 days"``, ``"12 hours"``."""
    topic_pattern: str = DEFAULT_TOPIC_PATTERN
    """Regular expression of the job's topics; must start with ``^`` and a literal prefix."""
    records_behind_alarm_threshold: int = 100_000
    """Alarm when the job is this many records behind the newest offsets."""
    archive_infrequent_access_days: int = 30
    """Age at which ``archive/`` objects move to STANDARD_IA (S3's minimum is 30)."""
    archive_glacier_days: int = 180
    """Age at which ``archive/`` objects move to GLACIER_IR; after the STANDARD_IA move."""
    noncurrent_version_days: int = 30
    """Days S3 keeps an overwritten or deleted object's previous version."""
    archive_lock_days: int = 365
    """Production: each archive file stays under S3 Object Lock in governance mode this many
    days from its writing; until then only a role allowed ``s3:BypassGovernanceRetention``
    deletes it for good (docs/operations.md, 'Break glass')."""
    test_pipeline: DeclaredPipeline | None = None
    """Set for a test pipeline declared in the deployment settings (owner, expiry, purpose):
    its stacks are tagged with them and its owner is notified from the expiry date on."""
    kafka: KafkaJobSettings = default_field(default_factory=KafkaJobSettings)
    """How the job and the archiver read Kafka: sign-in, isolation, options (`tablecast run`'s)."""

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def is_production(self) -> bool:
        """Whether the stricter production rules apply."""
        return self.production or self.name == "prod"

    @property
    def archive_locked(self) -> bool:
        """Whether the archive is under S3 Object Lock: production's only (the raw archive is
        the only copy once Kafka's retention has passed)."""
        return self.is_production

    @property
    def jobs(self) -> tuple[JobSettings, ...]:
        """The jobs the deployment settings declare; none: the environment's one job."""
        # Before the settings are checked, deployment may still be missing (None).
        jobs: tuple[JobSettings, ...] = getattr(self.deployment, "jobs", ())
        return jobs

    @property
    def glue_tables(self) -> tuple[str, ...]:
        """The Iceberg tables the jobs commit in the environment's Glue database."""
        return tuple(job.glue_table for job in self.jobs) or (layout.DEFAULT_GLUE_TABLE,)

    @property
    def trigger_seconds(self) -> int:
        """The trigger interval in seconds."""
        return parsing.trigger_seconds(self.trigger_interval)

    @property
    def topic_prefix(self) -> str:
        """Literal prefix of every topic the job reads, e.g. ``"sensor-"``."""
        return parsing.topic_prefix(self.topic_pattern)

    @property
    def msk_cluster_version(self) -> str:
        """MSK's version string for the cluster: ``3.8.x.kraft`` in KRaft mode."""
        version = versions().msk_kafka
        return f"{version}.kraft" if self.kafka_metadata_mode == "kraft" else version

    @property
    def replication_factor(self) -> int:
        """Topics' replication factor: three where there are three brokers or more."""
        return min(DURABLE_REPLICATION_FACTOR, self.broker_count)

    @property
    def min_insync_replicas(self) -> int:
        """Two with three replicas, so one broker may be down while writes stay durable."""
        return 2 if self.replication_factor >= DURABLE_REPLICATION_FACTOR else 1

    @property
    def hdfs_replication(self) -> int:
        """Copies HDFS keeps of the checkpoint: three where there are three workers."""
        return min(HDFS_REPLICATION, self.spark_worker_count)

    @property
    def required_broker_volume_gib(self) -> int:
        """Smallest per-broker volume that holds the retention at the peak rate."""
        return required_broker_volume_gib(
            peak_ingest_mib_per_s=self.peak_ingest_mib_per_s,
            retention_hours=self.retention_hours,
            replication_factor=self.replication_factor,
            broker_count=self.broker_count,
        )

    @property
    def effective_broker_volume_gib(self) -> int:
        """The per-broker volume the cluster gets."""
        if self.broker_volume_gib is None:
            return self.required_broker_volume_gib
        return self.broker_volume_gib

    @property
    def broker_volume_ceiling_gib(self) -> int:
        """How far storage autoscaling may grow each broker's volume."""
        if self.broker_volume_max_gib is not None:
            return self.broker_volume_max_gib
        return min(MSK_MAX_VOLUME_GIB, 4 * self.effective_broker_volume_gib)

    @property
    def subnets(self) -> SubnetPlan:
        """The environment's subnet CIDRs and the driver's fixed address."""
        return plan_subnets(
            self.vpc_cidr,
            len(self.availability_zones),
            spark_zone_index=self.availability_zones.index(self.spark_availability_zone),
        )

    @property
    def spark_availability_zone(self) -> str:
        """The zone of every Spark node, which also holds a broker subnet.

        The deployment settings' ``spark_zone``, or the first zone.
        """
        zone: str | None = getattr(self.deployment, "spark_zone", None)
        return zone or self.availability_zones[0]

    def stack_name(self, component: str) -> str:
        """``tablecast-<env>-<component>``: one environment is deployed without touching another."""
        return f"tablecast-{self.name}-{component}"

    @property
    def tags(self) -> dict[str, str]:
        """Tags of every resource beyond the project's: a test pipeline's owner, expiry, purpose."""
        return self.test_pipeline.tags if self.test_pipeline is not None else {}

    @property
    def resource_prefix(self) -> str:
        """Prefix of named AWS resources: ``tablecast-<env>``."""
        return f"tablecast-{self.name}"


def _validate(config: EnvironmentConfig) -> None:
    """Check every field; raise ``ConfigError`` naming the first one that is wrong."""
    _check_types(config)
    if not _NAME.match(config.name):
        raise _problem(config, "name", "must be 1-12 of a-z, 0-9, '-' starting with a letter")
    _check_placement(config)
    _check_kafka(config)
    _check_spark(config)
    _check_operations(config)
    _check_deployment(config)


def _problem(config: EnvironmentConfig, field: str, problem: str) -> ConfigError:
    return ConfigError(environment=config.name, field=field, problem=problem)


def _check_types(config: EnvironmentConfig) -> None:
    # Frozen dataclasses do not check types at run time; a tuple given as a
    # list or a count given as a string would otherwise fail deep in synth.
    for field in fields(config):
        value = getattr(config, field.name)
        if field.name == "availability_zones":
            if not isinstance(value, tuple) or not all(isinstance(item, str) for item in value):
                raise _problem(config, field.name, "must be a tuple of strings")
        elif field.type is int and (not isinstance(value, int) or isinstance(value, bool)):
            raise _problem(config, field.name, f"must be an integer (got {value!r})")


def _check_placement(config: EnvironmentConfig) -> None:
    if not _REGION.match(config.region):
        raise _problem(config, "region", f"{config.region!r} is not an AWS region name")
    zones = config.availability_zones
    if len(zones) not in (2, 3):
        raise _problem(config, "availability_zones", f"needs 2 or 3 zones (got {len(zones)})")
    if len(set(zones)) != len(zones):
        raise _problem(config, "availability_zones", f"zones repeat: {', '.join(zones)}")
    for zone in zones:
        if not re.fullmatch(re.escape(config.region) + r"[a-z]", zone):
            raise _problem(
                config, "availability_zones", f"{zone!r} is not a zone of {config.region}"
            )
    # A missing deployment is reported by _check_deployment.
    spark_zone: str | None = getattr(config.deployment, "spark_zone", None)
    if spark_zone is not None and spark_zone not in zones:
        raise _problem(
            config,
            "spark_zone",
            f"{spark_zone!r} is not one of the broker zones {', '.join(zones)} "
            f"(in {config.deployment.source})",
        )
    try:
        network = ipaddress.IPv4Network(config.vpc_cidr)
    except ValueError as exc:
        raise _problem(
            config, "vpc_cidr", f"{config.vpc_cidr!r} is not an IPv4 network: {exc}"
        ) from None
    if not network.is_private:
        raise _problem(config, "vpc_cidr", f"{config.vpc_cidr} is not a private range")
    if not 16 <= network.prefixlen <= 22:
        raise _problem(
            config, "vpc_cidr", f"prefix length must be /16 to /22 (got /{network.prefixlen})"
        )


def _check_kafka(config: EnvironmentConfig) -> None:
    if not config.broker_instance_type.startswith("kafka."):
        raise _problem(
            config, "broker_instance_type", f"{config.broker_instance_type!r} is not an MSK type"
        )
    zones = len(config.availability_zones)
    if config.broker_count < zones or config.broker_count % zones != 0:
        raise _problem(
            config,
            "broker_count",
            f"{config.broker_count} is not a multiple of the {zones} availability zones",
        )
    if config.retention_hours < MIN_RETENTION_HOURS:
        raise _problem(
            config,
            "retention_hours",
            f"{config.retention_hours} is under the minimum of {MIN_RETENTION_HOURS} hours",
        )
    if config.peak_ingest_mib_per_s <= 0:
        raise _problem(config, "peak_ingest_mib_per_s", "must be positive")
    required = config.required_broker_volume_gib
    if required > MSK_MAX_VOLUME_GIB:
        raise _problem(
            config,
            "broker_count",
            f"{required} GiB per broker needed for the retention exceeds MSK's "
            f"{MSK_MAX_VOLUME_GIB} GiB: add brokers or lower retention",
        )
    volume = config.broker_volume_gib
    if volume is not None and not required <= volume <= MSK_MAX_VOLUME_GIB:
        raise _problem(
            config,
            "broker_volume_gib",
            f"{volume} GiB does not hold {config.retention_hours} h at "
            f"{config.peak_ingest_mib_per_s} MiB/s x{config.replication_factor} "
            f"(needs {required} to {MSK_MAX_VOLUME_GIB})",
        )
    ceiling = config.broker_volume_max_gib
    if ceiling is not None and not config.effective_broker_volume_gib < ceiling <= (
        MSK_MAX_VOLUME_GIB
    ):
        raise _problem(
            config,
            "broker_volume_max_gib",
            f"must be above the {config.effective_broker_volume_gib} GiB start "
            f"and at most {MSK_MAX_VOLUME_GIB}",
        )
    if config.kafka_metadata_mode not in KAFKA_METADATA_MODES:
        raise _problem(
            config, "kafka_metadata_mode", f"must be one of {', '.join(KAFKA_METADATA_MODES)}"
        )
    major_minor = tuple(int(part) for part in versions().msk_kafka.split(".")[:2])
    if config.kafka_metadata_mode == "kraft" and major_minor < MIN_KRAFT_VERSION:
        raise _problem(
            config,
            "kafka_metadata_mode",
            f"MSK runs KRaft from Kafka 3.7 on (versions.toml has {versions().msk_kafka})",
        )
    if config.enhanced_monitoring not in ENHANCED_MONITORING_LEVELS:
        raise _problem(
            config, "enhanced_monitoring", f"must be one of {', '.join(ENHANCED_MONITORING_LEVELS)}"
        )
    try:
        parsing.topic_prefix(config.topic_pattern)
    except ValueError as exc:
        raise _problem(config, "topic_pattern", str(exc)) from None
    problem = config.kafka.problem(region=config.region, topic_pattern=config.topic_pattern)
    if problem is not None:
        raise _problem(config, *problem)
    problem = jobs_problem(
        config.jobs, topic_pattern=config.topic_pattern, explicit_topics=bool(config.kafka.topics)
    )
    if problem is not None:
        field, text = problem
        raise _problem(config, field, f"{text} (in {config.deployment.source})")


def _check_spark(config: EnvironmentConfig) -> None:
    if config.spark_worker_count < 1:
        raise _problem(
            config,
            "spark_worker_count",
            f"needs at least one worker (got {config.spark_worker_count})",
        )
    for field in ("spark_worker_instance_type", "driver_instance_type"):
        problem = _ec2_type_problem(getattr(config, field))
        if problem is not None:
            raise _problem(config, field, problem)
    if not 1 <= config.spark_data_volume_gib <= MSK_MAX_VOLUME_GIB:
        raise _problem(config, "spark_data_volume_gib", f"must be 1 to {MSK_MAX_VOLUME_GIB} GiB")
    if config.spark_placement not in SPARK_PLACEMENTS:
        raise _problem(config, "spark_placement", f"must be one of {', '.join(SPARK_PLACEMENTS)}")
    nodes = config.spark_worker_count + 1
    if config.spark_placement == "spread" and nodes > SPREAD_GROUP_MAX_NODES:
        raise _problem(
            config,
            "spark_placement",
            f"a spread group holds {SPREAD_GROUP_MAX_NODES} nodes per zone, not {nodes}: "
            "use 'none' (and accept that two nodes may share a rack)",
        )
    if config.hdfs_snapshot_interval_hours not in DLM_INTERVALS_HOURS:
        raise _problem(
            config,
            "hdfs_snapshot_interval_hours",
            f"DLM takes {', '.join(map(str, DLM_INTERVALS_HOURS))} hours",
        )
    if not 1 <= config.hdfs_snapshots_kept <= 1000:
        raise _problem(config, "hdfs_snapshots_kept", "must be 1 to 1000 (DLM's limit)")
    if config.checkpoint_backup_days < 1:
        raise _problem(config, "checkpoint_backup_days", "must be positive")


def _ec2_type_problem(instance_type: str) -> str | None:
    match = _EC2_TYPE.match(instance_type)
    if match is None:
        return f"{instance_type!r} is not an EC2 instance type"
    family, _generation, attributes, _size = match.groups()
    if family == "t":
        return f"{instance_type!r} is burstable: the Spark nodes take no t* types"
    if family in _INSTANCE_STORE_FAMILIES or "d" in attributes:
        return f"{instance_type!r} has instance store: the EC2 recover action needs EBS-only types"
    return None


def _check_deployment(config: EnvironmentConfig) -> None:
    settings = config.deployment
    if not isinstance(settings, DeploymentSettings):
        raise _problem(config, "deployment", "no deployment settings: " + _how_to_supply(config))
    if config.throwaway and config.is_production:
        raise _problem(config, "throwaway", "a production environment is never throwaway")
    if config.test_pipeline is not None and not config.throwaway:
        raise _problem(config, "throwaway", "a test pipeline is always throwaway")
    if not config.throwaway:
        if settings.state_backend is None:
            raise _problem(
                config,
                "state_backend",
                f"a shared environment keeps its Terraform state in S3 (in {settings.source}): "
                + _how_to_supply(config),
            )
        if not settings.alarm_endpoints:
            raise _problem(
                config,
                "alarm_endpoints",
                f"a shared environment needs someone to page (in {settings.source}): "
                + _how_to_supply(config),
            )
    for endpoint in settings.alarm_endpoints:
        # CloudWatch alarms publish only to topics in their own region; the
        # provider would accept the ARN and the apply fail.
        topic_region = endpoint.address.split(":")[3] if endpoint.kind is EndpointKind.TOPIC else ""
        if topic_region and topic_region != config.region:
            raise _problem(
                config,
                "alarm_endpoints",
                f"{endpoint.address} is in {topic_region}; alarms in {config.region} publish "
                f"only to topics of {config.region} (in {settings.source})",
            )
    vpc = ipaddress.IPv4Network(config.vpc_cidr)
    names = [network.name for network in settings.producer_networks]
    if len(set(names)) != len(names):
        raise _problem(config, "producer_networks", f"names repeat: {', '.join(names)}")
    for network in settings.producer_networks:
        try:
            cidr = ipaddress.IPv4Network(network.cidr)
        except ValueError as exc:
            raise _problem(
                config, "producer_networks", f"{network.name}: {network.cidr!r}: {exc}"
            ) from None
        if not cidr.is_private or cidr.prefixlen < 8:
            raise _problem(
                config, "producer_networks", f"{network.name}: {cidr} is not a private range"
            )
        if cidr.overlaps(vpc):
            raise _problem(
                config,
                "producer_networks",
                f"{network.name}: {cidr} overlaps the VPC {vpc}: no route could tell them apart",
            )


def _how_to_supply(config: EnvironmentConfig) -> str:
    return HOW_TO_SUPPLY.format(environment=config.name)


def _check_operations(config: EnvironmentConfig) -> None:
    try:
        seconds = parsing.trigger_seconds(config.trigger_interval)
    except ValueError as exc:
        raise _problem(config, "trigger_interval", str(exc)) from None
    if not 1 <= seconds <= 3600:
        raise _problem(
            config,
            "trigger_interval",
            f"must be 1 second to 1 hour (got {config.trigger_interval!r})",
        )
    try:
        parsing.retire_grace_seconds(config.retire_grace)
    except ValueError as exc:
        raise _problem(config, "retire_grace", str(exc)) from None
    try:
        parsing.table_history_seconds(config.table_history)
    except ValueError as exc:
        raise _problem(config, "table_history", str(exc)) from None
    if config.records_behind_alarm_threshold < 1:
        raise _problem(config, "records_behind_alarm_threshold", "must be positive")
    if config.archive_infrequent_access_days < MIN_INFREQUENT_ACCESS_DAYS:
        raise _problem(
            config,
            "archive_infrequent_access_days",
            f"S3 moves objects to STANDARD_IA after {MIN_INFREQUENT_ACCESS_DAYS} days at the "
            f"earliest (got {config.archive_infrequent_access_days})",
        )
    if config.archive_glacier_days <= config.archive_infrequent_access_days:
        raise _problem(
            config, "archive_glacier_days", "must come after archive_infrequent_access_days"
        )
    if config.noncurrent_version_days < 1:
        raise _problem(config, "noncurrent_version_days", "must be positive")
    if not 1 <= config.archive_lock_days <= MAX_LOCK_DAYS:
        raise _problem(config, "archive_lock_days", f"must be 1 to {MAX_LOCK_DAYS} days")

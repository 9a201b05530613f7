"""The hand-off's values: what infra's hand-off stack writes to SSM for an environment.

Kept apart from the stack (``infra/stacks/handoff.py``) so that the pipeline
on one machine (``app/local``) writes the very same values without importing
the CDK.
"""

import orjson

from app import handoff, metric_names
from app.defaults import RETIRE_GRACE_S, TABLE_HISTORY_S
from app.sources.kafka_client import Isolation, KafkaAuth
from infra.config import layout, parsing
from infra.config.model import EnvironmentConfig

# What the job-version parameter holds until the deploy tool sets a version.
NO_JOB_VERSION = "none"


def handoff_values(
    *,
    config: EnvironmentConfig,
    bootstrap_brokers_iam: str,
    bucket_name: str,
    driver_private_ip: str,
    driver_instance_id: str,
    bootstrap_brokers: str = "",
) -> dict[str, str]:
    """The value of every name in ``app.handoff.ALL``, in that order, then the environment's
    Kafka options (:func:`kafka_job_values`), table settings (:func:`table_values`) and
    archive lock (:func:`archive_values`).

    :param bootstrap_brokers: the brokers of ``config.kafka.auth`` when it is not IAM.
    """
    values = {
        handoff.BOOTSTRAP_BROKERS_IAM: bootstrap_brokers_iam,
        handoff.BUCKET: bucket_name,
        handoff.OUTPUT_URI: layout.s3_uri(bucket_name, layout.OUTPUT_PREFIX),
        handoff.ARCHIVE_URI: layout.s3_uri(bucket_name, layout.ARCHIVE_PREFIX),
        handoff.ARTIFACTS_URI: layout.s3_uri(bucket_name, layout.ARTIFACTS_PREFIX),
        handoff.CHECKPOINT_BACKUP_URI: layout.s3_uri(bucket_name, layout.CHECKPOINT_BACKUPS_PREFIX),
        handoff.CHECKPOINT_URI: layout.checkpoint_uri(driver_private_ip),
        handoff.TOPIC_PATTERN: config.topic_pattern,
        handoff.TRIGGER: config.trigger_interval,
        handoff.METRIC_NAMESPACE: metric_names.NAMESPACE,
        handoff.DRIVER_ADDRESS: driver_private_ip,
        handoff.DRIVER_INSTANCE_ID: driver_instance_id,
        handoff.JOB_VERSION: NO_JOB_VERSION,
        handoff.JOB_WHEEL_SHA256: NO_JOB_VERSION,
        handoff.RETENTION_HOURS: str(config.retention_hours),
        handoff.REPLICATION_FACTOR: str(config.replication_factor),
        handoff.REGION: config.region,
        handoff.GLUE_DATABASE: layout.glue_database(config.name),
        handoff.COMPACT_EVERY: config.compact_every,
    }
    return (
        {name: values[name] for name in handoff.ALL}
        | kafka_job_values(config, bootstrap_brokers)
        | table_values(config)
        | archive_values(config)
        | ({handoff.JOBS: ",".join(job.name for job in config.jobs)} if config.jobs else {})
    )


def job_values(
    config: EnvironmentConfig, *, bucket_name: str, driver_private_ip: str
) -> dict[str, dict[str, str]]:
    """Each declared job's parameters (``/tablecast/<env>/jobs/<name>/``), by job: every
    name of ``app.handoff.JOB_ALL`` and ``JOB_PROCESSOR``, and ``cores`` where its settings
    give it."""
    found: dict[str, dict[str, str]] = {}
    for job in config.jobs:
        values = {
            handoff.TOPIC_PATTERN: job.topic_pattern,
            handoff.OUTPUT_URI: layout.job_output_uri(bucket_name, job.output_prefix),
            handoff.CHECKPOINT_URI: layout.job_checkpoint_uri(driver_private_ip, job.name),
            handoff.GLUE_TABLE: job.glue_table,
            # The deploy tool uploads the schema and owns this from then on; a job without
            # one reads with its processor's own input schema.
            handoff.SCHEMA_SHA256: handoff.NO_SCHEMA
            if job.schema is not None
            else handoff.PROCESSOR_INPUT,
        }
        if job.cores is not None:
            values[handoff.CORES] = str(job.cores)
        # The deploy ships the wheel and owns these four from then on.
        values |= {
            handoff.PROCESSOR: job.processor or handoff.NO_PROCESSOR,
            handoff.PROCESSOR_WHEEL: handoff.NO_PROCESSOR,
            handoff.PROCESSOR_WHEEL_SHA256: handoff.NO_PROCESSOR,
            handoff.INTEGRITY: str(job.integrity),
        }
        found[job.name] = values
    return found


def archive_values(config: EnvironmentConfig) -> dict[str, str]:
    """How long the archiver locks each file, where the archive is under Object Lock."""
    return (
        {handoff.ARCHIVE_LOCK_DAYS: str(config.archive_lock_days)} if config.archive_locked else {}
    )


def table_values(config: EnvironmentConfig) -> dict[str, str]:
    """The table's settings the environment sets otherwise than the job's defaults, by name."""
    values: dict[str, str] = {}
    if parsing.retire_grace_seconds(config.retire_grace) != RETIRE_GRACE_S:
        values[handoff.RETIRE_GRACE] = config.retire_grace
    if parsing.table_history_seconds(config.table_history) != TABLE_HISTORY_S:
        values[handoff.TABLE_HISTORY] = config.table_history
    return values


def kafka_job_values(config: EnvironmentConfig, bootstrap_brokers: str) -> dict[str, str]:
    """The Kafka options the environment sets otherwise than the job's defaults, by name."""
    kafka = config.kafka
    values: dict[str, str] = {}
    if kafka.auth != KafkaAuth.IAM:
        values[handoff.KAFKA_AUTH] = str(kafka.auth)
        if kafka.auth == KafkaAuth.TLS:
            values[handoff.BOOTSTRAP_BROKERS_TLS] = bootstrap_brokers
        else:
            values[handoff.BOOTSTRAP_BROKERS_SASL_SCRAM] = bootstrap_brokers
            values[handoff.KAFKA_SECRET_ARN] = kafka.secret_arn
    if kafka.isolation_level != Isolation.READ_COMMITTED:
        values[handoff.KAFKA_ISOLATION_LEVEL] = str(kafka.isolation_level)
    if kafka.options:
        values[handoff.KAFKA_OPTIONS] = orjson.dumps(list(kafka.options)).decode()
    if kafka.starting_offsets != "earliest":
        values[handoff.STARTING_OFFSETS] = kafka.starting_offsets
    if kafka.topics:
        values[handoff.TOPICS] = ",".join(kafka.topics)
    if kafka.min_offsets_per_trigger:
        values[handoff.MIN_OFFSETS_PER_TRIGGER] = str(kafka.min_offsets_per_trigger)
    if kafka.max_trigger_delay:
        values[handoff.MAX_TRIGGER_DELAY] = kafka.max_trigger_delay
    return values

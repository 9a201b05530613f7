"""SSM Parameter Store names: the hand-off from ``infra`` to the job and tools.

``infra`` writes every parameter under ``/tablecast/<env>/``; the job's
service on the driver node and the operator's scripts read them. Both sides
import this module, so a renamed parameter breaks a test, not a deployment.
"""

from typing import Final

PREFIX: Final = "/tablecast"

# The topics the job reads unless told otherwise (the infra's default too).
DEFAULT_TOPIC_PATTERN: Final = "^sensor-.+"

BOOTSTRAP_BROKERS_IAM: Final = "bootstrap-brokers-iam"
BUCKET: Final = "bucket"
OUTPUT_URI: Final = "output-uri"
ARCHIVE_URI: Final = "archive-uri"
ARTIFACTS_URI: Final = "artifacts-uri"
CHECKPOINT_BACKUP_URI: Final = "checkpoint-backup-uri"
CHECKPOINT_URI: Final = "checkpoint-uri"
TOPIC_PATTERN: Final = "topic-pattern"
TRIGGER: Final = "trigger"
METRIC_NAMESPACE: Final = "metric-namespace"
DRIVER_ADDRESS: Final = "driver-address"
DRIVER_INSTANCE_ID: Final = "driver-instance-id"
JOB_VERSION: Final = "job-version"
# The SHA-256 of the deployed version's wheel: run-job installs no other bytes.
JOB_WHEEL_SHA256: Final = "job-wheel-sha256"
RETENTION_HOURS: Final = "retention-hours"
REPLICATION_FACTOR: Final = "replication-factor"
REGION: Final = "region"
# The output's Iceberg table: its Glue database (``run --glue-database``), and how
# often the job compacts closed days (``run --compact-every``; "off": never).
GLUE_DATABASE: Final = "glue-database"
COMPACT_EVERY: Final = "compact-every"

ALL: Final = (
    BOOTSTRAP_BROKERS_IAM,
    BUCKET,
    OUTPUT_URI,
    ARCHIVE_URI,
    ARTIFACTS_URI,
    CHECKPOINT_BACKUP_URI,
    CHECKPOINT_URI,
    TOPIC_PATTERN,
    TRIGGER,
    METRIC_NAMESPACE,
    DRIVER_ADDRESS,
    DRIVER_INSTANCE_ID,
    JOB_VERSION,
    JOB_WHEEL_SHA256,
    RETENTION_HOURS,
    REPLICATION_FACTOR,
    REGION,
    GLUE_DATABASE,
    COMPACT_EVERY,
)
"""The parameters of every environment."""

# How the job (and the archiver) read Kafka (infra/config/kafka_job.py), `tablecast
# run`'s options of the same names. Each is written only where the environment sets it
# otherwise than the job's default (SSM keeps no empty value): run-job passes what it finds.
KAFKA_AUTH: Final = "kafka-auth"  # tls or scram [iam]
BOOTSTRAP_BROKERS_TLS: Final = "bootstrap-brokers-tls"  # with kafka-auth tls
BOOTSTRAP_BROKERS_SASL_SCRAM: Final = "bootstrap-brokers-sasl-scram"  # with kafka-auth scram
KAFKA_SECRET_ARN: Final = "kafka-secret-arn"  # with kafka-auth scram
KAFKA_ISOLATION_LEVEL: Final = "kafka-isolation-level"  # read_uncommitted [read_committed]
KAFKA_OPTIONS: Final = "kafka-options"  # a JSON list of "key=value", --kafka-option each
STARTING_OFFSETS: Final = "starting-offsets"  # latest or a time [earliest]
TOPICS: Final = "topics"  # --topics: names separated by commas [the topic pattern's]
MIN_OFFSETS_PER_TRIGGER: Final = "min-offsets-per-trigger"
MAX_TRIGGER_DELAY: Final = "max-trigger-delay"

KAFKA_OPTIONAL: Final = (
    KAFKA_AUTH,
    BOOTSTRAP_BROKERS_TLS,
    BOOTSTRAP_BROKERS_SASL_SCRAM,
    KAFKA_SECRET_ARN,
    KAFKA_ISOLATION_LEVEL,
    KAFKA_OPTIONS,
    STARTING_OFFSETS,
    TOPICS,
    MIN_OFFSETS_PER_TRIGGER,
    MAX_TRIGGER_DELAY,
)
"""The job's Kafka parameters, of the environments that set them."""

# The output table's settings written the same way (infra/config/model.py), `tablecast
# run`'s options of the same names: only where the environment sets them otherwise.
RETIRE_GRACE: Final = "retire-grace"  # how long a compaction's inputs stay [2 minutes]
TABLE_HISTORY: Final = "table-history"  # how far back the table's snapshots reach [5 days]

TABLE_OPTIONAL: Final = (RETIRE_GRACE, TABLE_HISTORY)
"""The table's parameters, of the environments that set them."""

OPTIONAL: Final = KAFKA_OPTIONAL + TABLE_OPTIONAL
"""Every parameter only some environments have: run-job's ``OPTIONAL_PARAMETERS``."""

# Where the archive is under S3 Object Lock (production): the days each file the
# archiver writes stays locked (governance mode). The archiver's, not run-job's.
ARCHIVE_LOCK_DAYS: Final = "archive-lock-days"


# Several jobs per environment (infra/config/jobs.py): where the deployment settings
# declare jobs, ``jobs`` names them (comma-separated) and each has its own parameters
# under /tablecast/<env>/jobs/<name>/ (job_parameter_name), run-job's for that job:
# the environment's trigger, Kafka options, wheel and Glue database are every job's.
JOBS: Final = "jobs"
GLUE_TABLE: Final = "glue-table"  # run --glue-table
# The SHA-256 of the job's table schema (run --schema): the deploy tool uploads the
# document to <artifacts-uri>/schemas/<sha256>.toml and writes it; "none" until then.
SCHEMA_SHA256: Final = "schema-sha256"
CORES: Final = "cores"  # spark.cores.max, where the settings give one
NO_SCHEMA: Final = "none"
# schema-sha256 of a job whose settings name no schema: its processor reads messages with
# its own input schema, and run-job passes no --schema.
PROCESSOR_INPUT: Final = "processor-input"
# The job's processor (app/ops/processors.py): infra writes the settings' processor and
# integrity, "none" for the wheel and its SHA-256, and the deploy tool owns all four from
# then on; run-job installs the wheel <artifacts-uri>/<processor-wheel> only if its
# SHA-256 is processor-wheel-sha256. "none" in the three: the built-in table rebuild.
PROCESSOR: Final = "processor"  # run --processor: package.module:Class
PROCESSOR_WHEEL: Final = "processor-wheel"  # processors/<sha256>/<file>, below artifacts-uri
PROCESSOR_WHEEL_SHA256: Final = "processor-wheel-sha256"
INTEGRITY: Final = "integrity"  # run --integrity
NO_PROCESSOR: Final = "none"
JOB_PROCESSOR: Final = (PROCESSOR, PROCESSOR_WHEEL, PROCESSOR_WHEEL_SHA256, INTEGRITY)
"""The parameters of a declared job's processor: infra writes them for every job."""

JOB_ALL: Final = (TOPIC_PATTERN, OUTPUT_URI, CHECKPOINT_URI, GLUE_TABLE, SCHEMA_SHA256)
"""The parameters of every declared job that run-job requires."""
JOB_OPTIONAL: Final = (CORES, *JOB_PROCESSOR)
"""A declared job's parameters run-job does without: ``cores`` where its settings give it;
without the processor's, it runs the built-in processor under ``strict``."""
SCHEMAS_FOLDER: Final = "schemas"
"""Below the artifacts prefix: each deployed table schema, named ``<sha256>.toml``."""
PROCESSORS_FOLDER: Final = "processors"
"""Below the artifacts prefix: each deployed processor wheel, ``<sha256>/<file name>``."""


# Kafka consumer groups the job and its tools may use (`tablecast run
# --consumer-group`, the archiver): the nodes' IAM role grants these only.
CONSUMER_GROUP_PREFIX: Final = "tablecast-"


def driver_name(environment: str) -> str:
    """The driver instance's ``Name`` tag: the tools find the driver by it after a roll."""
    return f"tablecast-{environment}-driver"


def parameter_name(environment: str, name: str) -> str:
    """The full SSM parameter name of ``name`` in ``environment``."""
    return f"{PREFIX}/{environment}/{name}"


def job_parameter_name(environment: str, job: str, name: str) -> str:
    """The full SSM parameter name of a declared job's ``name``."""
    return f"{PREFIX}/{environment}/{JOBS}/{job}/{name}"


def job_unit(job: str | None) -> str:
    """The job's service on the driver: the environment's one job, or a declared one's."""
    return "tablecast-job.service" if job is None else f"tablecast-job@{job}.service"


def job_log_group(environment: str, job: str | None) -> str:
    """The CloudWatch log group of the job's service: the environment's ``job`` group (which
    the archiver shares), or a declared job's own (infra/ creates it, node-bootstrap ships
    its service's lines there)."""
    return f"{PREFIX}/{environment}/job" if job is None else f"{PREFIX}/{environment}/jobs/{job}"

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


# Kafka consumer groups the job and its tools may use (`tablecast run
# --consumer-group`, the archiver): the nodes' IAM role grants these only.
CONSUMER_GROUP_PREFIX: Final = "tablecast-"


def driver_name(environment: str) -> str:
    """The driver instance's ``Name`` tag: the tools find the driver by it after a roll."""
    return f"tablecast-{environment}-driver"


def parameter_name(environment: str, name: str) -> str:
    """The full SSM parameter name of ``name`` in ``environment``."""
    return f"{PREFIX}/{environment}/{name}"

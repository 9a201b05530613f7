"""The hand-off's values: what infra's hand-off stack writes to SSM for an environment.

Kept apart from the stack (``infra/stacks/handoff.py``) so that the pipeline
on one machine (``app/local``) writes the very same values without importing
the CDK.
"""

from app import handoff, metric_names
from infra.config import layout
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
) -> dict[str, str]:
    """The value of every name in ``app.handoff.ALL``, in that order."""
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
        handoff.GLUE_DATABASE: layout.GLUE_DATABASE,
        handoff.COMPACT_EVERY: config.compact_every,
    }
    return {name: values[name] for name in handoff.ALL}

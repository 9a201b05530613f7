"""Names, paths and ports agreed with the AMI and the job; change them together or not at all."""

from typing import Final

JOB_NAME: Final = "tablecast"

# Prefixes of the pipeline's bucket: the job's output dataset, the raw Kafka
# archive, deployable job artifacts, and copies of the HDFS checkpoint.
OUTPUT_PREFIX: Final = "output"
ARCHIVE_PREFIX: Final = "archive"
ARTIFACTS_PREFIX: Final = "artifacts"
CHECKPOINT_BACKUPS_PREFIX: Final = "checkpoint-backups"
ATHENA_RESULTS_PREFIX: Final = "athena-results"
BUCKET_PREFIXES: Final = (
    OUTPUT_PREFIX,
    ARCHIVE_PREFIX,
    ARTIFACTS_PREFIX,
    CHECKPOINT_BACKUPS_PREFIX,
)

# The Spark nodes (the AMI's node-bootstrap reads /etc/tablecast/node.env).
NODE_ENV_FILE: Final = "/etc/tablecast/node.env"
NODE_BOOTSTRAP: Final = "/opt/tablecast/bin/node-bootstrap"
HDFS_DEVICE: Final = "/dev/sdf"
# DLM snapshots every EBS volume with this tag (value: tablecast-<env>).
HDFS_SNAPSHOT_TAG: Final = "tablecast:hdfs-snapshots"
HDFS_NAMENODE_PORT: Final = 8020
SPARK_MASTER_PORT: Final = 7077
CHECKPOINT_PATH: Final = f"/tablecast/checkpoints/{JOB_NAME}"
JOB_CHECKPOINTS_PATH: Final = "/tablecast/checkpoints/jobs"
JOB_SERVICE: Final = "tablecast-job.service"
# The Iceberg table of an environment's one job in its Glue database (declared jobs name
# theirs: infra/config/jobs.py).
DEFAULT_GLUE_TABLE: Final = "output"

# The AMI build names and tags every image it makes like this.
AMI_NAME_PATTERN: Final = "tablecast-spark-node-*"
AMI_TAGS: Final = {"Project": "tablecast", "Component": "spark-node"}
AMI_SPARK_VERSION_TAG: Final = "SparkVersion"

# MSK's listeners: IAM-authenticated TLS clients (always on: the operator's tools),
# TLS with client certificates, and SASL/SCRAM over TLS.
KAFKA_IAM_PORT: Final = 9098
KAFKA_TLS_PORT: Final = 9094
KAFKA_SCRAM_PORT: Final = 9096
HTTPS_PORT: Final = 443

# Log groups the nodes' CloudWatch agent ships to (the AMI's agent template
# names them /tablecast/<env>/<name>); infra/ creates them with retention.
NODE_LOG_GROUPS: Final = ("job", "spark", "hdfs", "bootstrap")

# The nodes' own metrics (disk, memory) from the CloudWatch agent.
NODE_METRICS_NAMESPACE: Final = "Tablecast/Nodes"

# Logs kept a year: long enough for an incident review and for checkov's rule.
LOG_RETENTION_DAYS: Final = 365


def checkpoint_uri(driver_host: str) -> str:
    """Where the job keeps its checkpoint: HDFS on the Spark nodes."""
    return f"hdfs://{driver_host}:{HDFS_NAMENODE_PORT}{CHECKPOINT_PATH}"


def job_checkpoint_uri(driver_host: str, job: str) -> str:
    """Where a declared job keeps its checkpoint: beside the environment's one job's, in a
    folder of its own (hdfs-checkpoint-backup copies every job's with /tablecast)."""
    return f"hdfs://{driver_host}:{HDFS_NAMENODE_PORT}{JOB_CHECKPOINTS_PATH}/{job}"


def job_output_uri(bucket: str, output_prefix: str) -> str:
    """A declared job's output, below the bucket's ``output/``."""
    return s3_uri(bucket, f"{OUTPUT_PREFIX}/{output_prefix}")


def glue_database(environment: str) -> str:
    """The Glue database of an environment's Iceberg table, one per environment (Athena:
    ``SELECT ... FROM tablecast_<env>.output``): environments and test pipelines share an
    account and a region's one catalog. Glue and Athena take ``_``, not ``-``; environment
    names are ``a-z0-9-``, so no two map to one database."""
    return f"{JOB_NAME}_{environment.replace('-', '_')}"


def node_log_group(environment: str, name: str) -> str:
    """Name of one of the nodes' log groups."""
    return f"/tablecast/{environment}/{name}"


def bucket_name(resource_prefix: str, account: str, region: str) -> str:
    """The pipeline's bucket: account and region make the global name unique and predictable."""
    return f"{resource_prefix}-{account}-{region}"


def s3_uri(bucket: str, prefix: str) -> str:
    """``s3://<bucket>/<prefix>``, the form written to SSM."""
    return f"s3://{bucket}/{prefix}"

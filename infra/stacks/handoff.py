"""The hand-off: every value the job and the operator's tools read, in SSM and as outputs.

Names come from ``app.handoff``, which the job imports too; each parameter is
also a Terraform output of this stack, so the outputs are the contract.
"""

from cdktf_cdktf_provider_aws.ssm_parameter import SsmParameter
from constructs import Construct

from app import handoff
from infra.cdk import Fn, TerraformOutput, TerraformResourceLifecycle
from infra.config import EnvironmentConfig
from infra.config.handoff import handoff_values, job_values
from infra.stacks.base import EnvironmentStack

DESCRIPTIONS = {
    handoff.BOOTSTRAP_BROKERS_IAM: "MSK bootstrap brokers for IAM clients (TLS, port 9098)",
    handoff.BUCKET: "The pipeline's S3 bucket",
    handoff.OUTPUT_URI: "The job's output dataset",
    handoff.ARCHIVE_URI: "The raw Kafka archive",
    handoff.ARTIFACTS_URI: "Deployable job artifacts",
    handoff.CHECKPOINT_BACKUP_URI: "Copies of the HDFS checkpoint",
    handoff.CHECKPOINT_URI: "The job's checkpoint in HDFS on the driver",
    handoff.TOPIC_PATTERN: "Regular expression of the job's topics",
    handoff.TRIGGER: "The job's processing-time trigger interval",
    handoff.METRIC_NAMESPACE: "CloudWatch namespace of the job's metrics",
    handoff.DRIVER_ADDRESS: "Private address of the driver node (Spark master, NameNode)",
    handoff.DRIVER_INSTANCE_ID: "Instance id of the driver node, for SSM Run Command",
    handoff.JOB_VERSION: "Deployed job version; set by the deploy tool, not by Terraform",
    handoff.JOB_WHEEL_SHA256: "SHA-256 of the deployed wheel; set by the deploy tool",
    handoff.RETENTION_HOURS: "Kafka retention in hours",
    handoff.REPLICATION_FACTOR: "Replication factor for new topics",
    handoff.REGION: "AWS region of the environment",
    handoff.GLUE_DATABASE: "Glue database of the output's Iceberg table (run --glue-database)",
    handoff.COMPACT_EVERY: "How often the job compacts closed days (run --compact-every)",
    handoff.KAFKA_AUTH: "How the job and the archiver sign in to MSK (--kafka-auth)",
    handoff.BOOTSTRAP_BROKERS_TLS: "MSK bootstrap brokers for TLS clients (port 9094)",
    handoff.BOOTSTRAP_BROKERS_SASL_SCRAM: "MSK bootstrap brokers for SCRAM clients (port 9096)",
    handoff.KAFKA_SECRET_ARN: "Secrets Manager secret of the SCRAM sign-in (--kafka-secret-arn)",
    handoff.KAFKA_ISOLATION_LEVEL: "Which records the job and the archiver read",
    handoff.KAFKA_OPTIONS: "librdkafka settings of the job's clients (--kafka-option each)",
    handoff.STARTING_OFFSETS: "Where a fresh checkpoint starts (--starting-offsets)",
    handoff.TOPICS: "The job's topics by name (--topics), instead of the pattern",
    handoff.MIN_OFFSETS_PER_TRIGGER: "Offsets a batch waits for (--min-offsets-per-trigger)",
    handoff.MAX_TRIGGER_DELAY: "The longest a batch waits for them (--max-trigger-delay)",
    handoff.RETIRE_GRACE: "How long a compaction's inputs stay for readers (--retire-grace)",
    handoff.TABLE_HISTORY: "How far back the table keeps snapshots (--table-history)",
    handoff.ARCHIVE_LOCK_DAYS: "Days the archiver locks each archive file (Object Lock)",
    handoff.JOBS: "The jobs the settings declare (tablecast-job@<name>.service each)",
}
JOB_DESCRIPTIONS = {
    handoff.TOPIC_PATTERN: "Regular expression of the job's topics (--topic-pattern)",
    handoff.OUTPUT_URI: "The job's output dataset (--output)",
    handoff.CHECKPOINT_URI: "The job's checkpoint in HDFS on the driver (--checkpoint)",
    handoff.GLUE_TABLE: "The job's Iceberg table in the Glue database (--glue-table)",
    handoff.SCHEMA_SHA256: "SHA-256 of the job's deployed table schema (processor-input: the "
    "processor's own); set by the deploy tool",
    handoff.CORES: "The most of the cluster's cores the job takes (spark.cores.max)",
    handoff.PROCESSOR: "The job's processor (--processor; none: the built-in); set by deploy",
    handoff.PROCESSOR_WHEEL: "Its wheel below artifacts-uri; set by the deploy tool",
    handoff.PROCESSOR_WHEEL_SHA256: "SHA-256 of the processor's wheel; set by the deploy tool",
    handoff.INTEGRITY: "The job's integrity class (--integrity); set by the deploy tool",
}
# What the deploy tool owns once it exists: Terraform writes the first value only.
DEPLOYED = (
    handoff.JOB_VERSION,
    handoff.JOB_WHEEL_SHA256,
    handoff.SCHEMA_SHA256,
    *handoff.JOB_PROCESSOR,
)


class HandoffStack(EnvironmentStack):
    """``tablecast-<env>-handoff``: SSM parameters under ``/tablecast/<env>/`` and outputs."""

    def __init__(
        self,
        scope: Construct,
        *,
        config: EnvironmentConfig,
        bootstrap_brokers_iam: str,
        bucket_name: str,
        driver_private_ip: str,
        driver_instance_id: str,
        bootstrap_brokers: str = "",
    ) -> None:
        """Write the parameters.

        :param config: the environment.
        :param bootstrap_brokers_iam: the cluster's IAM bootstrap brokers (the kafka stack's).
        :param bucket_name: the pipeline's bucket (the storage stack's).
        :param driver_private_ip: the driver node's address (the spark stack's).
        :param driver_instance_id: the driver node's instance id (the spark stack's).
        :param bootstrap_brokers: the brokers of the environment's Kafka sign-in when it is
            not IAM (the kafka stack's).
        """
        super().__init__(scope, config=config, component="handoff")
        self.values = handoff_values(
            config=config,
            bootstrap_brokers_iam=bootstrap_brokers_iam,
            bucket_name=bucket_name,
            driver_private_ip=driver_private_ip,
            driver_instance_id=driver_instance_id,
            bootstrap_brokers=bootstrap_brokers,
        )
        for name, value in self.values.items():
            self._parameter(
                name, handoff.parameter_name(config.name, name), value, DESCRIPTIONS[name]
            )
        self.job_values = job_values(
            config, bucket_name=bucket_name, driver_private_ip=driver_private_ip
        )
        """Each declared job's parameters, by job."""
        for job, values in self.job_values.items():
            for name, value in values.items():
                self._parameter(
                    f"job-{job}-{name}",
                    handoff.job_parameter_name(config.name, job, name),
                    value,
                    f"Job {job}: {JOB_DESCRIPTIONS[name]}",
                    deployed=name in DEPLOYED,
                )

    def _parameter(
        self, key: str, path: str, value: str, description: str, *, deployed: bool = False
    ) -> None:
        """One SSM parameter and its output, named ``key`` (``-`` as ``_``)."""
        parameter = SsmParameter(
            self,
            f"parameter-{key}",
            name=path,
            type="String",
            tier="Standard",
            value=value,
            description=description,
            # The deploy tool owns the version once it exists.
            lifecycle=TerraformResourceLifecycle(ignore_changes=["value"])
            if deployed or key in DEPLOYED
            else None,
        )
        TerraformOutput(
            self,
            key.replace("-", "_"),
            # Addresses and names, no secrets: the provider marks every
            # parameter value sensitive, and cdktf every cross-stack value.
            value=Fn.nonsensitive(parameter.value),
            description=description,
        )

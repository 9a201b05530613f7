"""The pipeline's bucket: output dataset, raw archive, job artifacts and checkpoint backups."""

from cdktf_cdktf_provider_aws.data_aws_caller_identity import DataAwsCallerIdentity
from cdktf_cdktf_provider_aws.data_aws_partition import DataAwsPartition
from constructs import Construct

from infra.config import EnvironmentConfig, layout
from infra.constructs import EncryptionKey, SecureBucket, Tiering
from infra.constructs.iceberg_catalog import IcebergCatalog
from infra.stacks.base import EnvironmentStack


class StorageStack(EnvironmentStack):
    """``tablecast-<env>-storage``: the KMS key and the bucket with every prefix."""

    def __init__(self, scope: Construct, *, config: EnvironmentConfig) -> None:
        """Create the bucket of ``config``'s environment.

        :param config: the environment.
        """
        super().__init__(scope, config=config, component="storage")
        prefix = config.resource_prefix
        self.key = EncryptionKey(
            self,
            "data-key",
            alias=f"{prefix}-data",
            description=f"{prefix} pipeline bucket",
            region=config.region,
        )
        account = DataAwsCallerIdentity(self, "account").account_id
        self.bucket = SecureBucket(
            self,
            "pipeline",
            bucket_name=layout.bucket_name(prefix, account, config.region),
            kms_key_arn=self.key.arn,
            noncurrent_version_days=config.noncurrent_version_days,
            tiering=[
                Tiering(
                    prefix=f"{layout.ARCHIVE_PREFIX}/",
                    transitions=(
                        (config.archive_infrequent_access_days, "STANDARD_IA"),
                        (config.archive_glacier_days, "GLACIER_IR"),
                    ),
                )
            ],
            # Throwaway environments are torn down whole; shared ones are emptied by
            # hand, on purpose, and a plan that would destroy production's bucket fails.
            force_destroy=config.throwaway,
            prevent_destroy=config.is_production,
            # Production's archive: each file locked by the archiver as it writes it.
            object_lock=config.archive_locked,
            expiring=[(f"{layout.CHECKPOINT_BACKUPS_PREFIX}/", config.checkpoint_backup_days)],
        )
        self.bucket_name = self.bucket.name
        self.bucket_arn = self.bucket.arn
        self.key_arn = self.key.arn
        # The output's Iceberg table in Glue, and Athena's workgroup for it.
        partition = DataAwsPartition(self, "partition").partition
        self.iceberg = IcebergCatalog(
            self,
            "iceberg",
            prefix=prefix,
            database=layout.glue_database(config.name),
            bucket_name=self.bucket.name,
            kms_key_arn=self.key.arn,
            force_destroy=config.throwaway,
            bucket_arn=self.bucket.arn,
            region=config.region,
            account=account,
            partition=partition,
            tables=config.glue_tables,
        )

"""The output's Iceberg table in Glue, and an Athena workgroup to query it.

- **Glue database** ``tablecast`` (``--glue-database`` of ``tablecast table``):
  the job creates and commits the table ``output`` in it (``app/table/``).
- **The job's rights** (:func:`job_statements`): read the catalog and the
  database, create and update that one table, nothing else in Glue.
- **Athena workgroup** whose query results go to the pipeline bucket under
  ``athena-results/``, encrypted with the pipeline's KMS key; the workgroup's
  settings are enforced, so a client cannot send results elsewhere or
  unencrypted. ``SELECT ... FROM tablecast.output`` works on the day of
  deployment.
"""

from cdktf_cdktf_provider_aws.athena_workgroup import (
    AthenaWorkgroup,
    AthenaWorkgroupConfiguration,
    AthenaWorkgroupConfigurationResultConfiguration,
    AthenaWorkgroupConfigurationResultConfigurationEncryptionConfiguration,
)
from cdktf_cdktf_provider_aws.glue_catalog_database import GlueCatalogDatabase
from constructs import Construct

from infra.config import layout
from infra.constructs.policies import Statement, allow

DATABASE = layout.GLUE_DATABASE
TABLE = "output"
RESULTS_PREFIX = layout.ATHENA_RESULTS_PREFIX
GLUE_READ_ACTIONS = ("glue:GetDatabase", "glue:GetTable", "glue:GetTables")
GLUE_COMMIT_ACTIONS = ("glue:CreateTable", "glue:UpdateTable")


class IcebergCatalog(Construct):
    """The Glue database of the output's table and the Athena workgroup that reads it."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        prefix: str,
        bucket_name: str,
        kms_key_arn: str,
        force_destroy: bool,
    ) -> None:
        """Create the database and the workgroup.

        :param prefix: the environment's resource prefix, e.g. ``tablecast-prod``.
        :param bucket_name: the pipeline bucket (Athena's results go under ``athena-results/``).
        :param kms_key_arn: the pipeline's data key, which encrypts the results.
        :param force_destroy: a test environment's workgroup goes with its saved queries.
        """
        super().__init__(scope, id_)
        self.database = GlueCatalogDatabase(
            self, "database", name=DATABASE,
            description=f"{prefix}: the output as an Iceberg table (tablecast table)",
        )  # fmt: skip
        self.workgroup = AthenaWorkgroup(
            self,
            "workgroup",
            name=prefix,
            force_destroy=force_destroy,
            configuration=AthenaWorkgroupConfiguration(
                enforce_workgroup_configuration=True,
                publish_cloudwatch_metrics_enabled=True,
                result_configuration=AthenaWorkgroupConfigurationResultConfiguration(
                    output_location=f"s3://{bucket_name}/{RESULTS_PREFIX}/",
                    encryption_configuration=(
                        AthenaWorkgroupConfigurationResultConfigurationEncryptionConfiguration(
                            encryption_option="SSE_KMS", kms_key_arn=kms_key_arn
                        )
                    ),
                ),
            ),
        )
        self.database_name = self.database.name
        self.workgroup_name = self.workgroup.name


def job_statements(*, region: str, account: str, partition: str) -> list[Statement]:
    """What the job may do in Glue: commit its own table, read its database, nothing else."""
    base = f"arn:{partition}:glue:{region}:{account}"
    catalog, database = f"{base}:catalog", f"{base}:database/{DATABASE}"
    table = f"{base}:table/{DATABASE}/{TABLE}"
    return [
        allow("ReadOutputTableCatalog", GLUE_READ_ACTIONS, [catalog, database, table]),
        allow("CommitOutputTable", GLUE_COMMIT_ACTIONS, [catalog, database, table]),
    ]

"""The output's Iceberg table in Glue, and an Athena workgroup to query it.

- **Glue database** ``tablecast_<env>`` (:func:`infra.config.layout.glue_database`,
  ``--glue-database`` of ``tablecast run``), one per environment and test pipeline:
  they share the account's one catalog per region. The job creates and commits
  the table ``output`` in it (``app/table/``).
- **The job's rights** (:func:`job_statements`): read the catalog and its own
  database, create and update its one table, nothing else in Glue.
- **Athena workgroup** whose query results go to the pipeline bucket under
  ``athena-results/``, encrypted with the pipeline's KMS key; the workgroup's
  settings are enforced, so a client cannot send results elsewhere or
  unencrypted. ``SELECT ... FROM tablecast_<env>.output`` works on the day of
  deployment (the job makes the table at its first start: ``run-job`` passes
  ``--glue-database``).
- **Athena readers' policy** ``<prefix>-athena-reader`` (:func:`reader_statements`,
  output ``athena_reader_policy_arn``), a managed policy an analyst's role
  attaches: queries in this workgroup only; Glue reads of its environment's
  database and its one table; S3 reads of ``output/``; reads and writes of
  ``athena-results/``; the pipeline key, through S3 only, to read the output
  and to read and write encrypted results. Nothing else.
"""

from collections.abc import Sequence

from cdktf_cdktf_provider_aws.athena_workgroup import (
    AthenaWorkgroup,
    AthenaWorkgroupConfiguration,
    AthenaWorkgroupConfigurationResultConfiguration,
    AthenaWorkgroupConfigurationResultConfigurationEncryptionConfiguration,
)
from cdktf_cdktf_provider_aws.glue_catalog_database import GlueCatalogDatabase
from cdktf_cdktf_provider_aws.iam_policy import IamPolicy
from constructs import Construct

from infra.cdk import TerraformOutput
from infra.config import layout
from infra.constructs.policies import Statement, allow, policy_json

TABLE = layout.DEFAULT_GLUE_TABLE
"""The table of an environment's one job; declared jobs name theirs (``glue_table``)."""
RESULTS_PREFIX = layout.ATHENA_RESULTS_PREFIX
GLUE_READ_ACTIONS = ("glue:GetDatabase", "glue:GetTable", "glue:GetTables")
GLUE_COMMIT_ACTIONS = ("glue:CreateTable", "glue:UpdateTable")
# A query's life in one workgroup: start, follow, fetch, stop, list one's own.
ATHENA_QUERY_ACTIONS = (
    "athena:BatchGetQueryExecution",
    "athena:GetQueryExecution",
    "athena:GetQueryResults",
    "athena:GetQueryResultsStream",
    "athena:GetWorkGroup",
    "athena:ListQueryExecutions",
    "athena:StartQueryExecution",
    "athena:StopQueryExecution",
)
# Browsing the default catalog's metadata (the console's table list, DESCRIBE).
ATHENA_METADATA_ACTIONS = (
    "athena:GetDatabase",
    "athena:GetTableMetadata",
    "athena:ListDatabases",
    "athena:ListTableMetadata",
)
RESULTS_OBJECT_ACTIONS = (
    "s3:AbortMultipartUpload",
    "s3:GetObject",
    "s3:ListMultipartUploadParts",
    "s3:PutObject",
)


class IcebergCatalog(Construct):
    """The Glue database of the output's table and the Athena workgroup that reads it."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        prefix: str,
        database: str,
        bucket_name: str,
        kms_key_arn: str,
        force_destroy: bool,
        bucket_arn: str,
        region: str,
        account: str,
        partition: str,
        tables: Sequence[str] = (TABLE,),
    ) -> None:
        """Create the database and the workgroup.

        :param prefix: the environment's resource prefix, e.g. ``tablecast-prod``.
        :param database: the environment's Glue database (``tablecast_<env>``).
        :param bucket_name: the pipeline bucket (Athena's results go under ``athena-results/``).
        :param kms_key_arn: the pipeline's data key, which encrypts the results.
        :param force_destroy: a test environment's workgroup goes with its saved queries.
        :param bucket_arn, region, account, partition: for the Athena readers' policy.
        :param tables: the jobs' tables in the database, which the readers may read.
        """
        super().__init__(scope, id_)
        self.database = GlueCatalogDatabase(
            self,
            "database",
            name=database,
            description=f"{prefix}: the output as an Iceberg table (tablecast run --glue-database)",
        )
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
        self.reader_policy = IamPolicy(
            self,
            "athena-reader",
            name=f"{prefix}-athena-reader",
            description=f"Query {database}.{'/'.join(tables)} of {prefix} in Athena workgroup "
            f"{prefix} (attach to analysts' roles)",
            policy=policy_json(
                reader_statements(
                    workgroup=prefix,
                    database=database,
                    bucket_arn=bucket_arn,
                    kms_key_arn=kms_key_arn,
                    region=region,
                    account=account,
                    partition=partition,
                    tables=tables,
                )
            ),
        )
        TerraformOutput(
            self,
            "athena_reader_policy_arn",
            value=self.reader_policy.arn,
            description="Managed policy to attach to an Athena reader's role",
        )


def job_statements(
    *,
    database: str,
    region: str,
    account: str,
    partition: str,
    tables: Sequence[str] = (TABLE,),
) -> list[Statement]:
    """What the jobs may do in Glue: commit their own tables, read their database, nothing
    else."""
    resources = _table_resources(
        database, region=region, account=account, partition=partition, tables=tables
    )
    return [
        allow("ReadOutputTableCatalog", GLUE_READ_ACTIONS, resources),
        allow("CommitOutputTable", GLUE_COMMIT_ACTIONS, resources),
    ]


def _table_resources(
    database: str, *, region: str, account: str, partition: str, tables: Sequence[str]
) -> list[str]:
    """The catalog, the environment's database and its jobs' tables (Glue authorizes a
    table's calls on all three)."""
    base = f"arn:{partition}:glue:{region}:{account}"
    return [
        f"{base}:catalog",
        f"{base}:database/{database}",
        *(f"{base}:table/{database}/{table}" for table in tables),
    ]


def reader_statements(
    *,
    workgroup: str,
    database: str,
    bucket_arn: str,
    kms_key_arn: str,
    region: str,
    account: str,
    partition: str,
    tables: Sequence[str] = (TABLE,),
) -> list[Statement]:
    """What an Athena reader of the output's tables may do, and nothing more."""
    athena = f"arn:{partition}:athena:{region}:{account}"
    output, results = layout.OUTPUT_PREFIX, RESULTS_PREFIX
    return [
        allow("QueryInTheWorkgroup", ATHENA_QUERY_ACTIONS, [f"{athena}:workgroup/{workgroup}"]),
        allow(
            "BrowseTheCatalog", ATHENA_METADATA_ACTIONS, [f"{athena}:datacatalog/AwsDataCatalog"]
        ),
        allow(
            "ReadOutputTableCatalog",
            GLUE_READ_ACTIONS,
            _table_resources(
                database, region=region, account=account, partition=partition, tables=tables
            ),
        ),
        allow(
            "ListOutputAndResults",
            ["s3:ListBucket"],
            [bucket_arn],
            {"StringLike": {"s3:prefix": [output, f"{output}/*", results, f"{results}/*"]}},
        ),
        allow(
            "BucketMetadata",
            ["s3:GetBucketLocation", "s3:ListBucketMultipartUploads"],
            [bucket_arn],
        ),
        # The table's data and metadata files are all under output/ (the table's
        # location is output/_iceberg/table; its data files are the output's own).
        allow("ReadOutput", ["s3:GetObject"], [f"{bucket_arn}/{output}/*"]),
        allow("ReadWriteResults", RESULTS_OBJECT_ACTIONS, [f"{bucket_arn}/{results}/*"]),
        # The bucket's objects and the workgroup's results are SSE-KMS with the pipeline key;
        # Athena reads and writes them through S3 with the reader's own rights.
        allow(
            "UsePipelineDataKeyThroughS3",
            ["kms:Decrypt", "kms:GenerateDataKey"],
            [kms_key_arn],
            {"StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"}},
        ),
    ]

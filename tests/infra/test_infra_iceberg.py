"""The output's Iceberg table: a Glue database per environment, the job's rights on its one
table, and an Athena workgroup whose results are encrypted with the pipeline's key."""

from app import handoff
from infra.config import layout
from infra.constructs.iceberg_catalog import RESULTS_PREFIX
from infra.testing import SynthesizedEnvironment, policy_statements
from tests.infra.synthesized_documents import parameters


def glue_resources(env: SynthesizedEnvironment) -> set[str]:
    """Every Glue database and table any policy of the environment names."""
    return {
        resource.split(":", 5)[5]
        for resource_type in ("aws_iam_role_policy", "aws_iam_policy")
        for _, policy in env.all_resources(resource_type)
        for statement in policy_statements(policy["policy"])
        for resource in statement["Resource"]
        if ":glue:" in resource and not resource.endswith(":catalog")
    }


def test_glue_database_and_an_enforced_encrypted_athena_workgroup(
    env: SynthesizedEnvironment,
) -> None:
    database = layout.glue_database(env.config.name)
    assert env["storage"].has_resource("aws_glue_catalog_database", {"name": database})
    # The job makes its table where the hand-off says (run-job: --glue-database).
    found = parameters(env)[handoff.parameter_name(env.config.name, handoff.GLUE_DATABASE)]
    assert found["value"] == database
    (workgroup,) = env["storage"].resources("aws_athena_workgroup").values()
    configuration = workgroup["configuration"]
    assert configuration["enforce_workgroup_configuration"] is True
    results = configuration["result_configuration"]
    assert results["output_location"].endswith(f"/{RESULTS_PREFIX}/")
    encryption = results["encryption_configuration"]
    assert encryption["encryption_option"] == "SSE_KMS"
    assert encryption["kms_key_arn"].startswith("${aws_kms_key.")


def test_the_job_may_commit_its_table_and_nothing_else_in_glue(
    env: SynthesizedEnvironment,
) -> None:
    by_policy = {
        name: [
            s
            for s in policy_statements(policy["policy"])
            if any(str(a).startswith("glue:") for a in s["Action"])
        ]
        for name, policy in env["spark"].resources("aws_iam_role_policy").items()
    }
    # The driver commits the table (the sink, the recomputes); workers and the archiver never.
    assert {name for name, found in by_policy.items() if found} == {
        name for name in by_policy if "driver" in name
    }, by_policy.keys()
    glue = [s for found in by_policy.values() for s in found]
    assert glue, "the driver's role has no Glue statement"
    database = layout.glue_database(env.config.name)
    for statement in glue:
        assert not any(r == "*" or r.endswith("/*") for r in statement["Resource"])
        tables = [r for r in statement["Resource"] if ":table/" in r]
        # Each job's own table: the one job's "output", or each declared job's.
        assert sorted(r.rsplit(":table/", 1)[1] for r in tables) == sorted(
            f"{database}/{table}" for table in env.config.glue_tables
        )
    actions = {a for s in glue for a in s["Action"]}
    assert actions == {
        "glue:GetDatabase",
        "glue:GetTable",
        "glue:GetTables",
        "glue:CreateTable",
        "glue:UpdateTable",
    }


def test_athena_readers_get_a_least_privilege_managed_policy(
    env: SynthesizedEnvironment,
) -> None:
    storage = env["storage"]
    prefix = env.config.resource_prefix
    (policy,) = storage.resources("aws_iam_policy").values()
    assert policy["name"] == f"{prefix}-athena-reader"
    assert any("athena_reader_policy_arn" in name for name in storage.outputs())
    (workgroup,) = storage.resources("aws_athena_workgroup").values()
    statements = {s["Sid"]: s for s in policy_statements(policy["policy"])}
    for statement in statements.values():
        assert statement["Effect"] == "Allow"
        assert not any("*" in a for a in statement["Action"]), statement
        assert not any(r == "*" or r.endswith(":*") for r in statement["Resource"]), statement

    def resources(sid: str) -> list[str]:
        return list(statements[sid]["Resource"])

    # Queries: this workgroup only (its results location and encryption are enforced).
    assert len(resources("QueryInTheWorkgroup")) == 1
    assert resources("QueryInTheWorkgroup")[0].endswith(f":workgroup/{workgroup['name']}")
    assert "athena:StartQueryExecution" in statements["QueryInTheWorkgroup"]["Action"]
    # Glue: reads of the database and its one table.
    assert set(statements["ReadOutputTableCatalog"]["Action"]) == {
        "glue:GetDatabase",
        "glue:GetTable",
        "glue:GetTables",
    }
    database = layout.glue_database(env.config.name)
    tables = [r for r in resources("ReadOutputTableCatalog") if ":table/" in r]
    assert sorted(r.rsplit(":table/", 1)[1] for r in tables) == sorted(
        f"{database}/{table}" for table in env.config.glue_tables
    )
    # S3: the output read-only; athena-results/ read and write; nothing else of the bucket.
    object_grants = {
        r.split("}", 1)[-1]: set(s["Action"])
        for s in statements.values()
        for r in s["Resource"]
        if r.endswith("/*") and r.startswith("${aws_s3_bucket.")
    }
    assert object_grants == {
        "/output/*": {"s3:GetObject"},
        f"/{RESULTS_PREFIX}/*": {
            "s3:AbortMultipartUpload",
            "s3:GetObject",
            "s3:ListMultipartUploadParts",
            "s3:PutObject",
        },
    }
    listing = statements["ListOutputAndResults"]
    assert set(listing["Condition"]["StringLike"]["s3:prefix"]) == {
        "output",
        "output/*",
        RESULTS_PREFIX,
        f"{RESULTS_PREFIX}/*",
    }
    writes = {a for s in statements.values() for a in s["Action"] if "Put" in a}
    assert writes == {"s3:PutObject"}
    # KMS: the pipeline key, through S3 only.
    key = statements["UsePipelineDataKeyThroughS3"]
    assert set(key["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey"}
    assert key["Resource"] == [
        workgroup["configuration"]["result_configuration"]["encryption_configuration"][
            "kms_key_arn"
        ]
    ]
    assert key["Condition"]["StringEquals"]["kms:ViaService"].startswith("s3.")


def test_no_two_environments_share_a_glue_database_or_grant_on_each_others(
    synthesized: dict[str, SynthesizedEnvironment],
) -> None:
    """Every environment and test pipeline shares the account's one catalog per region: each
    creates its own database, and its roles and readers' policy name nothing but it."""
    databases: dict[str, str] = {}
    for name, env in synthesized.items():
        (database,) = env["storage"].resources("aws_glue_catalog_database").values()
        assert database["name"] not in databases, (name, databases.get(database["name"]))
        databases[database["name"]] = name
        own = database["name"]
        tables = {f"table/{own}/{table}" for table in env.config.glue_tables}
        assert glue_resources(env) == {f"database/{own}", *tables}, name
    assert len(databases) == len(synthesized) >= 5

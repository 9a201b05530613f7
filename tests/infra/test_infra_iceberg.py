"""The output's Iceberg table: a Glue database, the job's rights on its one table,
and an Athena workgroup whose results are encrypted with the pipeline's key."""

from infra.constructs.iceberg_catalog import DATABASE, RESULTS_PREFIX, TABLE
from infra.testing import SynthesizedEnvironment, policy_statements


def test_glue_database_and_an_enforced_encrypted_athena_workgroup(
    env: SynthesizedEnvironment,
) -> None:
    assert env["storage"].has_resource("aws_glue_catalog_database", {"name": DATABASE})
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
    for statement in glue:
        assert not any(r == "*" or r.endswith("/*") for r in statement["Resource"])
        tables = [r for r in statement["Resource"] if ":table/" in r]
        assert all(r.endswith(f":table/{DATABASE}/{TABLE}") for r in tables)
    actions = {a for s in glue for a in s["Action"]}
    assert actions == {"glue:GetDatabase", "glue:GetTable", "glue:GetTables",
                       "glue:CreateTable", "glue:UpdateTable"}  # fmt: skip

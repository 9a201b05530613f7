"""Least privilege: no wildcard actions, the bucket's prefixes only, the job's namespace only."""

from app import handoff, metric_names
from infra.config import layout
from infra.constructs.hdfs_snapshots import DLM_DESCRIBE_ACTIONS
from infra.constructs.node_permissions import (
    ACTIONS_WITHOUT_RESOURCES,
    S3_RETENTION_ACTIONS,
    SSM_AGENT_MESSAGE_ACTIONS,
)
from infra.testing import Document, SynthesizedEnvironment, as_list, policy_statements
from tests.infra.synthesized_documents import KINDS, role_statements

IAM_POLICY_TYPES = ("aws_iam_role_policy", "aws_iam_policy")


def identity_statements(env: SynthesizedEnvironment) -> list[Document]:
    return [
        statement
        for resource_type in IAM_POLICY_TYPES
        for _, policy in env.all_resources(resource_type)
        for statement in policy_statements(policy["policy"])
    ]


def node_statements(env: SynthesizedEnvironment) -> dict[str, Document]:
    return role_statements(env, "driver")


def object_access(statements: dict[str, Document]) -> dict[str, set[str]]:
    """Per bucket prefix, the S3 object actions a role's statements allow on it."""
    access: dict[str, set[str]] = {}
    for statement in statements.values():
        actions = {a for a in as_list(statement["Action"]) if a.startswith("s3:")}
        for resource in as_list(statement["Resource"]):
            if actions and "}/" in resource:
                prefix = resource.rsplit("}/", 1)[1].removesuffix("/*")
                access.setdefault(prefix, set()).update(actions)
    return access


def test_each_role_touches_only_its_prefixes_and_nobody_deletes_the_archive(
    env: SynthesizedEnvironment,
) -> None:
    access = {kind: object_access(role_statements(env, kind)) for kind in KINDS}
    write = {
        "s3:GetObject",
        "s3:PutObject",
        "s3:AbortMultipartUpload",
        "s3:ListMultipartUploadParts",
    }
    assert access["driver"] == {
        "artifacts": {"s3:GetObject"},  # nodes only read artifacts/: the deploy tool writes
        "archive": {"s3:GetObject"},
        "output": write | {"s3:DeleteObject"},
        "checkpoint-backups": write,
    }
    assert access["worker"] == {"archive": {"s3:GetObject"}, "output": write | {"s3:DeleteObject"}}
    # Where the archive is under Object Lock, the archiver locks each file it writes.
    locks = set(S3_RETENTION_ACTIONS) if env.config.archive_locked else set()
    assert access["archiver"] == {"archive": write | locks}
    assert not any("Bypass" in a for kind in KINDS for acts in access[kind].values() for a in acts)
    for kind in KINDS:
        assert "s3:DeleteObject" not in access[kind].get("archive", set()), kind
        assert access[kind].get("artifacts", {"s3:GetObject"}) == {"s3:GetObject"}, kind
        listing = role_statements(env, kind)["ListPipelinePrefixes"]
        prefixes = {p.removesuffix("/*") for p in listing["Condition"]["StringLike"]["s3:prefix"]}
        assert prefixes == set(access[kind]), kind


def test_only_the_driver_becomes_the_archiver_and_workers_read_no_ssm(
    env: SynthesizedEnvironment,
) -> None:
    roles = env["spark"].resources("aws_iam_role")
    (trust,) = policy_statements(roles["archiver-role"]["assume_role_policy"])
    assert trust["Principal"] == {"AWS": "${aws_iam_role.driver-role.arn}"}
    assert "ec2.amazonaws.com" not in roles["archiver-role"]["assume_role_policy"]
    become = role_statements(env, "driver")["BecomeTheArchiver"]
    assert (as_list(become["Action"]), as_list(become["Resource"])) == (
        ["sts:AssumeRole"],
        ["${aws_iam_role.archiver-role.arn}"],
    )
    for kind in ("worker", "archiver"):
        actions = {a for st in role_statements(env, kind).values() for a in as_list(st["Action"])}
        assert "sts:AssumeRole" not in actions, kind
    worker = role_statements(env, "worker")
    assert not any(a.startswith("ssm:Get") for st in worker.values() for a in as_list(st["Action"]))
    assert "ReadHandoffParameters" in role_statements(env, "archiver")


def test_no_wildcard_actions_in_identity_policies(env: SynthesizedEnvironment) -> None:
    statements = identity_statements(env)
    assert statements
    for statement in statements:
        assert statement["Effect"] == "Allow"
        assert "NotAction" not in statement
        assert "NotResource" not in statement
        for action in as_list(statement["Action"]):
            assert "*" not in action, statement


def test_wildcard_resource_only_where_aws_has_no_resource(env: SynthesizedEnvironment) -> None:
    for statement in identity_statements(env):
        if "*" not in as_list(statement["Resource"]):
            continue
        assert as_list(statement["Resource"]) == ["*"]
        assert set(as_list(statement["Action"])) <= (
            ACTIONS_WITHOUT_RESOURCES | set(DLM_DESCRIBE_ACTIONS)
        ), statement
        if "cloudwatch:PutMetricData" in as_list(statement["Action"]):
            namespaces = statement["Condition"]["StringEquals"]["cloudwatch:namespace"]
            assert set(statement["Condition"]) == {"StringEquals"}
            assert set(namespaces) <= {metric_names.NAMESPACE, layout.NODE_METRICS_NAMESPACE}


def test_no_aws_managed_policy_on_the_nodes(env: SynthesizedEnvironment) -> None:
    # AmazonSSMManagedInstanceCore reads every parameter and document of the account.
    assert not env["spark"].resources("aws_iam_role_policy_attachment")
    statements = node_statements(env)
    assert set(as_list(statements["SsmAgentMessages"]["Action"])) == set(SSM_AGENT_MESSAGE_ACTIONS)
    ssm_reads = [
        statement
        for statement in statements.values()
        if any(action.startswith("ssm:Get") for action in as_list(statement["Action"]))
    ]
    assert [statement["Sid"] for statement in ssm_reads] == ["ReadHandoffParameters"]


def test_no_role_reaches_every_object_of_the_bucket(env: SynthesizedEnvironment) -> None:
    bucket = "${data.terraform_remote_state.cross-stack-reference-input-"
    for kind in KINDS:
        s3_resources = [
            resource
            for statement in role_statements(env, kind).values()
            if any(action.startswith("s3:") for action in as_list(statement["Action"]))
            for resource in as_list(statement["Resource"])
        ]
        assert s3_resources and all(resource.startswith(bucket) for resource in s3_resources)
        # Nothing on every object of the bucket, which "<bucket arn>/*" would be.
        assert not any(resource.endswith("}/*") for resource in s3_resources), kind


def test_kms_use_only_through_s3(env: SynthesizedEnvironment) -> None:
    statement = node_statements(env)["UsePipelineDataKeyThroughS3"]
    assert set(as_list(statement["Action"])) == {"kms:Decrypt", "kms:GenerateDataKey"}
    assert statement["Condition"] == {
        "StringEquals": {"kms:ViaService": f"s3.{env.config.region}.amazonaws.com"}
    }


def test_metrics_only_in_the_jobs_and_the_nodes_namespaces(env: SynthesizedEnvironment) -> None:
    statement = node_statements(env)["PublishMetrics"]
    assert as_list(statement["Action"]) == ["cloudwatch:PutMetricData"]
    assert statement["Condition"]["StringEquals"]["cloudwatch:namespace"] == [
        "Tablecast",
        "Tablecast/Nodes",
    ]
    # The archiver publishes its heartbeat and lag beside the job's metrics, and nothing else.
    archiver = role_statements(env, "archiver")["PublishMetrics"]
    assert as_list(archiver["Action"]) == ["cloudwatch:PutMetricData"]
    assert archiver["Condition"] == {"StringEquals": {"cloudwatch:namespace": ["Tablecast"]}}


def kafka_actions(statements: dict[str, Document]) -> set[str]:
    return {
        action
        for statement in statements.values()
        for action in as_list(statement["Action"])
        if action.startswith("kafka-cluster:")
    }


CONSUME = {
    "kafka-cluster:Connect",
    "kafka-cluster:DescribeCluster",
    "kafka-cluster:DescribeTopic",
    "kafka-cluster:ReadData",
    "kafka-cluster:DescribeGroup",
    "kafka-cluster:AlterGroup",
}
LOAD = {
    "kafka-cluster:WriteData",
    "kafka-cluster:WriteDataIdempotently",
    "kafka-cluster:CreateTopic",
    "kafka-cluster:AlterTopic",
    "kafka-cluster:DescribeTopicDynamicConfiguration",
    "kafka-cluster:AlterTopicDynamicConfiguration",
    "kafka-cluster:DescribeTransactionalId",
    "kafka-cluster:AlterTransactionalId",
}


def test_nodes_only_consume_and_use_tablecast_groups(env: SynthesizedEnvironment) -> None:
    statements = node_statements(env)
    prefix = env.config.topic_prefix
    for kind in ("worker", "archiver"):
        assert kafka_actions(role_statements(env, kind)) == CONSUME, kind
    # A test pipeline's driver also creates and loads the pipeline's topics: test-run runs
    # there, where the brokers are, with the pipeline's own roles. No shared environment's.
    loads = LOAD if env.config.test_pipeline is not None else set()
    assert kafka_actions(statements) == CONSUME | loads
    for sid in ("WritePipelineTopics", "AdministerPipelineTopics") if loads else ():
        assert all(r.endswith(f"/{prefix}*") for r in as_list(statements[sid]["Resource"]))
    read = statements["ReadPipelineTopics"]
    for resource in as_list(read["Resource"]):
        assert f":kafka:{env.config.region}:" in resource
        assert ":topic/${" in resource
        assert resource.endswith(f"/{prefix}*")
    groups = statements["UseTablecastGroups"]
    assert set(as_list(groups["Action"])) == {
        "kafka-cluster:DescribeGroup",
        "kafka-cluster:AlterGroup",
    }
    (group,) = as_list(groups["Resource"])
    assert ":group/${" in group
    assert group.endswith("/tablecast-*")


def kafka_policies(env: SynthesizedEnvironment) -> tuple[dict[str, Document], dict[str, Document]]:
    kafka = env["kafka"]
    (producer,) = kafka.resources("aws_iam_policy").values()
    (admin,) = kafka.resources("aws_iam_role_policy").values()
    return (
        {s["Sid"]: s for s in policy_statements(producer["policy"])},
        {s["Sid"]: s for s in policy_statements(admin["policy"])},
    )


def test_producers_get_a_policy_that_only_writes_the_pipelines_topics(
    env: SynthesizedEnvironment,
) -> None:
    producer, _ = kafka_policies(env)
    assert kafka_actions(producer) == {
        "kafka-cluster:Connect",
        "kafka-cluster:DescribeCluster",
        "kafka-cluster:WriteDataIdempotently",
        "kafka-cluster:DescribeTopic",
        "kafka-cluster:WriteData",
    }
    for resource in as_list(producer["WritePipelineTopics"]["Resource"]):
        assert resource.endswith(f"/{env.config.topic_prefix}*")
    outputs = env["kafka"].outputs()
    assert outputs["producer_policy_arn"]["value"].startswith("${aws_iam_policy.")


def test_topic_administration_has_its_own_role(env: SynthesizedEnvironment) -> None:
    _, admin = kafka_policies(env)
    assert {
        "kafka-cluster:CreateTopic",
        "kafka-cluster:AlterTopic",
        "kafka-cluster:AlterTopicDynamicConfiguration",
    } <= kafka_actions(admin)
    assert "kafka-cluster:DeleteTopic" not in kafka_actions(admin)
    for resource in as_list(admin["AdministerPipelineTopics"]["Resource"]):
        assert resource.endswith(f"/{env.config.topic_prefix}*")
    (transactions,) = as_list(admin["LoadToolTransactions"]["Resource"])
    assert ":transactional-id/${" in transactions
    assert transactions.endswith("/tablecast-produce-*")
    (role,) = env["kafka"].resources("aws_iam_role").values()
    assert role["name"] == f"tablecast-{env.config.name}-topic-admin"
    (trust,) = policy_statements(role["assume_role_policy"])
    principals = env.config.deployment.topic_admin_principals
    if principals:
        assert trust["Principal"] == {"AWS": list(principals)}
    else:
        assert trust["Principal"]["AWS"][0].endswith(":root}") or trust["Principal"]["AWS"][
            0
        ].endswith(":root")
    assert "ec2.amazonaws.com" not in role["assume_role_policy"], "no node can become admin"


def test_ssm_read_only_under_the_environments_path(env: SynthesizedEnvironment) -> None:
    statement = node_statements(env)["ReadHandoffParameters"]
    assert all(action.startswith("ssm:Get") for action in as_list(statement["Action"]))
    path = f":parameter{handoff.PREFIX}/{env.config.name}"
    assert all(path in resource for resource in statement["Resource"])


def test_logs_only_to_the_nodes_log_groups(env: SynthesizedEnvironment) -> None:
    statement = node_statements(env)["ShipNodeLogs"]
    assert set(as_list(statement["Action"])) == {
        "logs:CreateLogStream",
        "logs:DescribeLogStreams",
        "logs:PutLogEvents",
    }
    groups = env["spark"].resources("aws_cloudwatch_log_group")
    arns = {f"${{aws_cloudwatch_log_group.{name}.arn}}" for name in groups}
    assert {resource.removesuffix(":*") for resource in statement["Resource"]} == arns


def test_every_policy_is_json_before_terraform_fills_it_in(env: SynthesizedEnvironment) -> None:
    # checkov reads the policies as text; an expression with quotes inside
    # would hide them from it.
    for stack in env.synthesized.values():
        for resources in stack.document.get("resource", {}).values():
            for name, resource in resources.items():
                for field in ("policy", "assume_role_policy"):
                    if field in resource:
                        assert policy_statements(resource[field]), (stack.name, name)


def test_kms_key_policies_have_no_wildcard_principal(env: SynthesizedEnvironment) -> None:
    keys = list(env.all_resources("aws_kms_key"))
    assert keys
    for _, key in keys:
        assert key["enable_key_rotation"] is True
        for statement in policy_statements(key["policy"]):
            assert statement["Principal"] != "*"
            assert statement["Principal"] != {"AWS": "*"}


def test_dlm_snapshots_and_deletes_only_the_environments_volumes(
    env: SynthesizedEnvironment,
) -> None:
    spark = env["spark"]
    (role,) = [r for r in spark.resources("aws_iam_role").values() if "hdfs-snapshots" in r["name"]]
    (trust,) = policy_statements(role["assume_role_policy"])
    assert trust["Principal"] == {"Service": "dlm.amazonaws.com"}
    assert trust["Condition"] == {
        "StringEquals": {"aws:SourceAccount": "${data.aws_caller_identity.account.account_id}"}
    }
    (policy,) = [
        p for p in spark.resources("aws_iam_role_policy").values() if "snapshot" in p["name"]
    ]
    statements = {s["Sid"]: s for s in policy_statements(policy["policy"])}
    tagged = {
        "StringEquals": {f"aws:ResourceTag/{layout.HDFS_SNAPSHOT_TAG}": env.config.resource_prefix}
    }
    partition = "${data.aws_partition.partition.partition}"
    region = env.config.region
    # Only the environment's tagged volumes are snapshotted, only their snapshots deleted.
    assert statements["SnapshotTaggedVolumes"]["Condition"] == tagged
    assert statements["DeleteOwnSnapshots"]["Condition"] == tagged
    assert statements["DeleteOwnSnapshots"]["Action"] == ["ec2:DeleteSnapshot"]
    for statement in statements.values():
        for resource in as_list(statement["Resource"]):
            assert (
                resource == "*"
                or resource.startswith(f"arn:{partition}:ec2:{region}:")
                or (resource.startswith("${aws_kms_key."))
            ), resource
    deletes = [s for s in statements.values() if "ec2:DeleteSnapshot" in s["Action"]]
    assert deletes == [statements["DeleteOwnSnapshots"]]


def test_no_arn_names_the_aws_partition_literally(env: SynthesizedEnvironment) -> None:
    """ARNs are built with the partition's data source (aws-cn, aws-us-gov alike); only the
    operator's settings name ARNs whole (alarm topics, the topic administrators)."""
    settings = env.config.deployment
    given = [e.address for e in settings.alarm_endpoints] + list(settings.topic_admin_principals)
    for stack in env.synthesized.values():
        text = stack.text
        for arn in given:
            text = text.replace(arn, "")
        assert "arn:aws:" not in text, stack.name

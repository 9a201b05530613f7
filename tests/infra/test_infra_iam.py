"""Least privilege: no wildcard actions, the bucket's prefixes only, the job's namespace only."""

from app import handoff, metric_names
from infra.config import layout
from infra.testing import Document, SynthesizedEnvironment, as_list, policy_statements

IAM_POLICY_TYPES = ("aws_iam_role_policy", "aws_iam_policy")


def identity_statements(env: SynthesizedEnvironment) -> list[Document]:
    return [
        statement
        for resource_type in IAM_POLICY_TYPES
        for _, policy in env.all_resources(resource_type)
        for statement in policy_statements(policy["policy"])
    ]


def node_statements(env: SynthesizedEnvironment) -> dict[str, Document]:
    (policy,) = env["spark"].resources("aws_iam_role_policy").values()
    return {statement["Sid"]: statement for statement in policy_statements(policy["policy"])}


def test_no_wildcard_actions_in_identity_policies(env: SynthesizedEnvironment) -> None:
    statements = identity_statements(env)
    assert statements
    for statement in statements:
        assert statement["Effect"] == "Allow"
        assert "NotAction" not in statement
        assert "NotResource" not in statement
        for action in as_list(statement["Action"]):
            assert "*" not in action, statement


def test_wildcard_resource_only_where_aws_has_no_resource_and_then_with_a_condition(
    env: SynthesizedEnvironment,
) -> None:
    for statement in identity_statements(env):
        if "*" in as_list(statement["Resource"]):
            assert as_list(statement["Action"]) == ["cloudwatch:PutMetricData"]
            assert statement["Condition"] == {
                "StringEquals": {"cloudwatch:namespace": metric_names.NAMESPACE}
            }


def test_nodes_read_and_write_only_the_pipeline_prefixes(env: SynthesizedEnvironment) -> None:
    statements = node_statements(env)
    bucket = "${data.terraform_remote_state.cross-stack-reference-input-"
    objects = statements["ReadWritePipelineObjects"]
    assert set(as_list(objects["Action"])) >= {
        "s3:GetObject",
        "s3:PutObject",
        "s3:DeleteObject",
        "s3:AbortMultipartUpload",
        "s3:ListMultipartUploadParts",
    }
    suffixes = {resource.rsplit("}/", 1)[1] for resource in objects["Resource"]}
    assert suffixes == {
        pattern for prefix in layout.BUCKET_PREFIXES for pattern in (prefix, f"{prefix}/*")
    }
    assert all(resource.startswith(bucket) for resource in objects["Resource"])
    listing = statements["ListPipelinePrefixes"]
    assert as_list(listing["Action"]) == ["s3:ListBucket"]
    assert set(listing["Condition"]["StringLike"]["s3:prefix"]) == suffixes
    # Nothing on every object of the bucket, which "<bucket arn>/*" would be.
    s3_resources = [
        resource
        for statement in statements.values()
        if any(action.startswith("s3:") for action in as_list(statement["Action"]))
        for resource in as_list(statement["Resource"])
    ]
    assert not any(resource.endswith("}/*") for resource in s3_resources)


def test_kms_use_only_through_s3(env: SynthesizedEnvironment) -> None:
    statement = node_statements(env)["UsePipelineDataKeyThroughS3"]
    assert set(as_list(statement["Action"])) == {"kms:Decrypt", "kms:GenerateDataKey"}
    assert statement["Condition"] == {
        "StringEquals": {"kms:ViaService": f"s3.{env.config.region}.amazonaws.com"}
    }


def test_metrics_only_in_the_jobs_namespace(env: SynthesizedEnvironment) -> None:
    statement = node_statements(env)["PublishJobMetrics"]
    assert as_list(statement["Action"]) == ["cloudwatch:PutMetricData"]
    assert statement["Condition"]["StringEquals"]["cloudwatch:namespace"] == "Tablecast"


def test_kafka_connect_and_read_only_for_the_topic_prefix(env: SynthesizedEnvironment) -> None:
    statements = node_statements(env)
    prefix = env.config.topic_prefix
    connect = statements["ConnectToCluster"]
    assert set(as_list(connect["Action"])) == {
        "kafka-cluster:Connect",
        "kafka-cluster:DescribeCluster",
    }
    read = statements["ReadPipelineTopics"]
    assert set(as_list(read["Action"])) == {
        "kafka-cluster:DescribeTopic",
        "kafka-cluster:ReadData",
    }
    for resource in as_list(read["Resource"]):
        assert f":kafka:{env.config.region}:" in resource
        assert ":topic/${" in resource
        assert resource.endswith(f"/{prefix}*")
    groups = statements["UseConsumerGroups"]
    assert set(as_list(groups["Action"])) == {
        "kafka-cluster:DescribeGroup",
        "kafka-cluster:AlterGroup",
    }
    assert any(resource.endswith(f"/{prefix}*") for resource in groups["Resource"])
    operate = statements["OperatePipelineTopics"]
    assert set(as_list(operate["Action"])) == {
        "kafka-cluster:CreateTopic",
        "kafka-cluster:AlterTopic",
        "kafka-cluster:DescribeTopicDynamicConfiguration",
        "kafka-cluster:WriteData",
    }
    assert all(resource.endswith(f"/{prefix}*") for resource in operate["Resource"])


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

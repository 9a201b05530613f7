"""Real Terraform on the test pipeline testing.toml declares: what it adds applies to moto.

Marked ``terraform`` (``make terraform-check``). A test pipeline's stacks are
the sandbox's code with other values (``test_infra_terraform.py`` validates
every stack of every environment and applies the sandbox whole). What only a
test pipeline has is in its monitoring stack: the owner's subscription, the
EventBridge Scheduler schedule of the expiry notice and its role. Those resources
are applied here (which validates the stack) to a moto server of its own, reading
stand-in states for the kafka and spark stacks' outputs, checked with boto3
as AWS would report it, and destroyed. Its network range and tags are checked
on the synthesized stacks (``test_infra_test_pipelines.py``): applying the
network stack again would double this check's time for nothing new.
"""

import dataclasses
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from infra.config.settings import TESTING_SETTINGS, load_settings
from infra.config.test_pipelines import destroy_command, pipeline_configs
from infra.testing import SynthesizedEnvironment, synthesize
from tests.infra.moto_apply import MOTO_ACCOUNT, client
from tests.infra.terraform import (
    Mirror,
    Terraform,
    moto_override,
    remote_state_names,
    resource_names,
    stand_in_state,
    write_override,
)

pytestmark = pytest.mark.terraform

_REFERENCE = re.compile(
    r"data\.terraform_remote_state\.(?P<state>[^.]+)\.outputs\.(?P<output>[^}]+)\}"
)


def stand_in_outputs(stack: Path, prefix: str) -> dict[str, dict[str, str]]:
    """Every output the stack reads from another stack, by remote state, with stand-in values."""
    document = (stack / "cdk.tf.json").read_text(encoding="utf-8")
    outputs: dict[str, dict[str, str]] = {}
    for match in _REFERENCE.finditer(document):
        state, output = match["state"], match["output"]
        found = outputs.setdefault(state, {})
        if output.endswith("cluster_name"):
            found[output] = prefix
        else:  # an instance id of the spark stack
            found[output] = f"i-{len(found) + 1:017x}"
    return outputs


def test_the_test_pipelines_expiry_notice_applies_to_moto_and_is_destroyed(
    mirror: Mirror, terraform: Terraform, moto: str, tmp_path: Path
) -> None:
    settings = load_settings(TESTING_SETTINGS)
    settings["sandbox"] = dataclasses.replace(settings["sandbox"], account_id=MOTO_ACCOUNT)
    (config,) = pipeline_configs(TESTING_SETTINGS, settings)
    declared = config.test_pipeline
    assert declared is not None
    (env,) = synthesize([config], tmp_path / "cdktf.out").values()
    states = tmp_path / "states"
    states.mkdir()
    stacks = {"monitoring": tmp_path / "cdktf.out" / "stacks" / env["monitoring"].name}
    stand_ins = stand_in_outputs(stacks["monitoring"], config.resource_prefix)
    for state, outputs in stand_ins.items():
        stand_in_state(states / f"{state}.tfstate", outputs)
    assert sorted(stand_ins) == remote_state_names(stacks["monitoring"])

    def init(component: str) -> None:
        stack = stacks[component]
        document = moto_override(
            version=mirror.version,
            endpoint=moto,
            state=states / f"{env[component].name}.tfstate",
            remote_states={r: states / f"{r}.tfstate" for r in remote_state_names(stack)},
        )
        # EventBridge Scheduler, which only a test pipeline's stacks call.
        document["provider"]["aws"]["endpoints"][0]["scheduler"] = moto
        write_override(stack, document)
        terraform(stack, "init", "-lockfile=readonly")

    init("monitoring")
    stack = stacks["monitoring"]
    # The notice and the owner's subscription, and what they need (key, topic,
    # role): the alarms and the dashboard are the sandbox's, applied there.
    targets = [
        f"-target={resource_type}.{name}"
        for resource_type in ("aws_scheduler_schedule", "aws_sns_topic_subscription")
        for name in resource_names(stack, resource_type)
    ]
    assert len(targets) == 2
    try:
        terraform(stack, "apply", "-auto-approve", *targets)
        check_applied(env, moto)
    finally:
        # The state holds only what was applied: destroy it all.
        terraform(stack, "destroy", "-auto-approve", "-refresh=false")
    schedules = client(moto, "scheduler").list_schedules()["Schedules"]
    assert not [s for s in schedules if s["Name"].startswith(config.resource_prefix)]


def check_applied(env: SynthesizedEnvironment, endpoint: str) -> None:
    config = env.config
    declared = config.test_pipeline
    assert declared is not None
    sns = client(endpoint, "sns")
    topic_arn = f"arn:aws:sns:{config.region}:{MOTO_ACCOUNT}:{config.resource_prefix}-alarms"
    subscriptions = sns.list_subscriptions_by_topic(TopicArn=topic_arn)["Subscriptions"]
    assert [(s["Protocol"], s["Endpoint"]) for s in subscriptions] == [
        ("email", declared.owner.address)
    ]
    scheduler = client(endpoint, "scheduler")
    schedule = scheduler.get_schedule(Name=f"{config.resource_prefix}-expiry-notice")
    assert schedule["ScheduleExpression"] == "rate(1 day)"
    assert schedule["StartDate"] == datetime(
        declared.expires.year, declared.expires.month, declared.expires.day, 9, tzinfo=UTC
    )
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert schedule["State"] == "ENABLED"
    assert schedule["KmsKeyArn"].startswith(f"arn:aws:kms:{config.region}:{MOTO_ACCOUNT}:key/")
    target = schedule["Target"]
    assert target["Arn"] == topic_arn
    assert destroy_command(config.name) in target["Input"]
    # Tagged like every resource of the pipeline's stacks (schedules take no tags).
    tags = sns.list_tags_for_resource(ResourceArn=topic_arn)["Tags"]
    assert {t["Key"]: t["Value"] for t in tags} | declared.tags == {
        t["Key"]: t["Value"] for t in tags
    }
    # The role the schedule publishes with may publish to that topic.
    iam = client(endpoint, "iam")
    role_name = target["RoleArn"].rsplit("/", 1)[1]
    trust = iam.get_role(RoleName=role_name)["Role"]["AssumeRolePolicyDocument"]
    assert [s["Principal"] for s in trust["Statement"]] == [{"Service": "scheduler.amazonaws.com"}]
    (policy_name,) = iam.list_role_policies(RoleName=role_name)["PolicyNames"]
    document = iam.get_role_policy(RoleName=role_name, PolicyName=policy_name)["PolicyDocument"]
    if isinstance(document, str):
        document = json.loads(document)
    publish = next(s for s in document["Statement"] if s["Sid"] == "PublishToTheAlarmTopic")
    assert publish["Resource"] == [topic_arn]
    # What the schedule sends at expiry reaches the owner's subscription: the
    # topic takes the schedule's message as it is.
    assert sns.publish(TopicArn=topic_arn, Message=target["Input"])["MessageId"]

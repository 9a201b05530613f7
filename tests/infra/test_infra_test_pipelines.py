"""Test pipelines declared in the deployment settings: shape, network, tags, expiry notice.

The declaration in ``infra/settings/testing.toml`` (``resync-exp``) is synthesized
with every environment (``tests/infra/conftest.py``); the refusals are driven
through ``infra.main`` as ``make synth`` runs it, so each is one line.
"""

import ipaddress
import json
import shutil
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from infra.config import ConfigError, EnvironmentConfig
from infra.config.settings import TESTING_SETTINGS, EndpointKind, load_settings
from infra.config.test_pipelines import (
    POOL,
    SLOT_PREFIX,
    allocate_vpc_cidr,
    destroy_command,
    load_test_pipelines,
    pipeline_configs,
)
from infra.main import main
from infra.testing import SynthesizedEnvironment

NAME = "resync-exp"  # declared in testing.toml
BASE_TEXT = TESTING_SETTINGS.read_text(encoding="utf-8").split("[test_pipelines.")[0]


def declaration(name: str, **keys: object) -> str:
    table = {
        "owner": "owner@tablecast-testing.net",
        "purpose": "a test",
        "created": date(2026, 11, 23),
        "expires": date(2026, 11, 30),
    } | keys
    lines = [f"[test_pipelines.{name}]"]
    for key, value in table.items():
        text = value.isoformat() if isinstance(value, date) else json.dumps(value)
        lines.append(f"{key} = {text}")
    return "\n".join(lines) + "\n"


def settings_file(tmp_path: Path, *tables: str) -> Path:
    path = tmp_path / "settings.toml"
    path.write_text(BASE_TEXT + "\n" + "\n".join(tables), encoding="utf-8")
    return with_schemas(path)


def with_schemas(path: Path) -> Path:
    """``path`` with the testing settings' jobs' table schemas beside it, where they name them."""
    schemas = TESTING_SETTINGS.parent / "schemas"
    shutil.copytree(schemas, path.parent / "schemas", dirs_exist_ok=True)
    return path


def synth_error(path: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> str:
    status = main(outdir=str(tmp_path / "out"), environ={"TABLECAST_SETTINGS": str(path)})
    error = capsys.readouterr().err
    assert status == 2, error
    assert error.count("\n") == 1, error
    assert not (tmp_path / "out").exists(), "nothing is written"
    return error


def test_the_declared_pipeline_has_the_sandboxs_shape_with_its_overrides(
    configs: dict[str, EnvironmentConfig],
) -> None:
    pipeline, sandbox = configs[NAME], configs["sandbox"]
    assert pipeline.spark_worker_count == 2 != sandbox.spark_worker_count
    assert pipeline.spark_worker_instance_type == "m7i.xlarge"
    assert pipeline.trigger_interval == "30 seconds"
    for same in (
        "region",
        "availability_zones",
        "broker_count",
        "broker_instance_type",
        "driver_instance_type",
        "retention_hours",
        "spark_placement",
    ):
        assert getattr(pipeline, same) == getattr(sandbox, same), same
    assert pipeline.throwaway and not pipeline.is_production
    assert pipeline.deployment.account_id == sandbox.deployment.account_id
    assert pipeline.deployment.spark_image_id == sandbox.deployment.spark_image_id
    owner = pipeline.deployment.alarm_endpoints[-1]
    assert (owner.kind, owner.address) == (
        EndpointKind.EMAIL,
        "tablecast-testing@tablecast-testing.net",
    )
    assert pipeline.stack_name("network") == f"tablecast-{NAME}-network"
    assert ipaddress.IPv4Network(pipeline.vpc_cidr).subnet_of(POOL)


def test_addresses_are_allocated_by_name_alone_and_never_overlap(tmp_path: Path) -> None:
    names = [f"exp-{n}" for n in range(12)]
    cidrs = [allocate_vpc_cidr(name) for name in names]
    assert all(ipaddress.IPv4Network(c).prefixlen == SLOT_PREFIX for c in cidrs)
    # Deterministic: declaring others (or fewer) moves nobody's network.
    path = settings_file(tmp_path, *(declaration(name) for name in names))
    settings = load_settings(path)
    configs = pipeline_configs(path, settings)
    assert [c.vpc_cidr for c in configs] == cidrs
    alone = settings_file(tmp_path, declaration(names[5]))
    assert [c.vpc_cidr for c in pipeline_configs(alone, settings)] == [cidrs[5]]
    networks = [ipaddress.IPv4Network(c) for c in cidrs]
    assert not [(a, b) for i, a in enumerate(networks) for b in networks[i + 1 :] if a.overlaps(b)]


def test_overlapping_addresses_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = settings_file(
        tmp_path,
        declaration("exp-a", vpc_cidr="10.100.0.0/20"),
        declaration("exp-b", vpc_cidr="10.100.8.0/21"),
    )
    error = synth_error(path, capsys, tmp_path)
    assert "environment 'exp-b': vpc_cidr (in " in error
    assert "10.100.8.0/21 overlaps test pipeline 'exp-a''s 10.100.0.0/20" in error
    # An environment's range is refused as well.
    path = settings_file(tmp_path, declaration("exp-c", vpc_cidr="10.49.16.0/20"))
    assert "10.49.16.0/20 overlaps environment 'sandbox''s 10.49.0.0/16" in synth_error(
        path, capsys, tmp_path
    )


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (
            {"retention_hours": 48},
            "retention_hours (in {path}): 48 is under the minimum of 72 hours",
        ),
        ({"expires": date(2026, 11, 20)}, "expires (in {path}): 2026-11-20 is not after created"),
        ({"expires": date(2027, 6, 1)}, "is 190 days after created 2026-11-23: at most 90"),
        (
            {"owner": "someone@example.com"},
            "owner (in {path}): 'someone@example.com' is a reserved",
        ),
        ({"purpose": "Bob's, test"}, 'purpose (in {path}): "Bob\'s, test" must be 1-200 of'),
        ({"spark_worker_count": "2"}, "spark_worker_count (in {path}): '2' must be an integer"),
        ({"broker_count": 4}, "broker_count (in {path}): is not a test pipeline setting"),
        ({"spark_worker_instance_type": "t3.large"}, "'t3.large' is burstable"),
    ],
)
def test_a_bad_declaration_stops_synth_in_one_line_naming_file_and_key(
    keys: dict[str, object],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = settings_file(tmp_path, declaration("exp-bad", **keys))
    error = synth_error(path, capsys, tmp_path)
    assert error.startswith("infra: invalid configuration: environment 'exp-bad': ")
    assert message.format(path=path) in error


def test_a_fixed_environments_name_or_no_sandbox_table_is_refused(tmp_path: Path) -> None:
    path = settings_file(tmp_path, declaration("dev"))
    with pytest.raises(ConfigError, match="is the name of a fixed environment"):
        pipeline_configs(path, load_settings(path))
    path = settings_file(tmp_path, declaration("exp-d"))
    with pytest.raises(ConfigError, match=r"takes the \[sandbox\] table's account and image"):
        pipeline_configs(path, {})


def test_synth_writes_the_pipelines_stacks_tagged_with_owner_expiry_and_purpose(
    synthesized: dict[str, SynthesizedEnvironment],
) -> None:
    env = synthesized[NAME]
    assert sorted(stack.name for stack in env.synthesized.values()) == sorted(
        f"tablecast-{NAME}-{c}"
        for c in ("network", "storage", "kafka", "spark", "monitoring", "handoff")
    )
    for stack in env.synthesized.values():
        (provider,) = stack.document["provider"]["aws"]
        (tags,) = provider["default_tags"]
        assert (
            tags["tags"]
            | {
                "Owner": "tablecast-testing@tablecast-testing.net",
                "Expires": "2026-12-07",
                "Purpose": "resync rules on two workers",
                "Environment": NAME,
            }
            == tags["tags"]
        ), stack.name
    # The fixed environments carry no such tags.
    (provider,) = synthesized["sandbox"]["network"].document["provider"]["aws"]
    assert "Owner" not in provider["default_tags"][0]["tags"]


def test_expiry_is_enforced_the_owner_told_before_and_after_the_nodes_stopped(
    synthesized: dict[str, SynthesizedEnvironment],
) -> None:
    env = synthesized[NAME]
    monitoring = env["monitoring"]
    ((topic_id, topic),) = monitoring.resources("aws_sns_topic").items()
    topic_arn = f"${{aws_sns_topic.{topic_id}.arn}}"
    assert topic["name"] == f"tablecast-{NAME}-alarms"
    subscriptions = monitoring.resources("aws_sns_topic_subscription").values()
    assert {(s["topic_arn"], s["protocol"], s["endpoint"]) for s in subscriptions} == {
        (topic_arn, "email", "tablecast-testing@tablecast-testing.net")
    }
    schedules = {s["name"]: s for s in monitoring.resources("aws_scheduler_schedule").values()}
    assert set(schedules) == {
        f"tablecast-{NAME}-{kind}" for kind in ("advance-notice", "expiry-notice", "expiry-stop")
    }
    advance = schedules[f"tablecast-{NAME}-advance-notice"]
    notice = schedules[f"tablecast-{NAME}-expiry-notice"]
    stop = schedules[f"tablecast-{NAME}-expiry-stop"]
    for schedule in schedules.values():
        assert schedule["schedule_expression"] == "rate(1 day)"
        assert schedule["flexible_time_window"] == {"mode": "OFF"}
    # Daily in the three days before expiry (expires 2026-12-07), then daily from it on.
    assert (advance["start_date"], advance["end_date"]) == (
        "2026-12-04T09:00:00Z",
        "2026-12-07T09:00:00Z",
    )
    assert "expires on 2026-12-07" in advance["target"]["input"]
    assert notice["start_date"] == stop["start_date"] == "2026-12-07T09:00:00Z"
    assert "end_date" not in notice and "end_date" not in stop
    assert "expired on 2026-12-07" in notice["target"]["input"]
    for message in (advance, notice):
        assert message["target"]["arn"] == topic_arn
        assert destroy_command(NAME) in message["target"]["input"]
        assert message["kms_key_arn"] == topic["kms_master_key_id"]
    # The stop: EC2 StopInstances of exactly the pipeline's nodes, with a role that may only that.
    target = stop["target"]
    assert (
        target["arn"]
        == "arn:${data.aws_partition.partition.partition}:scheduler:::aws-sdk:ec2:stopInstances"
    )
    stopped = [env.follow(i) for i in json.loads(target["input"])["InstanceIds"]]
    assert stopped == [f"${{aws_instance.{n}.id}}" for n in env["spark"].resources("aws_instance")]
    roles = {
        f"${{aws_iam_role.{rid}.arn}}": r for rid, r in monitoring.resources("aws_iam_role").items()
    }
    policies = {p["role"]: p for p in monitoring.resources("aws_iam_role_policy").values()}
    for schedule in schedules.values():
        role = roles[schedule["target"]["role_arn"]]
        (trust,) = json.loads(role["assume_role_policy"])["Statement"]
        assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
        assert "aws:SourceAccount" in trust["Condition"]["StringEquals"]
    (key_id,) = monitoring.resources("aws_kms_key")
    assert topic["kms_master_key_id"] == f"${{aws_kms_key.{key_id}.arn}}"
    key = topic["kms_master_key_id"]

    def granted(schedule: dict[str, Any]) -> dict[str, tuple[list[str], list[str]]]:
        role_id = schedule["target"]["role_arn"].removeprefix("${").removesuffix(".arn}")
        policy = policies[f"${{{role_id}.id}}"]
        return {
            s["Sid"]: (s["Action"], s["Resource"])
            for s in json.loads(policy["policy"])["Statement"]
        }

    notices = {
        "PublishToTheAlarmTopic": (["sns:Publish"], [topic_arn]),
        "UseTheTopicsKey": (["kms:Decrypt", "kms:GenerateDataKey"], [key]),
    }
    assert granted(advance) == granted(notice) == notices
    stopping = granted(stop)
    assert stopping.pop("UseTheTopicsKey") == (["kms:Decrypt"], [key])
    ((actions, instances),) = stopping.values()
    assert actions == ["ec2:StopInstances"]
    assert [r.rsplit("/", 1)[1] for r in instances] == json.loads(target["input"])["InstanceIds"]
    assert stop["kms_key_arn"] == key
    # No fixed environment has any.
    assert not synthesized["sandbox"]["monitoring"].resources("aws_scheduler_schedule")


def test_a_pipeline_declared_days_before_expiry_is_told_from_its_creation(tmp_path: Path) -> None:
    path = settings_file(
        tmp_path,
        declaration("exp-short", created=date(2026, 12, 5), expires=date(2026, 12, 6)),
    )
    (config,) = pipeline_configs(path, load_settings(path))
    assert config.test_pipeline is not None
    assert config.test_pipeline.first_advance_notice == "2026-12-05T09:00:00Z"


def test_a_pipeline_has_its_own_network_and_state_not_the_sandboxs_producers(
    tmp_path: Path, synthesized: dict[str, SynthesizedEnvironment]
) -> None:
    sandbox_table = (
        '[sandbox]\naccount_id = "000000000000"\nspark_image_id = "ami-00000000000000004"\n'
        'state_backend = { bucket = "team-state-000000000000" }\n'
        'producer_networks = [{ name = "plants", cidr = "10.60.0.0/16", '
        'via = "pcx-00000000000000001" }]\n'
    )
    path = tmp_path / "settings.toml"
    path.write_text(sandbox_table + declaration("exp-own"), encoding="utf-8")
    settings = load_settings(path)
    (config,) = pipeline_configs(path, settings)
    assert settings["sandbox"].producer_networks and not config.deployment.producer_networks
    assert config.deployment.state_backend == settings["sandbox"].state_backend
    # Synthesized: S3 state under its own name, no route or ingress for another VPC's peering.
    env = synthesized[NAME]
    for stack in env.synthesized.values():
        backend = stack.document["terraform"]["backend"]["s3"]
        component = stack.name.removeprefix(f"tablecast-{NAME}-")
        assert backend["key"] == f"tablecast/{NAME}/{component}.tfstate"
    assert not env["network"].resources("aws_route")
    rules = env["network"].resources("aws_vpc_security_group_ingress_rule").values()
    assert not [rule for rule in rules if "cidr_ipv4" in rule]


def test_a_pipeline_without_a_state_backend_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "settings.toml"
    path.write_text(
        BASE_TEXT.replace(
            'state_backend = { bucket = "testing-terraform-state-000000000000" }\n\n# A test',
            "\n# A test",
        )
        + declaration("exp-local"),
        encoding="utf-8",
    )
    with_schemas(path)
    assert load_settings(path)["sandbox"].state_backend is None
    error = synth_error(path, capsys, tmp_path)
    assert "environment 'exp-local': state_backend (in " in error
    assert "a test pipeline keeps its Terraform state in S3" in error


@pytest.mark.parametrize(
    ("names", "refused", "under"),
    [
        (["prod-x"], "prod-x", "prod"),
        (["exp", "exp-b"], "exp-b", "exp"),
        (["sandbox-2"], "sandbox-2", "sandbox"),
    ],
)
def test_a_name_another_environments_pattern_matches_is_refused(
    names: list[str],
    refused: str,
    under: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = settings_file(tmp_path, *(declaration(name) for name in names))
    error = synth_error(path, capsys, tmp_path)
    assert f"environment '{refused}': test_pipelines.{refused} (in " in error
    assert f"starts with '{under}' and '-': {destroy_command(under)} would destroy" in error


def test_make_synth_covers_the_declared_pipeline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert [table.name for table in load_test_pipelines(TESTING_SETTINGS)] == [NAME]
    environ = {"TABLECAST_SETTINGS": str(TESTING_SETTINGS), "TABLECAST_ENVIRONMENTS": NAME}
    assert main(outdir=str(tmp_path), environ=environ) == 0, capsys.readouterr().err
    assert sorted(p.parent.name for p in tmp_path.glob("stacks/*/cdk.tf.json")) == sorted(
        f"tablecast-{NAME}-{c}"
        for c in ("network", "storage", "kafka", "spark", "monitoring", "handoff")
    )

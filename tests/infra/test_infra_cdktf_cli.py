"""Every ``cdktf`` command the docs show, run with the real CLI against the sandbox in moto.

The forms are read from README.md, docs/operations.md and docs/infra.md (the
environment's name abstracted, a ``for stack in ...`` loop's variable too);
they must be exactly ``FORMS``, so a changed doc fails here until this test
runs the new form. The looped ``diff`` must loop over every stack and runs
here for the spark stack. The CLI is ``npx cdktf-cli@<versions.toml [cdktf] version>``,
as the docs say, with ``TABLECAST_SETTINGS`` naming a settings file for
moto's account and ``TABLECAST_ENVIRONMENTS=sandbox``. What differs from a
deploy:

- ``--auto-approve`` after ``deploy`` and ``destroy``: the CLI's approval
  prompt needs a terminal;
- ``--skip-synth`` after the first command, which synthesizes: the app's
  output is the same each time, and each synthesis loads the AWS provider's
  bindings (about 25 core-seconds);
- Terraform gets the offline mirror and moto through the override files of
  tests/infra/terraform.py, written into the stack directories before the
  CLI runs (its synth rewrites only ``cdk.tf.json``), and leaves out what moto
  cannot apply (tests/infra/moto_apply.py) with ``-target`` arguments given
  in ``TF_CLI_ARGS_plan``/``_apply``/``_destroy``, and plans without a refresh
  (``moto_apply.AGAIN`` says why).

It is the sandbox's apply-and-destroy to moto too: the deploy is checked
with boto3 and the destroy too. Marked ``terraform``.
"""

import base64
import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from app import handoff
from infra.config.environments import sandbox
from infra.config.settings import load_settings
from infra.testing import SynthesizedEnvironment
from tests.infra.moto_apply import (
    AGAIN,
    COMPONENTS,
    MOTO_ACCOUNT,
    NOT_IN_MOTO,
    client,
    node_image,
    prepared,
)
from tests.infra.terraform import Mirror, Terraform, targets_except
from tests.pins import pin

pytestmark = pytest.mark.terraform

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", ROOT / "docs" / "operations.md", ROOT / "docs" / "infra.md")
ENVIRONMENT = "sandbox"
FORMS: tuple[tuple[str, ...], ...] = (
    ("deploy", "tablecast-{env}-*"),
    ("diff", "tablecast-{env}-{stack}"),
    ("deploy", "tablecast-{env}-monitoring", "--ignore-missing-stack-dependencies"),
    (
        "deploy",
        "tablecast-{env}-monitoring",
        "tablecast-{env}-handoff",
        "--ignore-missing-stack-dependencies",
    ),
    ("destroy", "tablecast-{env}-*"),
)
"""Every documented form, in the order this test runs them."""
DIFFED = "spark"
"""The stack the looped ``diff`` form runs for: the one that reads most other stacks."""
_COMMAND = re.compile(r"npx cdktf-cli@(?P<version>[^\s`]+) (?P<arguments>[^#\n`]+)")
_LOOP = re.compile(r"^\s*for (?P<name>\w+) in (?P<values>[^;]+); do\b")
# An environment's name or a test pipeline's (docs/operations.md shows `<name>` and an
# example), before a stack's component, `*` or the loop's variable.
_ENVIRONMENT = re.compile(
    r"^tablecast-(?:<name>|[a-z][a-z0-9-]*)-(?=(?:\*|\$\w+|" + "|".join(COMPONENTS) + r")$)"
)


@dataclass(frozen=True, kw_only=True)
class Documented:
    """One cdktf command of the docs, the environment's name as ``{env}``."""

    version: str
    arguments: tuple[str, ...]
    loop: tuple[str, ...] = ()
    """The values of the shell loop the command runs in, its variable as ``{stack}``."""


def documented() -> Iterator[Documented]:
    """Every cdktf command in the docs."""
    for doc in DOCS:
        loop: tuple[str, tuple[str, ...]] | None = None
        for line in doc.read_text(encoding="utf-8").replace("\\\n", " ").splitlines():
            if match := _LOOP.match(line):
                loop = (match["name"], tuple(match["values"].split()))
            elif line.strip() == "done":
                loop = None
            if (command := _COMMAND.search(line)) is None:
                continue
            looped = loop is not None and f"${loop[0]}" in command["arguments"]
            arguments = [
                _ENVIRONMENT.sub("tablecast-{env}-", argument)
                for argument in shlex.split(command["arguments"])
            ]
            if looped and loop is not None:
                arguments = [a.replace(f"${loop[0]}", "{stack}") for a in arguments]
            yield Documented(
                version=command["version"],
                arguments=tuple(arguments),
                loop=loop[1] if looped and loop is not None else (),
            )


def test_the_docs_show_exactly_the_forms_run_here_with_the_pinned_cli() -> None:
    found = list(documented())
    assert {command.version for command in found} == {pin("cdktf", "version")}
    assert {command.arguments for command in found} == set(FORMS)
    # The looped diff covers every stack of an environment.
    assert {command.loop for command in found if "{stack}" in " ".join(command.arguments)} == {
        COMPONENTS
    }


@pytest.fixture
def project(tmp_path: Path, moto: str) -> Path:
    """A directory the CLI runs in: ``cdktf.json`` with this interpreter, a settings file."""
    directory = tmp_path / "project"
    directory.mkdir()
    config = json.loads((ROOT / "cdktf.json").read_text(encoding="utf-8"))
    config["app"] = f"{sys.executable} -m infra.main"
    (directory / "cdktf.json").write_text(json.dumps(config), encoding="utf-8")
    (directory / "settings.toml").write_text(
        f'[{ENVIRONMENT}]\naccount_id = "{MOTO_ACCOUNT}"\nspark_image_id = "{node_image(moto)}"\n',
        encoding="utf-8",
    )
    return directory


def cli_environment(
    terraform: Terraform, settings: Path, targets: Mapping[str, str]
) -> dict[str, str]:
    return {
        **terraform.environ,
        "TABLECAST_SETTINGS": str(settings),
        "TABLECAST_ENVIRONMENTS": ENVIRONMENT,
        # The app runs from the checkout, as `cdktf.json`'s relative command does there.
        "PYTHONPATH": str(ROOT),
        "CI": "1",
        "FORCE_COLOR": "0",
        **targets,
    }


# Alone it takes about 6 minutes (five CLI runs, the first synthesizing); inside `make test`,
# beside the suite, the commit chain and the production apply on two cores, 14 to 16: more
# than the suite's 900 s default twice in a row.
@pytest.mark.timeout(1800)
def test_every_documented_cdktf_form_runs_against_the_sandbox_in_moto(
    mirror: Mirror, terraform: Terraform, moto: str, project: Path, tmp_path: Path
) -> None:
    npx = shutil.which("npx")
    assert npx is not None, "no npx on the PATH (Node.js 20 runs cdktf-cli)"
    settings = project / "settings.toml"
    config = sandbox(load_settings(settings)[ENVIRONMENT])
    deployment = prepared(
        config,
        endpoint=moto,
        mirror=mirror,
        terraform=terraform,
        outdir=project / "cdktf.out",
        states=tmp_path / "states",
    )
    targets: list[str] = []
    left_out: set[str] = set()
    for component in COMPONENTS:
        deployment.override(component, lift_guards=True)
        stack = deployment.stack(component)
        kept = targets_except(stack, NOT_IN_MOTO.get(component, ()))
        targets += kept
        left_out |= set(targets_except(stack, ())) - set(kept)
    # One -target list serves every stack: no address may be kept in one and left out in another.
    assert not left_out & set(targets)
    joined = " ".join(targets)
    environ = cli_environment(
        terraform,
        settings,
        {
            "TF_CLI_ARGS_plan": f"{AGAIN} {joined}",
            "TF_CLI_ARGS_apply": f"{AGAIN} {joined}",
            "TF_CLI_ARGS_destroy": f"-refresh=false {joined}",
            # The CLI locks the providers after each init: from the mirror, not the registry.
            "TF_CLI_ARGS_providers_lock": f"-fs-mirror={mirror.path}",
        },
    )
    version = pin("cdktf", "version")
    synthesized = False

    def cdktf(*form: str) -> str:
        nonlocal synthesized
        arguments = [a.format(env=ENVIRONMENT, stack=DIFFED) for a in form]
        if form[0] in ("deploy", "destroy"):
            arguments.append("--auto-approve")
        if synthesized:
            arguments.append("--skip-synth")
        result = subprocess.run(
            [npx, "--yes", f"cdktf-cli@{version}", *arguments],
            cwd=project,
            env=environ,
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
        )
        assert result.returncode == 0, (
            f"cdktf {' '.join(arguments)} exited {result.returncode}:\n"
            f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )
        synthesized = True
        return result.stdout

    deployed = False
    try:
        for form in FORMS:
            if form[0] == "destroy":
                check_applied(deployment.env, moto)
            output = cdktf(*form)
            deployed = form[0] != "destroy"
            if form[0] == "diff":
                # Nothing replaced or destroyed (moto reads the root volumes' tags back empty,
                # an in-place update).
                assert re.search(
                    r"No changes|Plan: 0 to add, \d+ to change, 0 to destroy", output
                ), output[-2000:]
    finally:
        if deployed:
            for component in reversed(COMPONENTS):
                deployment.destroy(component)
    check_destroyed(deployment.env, moto)


def check_applied(env: SynthesizedEnvironment, endpoint: str) -> None:
    config = env.config
    ec2 = client(endpoint, "ec2")
    (vpc,) = ec2.describe_vpcs(Filters=[{"Name": "cidr", "Values": [config.vpc_cidr]}])["Vpcs"]
    vpc_filter = [{"Name": "vpc-id", "Values": [vpc["VpcId"]]}]
    assert not ec2.describe_internet_gateways(
        Filters=[{"Name": "attachment.vpc-id", "Values": [vpc["VpcId"]]}]
    )["InternetGateways"]
    subnets = ec2.describe_subnets(Filters=vpc_filter)["Subnets"]
    # A broker subnet and a Spark subnet in every zone.
    assert len(subnets) == 2 * len(config.availability_zones)
    groups = {
        group["GroupName"]: group
        for group in ec2.describe_security_groups(Filters=vpc_filter)["SecurityGroups"]
    }
    brokers = groups[f"{config.resource_prefix}-brokers"]
    (kafka_in,) = brokers["IpPermissions"]
    assert (kafka_in["FromPort"], kafka_in["ToPort"]) == (9098, 9098)
    assert [pair["GroupId"] for pair in kafka_in["UserIdGroupPairs"]] == [
        groups[f"{config.resource_prefix}-spark"]["GroupId"]
    ]

    s3 = client(endpoint, "s3")
    bucket = f"{config.resource_prefix}-{MOTO_ACCOUNT}-{config.region}"
    rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    lifecycle = {r["ID"] for r in s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]}
    assert {"housekeeping", "tiering-archive", "expire-checkpoint-backups"} <= lifecycle

    reservations = ec2.describe_instances(
        Filters=[*vpc_filter, {"Name": "instance-state-name", "Values": ["running"]}]
    )["Reservations"]
    nodes = [instance for r in reservations for instance in r["Instances"]]
    assert len(nodes) == config.spark_worker_count + 1
    addresses = {node["PrivateIpAddress"] for node in nodes}
    assert config.subnets.driver_private_ip in addresses
    zone_ids = {
        zone["ZoneName"]: zone["ZoneId"]
        for zone in ec2.describe_availability_zones()["AvailabilityZones"]
    }
    for node in nodes:
        assert node["MetadataOptions"]["HttpTokens"] == "required"
        data = ec2.describe_instance_attribute(InstanceId=node["InstanceId"], Attribute="userData")
        script = base64.b64decode(data["UserData"]["Value"]).decode()
        # The data source resolved the zone's id, as it will on AWS.
        assert f"TABLECAST_ZONE_ID={zone_ids[config.spark_availability_zone]}\n" in script
    volumes = ec2.describe_volumes(
        Filters=[{"Name": "tag:tablecast:hdfs-snapshots", "Values": [config.resource_prefix]}]
    )["Volumes"]
    assert len(volumes) == len(nodes)
    assert all(volume["Encrypted"] for volume in volumes)

    alarms = client(endpoint, "cloudwatch").describe_alarms(AlarmNamePrefix=config.resource_prefix)
    assert len(alarms["MetricAlarms"]) == len(env.stacks.monitoring.specs)
    for alarm in alarms["MetricAlarms"]:
        assert alarm["AlarmActions"], alarm["AlarmName"]

    pages = client(endpoint, "ssm").get_paginator("get_parameters_by_path")
    parameters = {
        p["Name"].rsplit("/", 1)[1]: p["Value"]
        for page in pages.paginate(Path=f"/tablecast/{config.name}/")
        for p in page["Parameters"]
    }
    assert set(parameters) == set(handoff.ALL)
    assert parameters[handoff.DRIVER_ADDRESS] == config.subnets.driver_private_ip
    assert parameters[handoff.CHECKPOINT_URI] == (
        f"hdfs://{config.subnets.driver_private_ip}:8020/tablecast/checkpoints/tablecast"
    )
    assert parameters[handoff.BUCKET] == bucket


def check_destroyed(env: SynthesizedEnvironment, endpoint: str) -> None:
    config = env.config
    ec2 = client(endpoint, "ec2")
    assert not ec2.describe_vpcs(Filters=[{"Name": "cidr", "Values": [config.vpc_cidr]}])["Vpcs"]
    buckets = [b["Name"] for b in client(endpoint, "s3").list_buckets()["Buckets"]]
    assert not [name for name in buckets if name.startswith(config.resource_prefix)]
    ssm = client(endpoint, "ssm")
    assert not ssm.get_parameters_by_path(Path=f"/tablecast/{config.name}/")["Parameters"]
    alarms = client(endpoint, "cloudwatch").describe_alarms(AlarmNamePrefix=config.resource_prefix)
    assert not alarms["MetricAlarms"]

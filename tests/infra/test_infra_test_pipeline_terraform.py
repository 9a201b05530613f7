"""A test pipeline's life with real Terraform on moto: created, listed, expired, destroyed.

Marked ``terraform`` (``make terraform-check``). The test pipeline
``infra/settings/testing.toml`` declares is applied whole, as a team would
from its settings, with moto's account and an image registered there:

- **its own state**: the sandbox table's S3 backend, a bucket in moto; every
  stack's state lands at ``tablecast/<name>/<component>.tfstate`` there, not in
  a checkout, and the cross-stack reads read it there (the kafka stack's
  outputs are a stand-in: moto has no MSK bootstrap brokers,
  tests/infra/moto_apply.py);
- **its own network**: its VPC range, no producer route or ingress;
- **listed**: ``tablecast-ops pipelines`` finds it deployed beside its
  declaration by its resources' tags, and as an orphan once the declaration
  is gone;
- **expiry**: the advance and expiry notices and the stop, as EventBridge
  Scheduler holds them; the stop's input, given to EC2's StopInstances,
  stops exactly its nodes;
- **destroyed**: nothing of it is left to list.

Its test run (the loop ``make pipeline-demo`` runs) is ``tests/local``'s:
moto runs no node.
"""

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.ops import cli
from infra.config.pipeline_listing import declarations
from infra.config.settings import TESTING_SETTINGS, load_settings
from infra.config.test_pipelines import destroy_command, pipeline_configs
from tests.infra.moto_apply import (
    COMPONENTS,
    MOTO_ACCOUNT,
    REGION,
    MotoDeployment,
    applied,
    client,
    node_image,
)
from tests.infra.terraform import Mirror, Terraform

pytestmark = pytest.mark.terraform

NAME = "resync-exp"
STATE_BUCKET = "team-terraform-state"
DECLARATION = (
    "[test_pipelines."
    + TESTING_SETTINGS.read_text(encoding="utf-8").split("[test_pipelines.", 1)[1]
)


def settings_file(path: Path, image: str, *, declared: bool) -> Path:
    """The team's settings: the sandbox table for moto's account, and the declaration."""
    sandbox = (
        f'[sandbox]\naccount_id = "{MOTO_ACCOUNT}"\nspark_image_id = "{image}"\n'
        f'state_backend = {{ bucket = "{STATE_BUCKET}" }}\n\n'
    )
    path.write_text(sandbox + (DECLARATION if declared else ""), encoding="utf-8")
    return path


def pipelines(settings: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """``tablecast-ops pipelines`` from a checkout, against moto."""
    status = cli.main(
        ["--region", REGION, "pipelines", "--settings", str(settings)],
        declarations=declarations(),
    )
    return status, capsys.readouterr().out.splitlines()


# Six stacks applied and destroyed, their state in S3: about 9 minutes alone.
@pytest.mark.timeout(1800)
def test_a_test_pipeline_is_created_listed_expired_and_destroyed_with_its_own_state(
    mirror: Mirror,
    terraform: Terraform,
    moto: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in {
        "AWS_ENDPOINT_URL": moto,
        "AWS_ACCESS_KEY_ID": "moto",
        "AWS_SECRET_ACCESS_KEY": "moto",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    s3 = client(moto, "s3")
    s3.create_bucket(Bucket=STATE_BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_bucket_versioning(Bucket=STATE_BUCKET, VersioningConfiguration={"Status": "Enabled"})
    settings = settings_file(tmp_path / "settings.toml", node_image(moto), declared=True)
    (config,) = pipeline_configs(settings, load_settings(settings))
    with applied(
        config,
        endpoint=moto,
        mirror=mirror,
        terraform=terraform,
        workdir=tmp_path,
        state_bucket=STATE_BUCKET,
    ) as deployment:
        check_own_state(deployment)
        check_own_network(deployment)
        status, listed = pipelines(settings, capsys)
        assert status == 0, listed
        (row,) = [line.split() for line in listed if line.startswith(f"{NAME} ")]
        deployed = int(row[row.index("resources") - 1])
        # Its nodes, their data volumes, its VPC and endpoints, found by their tags.
        assert deployed >= 2 * (config.spark_worker_count + 1) + 1, row
        # The declaration removed (its stacks not destroyed): an orphan, and how to end it.
        gone = settings_file(
            tmp_path / "gone.toml", config.deployment.spark_image_id, declared=False
        )
        status, listed = pipelines(gone, capsys)
        assert status == 1
        assert any(
            line.startswith(f"ORPHAN {NAME}: deployed, not declared in gone.toml: {deployed} ")
            for line in listed
        ), listed
        assert listed[-1].endswith(f"destroy it with {destroy_command(NAME)}")
        check_expiry(deployment)
    status, listed = pipelines(settings, capsys)
    (row,) = [line.split() for line in listed if line.startswith(f"{NAME} ")]
    assert status == 0 and "no" in row and not [line for line in listed if "ORPHAN" in line]


def check_own_state(deployment: MotoDeployment) -> None:
    """Every stack's state in the team's bucket under the pipeline's name, none local."""
    s3 = client(deployment.endpoint, "s3")
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=STATE_BUCKET)["Contents"]}
    assert {f"tablecast/{NAME}/{component}.tfstate" for component in COMPONENTS} <= keys
    local = {p.name for p in deployment.states.glob("*.tfstate")} - {deployment.stand_in.name}
    assert not local
    spark = json.loads(
        s3.get_object(Bucket=STATE_BUCKET, Key=f"tablecast/{NAME}/spark.tfstate")["Body"].read()
    )
    assert any(r["type"] == "aws_instance" for r in spark["resources"])


def check_own_network(deployment: MotoDeployment) -> None:
    config = deployment.env.config
    ec2 = client(deployment.endpoint, "ec2")
    (vpc,) = ec2.describe_vpcs(Filters=[{"Name": "cidr", "Values": [config.vpc_cidr]}])["Vpcs"]
    assert config.vpc_cidr.startswith("10.")
    vpc_filter = [{"Name": "vpc-id", "Values": [vpc["VpcId"]]}]
    for table in ec2.describe_route_tables(Filters=vpc_filter)["RouteTables"]:
        for route in table["Routes"]:
            assert not route.get("VpcPeeringConnectionId") and not route.get("TransitGatewayId")
    groups = ec2.describe_security_groups(Filters=vpc_filter)["SecurityGroups"]
    (brokers,) = [g for g in groups if g["GroupName"] == f"{config.resource_prefix}-brokers"]
    assert [address for p in brokers["IpPermissions"] for address in p["IpRanges"]] == []
    assert not ec2.describe_transit_gateway_vpc_attachments(Filters=vpc_filter)[
        "TransitGatewayVpcAttachments"
    ]


def check_expiry(deployment: MotoDeployment) -> None:
    config = deployment.env.config
    declared = config.test_pipeline
    assert declared is not None
    scheduler = client(deployment.endpoint, "scheduler")
    prefix = config.resource_prefix
    schedules = {
        s["Name"]: scheduler.get_schedule(Name=s["Name"])
        for s in scheduler.list_schedules()["Schedules"]
        if s["Name"].startswith(prefix)
    }
    assert set(schedules) == {
        f"{prefix}-{k}" for k in ("advance-notice", "expiry-notice", "expiry-stop")
    }
    expires = datetime(
        declared.expires.year, declared.expires.month, declared.expires.day, 9, tzinfo=UTC
    )
    notice, advance, stop = (
        schedules[f"{prefix}-expiry-notice"],
        schedules[f"{prefix}-advance-notice"],
        schedules[f"{prefix}-expiry-stop"],
    )
    assert notice["StartDate"] == stop["StartDate"] == expires == advance["EndDate"]
    assert advance["StartDate"] < expires
    topic = f"arn:aws:sns:{config.region}:{MOTO_ACCOUNT}:{prefix}-alarms"
    for message in (notice, advance):
        assert message["Target"]["Arn"] == topic
        assert destroy_command(config.name) in message["Target"]["Input"]
    sns = client(deployment.endpoint, "sns")
    subscriptions = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert [(s["Protocol"], s["Endpoint"]) for s in subscriptions] == [
        ("email", declared.owner.address)
    ]
    assert stop["Target"]["Arn"] == "arn:aws:scheduler:::aws-sdk:ec2:stopInstances"
    # What the stop asks of EC2 stops exactly the pipeline's Spark nodes.
    ec2 = client(deployment.endpoint, "ec2")
    ec2.stop_instances(**json.loads(stop["Target"]["Input"]))
    reservations = ec2.describe_instances(
        Filters=[{"Name": "tag:Environment", "Values": [config.name]}]
    )["Reservations"]
    states = {i["InstanceId"]: i["State"]["Name"] for r in reservations for i in r["Instances"]}
    assert len(states) == config.spark_worker_count + 1
    assert set(states.values()) <= {"stopping", "stopped"}
    assert sorted(json.loads(stop["Target"]["Input"])["InstanceIds"]) == sorted(states)
    iam = client(deployment.endpoint, "iam")
    role = stop["Target"]["RoleArn"].rsplit("/", 1)[1]
    (policy,) = iam.list_role_policies(RoleName=role)["PolicyNames"]
    document = iam.get_role_policy(RoleName=role, PolicyName=policy)["PolicyDocument"]
    document = json.loads(document) if isinstance(document, str) else document
    statements = {s["Sid"]: s for s in document["Statement"]}
    assert set(statements) == {"StopTheSparkNodes", "UseTheTopicsKey"}
    statement = statements["StopTheSparkNodes"]
    assert statement["Action"] == ["ec2:StopInstances"]
    assert sorted(r.rsplit("/", 1)[1] for r in statement["Resource"]) == sorted(states)

"""Real Terraform: every synthesized stack validates; the sandbox applies to moto and is destroyed.

Offline and on loopback only (tests/infra/terraform.py says what is
overridden and why). Marked ``terraform``: ``make terraform-check`` runs
these, ``make unit`` does not.

What moto cannot do, and so what is not applied (docs/infra.md, "Checks"):
moto has no MSK configurations and no bootstrap brokers, so of the kafka
stack only its KMS key, alias and log group are applied; the stacks that
read its outputs read a stand-in state holding an MSK cluster the test
creates in moto with boto3 (its bootstrap string is a stand-in too). moto
has no DLM: the spark stack is applied without its lifecycle policy, and no
MonitorInstances: its instances are applied without detailed monitoring. Every
other resource of the network, storage, spark, monitoring and hand-off
stacks is applied, checked with boto3 and destroyed.
"""

import dataclasses
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest

from app import handoff
from infra.config import EnvironmentConfig
from infra.config.environments import sandbox
from infra.config.settings import TESTING_SETTINGS, load_settings
from infra.testing import SynthesizedEnvironment, synthesize
from tests.infra.terraform import (
    OVERRIDE_FILE,
    Mirror,
    Terraform,
    TerraformError,
    cluster_outputs,
    moto_override,
    provider_version_override,
    remote_state_names,
    resource_names,
    stand_in_state,
    targets_except,
    write_override,
)

pytestmark = pytest.mark.terraform

MOTO_ACCOUNT = "123456789012"
REGION = "eu-west-1"
COMPONENTS = ("network", "storage", "kafka", "spark", "monitoring", "handoff")
# Stacks that read none of each other's outputs are applied together.
WAVES: tuple[tuple[str, ...], ...] = (
    ("network", "storage", "kafka"),
    ("spark",),
    ("monitoring", "handoff"),
)
# Resource types moto does not implement, left out of the apply.
NOT_IN_MOTO = {
    "kafka": (
        "aws_msk_configuration",
        "aws_msk_cluster",
        "aws_iam_policy",
        "aws_iam_role",
        "aws_iam_role_policy",
        "aws_appautoscaling_target",
        "aws_appautoscaling_policy",
    ),
    "spark": ("aws_dlm_lifecycle_policy",),
}


@pytest.fixture(scope="session")
def mirror() -> Mirror:
    return Mirror.find()


@pytest.fixture(scope="session")
def terraform(mirror: Mirror, tmp_path_factory: pytest.TempPathFactory) -> Terraform:
    return Terraform.offline(mirror, tmp_path_factory.mktemp("terraform"))


def copy_stack(outdir: Path, name: str, workdir: Path) -> Path:
    stack = workdir / name
    shutil.copytree(outdir / "stacks" / name, stack)
    return stack


@pytest.mark.parametrize("name", ["dev", "staging", "prod", "sandbox"])
def test_every_stack_validates_with_the_real_provider(
    name: str,
    synthesized: dict[str, SynthesizedEnvironment],
    outdir: Path,
    mirror: Mirror,
    terraform: Terraform,
    tmp_path: Path,
) -> None:
    env = synthesized[name]

    def validate(component: str) -> str:
        stack = copy_stack(outdir, env[component].name, tmp_path)
        write_override(stack, provider_version_override(mirror.version))
        terraform(stack, "init", "-backend=false", "-lockfile=readonly")
        return terraform(stack, "validate")

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(COMPONENTS, pool.map(validate, COMPONENTS), strict=True))
    for component, output in results.items():
        assert "Success! The configuration is valid." in output, component


def test_init_refuses_any_provider_build_but_the_locked_one(
    synthesized: dict[str, SynthesizedEnvironment],
    outdir: Path,
    mirror: Mirror,
    terraform: Terraform,
    tmp_path: Path,
) -> None:
    stack = copy_stack(outdir, "tablecast-sandbox-handoff", tmp_path)
    write_override(stack, provider_version_override(mirror.version))
    lock = stack / ".terraform.lock.hcl"
    lock.write_text(
        re.sub(
            r'"h1:[^"]+"', '"h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="', lock.read_text()
        ),
        encoding="utf-8",
    )
    with pytest.raises(TerraformError, match="checksum"):
        terraform(stack, "init", "-backend=false", "-lockfile=readonly")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def moto(tmp_path: Path) -> Iterator[str]:
    """A moto server of its own, in its own process, on loopback."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server_bin = Path(sys.executable).with_name("moto_server")
    with (tmp_path / "moto.log").open("w") as log:
        server = subprocess.Popen(
            [str(server_bin), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise AssertionError(f"moto_server did not start on {endpoint}") from None
                time.sleep(0.2)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=30)


def client(endpoint: str, service: Any) -> Any:
    return boto3.client(
        service,
        region_name=REGION,
        endpoint_url=endpoint,
        aws_access_key_id="moto",
        aws_secret_access_key="moto",
    )


def node_image(endpoint: str) -> str:
    """An image like ami/'s, owned by the account: name pattern and tags."""
    ec2 = client(endpoint, "ec2")
    base = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    instance = ec2.run_instances(ImageId=base, MinCount=1, MaxCount=1)["Instances"][0]
    image = ec2.create_image(InstanceId=instance["InstanceId"], Name="tablecast-spark-node-test")
    ec2.terminate_instances(InstanceIds=[instance["InstanceId"]])
    from infra.config import layout, versions

    tags = {**layout.AMI_TAGS, layout.AMI_SPARK_VERSION_TAG: versions().spark}
    ec2.create_tags(
        Resources=[image["ImageId"]], Tags=[{"Key": k, "Value": v} for k, v in tags.items()]
    )
    image_id: str = image["ImageId"]
    return image_id


def moto_sandbox(image_id: str) -> EnvironmentConfig:
    """The sandbox as configured, with moto's account and an image registered in moto."""
    settings = dataclasses.replace(
        load_settings(TESTING_SETTINGS)["sandbox"], account_id=MOTO_ACCOUNT, spark_image_id=image_id
    )
    return sandbox(settings)


def test_the_throwaway_settings_cannot_reach_a_real_account(
    synthesized: dict[str, SynthesizedEnvironment],
    outdir: Path,
    mirror: Mirror,
    terraform: Terraform,
    moto: str,
    tmp_path: Path,
) -> None:
    """Account 000000000000 of testing.toml: the provider refuses moto's account too."""
    stack = copy_stack(outdir, "tablecast-sandbox-storage", tmp_path)
    write_override(
        stack,
        moto_override(
            version=mirror.version, endpoint=moto, state=tmp_path / "s", remote_states={}
        ),
    )
    terraform(stack, "init", "-lockfile=readonly")
    with pytest.raises(TerraformError, match="not allowed"):
        terraform(stack, "plan")


def test_sandbox_applies_to_moto_and_is_destroyed(
    mirror: Mirror, terraform: Terraform, moto: str, tmp_path: Path
) -> None:
    config = moto_sandbox(node_image(moto))
    (env,) = synthesize([config], tmp_path / "cdktf.out").values()
    states = tmp_path / "states"
    states.mkdir()
    kafka = client(moto, "kafka")
    arn = kafka.create_cluster_v2(
        ClusterName=config.resource_prefix,
        Provisioned={
            "BrokerNodeGroupInfo": {
                "InstanceType": "kafka.m7g.large",
                "ClientSubnets": ["s-1", "s-2"],
            },
            "KafkaVersion": config.msk_cluster_version,
            "NumberOfBrokerNodes": config.broker_count,
        },
    )["ClusterArn"]
    stand_in = states / "kafka-stand-in.tfstate"
    stack_dirs = {c: tmp_path / "cdktf.out" / "stacks" / env[c].name for c in COMPONENTS}
    stand_in_state(
        stand_in,
        cluster_outputs(
            stack_dirs["kafka"],
            {
                "arn": arn,
                "cluster_name": config.resource_prefix,
                "cluster_uuid": arn.rsplit("/", 1)[1],
                "bootstrap_brokers_sasl_iam": "b-1.stand-in.kafka.invalid:9098",
            },
        ),
    )

    def state_of(reference: str) -> Path:
        stack_name = reference.removeprefix("cross-stack-reference-input-")
        return stand_in if stack_name.endswith("-kafka") else states / f"{stack_name}.tfstate"

    def init(component: str) -> None:
        stack = stack_dirs[component]
        write_override(
            stack,
            moto_override(
                version=mirror.version,
                endpoint=moto,
                state=states / f"{env[component].name}.tfstate",
                remote_states={r: state_of(r) for r in remote_state_names(stack)},
                instances=resource_names(stack, "aws_instance"),
            ),
        )
        terraform(stack, "init", "-lockfile=readonly")

    def run(command: str, component: str) -> None:
        stack = stack_dirs[component]
        left_out = NOT_IN_MOTO.get(component, ())
        extra = ("-refresh=false",) if command == "destroy" else ()
        terraform(stack, command, "-auto-approve", *extra, *targets_except(stack, left_out))

    with ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(init, COMPONENTS))
        applied: list[tuple[str, ...]] = []
        try:
            for wave in WAVES:
                applied.append(wave)
                list(pool.map(lambda component: run("apply", component), wave))
            check_applied(env, moto)
        finally:
            for done in reversed(applied):
                list(pool.map(lambda component: run("destroy", component), done))
    check_destroyed(env, moto)
    assert (stack_dirs["network"] / OVERRIDE_FILE).is_file()


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
        import base64

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

"""Real Terraform: the production environment applied to moto, rolled node by node, destroyed.

The production shape as the sandbox's apply does not have it: six workers,
producer networks routed through a VPC peering and a transit gateway, alarm
subscriptions and an existing pager topic, guarded data, and the driver,
worker and archiver roles. What moto cannot apply is listed in
tests/infra/moto_apply.py (the placement group among it: moto has none, so
the instances are applied without one).

The roll is the one of docs/infra.md, "Rolling the nodes": a new image id in
the settings and every stack applied (nothing replaced), then one worker and
then the driver replaced in the spark stack, then the monitoring and hand-off
stacks applied; after it nothing in moto names a terminated instance.
Marked ``terraform`` (``make terraform-check``); it runs beside the sandbox's
apply there.
"""

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from app import handoff
from infra.config import EnvironmentConfig, layout
from infra.config.environments import prod
from infra.config.node_services import interface_endpoint_services
from infra.config.settings import TESTING_SETTINGS, ProducerNetwork, alarm_endpoint, load_settings
from infra.constructs.node_permissions import BUCKET_ACCESS, S3_RETENTION_ACTIONS, NodeKind
from tests.infra.moto_apply import (
    AGAIN,
    COMPONENTS,
    MOTO_ACCOUNT,
    MotoDeployment,
    applied,
    client,
    node_image,
    resynthesize,
)
from tests.infra.terraform import Mirror, Terraform, resource_names

pytestmark = pytest.mark.terraform

PAGER_EMAIL = "oncall@pager.tablecast.net"
"""Not a reserved domain (settings refuse those); moto sends no mail."""


def moto_prod(endpoint: str, image_id: str) -> EnvironmentConfig:
    """prod as configured, with moto's account, an image, a pager topic and producer networks
    whose peering and transit gateway exist in moto."""
    ec2 = client(endpoint, "ec2")
    here = ec2.create_vpc(CidrBlock="10.60.0.0/16")["Vpc"]["VpcId"]
    there = ec2.create_vpc(CidrBlock="10.61.0.0/16")["Vpc"]["VpcId"]
    peering = ec2.create_vpc_peering_connection(VpcId=here, PeerVpcId=there)
    peering_id = peering["VpcPeeringConnection"]["VpcPeeringConnectionId"]
    ec2.accept_vpc_peering_connection(VpcPeeringConnectionId=peering_id)
    gateway = ec2.create_transit_gateway()["TransitGateway"]["TransitGatewayId"]
    pager = client(endpoint, "sns").create_topic(Name="platform-pager")["TopicArn"]
    settings = dataclasses.replace(
        load_settings(TESTING_SETTINGS)["prod"],
        account_id=MOTO_ACCOUNT,
        spark_image_id=image_id,
        alarm_endpoints=(alarm_endpoint(pager), alarm_endpoint(PAGER_EMAIL)),
        producer_networks=(
            ProducerNetwork(name="plants", cidr="10.60.0.0/16", via=peering_id),
            ProducerNetwork(name="lab", cidr="192.168.10.0/24", via=gateway),
        ),
        topic_admin_principals=(f"arn:aws:iam::{MOTO_ACCOUNT}:role/platform-admin",),
    )
    return prod(settings)


def nodes(endpoint: str, config: EnvironmentConfig) -> dict[str, dict[str, Any]]:
    """The environment's running instances, by ``Name`` tag."""
    reservations = client(endpoint, "ec2").describe_instances(
        Filters=[
            {"Name": "tag:Name", "Values": [f"{config.resource_prefix}-*"]},
            {"Name": "instance-state-name", "Values": ["running"]},
        ]
    )["Reservations"]
    found: dict[str, dict[str, Any]] = {}
    for reservation in reservations:
        for instance in reservation["Instances"]:
            name = {t["Key"]: t["Value"] for t in instance["Tags"]}["Name"]
            assert name not in found, f"two running instances named {name}"
            found[name] = instance
    return found


# Alone it takes about 8 minutes; beside the other terraform process on two shared cores
# (make terraform-check) it took 14: most of it the provider's polling.
@pytest.mark.timeout(1800)
def test_production_applies_to_moto_rolls_node_by_node_and_is_destroyed(
    mirror: Mirror, terraform: Terraform, moto: str, tmp_path: Path
) -> None:
    config = moto_prod(moto, node_image(moto))
    with applied(
        config,
        endpoint=moto,
        mirror=mirror,
        terraform=terraform,
        workdir=tmp_path,
        fixed_addresses=False,
    ) as deployment:
        check_production_shape(deployment)
        check_roll(deployment)
    check_gone(deployment)


def check_production_shape(deployment: MotoDeployment) -> None:
    config, endpoint = deployment.env.config, deployment.endpoint
    ec2 = client(endpoint, "ec2")
    (vpc,) = ec2.describe_vpcs(Filters=[{"Name": "cidr", "Values": [config.vpc_cidr]}])["Vpcs"]
    vpc_filter = [{"Name": "vpc-id", "Values": [vpc["VpcId"]]}]

    # Producer networks: a route back through each, and Kafka open to each.
    (table,) = ec2.describe_route_tables(
        Filters=[*vpc_filter, {"Name": "tag:Name", "Values": [f"{config.resource_prefix}-private"]}]
    )["RouteTables"]
    routes = {route.get("DestinationCidrBlock"): route for route in table["Routes"]}
    plants, lab = config.deployment.producer_networks
    assert routes[plants.cidr]["VpcPeeringConnectionId"] == plants.via
    assert routes[lab.cidr]["TransitGatewayId"] == lab.via
    (attachment,) = ec2.describe_transit_gateway_vpc_attachments(
        Filters=[{"Name": "vpc-id", "Values": [vpc["VpcId"]]}]
    )["TransitGatewayVpcAttachments"]
    assert attachment["TransitGatewayId"] == lab.via
    assert len(attachment["SubnetIds"]) == len(config.availability_zones)
    (brokers,) = ec2.describe_security_groups(
        Filters=[
            *vpc_filter,
            {"Name": "group-name", "Values": [f"{config.resource_prefix}-brokers"]},
        ]
    )["SecurityGroups"]
    kafka_from = {
        address["CidrIp"]
        for permission in brokers["IpPermissions"]
        if permission["FromPort"] == 9098
        for address in permission["IpRanges"]
    }
    assert kafka_from == {plants.cidr, lab.cidr}

    # Alarm subscriptions: the email on the environment's topic; the pager's topic as an action.
    sns = client(endpoint, "sns")
    topic = f"arn:aws:sns:{config.region}:{MOTO_ACCOUNT}:{config.resource_prefix}-alarms"
    subscriptions = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert [(s["Protocol"], s["Endpoint"]) for s in subscriptions] == [("email", PAGER_EMAIL)]
    (pager,) = (e.address for e in config.deployment.alarm_endpoints if e.address.startswith("arn"))
    alarms = client(endpoint, "cloudwatch").describe_alarms(AlarmNamePrefix=config.resource_prefix)
    assert len(alarms["MetricAlarms"]) == len(deployment.env.stacks.monitoring.specs)
    for alarm in alarms["MetricAlarms"]:
        assert {topic, pager} <= set(alarm["AlarmActions"]), alarm["AlarmName"]

    # The role split: each node kind's role, its instance profile on its nodes, its S3 access.
    iam = client(endpoint, "iam")
    running = nodes(endpoint, config)
    assert len(running) == config.spark_worker_count + 1
    for name, instance in running.items():
        kind = NodeKind.DRIVER if name.endswith("-driver") else NodeKind.WORKER
        profile = instance["IamInstanceProfile"]["Arn"].rsplit("/", 1)[1]
        (role,) = iam.get_instance_profile(InstanceProfileName=profile)["InstanceProfile"]["Roles"]
        assert role["RoleName"] == f"{config.resource_prefix}-{kind.value}", name
    bucket_arn = f"arn:aws:s3:::{config.resource_prefix}-{MOTO_ACCOUNT}-{config.region}"
    for kind in NodeKind:
        role_name = f"{config.resource_prefix}-{kind.value}"
        documents = [
            iam.get_role_policy(RoleName=role_name, PolicyName=policy)["PolicyDocument"]
            for policy in iam.list_role_policies(RoleName=role_name)["PolicyNames"]
        ]
        # Production's archive is locked file by file: its archiver may put (and read) locks.
        locks = set(S3_RETENTION_ACTIONS) if kind is NodeKind.ARCHIVER else set()
        assert object_access(documents, bucket_arn) == {
            prefix: set(actions) | (locks if prefix == layout.ARCHIVE_PREFIX else set())
            for prefix, actions in BUCKET_ACCESS[kind].items()
        }, kind
    archiver_trust = iam.get_role(RoleName=f"{config.resource_prefix}-archiver")["Role"]
    trusted = json.dumps(archiver_trust["AssumeRolePolicyDocument"])
    assert f"role/{config.resource_prefix}-driver" in trusted
    assert f"role/{config.resource_prefix}-worker" not in trusted

    # Guarded data: the production bucket and the data volumes are applied with their guards.
    s3 = client(endpoint, "s3")
    bucket = bucket_arn.rsplit(":", 1)[1]
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == ("Enabled")
    # The archive's Object Lock: on, no default retention (the archiver locks each file).
    lock = s3.get_object_lock_configuration(Bucket=bucket)["ObjectLockConfiguration"]
    assert lock["ObjectLockEnabled"] == "Enabled" and "Rule" not in lock

    # Its own Glue database; an endpoint for every service the nodes call, and S3's policy.
    glue = client(endpoint, "glue")
    assert glue.get_database(Name=layout.glue_database(config.name))["Database"]["Name"] == (
        "tablecast_prod"
    )
    found = ec2.describe_vpc_endpoints(Filters=vpc_filter)["VpcEndpoints"]
    services = {e["ServiceName"].rsplit(".", 1)[1]: e for e in found}
    assert set(services) == {"s3", *interface_endpoint_services(config)}
    s3_policy = json.loads(services["s3"]["PolicyDocument"])
    assert {s["Sid"] for s in s3_policy["Statement"]} == {
        "ThisEnvironmentsBucket",
        "SsmAgentBuckets",
    }


def object_access(documents: list[Any], bucket_arn: str) -> dict[str, set[str]]:
    """Per bucket prefix, the object actions the policy documents allow."""
    access: dict[str, set[str]] = {}
    for document in documents:
        body = json.loads(document) if isinstance(document, str) else document
        for statement in body["Statement"]:
            resources = statement["Resource"]
            for resource in [resources] if isinstance(resources, str) else resources:
                if not resource.startswith(f"{bucket_arn}/") or not resource.endswith("/*"):
                    continue
                prefix = resource.removeprefix(f"{bucket_arn}/").removesuffix("/*")
                actions = statement["Action"]
                access.setdefault(prefix, set()).update(
                    [actions] if isinstance(actions, str) else actions
                )
    return access


def check_roll(deployment: MotoDeployment) -> None:
    """docs/infra.md, "Rolling the nodes", step by step."""
    config, endpoint = deployment.env.config, deployment.endpoint
    before = nodes(endpoint, config)

    # 1. A new image id in the settings, every stack applied: nothing is replaced.
    image = node_image(endpoint, name="tablecast-spark-node-next")
    rolled = dataclasses.replace(
        config, deployment=dataclasses.replace(config.deployment, spark_image_id=image)
    )
    deployment = resynthesize(deployment, rolled)
    for component in COMPONENTS:
        deployment.apply(component, AGAIN)
    assert {n: i["InstanceId"] for n, i in nodes(endpoint, config).items()} == {
        n: i["InstanceId"] for n, i in before.items()
    }

    # 2. and 3. A worker, then the driver: `apply -replace=` in the spark stack;
    # 4. after every replaced node, the monitoring and hand-off stacks.
    spark = deployment.stack("spark")
    instances = resource_names(spark, "aws_instance")
    dead: set[str] = set()
    for node in ("worker-1", "driver"):
        (address,) = (name for name in instances if name.startswith(f"{node}_instance"))
        dead.add(before[f"{config.resource_prefix}-{node}"]["InstanceId"])
        deployment.apply("spark", AGAIN, f"-replace=aws_instance.{address}")
        for component in ("monitoring", "handoff"):
            deployment.apply(component, AGAIN)
        running = nodes(endpoint, config)
        check_nothing_names(deployment, dead=dead, live={i["InstanceId"] for i in running.values()})
    after = nodes(endpoint, config)
    assert set(after) == set(before)
    replaced = {f"{config.resource_prefix}-worker-1", f"{config.resource_prefix}-driver"}
    for name, instance in after.items():
        if name in replaced:
            assert instance["InstanceId"] not in dead, name
            assert instance["ImageId"] == image, name
        else:
            assert instance["InstanceId"] == before[name]["InstanceId"], name
    parameters = handoff_parameters(endpoint, config.name)
    driver = after[f"{config.resource_prefix}-driver"]["InstanceId"]
    assert parameters[handoff.DRIVER_INSTANCE_ID] == driver
    # The configured address on AWS; here moto's (MotoDeployment.fixed_addresses).
    assert (
        parameters[handoff.DRIVER_ADDRESS]
        == after[f"{config.resource_prefix}-driver"]["PrivateIpAddress"]
    )


def handoff_parameters(endpoint: str, environment: str) -> Mapping[str, str]:
    pages = client(endpoint, "ssm").get_paginator("get_parameters_by_path")
    return {
        p["Name"].rsplit("/", 1)[1]: p["Value"]
        for page in pages.paginate(Path=f"/tablecast/{environment}/")
        for p in page["Parameters"]
    }


def check_nothing_names(deployment: MotoDeployment, *, dead: set[str], live: set[str]) -> None:
    """No alarm (dimension or action), dashboard or hand-off parameter names a dead instance;
    every instance an alarm watches lives."""
    config, endpoint = deployment.env.config, deployment.endpoint
    cloudwatch = client(endpoint, "cloudwatch")
    alarms = cloudwatch.describe_alarms(AlarmNamePrefix=config.resource_prefix)["MetricAlarms"]
    watched = set()
    for alarm in alarms:
        text = json.dumps(alarm, default=str)
        assert not [i for i in dead if i in text], alarm["AlarmName"]
        watched |= {d["Value"] for d in alarm["Dimensions"] if d["Name"] == "InstanceId"}
    assert watched == live
    for entry in cloudwatch.list_dashboards(DashboardNamePrefix=config.resource_prefix)[
        "DashboardEntries"
    ]:
        body = cloudwatch.get_dashboard(DashboardName=entry["DashboardName"])["DashboardBody"]
        assert not [i for i in dead if i in body], entry["DashboardName"]
    values = " ".join(handoff_parameters(endpoint, config.name).values())
    assert not [i for i in dead if i in values]


def check_gone(deployment: MotoDeployment) -> None:
    config, endpoint = deployment.env.config, deployment.endpoint
    ec2 = client(endpoint, "ec2")
    assert not ec2.describe_vpcs(Filters=[{"Name": "cidr", "Values": [config.vpc_cidr]}])["Vpcs"]
    assert not nodes(endpoint, config)
    assert not client(endpoint, "ssm").get_parameters_by_path(Path=f"/tablecast/{config.name}/")[
        "Parameters"
    ]
    alarms = client(endpoint, "cloudwatch").describe_alarms(AlarmNamePrefix=config.resource_prefix)
    assert not alarms["MetricAlarms"]

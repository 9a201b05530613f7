"""The network: private only, and only the Spark nodes reach the brokers."""

import ipaddress
import json

from infra.config import EnvironmentConfig, layout
from infra.constructs.node_permissions import S3_ENDPOINT_ACTIONS
from infra.testing import SynthesizedEnvironment

PUBLIC_RESOURCE_TYPES = (
    "aws_internet_gateway",
    "aws_egress_only_internet_gateway",
    "aws_nat_gateway",
    "aws_eip",
    "aws_lb",
)
BROKERS = "${aws_security_group.brokers-security-group.id}"


def test_nothing_public(env: SynthesizedEnvironment) -> None:
    for resource_type in PUBLIC_RESOURCE_TYPES:
        assert not list(env.all_resources(resource_type)), resource_type
    # The only routes lead to the producer networks, through their peering or gateway.
    networks = {n.cidr: n.via for n in env.config.deployment.producer_networks}
    routes = [route for _, route in env.all_resources("aws_route")]
    assert {route["destination_cidr_block"] for route in routes} == set(networks)
    for route in routes:
        via = networks[route["destination_cidr_block"]]
        target = route.get("vpc_peering_connection_id") or route.get("transit_gateway_id")
        assert target == via
        assert not {"gateway_id", "nat_gateway_id", "egress_only_gateway_id"} & set(route)
    for _, subnet in env.all_resources("aws_subnet"):
        assert subnet["map_public_ip_on_launch"] is False
    for _, table in env.all_resources("aws_route_table"):
        assert "route" not in table
    for _, instance in env.all_resources("aws_instance"):
        assert instance["associate_public_ip_address"] is False


def test_no_ingress_from_anywhere(env: SynthesizedEnvironment) -> None:
    producers = {n.cidr for n in env.config.deployment.producer_networks}
    for _, rule in env.all_resources("aws_vpc_security_group_ingress_rule"):
        assert "cidr_ipv6" not in rule
        if "cidr_ipv4" in rule:
            # Only a producer network, only to the brokers, only on the IAM port.
            assert rule["cidr_ipv4"] in producers
            assert rule["security_group_id"] == BROKERS
            assert (rule["ip_protocol"], rule["from_port"], rule["to_port"]) == (
                "tcp",
                layout.KAFKA_IAM_PORT,
                layout.KAFKA_IAM_PORT,
            )
        else:
            assert "referenced_security_group_id" in rule
    for _, group in env.all_resources("aws_security_group"):
        assert "ingress" not in group
        assert "egress" not in group
    for _, rule in env.all_resources("aws_vpc_security_group_egress_rule"):
        assert rule.get("cidr_ipv4") != "0.0.0.0/0"
        assert "cidr_ipv6" not in rule
    (default_group,) = env["network"].resources("aws_default_security_group").values()
    assert "ingress" not in default_group
    assert "egress" not in default_group


def test_spark_nodes_and_configured_producers_reach_the_brokers(
    env: SynthesizedEnvironment,
) -> None:
    network = env["network"]
    rules = [
        rule
        for rule in network.resources("aws_vpc_security_group_ingress_rule").values()
        if rule["security_group_id"] == BROKERS
    ]
    producers = env.config.deployment.producer_networks
    assert sorted(rule.get("cidr_ipv4", "") for rule in rules) == sorted(
        ["", *(n.cidr for n in producers)]
    )
    (rule,) = [rule for rule in rules if "referenced_security_group_id" in rule]
    assert rule["referenced_security_group_id"] == "${aws_security_group.spark-security-group.id}"
    assert (rule["ip_protocol"], rule["from_port"], rule["to_port"]) == (
        "tcp",
        layout.KAFKA_IAM_PORT,
        layout.KAFKA_IAM_PORT,
    )


def test_security_groups_are_attached_across_stacks(env: SynthesizedEnvironment) -> None:
    # checkov cannot follow cross-stack references (CKV2_AWS_5 is skipped).
    (msk,) = env["kafka"].resources("aws_msk_cluster").values()
    assert [env.follow(group) for group in msk["broker_node_group_info"]["security_groups"]] == [
        "${aws_security_group.brokers-security-group.id}"
    ]
    for _, instance in env.all_resources("aws_instance"):
        assert [env.follow(group) for group in instance["vpc_security_group_ids"]] == [
            "${aws_security_group.spark-security-group.id}"
        ]


def test_subnets_follow_the_address_plan(env: SynthesizedEnvironment) -> None:
    plan = env.config.subnets
    subnets = env["network"].resources("aws_subnet")
    spark = subnets["spark"]  # the first zone's keeps the id the one Spark subnet had
    assert spark["cidr_block"] == plan.spark_subnet
    assert spark["availability_zone"] == env.config.availability_zones[0]
    spark_subnets = {
        subnet["availability_zone"]: subnet["cidr_block"]
        for subnet in subnets.values()
        if subnet["tags"]["Name"].startswith(f"{env.config.resource_prefix}-spark-")
    }
    zones = env.config.availability_zones
    assert spark_subnets == dict(zip(zones, plan.spark_subnets, strict=True))
    brokers = {
        subnet["availability_zone"]: subnet["cidr_block"]
        for name, subnet in subnets.items()
        if name.startswith("brokers-")
    }
    assert brokers == dict(zip(env.config.availability_zones, plan.broker_subnets, strict=True))
    vpc = ipaddress.IPv4Network(env.config.vpc_cidr)
    assert all(ipaddress.IPv4Network(cidr).subnet_of(vpc) for cidr in brokers.values())


def test_s3_gateway_endpoint_and_private_interface_endpoints(env: SynthesizedEnvironment) -> None:
    endpoints = list(env["network"].resources("aws_vpc_endpoint").values())
    services = {endpoint["service_name"]: endpoint for endpoint in endpoints}
    s3 = services[f"com.amazonaws.{env.config.region}.s3"]
    assert s3["vpc_endpoint_type"] == "Gateway"
    for service in ("ssm", "ssmmessages", "ec2messages", "monitoring", "logs", "sts", "glue"):
        endpoint = services[f"com.amazonaws.{env.config.region}.{service}"]
        assert endpoint["vpc_endpoint_type"] == "Interface"
        assert endpoint["private_dns_enabled"] is True


def test_flow_logs_are_on(env: SynthesizedEnvironment) -> None:
    assert env["network"].has_resource(
        "aws_flow_log", {"traffic_type": "ALL", "log_destination_type": "cloud-watch-logs"}
    )


def test_transit_gateways_are_attached_to_every_broker_zone(env: SynthesizedEnvironment) -> None:
    gateways = {n.via for n in env.config.deployment.producer_networks if n.via.startswith("tgw-")}
    attachments = list(env["network"].resources("aws_ec2_transit_gateway_vpc_attachment").values())
    assert {a["transit_gateway_id"] for a in attachments} == gateways
    for attachment in attachments:
        assert len(attachment["subnet_ids"]) == len(env.config.availability_zones)


def test_some_environment_has_producers(configs: dict[str, EnvironmentConfig]) -> None:
    # The testing settings exercise peering and transit gateways.
    vias = {n.via[:3] for c in configs.values() for n in c.deployment.producer_networks}
    assert vias == {"pcx", "tgw"}


def test_the_s3_endpoint_reaches_the_environments_bucket_and_the_ssm_agents_only(
    env: SynthesizedEnvironment,
) -> None:
    (s3,) = [
        e
        for e in env["network"].resources("aws_vpc_endpoint").values()
        if e["vpc_endpoint_type"] == "Gateway"
    ]
    statements = {s["Sid"]: s for s in json.loads(s3["policy"])["Statement"]}
    assert set(statements) == {"ThisEnvironmentsBucket", "SsmAgentBuckets"}
    bucket = statements["ThisEnvironmentsBucket"]
    name = f"{env.config.resource_prefix}-${{data.aws_caller_identity.account.account_id}}-"
    arn = f"arn:${{data.aws_partition.partition.partition}}:s3:::{name}{env.config.region}"
    assert bucket["Resource"] == [arn, f"{arn}/*"]
    # What the nodes do there, and no more: no bucket-wide or lock-lifting action.
    assert set(bucket["Action"]) == set(S3_ENDPOINT_ACTIONS)
    assert not [a for a in bucket["Action"] if "*" in a or "Bypass" in a or "Version" in a]
    agent = statements["SsmAgentBuckets"]
    assert agent["Action"] == ["s3:GetObject"]
    assert all("ssm" in r or "birdwatcher" in r or "patch-baseline" in r for r in agent["Resource"])
    assert all(env.config.region in r for r in agent["Resource"])
    for statement in statements.values():
        assert statement["Effect"] == "Allow" and statement["Principal"] == "*"

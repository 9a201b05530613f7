"""Moving Spark to another zone is a settings change whose plan touches no broker."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from pathlib import Path

import pytest

from infra.config import ConfigError
from infra.config.environments import dev
from infra.config.settings import TESTING_SETTINGS, load_settings, parse_settings
from infra.testing import Document, SynthesizedEnvironment, synthesize


def synth_in(zone: str | None, outdir: Path) -> SynthesizedEnvironment:
    settings = dataclasses.replace(load_settings(TESTING_SETTINGS)["dev"], spark_zone=zone)
    (env,) = synthesize([dev(settings)], outdir).values()
    return env


def subnets_by_cidr(env: SynthesizedEnvironment) -> dict[str, Document]:
    subnets = env["network"].resources("aws_subnet").values()
    return {subnet["cidr_block"]: subnet for subnet in subnets}


def test_moving_spark_changes_no_broker_and_no_subnet(tmp_path: Path) -> None:
    zones = dev(load_settings(TESTING_SETTINGS)["dev"]).availability_zones
    before = synth_in(None, tmp_path / "before")
    after = synth_in(zones[1], tmp_path / "after")
    # The kafka stack (the cluster, its configuration, its subnets' references) is the same.
    assert json.loads(before["kafka"].text) == json.loads(after["kafka"].text)
    # Every subnet already exists: a Spark subnet in each zone, the brokers' unchanged.
    assert subnets_by_cidr(before) == subnets_by_cidr(after)
    spark_subnets = [s for s in subnets_by_cidr(before).values() if "-spark-" in s["tags"]["Name"]]
    assert sorted(s["availability_zone"] for s in spark_subnets) == sorted(zones)
    # The network stack differs in nothing a broker uses.
    for resource_type in ("aws_subnet", "aws_security_group", "aws_vpc"):
        assert before["network"].resources(resource_type) == after["network"].resources(
            resource_type
        ), resource_type
    # The nodes move: their zone, subnet and the driver's address.
    (zone_before,) = before["spark"].data_sources("aws_availability_zone").values()
    (zone_after,) = after["spark"].data_sources("aws_availability_zone").values()
    assert (zone_before["name"], zone_after["name"]) == (zones[0], zones[1])
    driver_before = before.config.subnets.driver_private_ip
    driver_after = after.config.subnets.driver_private_ip
    assert driver_before != driver_after
    (holding,) = [
        subnet
        for cidr, subnet in subnets_by_cidr(after).items()
        if ipaddress.ip_address(driver_after) in ipaddress.ip_network(cidr)
    ]
    assert holding["availability_zone"] == zones[1] and "-spark-" in holding["tags"]["Name"]


def test_the_spark_zone_must_be_one_of_the_broker_zones() -> None:
    settings = parse_settings(
        "dev",
        {
            "account_id": "000000000000",
            "spark_image_id": "ami-0123456789abcdef0",
            "spark_zone": "eu-west-1c",
        },
        source="t.toml",
    )
    with pytest.raises(ConfigError, match=r"spark_zone: 'eu-west-1c' is not one of the broker "):
        dev(settings)

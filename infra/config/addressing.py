"""The environment's address plan: which CIDR each subnet gets, and the driver's address.

Pure functions of the VPC CIDR and the number of availability zones, so that
a plan never shifts under a running cluster when something else changes.
"""

import ipaddress
from dataclasses import dataclass

# Each subnet is 1/16 of the VPC. Broker subnets take blocks 0..2 (one per
# zone); the Spark subnets blocks 4..6 (one per zone, in the zones' order:
# the first zone's is block 4, where the one Spark subnet always was), so
# that neither adding a zone nor moving Spark to another moves any subnet.
SUBNET_PREFIX_EXTRA_BITS = 4
SPARK_BLOCK = 4
# AWS reserves the first four addresses of a subnet; the driver takes a fixed
# one after them so that it keeps its address when the instance is replaced
# (workers, the checkpoint URI and SSM all name it).
DRIVER_HOST_OFFSET = 10


@dataclass(frozen=True, kw_only=True)
class SubnetPlan:
    """CIDRs of the environment's private subnets."""

    broker_subnets: tuple[str, ...]
    """One per availability zone, in the zones' order: MSK's client subnets."""
    spark_subnets: tuple[str, ...]
    """One per availability zone, in the zones' order, ready for the Spark nodes."""
    spark_subnet: str
    """The subnet of every Spark node: the Spark zone's of ``spark_subnets``."""
    driver_private_ip: str
    """The driver node's fixed private address inside ``spark_subnet``."""


def plan_subnets(vpc_cidr: str, zone_count: int, *, spark_zone_index: int = 0) -> SubnetPlan:
    """Split ``vpc_cidr`` into a broker and a Spark subnet per zone; Spark in one zone."""
    network = ipaddress.IPv4Network(vpc_cidr)
    blocks = list(network.subnets(prefixlen_diff=SUBNET_PREFIX_EXTRA_BITS))
    spark_blocks = blocks[SPARK_BLOCK : SPARK_BLOCK + zone_count]
    spark = spark_blocks[spark_zone_index]
    return SubnetPlan(
        broker_subnets=tuple(str(block) for block in blocks[:zone_count]),
        spark_subnets=tuple(str(block) for block in spark_blocks),
        spark_subnet=str(spark),
        driver_private_ip=str(spark.network_address + DRIVER_HOST_OFFSET),
    )

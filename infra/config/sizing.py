"""Broker storage sized for the retention: what MSK must hold before it deletes."""

import math

# Keep the steady-state disk use below 70%: the disk alarm fires at 85%, and
# the gap absorbs segment roll-over (Kafka deletes whole segments late) and
# bursts above the planned rate.
TARGET_DISK_FRACTION = 0.70
MSK_MAX_VOLUME_GIB = 16384
MIB_PER_GIB = 1024
SECONDS_PER_HOUR = 3600
ROOT_VOLUME_GIB = 50
"""Every Spark node's root volume (it holds the NameNode's second name directory)."""


def required_broker_volume_gib(
    *,
    peak_ingest_mib_per_s: float,
    retention_hours: int,
    replication_factor: int,
    broker_count: int,
) -> int:
    """GiB each broker needs to keep ``retention_hours`` of the peak write rate.

    The cluster stores every byte ``replication_factor`` times, spread evenly
    over its brokers.
    """
    retained_mib = peak_ingest_mib_per_s * SECONDS_PER_HOUR * retention_hours * replication_factor
    per_broker_gib = retained_mib / broker_count / MIB_PER_GIB / TARGET_DISK_FRACTION
    return max(1, math.ceil(per_broker_gib))

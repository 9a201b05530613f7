"""The user data of a Spark node: which role it has and where its driver is.

The AMI's ``node-bootstrap`` reads ``/etc/tablecast/node.env``, formats and
mounts the HDFS data volume, and enables the role's systemd units.
"""

from enum import StrEnum

from infra.config import layout


class NodeRole(StrEnum):
    """A Spark node's role, as ``TABLECAST_ROLE`` names it."""

    DRIVER = "driver"
    """Spark master, HDFS NameNode and the job's service."""
    WORKER = "worker"
    """Spark worker and HDFS DataNode."""


def node_environment(
    *,
    environment: str,
    role: NodeRole,
    driver_host: str,
    region: str,
    zone_id: str,
    hdfs_replication: int,
    archiver_role_arn: str | None = None,
) -> dict[str, str]:
    """The variables written to ``/etc/tablecast/node.env``, in order."""
    archiver = (
        {}
        if archiver_role_arn is None
        else {
            # The driver's archiver service assumes it (ami/files/bin/archiver-credentials).
            "TABLECAST_ARCHIVER_ROLE_ARN": archiver_role_arn,
        }
    )
    return {
        "TABLECAST_ENV": environment,
        "TABLECAST_ROLE": role.value,
        "TABLECAST_DRIVER_HOST": driver_host,
        "AWS_REGION": region,
        # The zone's id (e.g. euw1-az1), which MSK gives its brokers as
        # broker.rack: the job's Kafka client sets it as client.rack to fetch
        # from a replica in its own zone. Zone names map to ids per account.
        "TABLECAST_ZONE_ID": zone_id,
        "TABLECAST_HDFS_DEVICE": layout.HDFS_DEVICE,
        # Optional for node-bootstrap (default 2); one DataNode holds one copy.
        "TABLECAST_HDFS_REPLICATION": str(hdfs_replication),
        **archiver,
    }


def node_user_data(
    *,
    environment: str,
    role: NodeRole,
    driver_host: str,
    region: str,
    zone_id: str,
    hdfs_replication: int,
    archiver_role_arn: str | None = None,
) -> str:
    """A shell script that writes the node's environment file and starts the bootstrap.

    :param environment: the environment's name.
    :param role: driver or worker.
    :param driver_host: the driver's private address; may be a cdktf token (a
        worker names the driver instance's ``private_ip``), which Terraform
        fills in before the script runs.
    :param region: the AWS region.
    :param zone_id: the node's availability zone id (a token Terraform fills in).
    :param hdfs_replication: copies HDFS keeps of each block.
    :param archiver_role_arn: the archiver's role (the driver's only).
    """
    variables = node_environment(
        environment=environment,
        role=role,
        driver_host=driver_host,
        region=region,
        zone_id=zone_id,
        hdfs_replication=hdfs_replication,
        archiver_role_arn=archiver_role_arn,
    )
    lines = "".join(f"{name}={value}\n" for name, value in variables.items())
    return (
        "#!/bin/bash\n"
        "# Written by infra/: tells this node its role and where its driver is.\n"
        "set -euo pipefail\n"
        f"install -d -m 0755 {_directory(layout.NODE_ENV_FILE)}\n"
        f"cat > {layout.NODE_ENV_FILE} <<'NODE_ENV'\n"
        f"{lines}"
        "NODE_ENV\n"
        f"chmod 0644 {layout.NODE_ENV_FILE}\n"
        # node-bootstrap as its unit runs it on every later boot.
        "systemctl start tablecast-bootstrap.service\n"
    )


def _directory(path: str) -> str:
    return path.rsplit("/", 1)[0]

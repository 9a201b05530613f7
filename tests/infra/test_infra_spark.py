"""The Spark cluster: zone affinity, the image, IMDSv2, encrypted volumes, user data."""

from pathlib import Path

import pytest

from infra.config import ConfigError, EnvironmentConfig, layout, versions
from infra.testing import Document, SynthesizedEnvironment
from tests.infra.valid_config import valid


def instances(env: SynthesizedEnvironment) -> dict[str, Document]:
    return env["spark"].resources("aws_instance")


def test_one_driver_and_the_configured_workers(env: SynthesizedEnvironment) -> None:
    nodes = instances(env)
    assert len(nodes) == env.config.spark_worker_count + 1
    types = sorted(node["instance_type"] for node in nodes.values())
    expected = sorted(
        [env.config.driver_instance_type]
        + [env.config.spark_worker_instance_type] * env.config.spark_worker_count
    )
    assert types == expected


def test_zone_affinity_one_subnet_in_a_broker_zone_and_a_spread_placement_group(
    env: SynthesizedEnvironment,
) -> None:
    subnets = {env.follow(node["subnet_id"]) for node in instances(env).values()}
    assert subnets == {"${aws_subnet.spark.id}"}
    network_subnets = env["network"].resources("aws_subnet")
    spark_zone = network_subnets["spark"]["availability_zone"]
    broker_zones = {
        subnet["availability_zone"]
        for name, subnet in network_subnets.items()
        if name.startswith("brokers-")
    }
    assert spark_zone in broker_zones
    groups = env["spark"].resources("aws_placement_group")
    if env.config.spark_placement == "spread":
        (group,) = groups.values()
        # Never "cluster": one rack's failure would take every HDFS copy.
        assert group["strategy"] == "spread"
        assert {node["placement_group"] for node in instances(env).values()} == {
            "${aws_placement_group.placement.name}"
        }
    else:
        assert not groups
        assert all("placement_group" not in node for node in instances(env).values())
    for volume in env["spark"].resources("aws_ebs_volume").values():
        assert volume["availability_zone"] == spark_zone


def test_shared_environments_spread_their_nodes(configs: dict[str, EnvironmentConfig]) -> None:
    for config in configs.values():
        assert config.spark_placement == ("none" if config.throwaway else "spread")
    with pytest.raises(ConfigError, match="a spread group holds 7 nodes per zone, not 8"):
        valid(spark_worker_count=7)


def test_hdfs_volumes_are_guarded_and_snapshotted(env: SynthesizedEnvironment) -> None:
    spark = env["spark"]
    tag = ("tablecast:hdfs-snapshots", f"tablecast-{env.config.name}")
    for volume in spark.resources("aws_ebs_volume").values():
        assert volume["lifecycle"] == {"prevent_destroy": not env.config.throwaway}
        assert volume["tags"][tag[0]] == tag[1]
    # The key that encrypts the volumes and so their snapshots: without it no
    # snapshot can be restored.
    (key,) = spark.resources("aws_kms_key").values()
    assert key.get("lifecycle", {}).get("prevent_destroy", False) is not env.config.throwaway
    (policy,) = spark.resources("aws_dlm_lifecycle_policy").values()
    details = policy["policy_details"]
    assert details["resource_types"] == ["VOLUME"]
    assert details["target_tags"] == {tag[0]: tag[1]}
    (schedule,) = details["schedule"]
    assert schedule["create_rule"] == {
        "interval": env.config.hdfs_snapshot_interval_hours,
        "interval_unit": "HOURS",
    }
    assert schedule["retain_rule"] == {"count": env.config.hdfs_snapshots_kept}
    assert policy["state"] == "ENABLED"
    assert policy["execution_role_arn"].startswith("${aws_iam_role.hdfs-snapshots_role")


def test_hdfs_keeps_three_copies_where_three_workers_allow(
    configs: dict[str, EnvironmentConfig],
) -> None:
    assert {name: c.hdfs_replication for name, c in configs.items()} == {
        "dev": 2,
        "staging": 3,
        "prod": 3,
        "sandbox": 1,
        "resync-exp": 2,
    }


def test_imdsv2_required(env: SynthesizedEnvironment) -> None:
    for node in instances(env).values():
        assert node["metadata_options"]["http_tokens"] == "required"
        assert node["metadata_options"]["http_endpoint"] == "enabled"


def test_encrypted_root_and_hdfs_volumes_attached_as_sdf(env: SynthesizedEnvironment) -> None:
    spark = env["spark"]
    for node in instances(env).values():
        root = node["root_block_device"]
        assert root["encrypted"] is True
        assert root["kms_key_id"].startswith("${aws_kms_key.")
    volumes = spark.resources("aws_ebs_volume")
    attachments = spark.resources("aws_volume_attachment")
    assert len(volumes) == len(attachments) == len(instances(env))
    for volume in volumes.values():
        assert volume["encrypted"] is True
        assert volume["kms_key_id"].startswith("${aws_kms_key.")
        assert volume["size"] == env.config.spark_data_volume_gib
    attached = {attachment["instance_id"] for attachment in attachments.values()}
    assert attached == {f"${{aws_instance.{name}.id}}" for name in instances(env)}
    assert {attachment["device_name"] for attachment in attachments.values()} == {"/dev/sdf"}


def test_image_is_the_pinned_one_checked_to_be_ours(env: SynthesizedEnvironment) -> None:
    (image,) = env["spark"].data_sources("aws_ami").values()
    assert image["owners"] == ["self"]
    assert "most_recent" not in image, "whatever was built last never reaches a node"
    filters = {entry["name"]: entry["values"] for entry in image["filter"]}
    assert filters["image-id"] == [env.config.deployment.spark_image_id]
    assert filters["name"] == ["tablecast-spark-node-*"]
    assert filters["tag:Project"] == ["tablecast"]
    assert filters["tag:Component"] == ["spark-node"]
    assert filters["tag:SparkVersion"] == [versions().spark]
    for node in instances(env).values():
        assert node["ami"] == "${data.aws_ami.spark-node-image.id}"


def test_a_new_image_or_user_data_replaces_no_running_node(env: SynthesizedEnvironment) -> None:
    # Nodes are rolled one at a time with terraform apply -replace (docs/infra.md).
    for node in instances(env).values():
        assert node["lifecycle"] == {"ignore_changes": ["ami", "user_data"]}


def node_env(user_data: str) -> dict[str, str]:
    body = user_data.split("<<'NODE_ENV'\n", 1)[1].split("\nNODE_ENV\n", 1)[0]
    return dict(line.split("=", 1) for line in body.splitlines())


def test_user_data_tells_each_node_its_role_and_driver(env: SynthesizedEnvironment) -> None:
    nodes = instances(env)
    driver_ip = env.config.subnets.driver_private_ip
    # The driver is the one node with the fixed address.
    (driver_name,) = [name for name, node in nodes.items() if node.get("private_ip") == driver_ip]
    for name, node in nodes.items():
        script = node["user_data"]
        assert script.startswith("#!/bin/bash\n")
        assert "set -euo pipefail" in script
        # node-bootstrap as its unit runs it on every boot (tests/ami checks the unit).
        assert script.rstrip().endswith("systemctl start tablecast-bootstrap.service")
        assert f"cat > {layout.NODE_ENV_FILE} <<'NODE_ENV'" in script
        variables = node_env(script)
        assert variables["TABLECAST_ENV"] == env.config.name
        assert variables["AWS_REGION"] == env.config.region
        assert variables["TABLECAST_HDFS_DEVICE"] == "/dev/sdf"
        # The job's Kafka client.rack: the id (not the name) of the nodes' zone.
        assert variables["TABLECAST_ZONE_ID"] == "${data.aws_availability_zone.spark-zone.zone_id}"
        assert variables["TABLECAST_HDFS_REPLICATION"] == str(min(3, env.config.spark_worker_count))
        if name == driver_name:
            assert variables["TABLECAST_ROLE"] == "driver"
            assert variables["TABLECAST_DRIVER_HOST"] == driver_ip
        else:
            assert variables["TABLECAST_ROLE"] == "worker"
            assert (
                variables["TABLECAST_DRIVER_HOST"] == f"${{aws_instance.{driver_name}.private_ip}}"
            )


def test_driver_and_workers_use_their_own_instance_profiles(env: SynthesizedEnvironment) -> None:
    spark = env["spark"]
    for node in instances(env).values():
        kind = "driver" if "TABLECAST_ROLE=driver" in node["user_data"] else "worker"
        assert node["iam_instance_profile"] == f"${{aws_iam_instance_profile.{kind}-profile.name}}"
        assert node["monitoring"] is True
    for kind in ("driver", "worker"):
        role = spark.resources("aws_iam_role")[f"{kind}-role"]
        assert '"Service": "ec2.amazonaws.com"' in role["assume_role_policy"]
        profile = spark.resources("aws_iam_instance_profile")[f"{kind}-profile"]
        assert profile["role"] == f"${{aws_iam_role.{kind}-role.name}}"


def test_log_groups_for_the_nodes_agent(env: SynthesizedEnvironment) -> None:
    groups = {
        group["name"]: group
        for group in env["spark"].resources("aws_cloudwatch_log_group").values()
    }
    environment = env.config.name
    # Each declared job's lines in a group of its own; the archiver's stay in "job".
    assert set(groups) == {
        f"/tablecast/{environment}/{name}" for name in ("job", "spark", "hdfs", "bootstrap")
    } | {f"/tablecast/{environment}/jobs/{job.name}" for job in env.config.jobs}
    for group in groups.values():
        assert group["kms_key_id"] == groups[f"/tablecast/{environment}/job"]["kms_key_id"]
        assert group["kms_key_id"].startswith("${aws_kms_key.")
        assert group["retention_in_days"] >= 365
        assert (
            group["retention_in_days"]
            == groups[f"/tablecast/{environment}/job"]["retention_in_days"]
        )


def test_zone_id_is_looked_up_for_the_nodes_zone(env: SynthesizedEnvironment) -> None:
    (zone,) = env["spark"].data_sources("aws_availability_zone").values()
    assert zone["name"] == env.config.spark_availability_zone


def test_the_driver_is_tagged_as_the_tools_look_for_it(env: SynthesizedEnvironment) -> None:
    from app import handoff

    drivers = [i for i in instances(env).values() if "TABLECAST_ROLE=driver" in i["user_data"]]
    assert [d["tags"]["Name"] for d in drivers] == [handoff.driver_name(env.config.name)]


def test_the_documented_roll_reapplies_every_stack_that_names_an_instance(
    env: SynthesizedEnvironment,
) -> None:
    """A replaced instance has a new id: every stack that reads one is in the roll's step 4."""
    import re

    naming = {
        component
        for component, stack in env.synthesized.items()
        if re.search(
            r"aws_instance\.?[\w-]*?\.id\}|cross-stack-output-aws_instance[\w-]*id\}", stack.text
        )
        and component != "spark"
    }
    assert naming == {"monitoring", "handoff"}
    for stack in env.synthesized.values():
        assert not re.search(r'"i-[0-9a-f]{8,17}"', stack.text), "no instance id is written down"
    docs = (Path(__file__).resolve().parents[2] / "docs" / "infra.md").read_text("utf-8")
    roll = docs[docs.index("## Rolling the nodes") :]
    assert "deploy tablecast-prod-monitoring tablecast-prod-handoff" in roll

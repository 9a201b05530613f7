"""Alarms that reach the topic, on metrics someone publishes; EC2 recovery; the dashboard."""

import dataclasses
import json
from pathlib import Path

import pytest

from app import metric_names
from infra.config import EndpointKind
from infra.config.environments import dev
from infra.config.settings import TESTING_SETTINGS, alarm_endpoint, load_settings
from infra.stacks.monitoring import (
    CHECKPOINT_BACKUPS,
    HDFS_METRICS,
    STABLE_OFFSET_STALLED_SECONDS,
    heartbeat_window_seconds,
    job_dimensions,
)
from infra.testing import Document, SynthesizedEnvironment, synthesize

TOPIC = "${aws_sns_topic.alarms.arn}"
ROOT = Path(__file__).resolve().parents[2]


def alarms(env: SynthesizedEnvironment) -> dict[str, Document]:
    return {
        alarm["alarm_name"]: alarm
        for alarm in env["monitoring"].resources("aws_cloudwatch_metric_alarm").values()
    }


def alarm(env: SynthesizedEnvironment, name: str) -> Document:
    return alarms(env)[f"tablecast-{env.config.name}-{name}"]


def jobs(env: SynthesizedEnvironment) -> list[str | None]:
    """The environment's declared jobs, or ``None``: its one job."""
    return [job.name for job in env.config.jobs] or [None]


def job_alarms_named(env: SynthesizedEnvironment, name: str) -> list[Document]:
    """The alarm ``name`` (``job-...``) of every job of the environment."""
    return [alarm(env, metric_names.job_alarm(name, job)) for job in jobs(env)]


def armed_names(env: SynthesizedEnvironment) -> set[str]:
    return {name for job in jobs(env) for name in metric_names.armed_by_deploy(job)}


def watched_metrics(alarm: Document) -> list[tuple[str, str]]:
    """``(namespace, metric name)`` of every metric the alarm reads."""
    if "metric_name" in alarm:
        return [(alarm["namespace"], alarm["metric_name"])]
    return [
        (query["metric"]["namespace"], query["metric"]["metric_name"])
        for query in alarm["metric_query"]
        if "metric" in query
    ]


def test_every_alarm_in_every_stack_notifies_the_topic(env: SynthesizedEnvironment) -> None:
    found = list(env.all_resources("aws_cloudwatch_metric_alarm"))
    assert found
    prefix = f"tablecast-{env.config.name}-"
    for stack, alarm in found:
        assert stack == f"{prefix}monitoring"
        armed = alarm["alarm_name"].removeprefix(prefix) in armed_names(env)
        # The deploy tool turns an armed alarm's actions on; Terraform leaves them to it.
        assert alarm["actions_enabled"] is not armed, alarm["alarm_name"]
        assert alarm.get("lifecycle", {}).get("ignore_changes", []) == (
            ["actions_enabled"] if armed else []
        )
        assert TOPIC in alarm["alarm_actions"], alarm["alarm_name"]
        assert TOPIC in alarm["ok_actions"], alarm["alarm_name"]


def test_only_what_runs_after_the_first_deploy_waits_for_it(env: SynthesizedEnvironment) -> None:
    armed = {spec.name for spec in env.stacks.monitoring.specs if spec.armed_by_deploy}
    assert armed == armed_names(env)
    # Each would be in alarm from the apply on: silence breaches, and nothing runs yet.
    for name in armed:
        assert alarm(env, name)["treat_missing_data"] == "breaching", name


def test_job_alarms_watch_only_metrics_the_job_publishes(env: SynthesizedEnvironment) -> None:
    job_alarms = 0
    for _, alarm in env.all_resources("aws_cloudwatch_metric_alarm"):
        for namespace, metric in watched_metrics(alarm):
            if namespace == metric_names.NAMESPACE:
                job_alarms += 1
                assert metric in (*metric_names.ALL, *metric_names.ARCHIVER), alarm["alarm_name"]
                name = alarm["alarm_name"].removeprefix(f"tablecast-{env.config.name}-")
                owner = [
                    job for job in jobs(env) if job is not None and name.startswith(f"job-{job}-")
                ]
                assert alarm["dimensions"] == job_dimensions(
                    env.config.name, owner[0] if owner else None
                ), name
    assert job_alarms >= 4 * len(jobs(env))


def test_heartbeat_missing_is_breaching(env: SynthesizedEnvironment) -> None:
    for heartbeat in job_alarms_named(env, "job-heartbeat-missing"):
        assert heartbeat["metric_name"] == metric_names.HEARTBEAT
        assert heartbeat["treat_missing_data"] == "breaching"
        assert heartbeat["comparison_operator"] == "LessThanThreshold"
        assert heartbeat["threshold"] == 1
        assert heartbeat["period"] == heartbeat_window_seconds(env.config.trigger_seconds)
        assert heartbeat["period"] % 60 == 0
        assert heartbeat["period"] >= 3 * env.config.trigger_seconds


def test_integrity_violations_above_zero(env: SynthesizedEnvironment) -> None:
    for violations in job_alarms_named(env, "job-integrity-violations"):
        assert violations["metric_name"] == metric_names.INTEGRITY_VIOLATIONS
        assert (violations["comparison_operator"], violations["threshold"]) == (
            "GreaterThanThreshold",
            0,
        )


def test_records_behind_over_the_configured_threshold(env: SynthesizedEnvironment) -> None:
    for behind in job_alarms_named(env, "job-records-behind"):
        assert behind["metric_name"] == metric_names.RECORDS_BEHIND
        assert behind["threshold"] == env.config.records_behind_alarm_threshold
        assert behind["comparison_operator"] == "GreaterThanThreshold"


def test_a_stable_offset_stalled_longer_than_any_transaction_may_stay_open(
    env: SynthesizedEnvironment,
) -> None:
    for stalled in job_alarms_named(env, "job-stable-offset-stalled"):
        assert stalled["metric_name"] == metric_names.STABLE_OFFSET_STALLED_SECONDS
        assert (stalled["comparison_operator"], stalled["threshold"]) == (
            "GreaterThanThreshold",
            STABLE_OFFSET_STALLED_SECONDS,
        )
        assert STABLE_OFFSET_STALLED_SECONDS == 15 * 60  # Kafka's transaction.max.timeout.ms
        assert (stalled["statistic"], stalled["treat_missing_data"]) == ("Maximum", "notBreaching")


def test_batch_duration_over_the_trigger_interval(env: SynthesizedEnvironment) -> None:
    for duration in job_alarms_named(env, "job-batch-duration"):
        assert duration["metric_name"] == metric_names.BATCH_DURATION_MS
        assert duration["threshold"] == env.config.trigger_seconds * 1000
        assert duration["comparison_operator"] == "GreaterThanThreshold"


def test_kafka_alarms(env: SynthesizedEnvironment) -> None:
    brokers = env.config.broker_count
    for broker in range(1, brokers + 1):
        disk = alarm(env, f"kafka-disk-used-broker-{broker}")
        assert disk["metric_name"] == "KafkaDataLogsDiskUsed"
        assert disk["threshold"] == 85
        assert disk["dimensions"]["Broker ID"] == str(broker)
        cpu = alarm(env, f"kafka-cpu-broker-{broker}")
        assert {metric for _, metric in watched_metrics(cpu)} == {"CpuUser", "CpuSystem"}
        heap = alarm(env, f"kafka-heap-after-gc-broker-{broker}")
        assert (heap["metric_name"], heap["threshold"]) == ("HeapMemoryAfterGC", 60)
    for name, metric in [
        ("kafka-under-replicated-partitions", "UnderReplicatedPartitions"),
        ("kafka-under-min-isr-partitions", "UnderMinIsrPartitionCount"),
    ]:
        summed = alarm(env, name)
        assert watched_metrics(summed) == [("AWS/Kafka", metric)] * brokers
        (expression,) = [q["expression"] for q in summed["metric_query"] if "expression" in q]
        assert expression.startswith("SUM([")
        assert summed["threshold"] == 0
    offline = alarm(env, "kafka-offline-partitions")
    assert (offline["metric_name"], offline["threshold"]) == ("OfflinePartitionsCount", 0)
    # KRaft: MSK runs and watches the controllers; the brokers report none.
    assert f"tablecast-{env.config.name}-kafka-active-controller-count" not in alarms(env)
    for name, found in alarms(env).items():
        if "kafka" in name:
            assert all(namespace == "AWS/Kafka" for namespace, _ in watched_metrics(found))


def test_every_alarm_says_what_silence_means(env: SynthesizedEnvironment) -> None:
    breaching = {
        name.removeprefix(f"tablecast-{env.config.name}-")
        for name, found in alarms(env).items()
        if found["treat_missing_data"] == "breaching"
    }
    for found in alarms(env).values():
        assert found["treat_missing_data"] in {"breaching", "notBreaching"}
    # Where silence means something is gone, silence alarms.
    expected = {
        *(metric_names.job_alarm("job-heartbeat-missing", job) for job in jobs(env)),
        "archiver-heartbeat-missing",
        "kafka-under-replicated-partitions",
        "kafka-under-min-isr-partitions",
        "hdfs-live-datanodes",
        "checkpoint-backup-missing",
    }
    expected |= {
        f"kafka-{kind}-broker-{broker}"
        for broker in range(1, env.config.broker_count + 1)
        for kind in ("disk-used", "cpu", "heap-after-gc")
    }
    assert expected <= breaching
    for node in node_names(env):
        for kind in ("memory-used", "root-disk-used", "data-disk-used"):
            assert f"{node}-{kind}" in breaching


def node_names(env: SynthesizedEnvironment) -> list[str]:
    return ["driver"] + [f"worker-{i}" for i in range(1, env.config.spark_worker_count + 1)]


def test_node_disk_and_memory_alarms_watch_what_the_agent_publishes(
    env: SynthesizedEnvironment,
) -> None:
    config = agent_metrics_config()
    assert config["metrics"]["namespace"] == "Tablecast/Nodes"
    collected = config["metrics"]["metrics_collected"]
    assert collected["mem"]["measurement"] == ["used_percent"]
    assert collected["disk"]["resources"] == ["/", "/data"]
    assert collected["disk"]["drop_device"] is True
    assert config["metrics"]["append_dimensions"] == {"InstanceId": "${aws:InstanceId}"}
    for node in node_names(env):
        memory = alarm(env, f"{node}-memory-used")
        assert (memory["namespace"], memory["metric_name"]) == (
            "Tablecast/Nodes",
            "mem_used_percent",
        )
        assert set(memory["dimensions"]) == {"InstanceId"}
        for label, path, fstype in (("root", "/", "ext4"), ("data", "/data", "xfs")):
            disk = alarm(env, f"{node}-{label}-disk-used")
            assert disk["metric_name"] == "disk_used_percent"
            assert {k: v for k, v in disk["dimensions"].items() if k != "InstanceId"} == {
                "path": path,
                "fstype": fstype,
            }


def agent_metrics_config() -> Document:
    text = (ROOT / "ami" / "files" / "bin" / "node-bootstrap").read_text(encoding="utf-8")
    body = text.split("<<'JSON'\n", 1)[1].split("\nJSON\n", 1)[0]
    config: Document = json.loads(body)
    return config


def test_hdfs_alarms_watch_what_the_driver_publishes(env: SynthesizedEnvironment) -> None:
    health = (ROOT / "ami" / "files" / "bin" / "hdfs-health").read_text(encoding="utf-8")
    backup = (ROOT / "ami" / "files" / "bin" / "hdfs-checkpoint-backup").read_text(encoding="utf-8")
    for name in HDFS_METRICS:
        assert f'"{name}"' in health
    assert f'"{CHECKPOINT_BACKUPS}"' in backup
    assert 'Namespace="Tablecast/Nodes"' in backup
    assert 'NAMESPACE = "Tablecast/Nodes"' in health
    live = alarm(env, "hdfs-live-datanodes")
    assert (live["metric_name"], live["threshold"]) == (
        "HdfsLiveDataNodes",
        env.config.spark_worker_count,
    )
    assert live["dimensions"] == {"Environment": env.config.name}
    for name in ("hdfs-missing-blocks", "hdfs-corrupt-blocks", "hdfs-under-replicated-blocks"):
        assert alarm(env, name)["threshold"] == 0
    backups = alarm(env, "checkpoint-backup-missing")
    assert (backups["metric_name"], backups["period"]) == (CHECKPOINT_BACKUPS, 3 * 3600)


def test_the_edit_logs_checkpoints_and_the_name_directories_alarm(
    env: SynthesizedEnvironment,
) -> None:
    """Thresholds follow the secondary NameNode's settings in the image's hdfs-site.xml."""
    import re

    site = (ROOT / "ami" / "files" / "templates" / "hdfs-site.xml.tmpl").read_text("utf-8")
    props = dict(re.findall(r"<name>([^<]+)</name>\s*<value>([^<]+)</value>", site))
    txns = int(props["dfs.namenode.checkpoint.txns"])
    period_minutes = int(props["dfs.namenode.checkpoint.period"]) // 60
    health = (ROOT / "ami" / "files" / "bin" / "hdfs-health").read_text(encoding="utf-8")
    expected = {
        "hdfs-checkpoint-transactions": ("HdfsTransactionsSinceCheckpoint", 3 * txns),
        "hdfs-checkpoint-age": ("HdfsMinutesSinceCheckpoint", 3 * period_minutes),
        "hdfs-name-dirs-used": ("HdfsNameDirsUsedPercent", 80),
    }
    for name, (metric, threshold) in expected.items():
        found = alarm(env, name)
        assert (found["metric_name"], found["threshold"]) == (metric, threshold), name
        assert found["comparison_operator"] == "GreaterThanThreshold"
        assert found["namespace"] == "Tablecast/Nodes"
        assert found["dimensions"] == {"Environment": env.config.name}
        assert f'"{metric}"' in health, f"hdfs-health does not publish {metric}"
        # Silence is the NameNode's: hdfs-live-datanodes fires on it.
        assert found["treat_missing_data"] == "notBreaching"


def test_alarms_are_built_from_one_table(env: SynthesizedEnvironment) -> None:
    stack = env.stacks.monitoring
    assert len(stack.specs) == len(alarms(env))
    assert {f"tablecast-{env.config.name}-{spec.name}" for spec in stack.specs} == set(alarms(env))


def test_broker_storage_grows_before_the_disk_alarm(env: SynthesizedEnvironment) -> None:
    kafka = env["kafka"]
    (target,) = kafka.resources("aws_appautoscaling_target").values()
    assert target["scalable_dimension"] == "kafka:broker-storage:VolumeSize"
    assert target["resource_id"] == "${aws_msk_cluster.cluster.arn}"
    assert target["max_capacity"] == env.config.broker_volume_ceiling_gib
    assert target["max_capacity"] > env.config.effective_broker_volume_gib
    (policy,) = kafka.resources("aws_appautoscaling_policy").values()
    tracking = policy["target_tracking_scaling_policy_configuration"]
    assert tracking["predefined_metric_specification"]["predefined_metric_type"] == (
        "KafkaBrokerStorageUtilization"
    )
    assert tracking["target_value"] < 85
    assert tracking["disable_scale_in"] is True
    (msk,) = kafka.resources("aws_msk_cluster").values()
    assert (
        "broker_node_group_info[0].storage_info[0].ebs_storage_info[0].volume_size"
        in msk["lifecycle"]["ignore_changes"]
    )


def test_ec2_status_checks_recover_every_node(env: SynthesizedEnvironment) -> None:
    instances = env["spark"].resources("aws_instance")
    system_checks = [
        found
        for found in alarms(env).values()
        if found.get("metric_name") == "StatusCheckFailed_System"
    ]
    assert len(system_checks) == len(instances)
    recover = (
        f"arn:${{data.aws_partition.partition.partition}}:automate:{env.config.region}:ec2:recover"
    )
    watched = set()
    for check in system_checks:
        assert recover in check["alarm_actions"]
        watched.add(env.follow(check["dimensions"]["InstanceId"]))
    assert watched == {f"${{aws_instance.{name}.id}}" for name in instances}


def test_alarm_topic_is_encrypted_and_reaches_the_configured_endpoints(
    env: SynthesizedEnvironment,
) -> None:
    monitoring = env["monitoring"]
    (topic,) = monitoring.resources("aws_sns_topic").values()
    assert topic["kms_master_key_id"].startswith("${aws_kms_key.")
    endpoints = env.config.deployment.alarm_endpoints
    subscribed = sorted(
        (s["protocol"], s["endpoint"])
        for s in monitoring.resources("aws_sns_topic_subscription").values()
        if s["topic_arn"] == TOPIC
    )
    assert subscribed == sorted(
        (e.kind.value, e.address) for e in endpoints if e.kind is not EndpointKind.TOPIC
    )
    existing = [e.address for e in endpoints if e.kind is EndpointKind.TOPIC]
    for alarm in alarms(env).values():
        assert set(existing) <= set(alarm["alarm_actions"])
        assert set(existing) <= set(alarm["ok_actions"])
    if not env.config.throwaway:
        assert endpoints, "a shared environment pages someone"


def test_email_and_https_endpoints_become_subscriptions(tmp_path: Path) -> None:
    settings = dataclasses.replace(
        load_settings(TESTING_SETTINGS)["dev"],
        alarm_endpoints=(
            alarm_endpoint("oncall@tablecast-ops.net"),
            alarm_endpoint("https://events.pagerduty.com/integration/abc/enqueue"),
        ),
    )
    (team,) = synthesize([dev(settings)], tmp_path / "cdktf.out").values()
    subscriptions = team["monitoring"].resources("aws_sns_topic_subscription").values()
    assert sorted((s["protocol"], s["endpoint"]) for s in subscriptions) == [
        ("email", "oncall@tablecast-ops.net"),
        ("https", "https://events.pagerduty.com/integration/abc/enqueue"),
    ]
    for alarm in alarms(team).values():
        assert alarm["alarm_actions"][-1:] == [TOPIC]


def test_dashboard_shows_the_job_brokers_nodes_and_alarms(env: SynthesizedEnvironment) -> None:
    (dashboard,) = env["monitoring"].resources("aws_cloudwatch_dashboard").values()
    assert dashboard["dashboard_name"] == f"tablecast-{env.config.name}"
    body = json.loads(dashboard["dashboard_body"])
    metrics = {
        (line[0], line[1])
        for widget in body["widgets"]
        if widget["type"] == "metric"
        for line in widget["properties"]["metrics"]
    }
    for name in metric_names.ALL:
        assert (metric_names.NAMESPACE, name) in metrics
    served = [
        line[2:-1]
        for widget in body["widgets"]
        if widget["type"] == "metric"
        for line in widget["properties"]["metrics"]
        if line[1] in metric_names.BY_SOURCE
    ]
    # Each job's rows: its metrics by its dimensions.
    assert sorted(served) == sorted(
        [
            *(item for pair in job_dimensions(env.config.name, job).items() for item in pair),
            metric_names.SOURCE_DIMENSION,
            source,
        ]
        for job in jobs(env)
        for name in metric_names.BY_SOURCE
        for source in metric_names.SOURCES
    )
    titles = [widget["properties"]["title"] for widget in body["widgets"]]
    for job in jobs(env):
        title = "Job" if job is None else f"Job {job}"
        assert f"{title}: heartbeat and throughput" in titles
    assert ("AWS/Kafka", "KafkaDataLogsDiskUsed") in metrics
    assert ("AWS/EC2", "StatusCheckFailed") in metrics
    (alarm_widget,) = [widget for widget in body["widgets"] if widget["type"] == "alarm"]
    assert len(alarm_widget["properties"]["alarms"]) == len(alarms(env))


def test_the_archiver_has_a_heartbeat_and_a_lag_alarm_and_a_dashboard_row(
    env: SynthesizedEnvironment,
) -> None:
    heartbeat = alarm(env, "archiver-heartbeat-missing")
    assert (heartbeat["namespace"], heartbeat["metric_name"]) == (
        metric_names.NAMESPACE,
        metric_names.ARCHIVER_HEARTBEAT,
    )
    assert heartbeat["dimensions"] == {metric_names.ENVIRONMENT_DIMENSION: env.config.name}
    assert (heartbeat["comparison_operator"], heartbeat["threshold"]) == ("LessThanThreshold", 1)
    assert heartbeat["treat_missing_data"] == "breaching"
    # The archiver publishes every minute (app/ops/archiver.py): five minutes of silence.
    assert heartbeat["period"] == 300 and heartbeat["evaluation_periods"] == 1
    behind = alarm(env, "archiver-records-behind")
    assert behind["metric_name"] == metric_names.ARCHIVER_RECORDS_BEHIND
    assert behind["threshold"] == env.config.records_behind_alarm_threshold
    assert behind["treat_missing_data"] == "notBreaching"  # the heartbeat covers silence
    (dashboard,) = env["monitoring"].resources("aws_cloudwatch_dashboard").values()
    lines = [
        line
        for widget in json.loads(dashboard["dashboard_body"])["widgets"]
        if widget["type"] == "metric"
        for line in widget["properties"]["metrics"]
    ]
    assert {line[1] for line in lines if line[0] == metric_names.NAMESPACE} >= set(
        metric_names.ARCHIVER
    )


def test_failed_snapshots_and_failed_alarm_deliveries_alarm(env: SynthesizedEnvironment) -> None:
    snapshots = alarm(env, "hdfs-snapshots-failed")
    assert (snapshots["namespace"], snapshots["metric_name"]) == (
        "AWS/EBS",
        "SnapshotsCreateFailed",
    )
    (policy,) = env["spark"].resources("aws_dlm_lifecycle_policy")
    assert env.follow(snapshots["dimensions"]["DLMPolicyId"]) == (
        f"${{aws_dlm_lifecycle_policy.{policy}.id}}"
    )
    deliveries = alarm(env, "alarm-deliveries-failed")
    assert (deliveries["namespace"], deliveries["metric_name"]) == (
        "AWS/SNS",
        "NumberOfNotificationsFailed",
    )
    assert deliveries["dimensions"] == {"TopicName": f"tablecast-{env.config.name}-alarms"}
    for found in (snapshots, deliveries):
        assert (found["comparison_operator"], found["threshold"]) == ("GreaterThanThreshold", 0)
        assert found["treat_missing_data"] == "notBreaching"


def test_offline_partitions_breach_on_silence_only_where_a_broker_is_the_controller(
    env: SynthesizedEnvironment,
) -> None:
    # KRaft (every environment here): MSK's controllers may report no OfflinePartitionsCount.
    assert env.config.kafka_metadata_mode == "kraft"
    assert alarm(env, "kafka-offline-partitions")["treat_missing_data"] == "notBreaching"


def test_a_zookeeper_cluster_breaches_on_silent_offline_partitions(tmp_path: Path) -> None:
    config = dataclasses.replace(
        dev(load_settings(TESTING_SETTINGS)["dev"]), kafka_metadata_mode="zookeeper"
    )
    (zookeeper,) = synthesize([config], tmp_path / "cdktf.out").values()
    assert alarm(zookeeper, "kafka-offline-partitions")["treat_missing_data"] == "breaching"


def test_each_declared_job_has_alarms_and_dashboard_rows_of_its_own(
    synthesized: dict[str, SynthesizedEnvironment],
) -> None:
    """Staging's testing settings declare two jobs (plant, lab): each has the five job
    alarms on its own ``Job`` dimension, and the environment has no job alarm of its own."""
    env = synthesized["staging"]
    assert [job.name for job in env.config.jobs] == ["plant", "lab"]
    found = alarms(env)
    prefix = "tablecast-staging-"
    job_alarm_names = {name.removeprefix(prefix) for name in found if "-job-" in name}
    assert job_alarm_names == {
        f"job-{job}-{alarm}"
        for job in ("plant", "lab")
        for alarm in (
            "heartbeat-missing",
            "integrity-violations",
            "records-behind",
            "stable-offset-stalled",
            "batch-duration",
        )
    }
    for job in ("plant", "lab"):
        for name in job_alarm_names:
            if name.startswith(f"job-{job}-"):
                assert found[prefix + name]["dimensions"] == {
                    metric_names.ENVIRONMENT_DIMENSION: "staging",
                    metric_names.JOB_DIMENSION: job,
                }, name
        heartbeat = found[f"{prefix}job-{job}-heartbeat-missing"]
        assert heartbeat["alarm_description"].startswith(f"Job {job} published no heartbeat")
        # Armed by the deploy like the one job's: silent until the job first runs.
        assert heartbeat["actions_enabled"] is False
    (dashboard,) = env["monitoring"].resources("aws_cloudwatch_dashboard").values()
    titles = [w["properties"]["title"] for w in json.loads(dashboard["dashboard_body"])["widgets"]]
    assert len(titles) == len(set(titles))
    assert not any(title.startswith("Job:") for title in titles)
    assert (
        sum(title.startswith("Job plant: ") for title in titles)
        == sum(title.startswith("Job lab: ") for title in titles)
        == 8
    )


def test_a_job_alarm_is_named_for_its_job_and_nothing_else_is() -> None:
    assert metric_names.job_alarm("job-records-behind", None) == "job-records-behind"
    assert metric_names.job_alarm("job-records-behind", "lab") == "job-lab-records-behind"
    assert metric_names.armed_by_deploy("lab") == (
        "job-lab-heartbeat-missing",
        *(name for name in metric_names.ARMED_BY_DEPLOY if not name.startswith("job-")),
    )
    assert metric_names.armed_by_deploy(None) == metric_names.ARMED_BY_DEPLOY
    with pytest.raises(ValueError, match="'archiver-heartbeat-missing' is not a job alarm"):
        metric_names.job_alarm("archiver-heartbeat-missing", "lab")

"""Alarms that reach the topic, on metrics someone publishes; EC2 recovery; the dashboard."""

import dataclasses
import json
from pathlib import Path

from app import metric_names
from infra.config import EndpointKind
from infra.config.environments import dev
from infra.config.settings import TESTING_SETTINGS, alarm_endpoint, load_settings
from infra.stacks.monitoring import heartbeat_window_seconds
from infra.testing import Document, SynthesizedEnvironment, synthesize

TOPIC = "${aws_sns_topic.alarms.arn}"


def alarms(env: SynthesizedEnvironment) -> dict[str, Document]:
    return {
        alarm["alarm_name"]: alarm
        for alarm in env["monitoring"].resources("aws_cloudwatch_metric_alarm").values()
    }


def alarm(env: SynthesizedEnvironment, name: str) -> Document:
    return alarms(env)[f"tablecast-{env.config.name}-{name}"]


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
    for stack, alarm in found:
        assert stack == f"tablecast-{env.config.name}-monitoring"
        assert alarm["actions_enabled"] is True
        assert TOPIC in alarm["alarm_actions"], alarm["alarm_name"]
        assert TOPIC in alarm["ok_actions"], alarm["alarm_name"]


def test_job_alarms_watch_only_metrics_the_job_publishes(env: SynthesizedEnvironment) -> None:
    job_alarms = 0
    for _, alarm in env.all_resources("aws_cloudwatch_metric_alarm"):
        for namespace, metric in watched_metrics(alarm):
            if namespace == metric_names.NAMESPACE:
                job_alarms += 1
                assert metric in metric_names.ALL, alarm["alarm_name"]
                assert alarm["dimensions"] == {metric_names.ENVIRONMENT_DIMENSION: env.config.name}
    assert job_alarms >= 4


def test_heartbeat_missing_is_breaching(env: SynthesizedEnvironment) -> None:
    heartbeat = alarm(env, "job-heartbeat-missing")
    assert heartbeat["metric_name"] == metric_names.HEARTBEAT
    assert heartbeat["treat_missing_data"] == "breaching"
    assert heartbeat["comparison_operator"] == "LessThanThreshold"
    assert heartbeat["threshold"] == 1
    assert heartbeat["period"] == heartbeat_window_seconds(env.config.trigger_seconds)
    assert heartbeat["period"] % 60 == 0
    assert heartbeat["period"] >= 3 * env.config.trigger_seconds


def test_integrity_violations_above_zero(env: SynthesizedEnvironment) -> None:
    violations = alarm(env, "job-integrity-violations")
    assert violations["metric_name"] == metric_names.INTEGRITY_VIOLATIONS
    assert (violations["comparison_operator"], violations["threshold"]) == (
        "GreaterThanThreshold",
        0,
    )


def test_records_behind_over_the_configured_threshold(env: SynthesizedEnvironment) -> None:
    behind = alarm(env, "job-records-behind")
    assert behind["metric_name"] == metric_names.RECORDS_BEHIND
    assert behind["threshold"] == env.config.records_behind_alarm_threshold
    assert behind["comparison_operator"] == "GreaterThanThreshold"


def test_batch_duration_over_the_trigger_interval(env: SynthesizedEnvironment) -> None:
    duration = alarm(env, "job-batch-duration")
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
    replicated = alarm(env, "kafka-under-replicated-partitions")
    assert len(watched_metrics(replicated)) == brokers
    assert {metric for _, metric in watched_metrics(replicated)} == {"UnderReplicatedPartitions"}
    offline = alarm(env, "kafka-offline-partitions")
    assert (offline["metric_name"], offline["threshold"]) == ("OfflinePartitionsCount", 0)
    controller = alarm(env, "kafka-active-controller-count")
    assert watched_metrics(controller) == [("AWS/Kafka", "ActiveControllerCount")]
    expressions = [
        query["expression"] for query in controller["metric_query"] if "expression" in query
    ]
    assert expressions == ["ABS(controllers - 1)"]
    for name, found in alarms(env).items():
        if "kafka" in name:
            assert all(namespace == "AWS/Kafka" for namespace, _ in watched_metrics(found))


def test_ec2_status_checks_recover_every_node(env: SynthesizedEnvironment) -> None:
    instances = env["spark"].resources("aws_instance")
    system_checks = [
        found
        for found in alarms(env).values()
        if found.get("metric_name") == "StatusCheckFailed_System"
    ]
    assert len(system_checks) == len(instances)
    recover = f"arn:aws:automate:{env.config.region}:ec2:recover"
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
    assert ("AWS/Kafka", "KafkaDataLogsDiskUsed") in metrics
    assert ("AWS/EC2", "StatusCheckFailed") in metrics
    (alarm_widget,) = [widget for widget in body["widgets"] if widget["type"] == "alarm"]
    assert len(alarm_widget["properties"]["alarms"]) == len(alarms(env))

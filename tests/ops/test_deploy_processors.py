"""Deploy ships each declared job's processor: the user's wheel beside ours, its SHA-256,
class and integrity class in the job's SSM parameters (what run-job reads and checks).

The settings are read by infra's own reading (``scripts/tablecast_ops.py``'s
declarations), the wheel is the example processor built by pip, AWS is moto.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from app import handoff
from app.ops.aws import AwsClients
from app.ops.cli import main
from app.ops.wheel import Wheel
from infra.config.pipeline_listing import declarations
from tests.ops.conftest import REGION, Environment
from tests.ops.deploy_harness import commands, declare_jobs, deploy_polled, job_version
from tests.ops.standin import DriverStandIn
from tests.processor_wheel import PROCESSOR, example_wheel

# The example processor's own input schema: a job naming both reads with the one schema.
SCHEMA = (
    '[key]\ncolumns = ["meter"]\n\n[columns]\nmeter = "string"\nkwh = "float64"\n'
    'read_at = "timestamp"\n'
)
HEAD = (
    '[dev]\naccount_id = "111122223333"\nspark_image_id = "ami-0123456789abcdef0"\n'
    'alarm_endpoints = ["oncall@tablecast-ops.net"]\n'
)
POLL = ["--poll", "50ms", "--heartbeat-timeout", "20s"]


@pytest.fixture(scope="module")
def user_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return example_wheel(tmp_path_factory)


@pytest.fixture(autouse=True)
def _no_operator_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TABLECAST_SETTINGS", raising=False)


def deploy_argv(job_wheel: Wheel, *more: str) -> list[str]:
    """``tablecast-ops deploy`` of ``job_wheel`` to dev."""
    return ["--region", REGION, "deploy", "-e", "dev", "--wheel", str(job_wheel.path), *more]


def settings(tmp_path: Path, jobs: dict[str, dict[str, str]]) -> Path:
    """The dev environment's settings declaring ``jobs`` (a schema beside them)."""
    (tmp_path / "s.toml").write_text(SCHEMA, encoding="utf-8")
    lines = [HEAD]
    for name, table in jobs.items():
        lines.append(f"[dev.jobs.{name}]")
        more = {"topic_pattern": f"^sensor-{name}-.+", "schema": "s.toml", "cores": 1, **table}
        lines += [f"{key} = {json.dumps(value)}" for key, value in more.items()]
    path = tmp_path / "settings.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def recorded(aws: AwsClients, env: Environment, job: str) -> dict[str, str]:
    """The job's processor parameters in SSM."""
    return {
        name: aws.ssm.get_parameter(Name=handoff.job_parameter_name(env.name, job, name))[
            "Parameter"
        ]["Value"]
        for name in handoff.JOB_PROCESSOR
    }


def test_a_deploy_ships_a_jobs_processor_wheel_beside_ours_and_records_it(
    aws: AwsClients,
    environment: Environment,
    job_wheel: Wheel,
    user_wheel: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    declare_jobs(aws, environment, "plant", "lab")
    shutil.copy(user_wheel, tmp_path)
    path = settings(
        tmp_path,
        {
            "lab": {
                "processor": PROCESSOR,
                "processor_wheel": user_wheel.name,
                "integrity": "ordered",
            },
            "plant": {"integrity": "resync"},
        },
    )
    argv = deploy_argv(job_wheel, *POLL)
    with DriverStandIn(REGION, environment.name, environment.driver, jobs=("plant", "lab")):
        assert main([*argv, "--settings", str(path)], declarations=declarations()) == 0
        digest = hashlib.sha256(user_wheel.read_bytes()).hexdigest()
        key = f"processors/{digest}/{user_wheel.name}"
        first = aws.s3.head_object(Bucket=environment.bucket, Key=f"artifacts/{key}")
        # Again, the settings named by $TABLECAST_SETTINGS: the same bytes are not uploaded
        # twice (the deploy takes seconds: a new upload would be stamped later).
        monkeypatch.setenv("TABLECAST_SETTINGS", str(path))
        assert main(argv, declarations=declarations()) == 0
    again = aws.s3.head_object(Bucket=environment.bucket, Key=f"artifacts/{key}")
    assert again["LastModified"] == first["LastModified"]
    stored = aws.s3.get_object(Bucket=environment.bucket, Key=f"artifacts/{key}")
    # What run-job fetches and checks (tests/ami/test_ami_run_job_processor.py).
    assert stored["Body"].read() == user_wheel.read_bytes()
    assert stored["Metadata"] == {"sha256": digest}
    assert recorded(aws, environment, "lab") == {
        handoff.PROCESSOR: PROCESSOR,
        handoff.PROCESSOR_WHEEL: key,
        handoff.PROCESSOR_WHEEL_SHA256: digest,
        handoff.INTEGRITY: "ordered",
    }
    assert recorded(aws, environment, "plant") == {
        handoff.PROCESSOR: "none",
        handoff.PROCESSOR_WHEEL: "none",
        handoff.PROCESSOR_WHEEL_SHA256: "none",
        handoff.INTEGRITY: "resync",
    }
    out = capsys.readouterr().out
    uri = f"s3://{environment.bucket}/artifacts/{key}"
    assert out.count(f"job lab: processor {PROCESSOR} from {uri}, integrity ordered\n") == 2
    assert "job plant: the built-in processor, integrity resync" in out
    assert job_version(aws, environment) == job_wheel.version


@pytest.mark.parametrize(
    ("jobs", "complaint"),
    [
        (
            {"meters": {}},
            "the deployment settings declare jobs meters for dev, SSM's hand-off lab: apply "
            "the infrastructure of these settings first",
        ),
        (
            {"lab": {"processor": "meter_energy.gone:HourlyEnergy", "processor_wheel": "{w}"}},
            "jobs.lab.processor_wheel (in {path}): {w} holds no module meter_energy.gone",
        ),
        (
            {"lab": {"processor": PROCESSOR}},
            "jobs.lab.processor_wheel (in {path}): is missing",
        ),
    ],
)
def test_settings_unlike_ssms_jobs_or_a_bad_processor_are_refused_before_anything_changes(
    aws: AwsClients,
    environment: Environment,
    job_wheel: Wheel,
    user_wheel: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    jobs: dict[str, dict[str, str]],
    complaint: str,
) -> None:
    declare_jobs(aws, environment, "lab")
    shutil.copy(user_wheel, tmp_path)
    given = {
        job: {key: value.format(w=user_wheel.name) for key, value in table.items()}
        for job, table in jobs.items()
    }
    path = settings(tmp_path, given)
    argv = deploy_argv(job_wheel)
    assert main([*argv, "--settings", str(path)], declarations=declarations()) == 64
    (error,) = capsys.readouterr().err.strip().splitlines()
    assert complaint.format(path=path, w=user_wheel.name) in error
    assert aws.s3.list_objects_v2(Bucket=environment.bucket).get("KeyCount") == 0
    assert job_version(aws, environment) == "none" and commands(aws, environment) == []


def test_without_settings_a_deploy_leaves_the_recorded_processors_and_says_so(
    aws: AwsClients, environment: Environment, job_wheel: Wheel
) -> None:
    declare_jobs(aws, environment, "lab")
    lab = handoff.job_parameter_name(environment.name, "lab", handoff.PROCESSOR)
    aws.ssm.put_parameter(Name=lab, Value=PROCESSOR, Type="String")
    lines: list[str] = []
    with DriverStandIn(REGION, environment.name, environment.driver, jobs=("lab",)):
        deploy_polled(
            aws,
            environment,
            wheel=job_wheel,
            progress=lines.append,
        )
    assert "jobs' processors and integrity: as recorded (no deployment settings named)" in lines
    assert aws.ssm.get_parameter(Name=lab)["Parameter"]["Value"] == PROCESSOR


def test_deploy_settings_without_infras_reading_are_refused(
    aws: AwsClients,
    environment: Environment,
    job_wheel: Wheel,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On a node (``python -m app.ops``, no ``infra/``), --settings cannot be read."""
    argv = deploy_argv(job_wheel)
    assert main([*argv, "--settings", str(tmp_path / "s.toml")]) == 64
    assert "deploy --settings reads infra's configuration: run it from a checkout" in (
        capsys.readouterr().err
    )


def test_a_job_the_settings_give_no_schema_reads_with_its_processors_own_input(
    aws: AwsClients,
    environment: Environment,
    job_wheel: Wheel,
    user_wheel: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    declare_jobs(aws, environment, "lab")
    shutil.copy(user_wheel, tmp_path)
    lab = {"processor": PROCESSOR, "processor_wheel": user_wheel.name}
    path = settings(tmp_path, {"lab": lab})
    text = path.read_text(encoding="utf-8").replace('schema = "s.toml"\n', "")
    path.write_text(text, encoding="utf-8")
    schema = handoff.job_parameter_name(environment.name, "lab", handoff.SCHEMA_SHA256)
    aws.ssm.put_parameter(Name=schema, Value=handoff.NO_SCHEMA, Type="String")
    argv = ["--region", REGION, "deploy", "-e", "dev", "--wheel", str(job_wheel.path), *POLL]
    argv += ["--settings", str(path)]
    # A schema for it contradicts the settings: refused before anything changes.
    schema_file = f"lab={tmp_path / 's.toml'}"
    assert main([*argv, "--schema", schema_file], declarations=declarations()) == 64
    (error,) = capsys.readouterr().err.strip().splitlines()
    assert error.endswith(
        f"the deployment settings give job lab no schema, so its processor {PROCESSOR} reads "
        "its messages with its own input schema: leave --schema out, or name the schema in "
        "the settings"
    )
    assert aws.s3.list_objects_v2(Bucket=environment.bucket).get("KeyCount") == 0
    with DriverStandIn(REGION, environment.name, environment.driver, jobs=("lab",)):
        assert main(argv, declarations=declarations()) == 0
    # run-job runs it without --schema (tests/ami/test_ami_run_job_processor.py).
    assert aws.ssm.get_parameter(Name=schema)["Parameter"]["Value"] == "processor-input"
    assert recorded(aws, environment, "lab")[handoff.PROCESSOR] == PROCESSOR
    # The settings name a schema again: until one is deployed, the job does not start.
    path = settings(tmp_path, {"lab": lab})
    with DriverStandIn(REGION, environment.name, environment.driver, jobs=("lab",)):
        assert main(argv, declarations=declarations()) == 0
    assert aws.ssm.get_parameter(Name=schema)["Parameter"]["Value"] == "none"
    assert (
        "job lab: the settings name a schema, none is deployed: deploy it with --schema "
        "lab=FILE (the job does not start until then)"
    ) in capsys.readouterr().out

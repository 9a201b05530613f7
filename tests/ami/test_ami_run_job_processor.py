"""run-job and a declared job's processor, against moto's SSM and S3: the user's wheel
installed only if its SHA-256 is the recorded one, into the job's own folder, shipped to
the executors beside ours, and named to ``tablecast run`` with the job's integrity class.

The wheel is the example processor built by pip, installed by a real pip (the venv's
python stand-in passes ``pip install --target`` through); spark-submit records its
arguments and the PYTHONPATH it was given.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from app import handoff
from app.cli import build_parser
from tests.ami.run_job_harness import (
    BUCKET,
    REGION,
    VERSION,
    declared,
    job_options,
    prepare,
    run_job,
    sha256,
)
from tests.processor_wheel import PROCESSOR, example_wheel


@pytest.fixture(scope="module")
def user_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return example_wheel(tmp_path_factory)


def start(
    aws: dict[str, str],
    tmp_path: Path,
    parameters: dict[str, str],
    *,
    stored: bytes | None = None,
    key: str | None = None,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """run-job lab with ``parameters`` as lab's processor parameters and ``stored`` at
    ``artifacts/<key>``; the run and the file spark-submit writes its arguments to."""
    env = prepare(aws, tmp_path, recorded_sha256=None)
    declared(aws, tmp_path)
    session = boto3.session.Session(
        region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    if stored is not None and key is not None:
        s3 = session.client("s3", endpoint_url=aws["AWS_ENDPOINT_URL"])
        s3.put_object(Bucket=BUCKET, Key=f"artifacts/{key}", Body=stored)
    ssm = session.client("ssm", endpoint_url=aws["AWS_ENDPOINT_URL"])
    for name, value in parameters.items():
        ssm.put_parameter(
            Name=handoff.job_parameter_name("t", "lab", name),
            Value=value,
            Type="String",
            Overwrite=True,
        )
    # pip installs ours as a stand-in (the harness's empty zip), the user's for real.
    python = Path(env["TABLECAST_VENV"]) / "bin" / "python"
    python.write_text(
        '#!/bin/sh\nif [ "$1 $2" = "-m pip" ]; then\n'
        f'  case "$*" in *--target*) exec {sys.executable} "$@" ;; esac\n  exit 0\nfi\n'
        f'if [ "$1" = "-c" ]; then echo {VERSION}; exit 0; fi\nexec {sys.executable} "$@"\n'
    )
    recorded = tmp_path / "spark-submit.args"
    spark_submit = Path(env["SPARK_HOME"]) / "bin" / "spark-submit"
    spark_submit.parent.mkdir(parents=True)
    spark_submit.write_text(
        f'#!/bin/sh\nprintf \'%s\\0\' "PYTHONPATH=$PYTHONPATH" "$@" > {recorded}\n'
    )
    spark_submit.chmod(0o755)
    env.pop("TABLECAST_PRELOAD_DIR", None)
    env.pop("PYTHONPATH", None)
    return run_job(env, "lab"), recorded


def shipped(user_wheel: Path, integrity: str = "ordered") -> tuple[dict[str, str], str]:
    """Lab's parameters as the deploy writes them for ``user_wheel``, and its key."""
    digest = sha256(user_wheel.read_bytes())
    key = f"processors/{digest}/{user_wheel.name}"
    return {
        handoff.PROCESSOR: PROCESSOR,
        handoff.PROCESSOR_WHEEL: key,
        handoff.PROCESSOR_WHEEL_SHA256: digest,
        handoff.INTEGRITY: integrity,
    }, key


def test_a_jobs_processor_is_installed_in_its_own_folder_shipped_and_named_to_run(
    aws: dict[str, str], tmp_path: Path, user_wheel: Path
) -> None:
    parameters, key = shipped(user_wheel)
    done, recorded = start(aws, tmp_path, parameters, stored=user_wheel.read_bytes(), key=key)
    assert done.returncode == 0, done.stderr
    pythonpath, *argv = recorded.read_bytes().decode().split("\0")[:-1]
    wheels = tmp_path / "wheels"
    site = wheels / "jobs" / "lab" / "python"
    # Installed by pip, without an index or dependencies, into the job's own folder.
    assert (site / "meter_energy" / "energy.py").is_file()
    assert list(site.glob("meter_energy-1.0.0.dist-info/METADATA"))
    assert pythonpath == f"PYTHONPATH={site}"
    imported = subprocess.run(
        [sys.executable, "-c", "import meter_energy.energy as m; print(m.__file__)"],
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert imported.stdout.strip() == str(site / "meter_energy" / "energy.py")
    # Ours and the user's (the very bytes checked) go to the executors.
    ours, theirs = argv[argv.index("--py-files") + 1].split(",")
    assert ours == str(wheels / f"tablecast-{VERSION}.zip")
    assert Path(theirs) == wheels / key.replace(".whl", ".zip")
    assert Path(theirs).read_bytes() == user_wheel.read_bytes()
    options = job_options(argv)
    assert ("--processor", PROCESSOR) in options
    assert ("--integrity", "ordered") in options
    args = build_parser().parse_args(argv[argv.index("run") :])
    assert (args.processor, args.integrity, args.job) == (PROCESSOR, "ordered", "lab")
    assert f"job lab: processor {PROCESSOR} ({user_wheel.name}, SHA-256" in done.stderr


def test_a_processor_wheel_whose_hash_is_not_the_recorded_one_is_not_installed(
    aws: dict[str, str], tmp_path: Path, user_wheel: Path
) -> None:
    parameters, key = shipped(user_wheel)
    tampered = user_wheel.read_bytes() + b"\0"
    done, recorded = start(aws, tmp_path, parameters, stored=tampered, key=key)
    assert done.returncode == 1
    expected = parameters[handoff.PROCESSOR_WHEEL_SHA256]
    assert done.stderr.strip().splitlines()[-1] == (
        f"run-job: ERROR: job lab: {key} has SHA-256 {sha256(tampered)}; processor-wheel-sha256 "
        f"records {expected}: not installing processor {PROCESSOR} (ship it again with "
        "tablecast-ops deploy)"
    )
    wheels = tmp_path / "wheels"
    assert not (wheels / "jobs").exists(), "nothing installed"
    assert not list((wheels / "processors").rglob("*.whl*")), "the refused wheel is not kept"
    assert not recorded.exists(), "spark-submit never ran"


def test_a_processor_without_a_deployed_wheel_does_not_run(
    aws: dict[str, str], tmp_path: Path, user_wheel: Path
) -> None:
    """What synth writes before the first deploy ships the wheel."""
    parameters = {
        handoff.PROCESSOR: PROCESSOR,
        handoff.PROCESSOR_WHEEL: "none",
        handoff.PROCESSOR_WHEEL_SHA256: "none",
        handoff.INTEGRITY: "strict",
    }
    done, recorded = start(aws, tmp_path, parameters)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"run-job: ERROR: job lab: processor {PROCESSOR} has no deployed wheel (processor-wheel "
        "'none', processor-wheel-sha256 'none'): ship it with tablecast-ops deploy"
    )
    assert not recorded.exists()


@pytest.mark.parametrize(
    ("parameters", "integrity"),
    [
        (
            {
                handoff.PROCESSOR: "none",
                handoff.PROCESSOR_WHEEL: "none",
                handoff.PROCESSOR_WHEEL_SHA256: "none",
                handoff.INTEGRITY: "strict",
            },
            ["strict"],
        ),
        ({}, []),  # a hand-off without the processor's parameters
    ],
)
def test_a_job_without_a_processor_runs_the_built_in_as_before(
    aws: dict[str, str], tmp_path: Path, parameters: dict[str, str], integrity: list[str]
) -> None:
    done, recorded = start(aws, tmp_path, parameters)
    assert done.returncode == 0, done.stderr
    pythonpath, *argv = recorded.read_bytes().decode().split("\0")[:-1]
    assert pythonpath == "PYTHONPATH="
    wheels = tmp_path / "wheels"
    assert argv[argv.index("--py-files") + 1] == str(wheels / f"tablecast-{VERSION}.zip")
    run = argv[argv.index("run") :]
    assert "--processor" not in run
    assert [run[i + 1] for i, word in enumerate(run) if word == "--integrity"] == integrity
    assert not (wheels / "jobs").exists()


def test_a_job_without_a_schema_runs_its_processor_without_schema(
    aws: dict[str, str], tmp_path: Path, user_wheel: Path
) -> None:
    """schema-sha256 processor-input (the settings name no schema): no --schema, no download."""
    parameters, key = shipped(user_wheel)
    parameters[handoff.SCHEMA_SHA256] = handoff.PROCESSOR_INPUT
    done, recorded = start(aws, tmp_path, parameters, stored=user_wheel.read_bytes(), key=key)
    assert done.returncode == 0, done.stderr
    _, *argv = recorded.read_bytes().decode().split("\0")[:-1]
    args = build_parser().parse_args(argv[argv.index("run") :])
    assert (args.schema, args.processor, args.job) == (None, PROCESSOR, "lab")
    assert not (tmp_path / "wheels" / "schemas").exists()
    assert "job lab: no table schema, its processor's own input schema" in done.stderr


def test_processor_input_without_a_processor_does_not_run(
    aws: dict[str, str], tmp_path: Path
) -> None:
    parameters = {handoff.SCHEMA_SHA256: handoff.PROCESSOR_INPUT, handoff.PROCESSOR: "none"}
    done, recorded = start(aws, tmp_path, parameters)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "run-job: ERROR: job lab: schema-sha256 is processor-input, but the job has no "
        "processor whose input schema could read its messages: deploy its table schema "
        "(tablecast-ops deploy --schema lab=FILE)"
    )
    assert not recorded.exists()

"""The hand-off: every name in app.handoff in SSM under /tablecast/<env>/ and as an output."""

import shutil
from pathlib import Path

import pytest

from app import handoff, metric_names
from infra.config.environments import staging
from infra.config.settings import TESTING_SETTINGS, load_settings
from infra.testing import SynthesizedEnvironment, synthesize
from tests.infra.synthesized_documents import parameters
from tests.processor_wheel import PROCESSOR, example_wheel


def value(env: SynthesizedEnvironment, name: str) -> str:
    return str(parameters(env)[handoff.parameter_name(env.config.name, name)]["value"])


def test_every_handoff_name_is_a_parameter(env: SynthesizedEnvironment) -> None:
    # The archive's lock, where there is one (production).
    locked = (handoff.ARCHIVE_LOCK_DAYS,) if env.config.archive_locked else ()
    # The declared jobs' names, where the settings declare jobs (staging's testing settings).
    jobs = (handoff.JOBS,) if env.config.jobs else ()
    expected = {
        handoff.parameter_name(env.config.name, name) for name in (*handoff.ALL, *locked, *jobs)
    }
    expected |= {
        handoff.job_parameter_name(env.config.name, job.name, name)
        for job in env.config.jobs
        for name in (
            *handoff.JOB_ALL,
            *handoff.JOB_PROCESSOR,
            *((handoff.CORES,) if job.cores else ()),
        )
    }
    assert set(parameters(env)) == expected
    for parameter in parameters(env).values():
        assert parameter["type"] == "String"
        assert parameter["name"].startswith(f"/tablecast/{env.config.name}/")


def test_every_handoff_name_is_an_output(env: SynthesizedEnvironment) -> None:
    outputs = env["handoff"].outputs()
    for name in handoff.ALL:
        output = outputs[name.replace("-", "_")]
        assert output["value"].startswith("${nonsensitive(aws_ssm_parameter.")
        assert output["description"]


def test_job_version_starts_as_none_and_belongs_to_the_deploy_tool(
    env: SynthesizedEnvironment,
) -> None:
    owned = [
        parameters(env)[handoff.parameter_name(env.config.name, name)]
        for name in (handoff.JOB_VERSION, handoff.JOB_WHEEL_SHA256)
    ] + [
        parameters(env)[handoff.job_parameter_name(env.config.name, job.name, name)]
        for job in env.config.jobs
        for name in (handoff.SCHEMA_SHA256, *handoff.JOB_PROCESSOR)
    ]
    for parameter in owned:
        # A job's integrity starts as its settings' (testing.toml's jobs: the default).
        start = "strict" if parameter["name"].endswith("/integrity") else "none"
        assert parameter["value"] == start
        assert parameter["lifecycle"] == {"ignore_changes": ["value"]}
    others = [p for p in parameters(env).values() if all(p is not o for o in owned)]
    assert all("lifecycle" not in other for other in others)


def test_values(env: SynthesizedEnvironment) -> None:
    config = env.config
    (driver,) = [
        name
        for name, instance in env["spark"].resources("aws_instance").items()
        if instance.get("private_ip") == config.subnets.driver_private_ip
    ]
    driver_ip = f"${{aws_instance.{driver}.private_ip}}"
    assert env.follow(value(env, handoff.DRIVER_ADDRESS)) == driver_ip
    assert env.follow(value(env, handoff.CHECKPOINT_URI)) == (
        f"hdfs://{driver_ip}:8020/tablecast/checkpoints/tablecast"
    )
    assert env.follow(value(env, handoff.BOOTSTRAP_BROKERS_IAM)) == (
        "${aws_msk_cluster.cluster.bootstrap_brokers_sasl_iam}"
    )
    bucket = value(env, handoff.BUCKET)
    assert env.follow(bucket).startswith("${aws_s3_bucket.")
    assert env.follow(bucket).endswith(".bucket}")
    for name, prefix in [
        (handoff.OUTPUT_URI, "output"),
        (handoff.ARCHIVE_URI, "archive"),
        (handoff.ARTIFACTS_URI, "artifacts"),
        (handoff.CHECKPOINT_BACKUP_URI, "checkpoint-backups"),
    ]:
        assert value(env, name) == f"s3://{bucket}/{prefix}"
    assert value(env, handoff.TOPIC_PATTERN) == config.topic_pattern
    assert value(env, handoff.TRIGGER) == config.trigger_interval
    assert value(env, handoff.METRIC_NAMESPACE) == metric_names.NAMESPACE
    assert value(env, handoff.RETENTION_HOURS) == str(config.retention_hours)
    assert value(env, handoff.REPLICATION_FACTOR) == str(config.replication_factor)
    assert value(env, handoff.REGION) == config.region


def test_stack_names_contain_the_environment(env: SynthesizedEnvironment) -> None:
    names = {stack.name for stack in env.synthesized.values()}
    assert names == {
        f"tablecast-{env.config.name}-{component}"
        for component in ("network", "storage", "kafka", "spark", "monitoring", "handoff")
    }
    # Cross-stack reads stay inside the environment.
    for stack in env.synthesized.values():
        for reference in stack.data_sources("terraform_remote_state"):
            assert reference.startswith(f"cross-stack-reference-input-tablecast-{env.config.name}-")


def test_each_declared_job_has_its_own_topics_output_checkpoint_and_table(
    env: SynthesizedEnvironment,
) -> None:
    config = env.config
    if not config.jobs:
        assert handoff.parameter_name(config.name, handoff.JOBS) not in parameters(env)
        return
    assert value(env, handoff.JOBS) == ",".join(job.name for job in config.jobs)
    bucket = value(env, handoff.BUCKET)
    driver = env.follow(value(env, handoff.DRIVER_ADDRESS))
    outputs = env["handoff"].outputs()
    for job in config.jobs:

        def job_value(name: str, job_name: str = job.name) -> str:
            path = handoff.job_parameter_name(config.name, job_name, name)
            return str(parameters(env)[path]["value"])

        assert job_value(handoff.TOPIC_PATTERN) == job.topic_pattern
        assert job_value(handoff.OUTPUT_URI) == f"s3://{bucket}/output/{job.output_prefix}"
        assert env.follow(job_value(handoff.CHECKPOINT_URI)) == (
            f"hdfs://{driver}:8020/tablecast/checkpoints/jobs/{job.name}"
        )
        assert job_value(handoff.GLUE_TABLE) == job.glue_table
        assert job_value(handoff.SCHEMA_SHA256) == "none"
        assert job_value(handoff.CORES) == str(job.cores)
        for name in handoff.JOB_ALL:
            output = outputs[f"job_{job.name}_{name}".replace("-", "_")]
            assert output["value"].startswith("${nonsensitive(aws_ssm_parameter.")
    # Every job its own checkpoint and output, none inside another's.
    checkpoints = {
        parameters(env)[handoff.job_parameter_name(config.name, j.name, handoff.CHECKPOINT_URI)][
            "value"
        ]
        for j in config.jobs
    }
    assert len(checkpoints) == len(config.jobs)


def test_synth_writes_each_jobs_processor_and_integrity_for_the_deploy_to_own(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """staging's jobs, lab's with a processor in its wheel under ``ordered``: what run-job
    reads starts as the settings say, the wheel as none until the deploy ships it."""
    wheel = tmp_path / "dist" / example_wheel(tmp_path_factory).name
    wheel.parent.mkdir()
    shutil.copy(example_wheel(tmp_path_factory), wheel)
    text = TESTING_SETTINGS.read_text(encoding="utf-8").replace(
        'glue_table = "lab_meters"\n',
        f'glue_table = "lab_meters"\nprocessor = "{PROCESSOR}"\n'
        f'processor_wheel = "{wheel}"\nintegrity = "ordered"\n',
    )
    # The processor declares its input: lab names no schema of its own.
    text = text.replace('schema = "schemas/lab.toml"\n', "")
    assert PROCESSOR in text and "lab.toml" not in text
    shutil.copytree(TESTING_SETTINGS.parent / "schemas", tmp_path / "schemas")
    path = tmp_path / "settings.toml"
    path.write_text(text, encoding="utf-8")
    settings = load_settings(path)["staging"]
    (env,) = synthesize([staging(settings)], tmp_path / "cdktf.out").values()

    def parameter(job: str, name: str) -> dict[str, object]:
        found: dict[str, object] = parameters(env)[handoff.job_parameter_name("staging", job, name)]
        return found

    assert {name: parameter("lab", name)["value"] for name in handoff.JOB_PROCESSOR} == {
        handoff.PROCESSOR: PROCESSOR,
        handoff.PROCESSOR_WHEEL: "none",
        handoff.PROCESSOR_WHEEL_SHA256: "none",
        handoff.INTEGRITY: "ordered",
    }
    assert {name: parameter("plant", name)["value"] for name in handoff.JOB_PROCESSOR} == {
        handoff.PROCESSOR: "none",
        handoff.PROCESSOR_WHEEL: "none",
        handoff.PROCESSOR_WHEEL_SHA256: "none",
        handoff.INTEGRITY: "strict",
    }
    assert parameter("lab", handoff.SCHEMA_SHA256)["value"] == handoff.PROCESSOR_INPUT
    assert parameter("plant", handoff.SCHEMA_SHA256)["value"] == handoff.NO_SCHEMA
    for name in handoff.JOB_PROCESSOR:
        assert parameter("lab", name)["lifecycle"] == {"ignore_changes": ["value"]}
        output = env["handoff"].outputs()[f"job_lab_{name}".replace("-", "_")]
        assert output["description"].startswith("Job lab: ")

"""Command-line parsing: triggers, durations, one-line errors."""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest

from app import cli
from app.errors import ConfigurationError
from app.spark.job import Trigger, TriggerKind


def test_triggers_parse_with_or_without_the_processing_time_prefix() -> None:
    assert Trigger.parse("available-now") == Trigger(TriggerKind.AVAILABLE_NOW)
    assert Trigger.parse("processing-time=15 minutes") == Trigger(
        TriggerKind.PROCESSING_TIME, "15 minutes"
    )
    # What SSM's `trigger` parameter holds on the cluster.
    assert Trigger.parse("1 minute") == Trigger(TriggerKind.PROCESSING_TIME, "1 minute")
    with pytest.raises(ConfigurationError, match="--trigger 'soon'"):
        Trigger.parse("soon")


def test_durations() -> None:
    assert cli.parse_duration_ms("1 hour") == 3_600_000
    assert cli.parse_duration_ms("90s") == 90_000
    with pytest.raises(ConfigurationError, match="'a while'"):
        cli.parse_duration_ms("a while")
    assert cli.parse_duration_ms("3650 days") == 3650 * 86_400_000
    with pytest.raises(ConfigurationError, match="'3651d' is longer than ten years"):
        cli.parse_duration_ms("3651d")


def test_bad_input_gets_one_line_and_an_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = an_output(tmp_path / "sample")
    (tmp_path / "archive" / "sensor-1" / "0").mkdir(parents=True)
    (tmp_path / "archive" / "sensor-1" / "0" / "junk.parquet").write_bytes(b"x")
    code = cli.main(["verify", "--archive", str(tmp_path / "archive"), "--output", output])
    err = capsys.readouterr().err.strip()
    assert code == 3
    assert err.startswith("tablecast verify: archive file ") and "junk.parquet" in err
    assert "\n" not in err


def test_an_unexpected_error_is_reported_by_its_innermost_cause() -> None:
    wrapped = RuntimeError(
        "[STREAM_FAILED] Query [id = 1] terminated with exception: [PYTHON_DATA_SOURCE_ERROR] "
        "Failed to plan Python data source: Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "ModuleNotFoundError: No module named 'app'\n"
        "\tat org.apache.spark.sql.errors.QueryCompilationErrors$.pythonDataSourceError(x.scala:1)"
    )
    assert cli.root_cause(wrapped) == "ModuleNotFoundError: No module named 'app'"
    assert cli.root_cause(ValueError("plain\nsecond line")) == "ValueError: plain"
    # A worker's traceback after the driver's own (Spark's wrapping): the worker's exception,
    # by its own line, not its notes nor the Java frames after it.
    try:
        raise KeyError("row-7")
    except KeyError as exc:
        exc.add_note("a note")
        worker = "".join(traceback.format_exception(exc))
    driver = 'Traceback (most recent call last):\n  File "commit.py", line 1\nPythonException: x\n'
    assert cli.root_cause(RuntimeError(f"{driver}{worker}\tat org.x(y.scala:1)")) == (
        "KeyError: 'row-7'"
    )


def _cli_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(argv)
    return code, capsys.readouterr().err.strip()


def test_verify_refuses_a_missing_or_empty_archive_or_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "out").mkdir()
    missing = str(tmp_path / "nope")
    cases = [
        (
            ["--archive", missing, "--output", str(tmp_path / "out")],
            f"tablecast verify: output {tmp_path / 'out'} holds no Parquet file: nothing to verify",
        ),
        (
            ["--archive", str(tmp_path / "empty"), "--output", missing],
            f"tablecast verify: output {missing} does not exist",
        ),
    ]
    for argv, message in cases:
        assert _cli_error(["verify", *argv], capsys) == (64, message)
    # With an output that holds rows, the archive is checked too.
    output = an_output(tmp_path / "sample")
    argv = ["verify", "--archive", missing, "--output", output]
    assert _cli_error(argv, capsys) == (64, f"tablecast verify: archive {missing} does not exist")
    argv = ["verify", "--archive", str(tmp_path / "empty"), "--output", output]
    assert _cli_error(argv, capsys) == (
        64,
        f"tablecast verify: archive {tmp_path / 'empty'} holds no topic matching '^sensor-.+': "
        "nothing to verify",
    )


def test_a_mistyped_archive_is_refused_before_anything_is_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "archvie")
    for argv in (
        [
            "run",
            "--archive",
            missing,
            "--output",
            str(tmp_path / "o"),
            "--checkpoint",
            str(tmp_path / "c"),
        ],
        [
            "replay",
            "--archive",
            missing,
            "--output",
            str(tmp_path / "o"),
            "--since",
            "2026-01-01T00:00:00Z",
            "--until",
            "2026-01-02T00:00:00Z",
        ],
        [
            "repair",
            "--archive",
            missing,
            "--output",
            str(tmp_path / "o"),
            "--checkpoint",
            str(tmp_path / "c"),
            "--dry-run",
        ],
        ["correct", "--archive", missing, "--output", str(tmp_path / "o"), "--version", "1.0"],
    ):
        assert _cli_error(argv, capsys) == (
            64,
            f"tablecast {argv[0]}: archive {missing} does not exist",
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def an_output(root: Path) -> str:
    """A small archive and the output it implies, laid out by the sink's writer."""
    from app.engine.writer import stage_table
    from app.storage import resolve
    from app.tools import generate as gen
    from app.tools.verify import expected_output

    spec = gen.CaptureSpec(topics=1, partitions=1, sessions=1, updates=2)
    gen.write_archive(gen.generate(spec), str(root / "archive"), spec)
    rows = expected_output(str(root / "archive"), "^sensor-.+").rows
    # Staged straight into the visible directory: nothing here needs the commit's steps.
    assert stage_table(resolve(str(root / "out")), "", "", rows, "ts", "t")
    return str(root / "out")


def test_a_consumer_group_outside_the_granted_names_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(
        [
            "run",
            "--bootstrap-servers",
            "127.0.0.1:1",
            "--output",
            "o",
            "--checkpoint",
            "c",
            "--consumer-group",
            "analytics",
        ]
    )
    assert code == 64
    assert capsys.readouterr().err.strip() == (
        "tablecast run: --consumer-group 'analytics' must start with 'tablecast-' (the only "
        "groups the cluster's IAM role may commit to)"
    )


def test_a_correction_needs_an_output_with_a_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "archive").mkdir()
    output = tmp_path / "out"
    argv = [
        "correct",
        "--archive",
        str(tmp_path / "archive"),
        "--output",
        str(output),
        "--commit",
        "abc1234",
        "--dry-run",
    ]
    assert _cli_error(argv, capsys) == (64, f"tablecast correct: output {output} does not exist")
    output.mkdir()
    assert _cli_error(argv, capsys) == (
        64,
        f"tablecast correct: output {output} has no ledger: nothing was published there",
    )
    short = [*argv[:-3], "--commit", "abc", "--dry-run"]
    assert _cli_error(short, capsys) == (
        64,
        "tablecast correct: --commit 'abc': give at least 7 hex digits",
    )


def test_the_cli_module_stays_light() -> None:
    """``tablecast --help`` and the light commands load neither Spark, pandas nor DuckDB."""
    import subprocess
    import sys

    probe = (
        "import sys, app.cli; print(sorted(m for m in ('pyspark', 'pandas', 'duckdb') "
        "if m in sys.modules))"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert found == "[]"


def test_the_command_lines_defaults_are_the_jobs() -> None:
    from app import defaults
    from app.spark.job import JobConfig

    args = cli.build_parser().parse_args(
        ["run", "--archive", "a", "--output", "o", "--checkpoint", "c"]
    )
    config = JobConfig(source=None, output="o", checkpoint="c")  # type: ignore[arg-type]
    assert cli.parse_duration_ms(args.session_timeout) == config.session_timeout_ms
    assert args.max_offsets_per_trigger == config.max_offsets_per_trigger
    assert args.topic_pattern == config.topic_pattern == defaults.TOPIC_PATTERN
    assert args.trigger == defaults.TRIGGER and config.trigger.kind.value == "processing-time"


def test_the_kafka_source_options_of_run_are_refused_in_one_line_when_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    paths = ["--output", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ckpt")]
    kafka = ["--bootstrap-servers", "127.0.0.1:9"]
    cases = {
        ("--kafka-option", "group.id=mine"): "--kafka-option group.id: the source sets "
        "group.id itself",
        (
            "--kafka-option",
            "isolation.level=read_uncommitted",
        ): "--kafka-option isolation.level: the source sets isolation.level itself "
        "(use --kafka-isolation-level)",
        ("--kafka-option", "sasl.password=x"): "--kafka-option sasl.password: the source sets "
        "sasl.password itself",
        ("--kafka-option", "fetch.min.bytes"): "--kafka-option 'fetch.min.bytes' is not key=value",
        ("--topics", "sensor-1,bad name"): "--topics 'sensor-1,bad name': give Kafka topic names "
        "separated by commas ('bad name' is not one)",
        ("--starting-offsets", "yesterday"): "--starting-offsets 'yesterday' is neither earliest, "
        "latest, milliseconds since the epoch nor an ISO "
        "8601 time",
        ("--kafka-auth", "scram"): "--kafka-auth scram needs --kafka-secret-arn (the cluster's "
        "Secrets Manager secret)",
        ("--max-trigger-delay", "soon"): "--max-trigger-delay 'soon' is not a duration like "
        "'90s', '30 minutes' or '1h'",
        # Beyond int64 in the idle clock (a TypeError from NumPy), and Spark's interval.
        ("--session-timeout", "99999999999999999999d"): "--session-timeout "
        "'99999999999999999999d' is longer than ten years (3650 days)",
        ("--trigger", "processing-time=99999999999999999d"): "--trigger "
        "'processing-time=99999999999999999d' is neither 'available-now' nor "
        "'processing-time=<duration>' with a duration like '90s', '30 minutes' or '1h'",
    }
    for args, message in cases.items():
        assert _cli_error(["run", *kafka, *args, *paths], capsys) == (
            64,
            f"tablecast run: {message}",
        )
    archive_only = ["run", "--archive", str(tmp_path / "archive"), "--kafka-option", "a=b", *paths]
    needs = "tablecast run: --kafka-option needs --bootstrap-servers"
    assert _cli_error(archive_only, capsys) == (64, needs)
    with pytest.raises(SystemExit):  # argparse: one or the other
        cli.build_parser().parse_args(["run", "--topics", "a", "--topic-pattern", "b", *paths])
    assert not (tmp_path / "ckpt").exists()


def test_topics_by_name_become_a_pattern_of_exactly_them() -> None:
    import re

    pattern = cli.topic_pattern("sensor-1, sensor.2,sensor-1", "ignored")
    assert [
        t
        for t in ("sensor-1", "sensor.2", "sensor-12", "sensorx2", "sensor-")
        if re.fullmatch(pattern, t)
    ] == ["sensor-1", "sensor.2"]
    assert cli.topic_pattern(None, "^s-.+") == "^s-.+"


def test_msk_tls_and_scram_sign_in_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """SCRAM's user and password come from Secrets Manager (moto), read once per process."""
    import boto3
    import orjson
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient
    from moto import mock_aws

    from app.sources import kafka_client
    from app.sources.kafka_client import KafkaAuth, KafkaEndpoint

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    tls = KafkaEndpoint(
        "b-1:9094", KafkaAuth.TLS, options=(("ssl.endpoint.identification.algorithm", "https"),)
    )
    settings = tls.config()
    assert (settings["security.protocol"], settings["ssl.ca.location"]) == ("SSL", "probe")
    assert settings["ssl.endpoint.identification.algorithm"] == "https"
    assert "sasl.mechanisms" not in settings
    with mock_aws():
        arn = boto3.client("secretsmanager", region_name="eu-west-1").create_secret(
            Name="AmazonMSK_tablecast",
            SecretString=orjson.dumps({"username": "job", "password": "s3cret"}).decode(),
        )["ARN"]
        kafka_client.scram_credentials.cache_clear()
        scram = KafkaEndpoint("b-1:9096", KafkaAuth.SCRAM, region="eu-west-1", secret_arn=arn)
        settings = scram.config()
        assert (settings["security.protocol"], settings["sasl.mechanisms"]) == (
            "SASL_SSL",
            "SCRAM-SHA-512",
        )
        assert (settings["sasl.username"], settings["sasl.password"]) == ("job", "s3cret")
        for kind in (Consumer, AdminClient):  # librdkafka takes them for every client
            kind(scram.config(**({"group.id": "t"} if kind is Consumer else {})))
        missing = KafkaEndpoint(
            "b-1:9096", KafkaAuth.SCRAM, region="eu-west-1", secret_arn="AmazonMSK_missing"
        )
        unread = "--kafka-secret-arn AmazonMSK_missing: could not read the secret in eu-west-1"
        with pytest.raises(ConfigurationError, match=unread):
            missing.config()
    kafka_client.scram_credentials.cache_clear()

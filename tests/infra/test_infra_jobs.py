"""Several jobs per environment: the deployment settings declare them, synth checks them."""

import dataclasses
import json
from pathlib import Path

import pytest

from infra.config import ConfigError
from infra.config.jobs import FIELDS, REQUIRED
from infra.config.settings import load_settings
from infra.main import main
from tests.infra.valid_config import SHARED, valid

SCHEMA = (
    '[key]\ncolumns = ["id"]\n\n[columns]\nid = "int64"\n'
    'name = { type = "string", nullable = true }\n'
)
HEAD = (
    '[team]\naccount_id = "111122223333"\nspark_image_id = "ami-0123456789abcdef0"\n'
    'alarm_endpoints = ["oncall@tablecast-ops.net"]\n'
    'state_backend = { bucket = "team-terraform-state" }\n'
)


def settings(tmp_path: Path, jobs: dict[str, dict[str, object]], environment: str = "team") -> Path:
    """A settings file declaring ``jobs``, with a schema document ``s.toml`` beside it."""
    (tmp_path / "s.toml").write_text(SCHEMA, encoding="utf-8")
    lines = [HEAD.replace("[team]", f"[{environment}]")]
    for name, table in jobs.items():
        lines.append(f"[{environment}.jobs.{name}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in table.items()]
    path = tmp_path / "settings.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def configured(tmp_path: Path, jobs: dict[str, dict[str, object]]) -> object:
    deployment = load_settings(settings(tmp_path, jobs))["team"]
    return valid(deployment=dataclasses.replace(deployment, source=str(tmp_path)))


def job(pattern: str, **more: object) -> dict[str, object]:
    return {"topic_pattern": pattern, "schema": "s.toml", **more}


def test_declared_jobs_are_read_with_their_defaults(tmp_path: Path) -> None:
    config = configured(
        tmp_path,
        {
            "plant-a": job("^sensor-a-.+", cores=2),
            "lab": job("^sensor-lab-.+", cores=1, output_prefix="lab/meters", glue_table="meters"),
        },
    )
    plant, lab = config.jobs  # type: ignore[attr-defined]
    assert (plant.name, plant.output_prefix, plant.glue_table, plant.cores) == (
        "plant-a",
        "plant-a",
        "plant_a",
        2,
    )
    # The schema beside the settings file, read at synth.
    assert plant.schema == tmp_path / "s.toml"
    assert [column.name for column in plant.schema_document.columns] == ["id", "name"]
    assert (lab.output_prefix, lab.glue_table) == ("lab/meters", "meters")
    assert config.glue_tables == ("plant_a", "meters")  # type: ignore[attr-defined]


def test_an_environment_without_jobs_has_none() -> None:
    config = valid()
    assert config.jobs == () and config.glue_tables == ("output",)
    assert SHARED.jobs == ()


@pytest.mark.parametrize(
    ("jobs", "complaint"),
    [
        ({"Bad_Name": job("^sensor-.+")}, "jobs.Bad_Name (in {path}): a job's name is 1-24"),
        ({"a": {"schema": "s.toml"}}, "jobs.a.topic_pattern (in {path}): is missing"),
        ({"a": {"topic_pattern": "^sensor-.+"}}, "jobs.a.schema (in {path}): is missing"),
        ({"a": job("^sensor-.+", color="red")}, "jobs.a.color (in {path}): is not a job setting"),
        ({"a": job("sensor-.+")}, "jobs.a.topic_pattern (in {path}): 'sensor-.+' must be anchored"),
        ({"a": job("^sensor-.+", schema="none.toml")}, "jobs.a.schema (in {path}): cannot be read"),
        ({"a": job("^sensor-.+", cores=0)}, "jobs.a.cores (in {path}): 0 is not a whole number"),
        (
            {"a": job("^sensor-.+", output_prefix="_tablecast")},
            "jobs.a.output_prefix (in {path}): '_tablecast' is not a prefix",
        ),
        (
            {"a": job("^sensor-.+", glue_table="A-B")},
            "jobs.a.glue_table (in {path}): 'A-B' is not a Glue table name",
        ),
    ],
)
def test_a_bad_job_setting_is_refused_in_one_line_naming_file_job_and_key(
    tmp_path: Path, jobs: dict[str, dict[str, object]], complaint: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(settings(tmp_path, jobs))
    assert complaint.format(path=tmp_path / "settings.toml") in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_malformed_schema_is_refused_at_synth_naming_its_document(tmp_path: Path) -> None:
    path = settings(tmp_path, {"a": job("^sensor-.+")})
    (tmp_path / "s.toml").write_text('[key]\ncolumns = ["id"]\n[columns]\nid = "int65"\n')
    with pytest.raises(ConfigError) as refused:
        load_settings(path)
    assert "jobs.a.schema" in str(refused.value) and "int65" in str(refused.value)


@pytest.mark.parametrize(
    ("jobs", "complaint"),
    [
        (
            {"a": job("^meter-.+")},
            "jobs.a.topic_pattern: '^meter-.+' reads topics starting 'meter-', outside the "
            "environment's topic_pattern '^sensor-.+'",
        ),
        (
            {"a": job("^sensor-.+", cores=1), "b": job("^sensor-b.+", cores=1)},
            "jobs.b.topic_pattern: its topics (starting 'sensor-b') may be those of job 'a' too",
        ),
        (
            {"a": job("^sensor-a.+", cores=1), "b": job("^sensor-b.+")},
            "jobs.b.cores: 2 jobs share the Spark cluster: give each one cores",
        ),
        (
            {
                "a": job("^sensor-a.+", cores=1, output_prefix="x"),
                "b": job("^sensor-b.+", cores=1, output_prefix="x/y"),
            },
            "jobs.b.output_prefix: 'x/y' is, holds or lies in 'x' of job 'a'",
        ),
        (
            {
                "a": job("^sensor-a.+", cores=1, glue_table="t"),
                "b": job("^sensor-b.+", cores=1, glue_table="t"),
            },
            "jobs.b.glue_table: 't' is, holds or lies in 't' of job 'a'",
        ),
    ],
)
def test_jobs_that_would_share_topics_outputs_tables_or_cores_are_refused(
    tmp_path: Path, jobs: dict[str, dict[str, object]], complaint: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        configured(tmp_path, jobs)
    assert complaint in str(refused.value)
    assert str(refused.value).endswith(f"(in {tmp_path})")


def test_a_job_setting_is_a_field_and_a_parser() -> None:
    """What #36 extends (a job's processor): every setting has a parser, and the required
    ones are settings."""
    assert set(REQUIRED) <= set(FIELDS)
    assert set(FIELDS) == {"topic_pattern", "schema", "output_prefix", "glue_table", "cores"}


@pytest.mark.parametrize(
    ("jobs", "complaint"),
    [
        ({"a": job("^sensor-.+", cores="two")}, "jobs.a.cores"),
        ({"a": job("^sensor-a.+"), "b": job("^sensor-b.+")}, "jobs.a.cores"),
    ],
)
def test_synth_stops_in_one_line_on_a_bad_job(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    jobs: dict[str, dict[str, object]],
    complaint: str,
) -> None:
    path = settings(tmp_path, jobs, environment="dev")
    environ = {"TABLECAST_SETTINGS": str(path), "TABLECAST_ENVIRONMENTS": "dev"}
    assert main(outdir=str(tmp_path / "out"), environ=environ) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1, error
    assert error[0].startswith("infra: invalid configuration: environment 'dev': " + complaint)
    assert not (tmp_path / "out").exists(), "nothing is written"

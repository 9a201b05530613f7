"""Several jobs per environment: the deployment settings declare them, synth checks them."""

import dataclasses
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from app import handoff
from app.engine.machine import IntegrityMode
from app.ops.processors import JobProcessor
from infra.config import ConfigError
from infra.config.handoff import job_values
from infra.config.jobs import FIELDS, REQUIRED
from infra.config.pipeline_listing import job_processors
from infra.config.settings import load_settings
from infra.config.spark_cores import vcpus
from infra.main import main
from tests.infra.valid_config import SHARED, valid
from tests.processor_wheel import (
    COUNTS,
    PROCESSOR,
    READS_THE_JOBS_SCHEMA,
    example_wheel,
    written_wheel,
)

# The example processor's own input schema: a job naming both reads with the one schema.
SCHEMA = (
    '[key]\ncolumns = ["meter"]\n\n[columns]\nmeter = "string"\nkwh = "float64"\n'
    'read_at = "timestamp"\n'
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
    assert plant.schema_document is not None
    assert [column.name for column in plant.schema_document.columns] == ["meter", "kwh", "read_at"]
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
    assert set(FIELDS) == {
        "topic_pattern",
        "schema",
        "output_prefix",
        "glue_table",
        "cores",
        "processor",
        "processor_wheel",
        "integrity",
    }


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


@pytest.mark.parametrize(
    ("instance_type", "cores"),
    [
        ("m7i.large", 2),
        ("r7i.xlarge", 4),
        ("r7i.2xlarge", 8),
        ("m7g.medium", 1),
        ("c7i.48xlarge", 192),
        ("m7i.metal-48xl", None),
        ("hpc7g.16xlarge", None),
    ],
)
def test_a_workers_cores_are_its_types_vcpus_by_the_sizes_name(
    instance_type: str, cores: int | None
) -> None:
    assert vcpus(instance_type) == cores


def test_jobs_whose_cores_fit_the_workers_pass(tmp_path: Path) -> None:
    # valid(): 2 workers of r7i.xlarge, 4 cores each.
    config = configured(
        tmp_path, {"a": job("^sensor-a.+", cores=5), "b": job("^sensor-b.+", cores=3)}
    )
    assert [j.cores for j in config.jobs] == [5, 3]  # type: ignore[attr-defined]


def test_jobs_whose_cores_the_workers_do_not_have_are_refused_with_the_figures(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError) as refused:
        configured(tmp_path, {"a": job("^sensor-a.+", cores=6), "b": job("^sensor-b.+", cores=3)})
    line = str(refused.value)
    assert line.startswith("environment 'team': jobs.b.cores: jobs a 6, b 3 ask for 9 cores ")
    assert "the 2 Spark workers (r7i.xlarge, 4 cores each) have 8" in line
    assert line.endswith(f"(in {tmp_path})") and "\n" not in line


def test_jobs_asking_cores_of_a_type_without_a_known_count_are_refused(tmp_path: Path) -> None:
    deployment = load_settings(settings(tmp_path, {"a": job("^sensor-a.+", cores=2)}))["team"]
    with pytest.raises(ConfigError) as refused:
        valid(
            deployment=dataclasses.replace(deployment, source=str(tmp_path)),
            spark_worker_instance_type="m7i.metal-24xl",
        )
    assert "spark_worker_instance_type: jobs a 2 ask for 2 cores" in str(refused.value)


def test_synth_stops_on_jobs_that_need_more_cores_than_the_workers_have(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """dev: 2 workers of m7i.xlarge, 8 cores; 4 and 4 synthesize, 6 and 4 stop synth."""
    jobs = {"plant": job("^sensor-plant-.+", cores=4), "lab": job("^sensor-lab-.+", cores=4)}
    environ = {
        "TABLECAST_SETTINGS": str(settings(tmp_path, jobs, environment="dev")),
        "TABLECAST_ENVIRONMENTS": "dev",
    }
    assert main(outdir=str(tmp_path / "fits"), environ=environ) == 0
    stack = tmp_path / "fits" / "stacks" / "tablecast-dev-handoff" / "cdk.tf.json"
    parameters = json.loads(stack.read_text(encoding="utf-8"))["resource"]["aws_ssm_parameter"]
    cores = {p["name"]: p["value"] for p in parameters.values() if p["name"].endswith("/cores")}
    assert cores == {"/tablecast/dev/jobs/plant/cores": "4", "/tablecast/dev/jobs/lab/cores": "4"}
    jobs["plant"]["cores"] = 6
    path = settings(tmp_path, jobs, environment="dev")
    assert main(outdir=str(tmp_path / "over"), environ=environ) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == [
        "infra: invalid configuration: environment 'dev': jobs.lab.cores: jobs plant 6, lab 4 "
        "ask for 10 cores together; the 2 Spark workers (m7i.xlarge, 4 cores each) have 8: a "
        "job whose cores are not free waits for them, so lower the jobs' cores or add workers "
        f"(in {path})"
    ]
    assert not (tmp_path / "over").exists(), "nothing is written"


@pytest.fixture(scope="module")
def user_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return example_wheel(tmp_path_factory)


def test_a_jobs_processor_its_wheel_and_integrity_class_are_read(
    tmp_path: Path, user_wheel: Path
) -> None:
    (tmp_path / "dist").mkdir()
    shutil.copy(user_wheel, tmp_path / "dist")
    wheel = f"dist/{user_wheel.name}"
    path = settings(
        tmp_path,
        {
            "lab": job("^sensor-lab-.+", cores=1, processor=PROCESSOR, processor_wheel=wheel),
            "plant": job("^sensor-plant-.+", cores=1, integrity="resync"),
        },
    )
    lab, plant = load_settings(path)["team"].jobs
    assert (lab.processor, lab.processor_wheel, lab.integrity) == (
        PROCESSOR,
        tmp_path / wheel,
        IntegrityMode.STRICT,
    )
    assert (plant.processor, plant.processor_wheel, plant.integrity) == (
        None,
        None,
        IntegrityMode.RESYNC,
    )
    # What the deploy ships (tablecast-ops deploy reads them through infra).
    assert job_processors(path, "team") == [
        JobProcessor(job="lab", processor=PROCESSOR, wheel=tmp_path / wheel, integrity="strict"),
        JobProcessor(job="plant", processor=None, wheel=None, integrity="resync"),
    ]
    assert job_processors(path, "a-test-pipeline") == []


def _without_module(wheel: Path, target: Path) -> Path:
    """``wheel``'s name and metadata without the processor's module."""
    target.mkdir()
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(target / wheel.name, "w") as out:
        for item in source.infolist():
            if not item.filename.endswith("energy.py"):
                out.writestr(item, source.read(item))
    return target / wheel.name


@pytest.mark.parametrize(
    ("more", "complaint"),
    [
        (
            {"processor": PROCESSOR},
            "jobs.a.processor_wheel (in {path}): is missing: processor "
            f"{PROCESSOR} needs the wheel of its package",
        ),
        (
            {"processor_wheel": "{wheel}"},
            "jobs.a.processor (in {path}): is missing: processor_wheel meter_energy-1.0.0-py3-"
            "none-any.whl needs the class it runs",
        ),
        (
            {"processor": "meter_energy", "processor_wheel": "{wheel}"},
            "jobs.a.processor (in {path}): 'meter_energy' is not like package.module:Class",
        ),
        (
            {"processor": "table", "processor_wheel": "{wheel}"},
            "jobs.a.processor (in {path}): 'table' is not like package.module:Class (leave it "
            "out: the built-in)",
        ),
        (
            {"integrity": "exactly"},
            "jobs.a.integrity (in {path}): 'exactly' is not one of strict, resync, ordered, "
            "once, none",
        ),
        (
            {"processor": PROCESSOR, "processor_wheel": "dist/gone-1.0-py3-none-any.whl"},
            "jobs.a.processor_wheel (in {path}): {dir}/dist/gone-1.0-py3-none-any.whl does not "
            "exist (build it: pip wheel --no-deps)",
        ),
        (
            {"processor": PROCESSOR, "processor_wheel": "s.toml"},
            "jobs.a.processor_wheel (in {path}): s.toml is not a pure-Python wheel's name",
        ),
        (
            {"processor": "meter_energy.other:HourlyEnergy", "processor_wheel": "{wheel}"},
            "jobs.a.processor_wheel (in {path}): meter_energy-1.0.0-py3-none-any.whl holds no "
            "module meter_energy.other (meter_energy/other.py), which processor "
            "meter_energy.other:HourlyEnergy names",
        ),
        (
            {"processor": PROCESSOR, "processor_wheel": "{stripped}"},
            "jobs.a.processor_wheel (in {path}): meter_energy-1.0.0-py3-none-any.whl holds no "
            "module meter_energy.energy",
        ),
    ],
)
def test_a_bad_processor_setting_is_refused_in_one_line_naming_file_job_and_key(
    tmp_path: Path, user_wheel: Path, more: dict[str, str], complaint: str
) -> None:
    (tmp_path / "dist").mkdir()
    shutil.copy(user_wheel, tmp_path / "dist")
    stripped = _without_module(user_wheel, tmp_path / "stripped")
    given = {
        key: value.format(
            wheel=f"dist/{user_wheel.name}", stripped=str(stripped.relative_to(tmp_path))
        )
        for key, value in more.items()
    }
    with pytest.raises(ConfigError) as refused:
        load_settings(settings(tmp_path, {"a": job("^sensor-.+", **given)}))
    assert complaint.format(path=tmp_path / "settings.toml", dir=tmp_path) in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_processor_job_without_a_schema_reads_with_the_processors_own_input(
    tmp_path: Path, user_wheel: Path
) -> None:
    shutil.copy(user_wheel, tmp_path)
    lab_settings: dict[str, object] = {"topic_pattern": "^sensor-lab-.+", "cores": 1}
    lab_settings |= {"processor": PROCESSOR, "processor_wheel": user_wheel.name}
    jobs = {"lab": lab_settings, "plant": job("^sensor-plant-.+", cores=1)}
    path = settings(tmp_path, jobs)
    lab, plant = load_settings(path)["team"].jobs
    assert (lab.schema, lab.schema_document) == (None, None)
    assert plant.schema == tmp_path / "s.toml"
    assert [(j.job, j.reads_own_input) for j in job_processors(path, "team")] == [
        ("lab", True),
        ("plant", False),
    ]
    # What synth writes: run-job runs lab without --schema, plant once its schema is deployed.
    config = valid(
        deployment=dataclasses.replace(load_settings(path)["team"], source=str(tmp_path))
    )
    values = job_values(config, bucket_name="b", driver_private_ip="10.0.0.1")
    assert values["lab"][handoff.SCHEMA_SHA256] == handoff.PROCESSOR_INPUT == "processor-input"
    assert values["plant"][handoff.SCHEMA_SHA256] == handoff.NO_SCHEMA


def test_a_processor_that_reads_the_jobs_schema_takes_it_from_the_settings(
    tmp_path: Path,
) -> None:
    wheel = written_wheel(tmp_path / "dist", READS_THE_JOBS_SCHEMA)
    lab = job("^sensor-.+", processor=COUNTS, processor_wheel=f"dist/{wheel.name}")
    (found,) = load_settings(settings(tmp_path, {"lab": lab}))["team"].jobs
    assert found.schema == tmp_path / "s.toml" and found.processor == COUNTS


FAILS_ON_IMPORT = "raise RuntimeError('no meters table here')\n"
NO_OUTPUT = READS_THE_JOBS_SCHEMA.replace("    output =", "    result =")


@pytest.mark.parametrize(
    ("source", "schema", "complaint"),
    [
        (
            READS_THE_JOBS_SCHEMA,
            None,
            f"jobs.a.schema (in {{path}}): is missing: processor {COUNTS} declares no input "
            "schema of its own, so the job's schema gives its messages' columns",
        ),
        (
            FAILS_ON_IMPORT,
            "s.toml",
            f"jobs.a.processor_wheel (in {{path}}): processor {COUNTS} from "
            f"plain_counts-1.0.0-py3-none-any.whl: --processor {COUNTS}: importing "
            "plain_counts.counts failed: RuntimeError: no meters table here",
        ),
        (
            NO_OUTPUT,
            "s.toml",
            f"jobs.a.processor_wheel (in {{path}}): processor {COUNTS} from "
            f"plain_counts-1.0.0-py3-none-any.whl: --processor {COUNTS}: declares no output "
            "schema (output = tablecast.schema(...))",
        ),
    ],
)
def test_a_processor_that_cannot_read_the_jobs_messages_is_refused_at_synth(
    tmp_path: Path, source: str, schema: str | None, complaint: str
) -> None:
    """Synth imports the class from its wheel as the job would (in a process of its own)."""
    wheel = written_wheel(tmp_path / "dist", source)
    table: dict[str, object] = {"topic_pattern": "^sensor-.+", "processor": COUNTS}
    table |= {"processor_wheel": f"dist/{wheel.name}"} | ({"schema": schema} if schema else {})
    with pytest.raises(ConfigError) as refused:
        load_settings(settings(tmp_path, {"a": table}))
    assert str(refused.value).endswith(complaint.format(path=tmp_path / "settings.toml"))
    assert "\n" not in str(refused.value)


def test_a_schema_other_than_the_processors_own_input_is_refused_at_synth(
    tmp_path: Path, user_wheel: Path
) -> None:
    """The job would refuse it at start (exit 64), over and over under systemd."""
    shutil.copy(user_wheel, tmp_path)
    (tmp_path / "other.toml").write_text('[key]\ncolumns = ["id"]\n\n[columns]\nid = "int64"\n')
    lab = job("^sensor-.+", schema="other.toml", processor=PROCESSOR)
    lab["processor_wheel"] = user_wheel.name
    with pytest.raises(ConfigError) as refused:
        load_settings(settings(tmp_path, {"lab": lab}))
    assert str(refused.value) == (
        f"environment 'team': jobs.lab.schema (in {tmp_path / 'settings.toml'}): declares key "
        f"(id); id int64 not null, but processor {PROCESSOR} reads its messages with its own "
        "input schema (key (meter); meter string not null, kwh float64 not null, read_at "
        "timestamp not null): leave schema out"
    )

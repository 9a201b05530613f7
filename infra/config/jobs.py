"""Several jobs per environment: each declared by name in the deployment settings.

An environment's table may declare jobs, each a table of its own::

    [dev.jobs.sensors]
    topic_pattern = "^sensor-.+"        # its topics: within the environment's pattern
    schema = "schemas/sensors.toml"     # its table schema, beside the settings file [with
                                        # a processor: the processor's own input schema]
    output_prefix = "sensors"           # s3://<bucket>/output/sensors [the name]
    glue_table = "sensors"              # tablecast_<env>.sensors [the name, - as _]
    cores = 4                           # spark.cores.max: its share of the cluster
    processor = "meters.energy:Energy"  # run --processor [the built-in table rebuild]
    processor_wheel = "dist/meters-1.0.0-py3-none-any.whl"  # its wheel, with processor
    integrity = "ordered"               # run --integrity [strict]

Each runs on the environment's Spark cluster as ``tablecast-job@<name>.service``
on the driver, with its own checkpoint, hand-off (``/tablecast/<env>/jobs/<name>/``),
alarms and dashboard rows. An environment that declares none runs its one job
(``tablecast-job.service``, ``/tablecast/<env>/``). What one job's settings are is
:class:`JobSettings`; a new setting is a field there and one entry in :data:`FIELDS`
(its parser), and a check in :func:`parse_jobs` where it needs another setting.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.contract import loader
from app.contract.schema import TableSchema, parse_schema
from app.engine.machine import IntegrityMode
from app.errors import ConfigurationError
from app.ops.processor_input import declared_input
from app.ops.processors import JobProcessor, read_processor_wheel
from infra.config import parsing
from infra.config.errors import ConfigError

# A systemd instance name, an SSM path element, a metric dimension and part of alarm names.
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,22}[a-z0-9]$|^[a-z]$")
# Below output/: no hidden (_tablecast, _iceberg) or partition (date=...) element.
_OUTPUT_PREFIX = re.compile(r"^[a-z0-9][a-z0-9.-]{0,62}(/[a-z0-9][a-z0-9.-]{0,62}){0,3}$")
# Glue and Athena take lower-case names of letters, digits and _.
_GLUE_TABLE = re.compile(r"^[a-z][a-z0-9_]{0,127}$")
MAX_CORES = 1024


@dataclass(frozen=True, kw_only=True)
class JobSettings:
    """One job of an environment, as the deployment settings declare it."""

    name: str
    """1-24 of ``a-z0-9-``: the service ``tablecast-job@<name>``, ``/tablecast/<env>/jobs/<name>/``,
    the metrics' ``Job`` dimension, the alarms ``job-<name>-...``."""
    topic_pattern: str
    """Its topics (``run --topic-pattern``); its literal prefix lies within the environment's
    (the nodes may read only those topics) and no other job's prefix overlaps it."""
    schema: Path | None
    """Its table schema (``run --schema``), a TOML document checked at synth; the deploy
    uploads it beside the wheel and records its SHA-256, which run-job checks. None: the
    job's processor declares its own ``input``, which reads the messages (run-job passes
    no ``--schema``)."""
    schema_document: TableSchema | None
    """The schema the document declares (read at synth: a malformed one stops it)."""
    output_prefix: str
    """Its output, ``s3://<bucket>/output/<output_prefix>``; no job's lies inside another's."""
    glue_table: str
    """Its Iceberg table in the environment's Glue database (``run --glue-table``)."""
    cores: int | None = None
    """``spark.cores.max``: the most of the cluster's cores it takes. Spark's standalone
    master gives an application every core unless told, so with two jobs or more each needs
    one, or the first to start takes them all and the others wait."""
    processor: str | None = None
    """``run --processor``: ``package.module:Class`` in :attr:`processor_wheel`; None: the
    built-in table rebuild."""
    processor_wheel: Path | None = None
    """The wheel of the processor's package (pure Python, holding its module), checked at
    synth; the deploy uploads it beside ours and records its SHA-256, which run-job checks."""
    integrity: IntegrityMode = IntegrityMode.STRICT
    """``run --integrity``: what a message's seq means (docs/processors.md)."""

    def shipped(self) -> JobProcessor:
        """What the deploy ships of it (app/ops/processors.py)."""
        return JobProcessor(
            job=self.name,
            processor=self.processor,
            wheel=self.processor_wheel,
            integrity=str(self.integrity),
            reads_own_input=self.schema is None,
        )


def _text(pattern: re.Pattern[str], what: str) -> Callable[[Any, str], str]:
    def parse(value: Any, _base: str) -> str:
        if not isinstance(value, str) or not pattern.match(value):
            raise ValueError(f"{value!r} is not {what}")
        return value

    return parse


def _topic_pattern(value: Any, _base: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a regular expression")
    parsing.topic_prefix(value)
    return value


def _schema(value: Any, base: str) -> Path:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{value!r} is not a file name")
    path = Path(value)
    return path if path.is_absolute() else Path(base) / path


def _processor(value: Any, _base: str) -> str:
    if not isinstance(value, str) or value == loader.BUILT_IN:
        raise ValueError(f"{value!r} is not like package.module:Class (leave it out: the built-in)")
    try:
        loader.split(value)
    except ConfigurationError:
        raise ValueError(f"{value!r} is not like package.module:Class") from None
    return value


def _integrity(value: Any, _base: str) -> IntegrityMode:
    known = [str(mode) for mode in IntegrityMode]
    if value not in known:
        raise ValueError(f"{value!r} is not one of {', '.join(known)}")
    return IntegrityMode(value)


def _cores(value: Any, _base: str) -> int:
    if type(value) is not int or not 1 <= value <= MAX_CORES:
        raise ValueError(f"{value!r} is not a whole number of cores from 1 to {MAX_CORES}")
    return value


FIELDS: Mapping[str, Callable[[Any, str], Any]] = {
    "topic_pattern": _topic_pattern,
    "schema": _schema,
    "output_prefix": _text(_OUTPUT_PREFIX, "a prefix of 1-4 elements of a-z0-9.- below output/"),
    "glue_table": _text(_GLUE_TABLE, "a Glue table name (a-z, 0-9, _; a letter first)"),
    "cores": _cores,
    "processor": _processor,
    "processor_wheel": _schema,  # a file beside the settings, as the schema
    "integrity": _integrity,
}
"""Each setting of a job and its parser (the value, the settings file's folder): a parser
raises ``ValueError`` saying what is wrong."""
REQUIRED = ("topic_pattern",)
"""Settings without a default; ``schema`` too, unless a processor declares its input."""


def parse_jobs(environment: str, value: Any, *, source: str) -> tuple[JobSettings, ...]:
    """The ``jobs`` table of an environment's settings, every key checked.

    Raises :class:`~infra.config.errors.ConfigError` naming the file, the job and the key.
    """

    def fail(key: str, problem: str) -> ConfigError:
        return ConfigError(environment=environment, field=f"{key} (in {source})", problem=problem)

    if not isinstance(value, dict):
        raise fail("jobs", "must be a table of jobs by name ([<env>.jobs.<name>])")
    base = str(Path(source).parent)
    jobs = []
    for name, table in value.items():
        if not _NAME.match(name):
            raise fail(f"jobs.{name}", "a job's name is 1-24 of a-z, 0-9, '-', a letter first")
        if not isinstance(table, dict):
            raise fail(f"jobs.{name}", "must be a table of the job's settings")
        unknown = sorted(set(table) - set(FIELDS))
        if unknown:
            known = ", ".join(FIELDS)
            raise fail(f"jobs.{name}.{unknown[0]}", f"is not a job setting (known: {known})")
        for key in REQUIRED:
            if key not in table:
                raise fail(f"jobs.{name}.{key}", "is missing")
        values: dict[str, Any] = {}
        for key, parse in FIELDS.items():
            if key in table:
                try:
                    values[key] = parse(table[key], base)
                except ValueError as exc:
                    raise fail(f"jobs.{name}.{key}", str(exc)) from None
        document = None
        if "schema" in values:
            try:
                document = parse_schema(values["schema"].read_bytes(), str(values["schema"]))
            except OSError as exc:
                raise fail(f"jobs.{name}.schema", f"cannot be read: {exc.strerror}") from None
            except ConfigurationError as exc:
                raise fail(f"jobs.{name}.schema", str(exc)) from None
        elif "processor" not in values:
            raise fail(
                f"jobs.{name}.schema",
                "is missing: the built-in table rebuild writes the table it declares",
            )
        _check_processor(fail, name, values, document)
        values.setdefault("schema", None)
        values.setdefault("output_prefix", name)
        values.setdefault("glue_table", name.replace("-", "_"))
        jobs.append(JobSettings(name=name, schema_document=document, **values))
    return tuple(jobs)


def _check_processor(
    fail: Callable[[str, str], ConfigError],
    job: str,
    values: Mapping[str, Any],
    schema: TableSchema | None,
) -> None:
    """A processor comes with its wheel, the wheel holds it, and exactly one schema reads the
    job's messages: the processor's own ``input``, or else the job's ``schema`` (given both,
    they are one schema, or the job would refuse the start)."""
    processor, wheel = values.get("processor"), values.get("processor_wheel")
    if processor is not None and wheel is None:
        raise fail(
            f"jobs.{job}.processor_wheel",
            f"is missing: processor {processor} needs "
            "the wheel of its package, which the deploy ships",
        )
    if wheel is not None and processor is None:
        raise fail(
            f"jobs.{job}.processor",
            f"is missing: processor_wheel {wheel.name} needs "
            "the class it runs (package.module:Class)",
        )
    if processor is not None and wheel is not None:
        try:
            read_processor_wheel(wheel, processor)
            declared = declared_input(wheel, processor)
        except ConfigurationError as exc:
            raise fail(f"jobs.{job}.processor_wheel", str(exc)) from None
        if declared is None and schema is None:
            raise fail(
                f"jobs.{job}.schema",
                f"is missing: processor {processor} declares no input schema of its own, so "
                "the job's schema gives its messages' columns",
            )
        if declared is not None and schema is not None and declared.digest != schema.digest:
            raise fail(
                f"jobs.{job}.schema",
                f"declares {schema.describe()}, but processor {processor} reads its messages "
                f"with its own input schema ({declared.describe()}): leave schema out",
            )


def jobs_problem(
    jobs: Sequence[JobSettings], *, topic_pattern: str, explicit_topics: bool
) -> tuple[str, str] | None:
    """What the environment's jobs together get wrong, as ``(field, problem)``, or None."""
    environment_prefix = parsing.topic_prefix(topic_pattern)
    if jobs and explicit_topics:
        return "kafka.topics", "names the single job's topics: with jobs, each job's topic_pattern"
    prefixes: dict[str, str] = {}
    for job in jobs:
        prefix = parsing.topic_prefix(job.topic_pattern)
        if not prefix.startswith(environment_prefix):
            return f"jobs.{job.name}.topic_pattern", (
                f"{job.topic_pattern!r} reads topics starting {prefix!r}, outside the "
                f"environment's topic_pattern {topic_pattern!r} (the nodes may read only those)"
            )
        for other, other_prefix in prefixes.items():
            if prefix.startswith(other_prefix) or other_prefix.startswith(prefix):
                return f"jobs.{job.name}.topic_pattern", (
                    f"its topics (starting {prefix!r}) may be those of job {other!r} too "
                    f"(starting {other_prefix!r}): give each job a literal prefix that no "
                    "other job's starts with"
                )
        prefixes[job.name] = prefix
    for field, value in (("output_prefix", _output_of), ("glue_table", _table_of)):
        seen: dict[str, str] = {}
        for job in jobs:
            mine = value(job)
            for other, theirs in seen.items():
                if mine == theirs or (
                    field == "output_prefix"
                    and (mine.startswith(theirs + "/") or theirs.startswith(mine + "/"))
                ):
                    return f"jobs.{job.name}.{field}", (
                        f"{mine!r} is, holds or lies in {theirs!r} of job {other!r}: "
                        "each job writes its own"
                    )
            seen[job.name] = mine
    if len(jobs) > 1:
        without = [job.name for job in jobs if job.cores is None]
        if without:
            return f"jobs.{without[0]}.cores", (
                f"{len(jobs)} jobs share the Spark cluster: give each one cores "
                "(spark.cores.max), or the first to start takes every core and the others wait"
            )
    return None


def _output_of(job: JobSettings) -> str:
    return job.output_prefix


def _table_of(job: JobSettings) -> str:
    return job.glue_table

"""A declared job's processor as the deploy ships it: the user's wheel beside ours.

Where the deployment settings give a job ``processor = "package.module:Class"`` and
``processor_wheel`` (infra/config/jobs.py), ``tablecast-ops deploy`` stores the wheel
as ``<artifacts-uri>/processors/<sha256>/<its file name>`` (the file keeps its name,
which pip reads the distribution from) with its SHA-256 as the object's metadata, as
it stores ours, and records in the job's SSM parameters the class, the wheel's key
below ``artifacts-uri``, its SHA-256 and the job's integrity class. run-job installs
no other bytes (ami/files/bin/run-job). A job without a processor gets ``none`` in
the three processor parameters: the built-in table rebuild. A job whose settings name
no ``schema`` gets ``processor-input`` as its ``schema-sha256``: the processor's own
input schema reads the messages.

The wheel must be pure Python (``-none-any``): run-job ships it to the executors with
``--py-files``, from which Python imports no compiled module.
"""

from __future__ import annotations

import hashlib
import re
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from app import handoff
from app.contract import loader
from app.errors import ConfigurationError

TABLECAST = "tablecast"
# PEP 427's file name, pure Python only: distribution-version(-build)-python-none-any.whl.
_PURE_WHEEL = re.compile(
    r"^(?P<distribution>[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?)-(?P<version>[A-Za-z0-9_.!+]+)"
    r"(?:-[0-9][A-Za-z0-9_.]*)?-[A-Za-z0-9_.]+-none-any\.whl$"
)
# What run-job accepts in processor-wheel: the key this module writes, nothing else.
KEY = re.compile(rf"^{handoff.PROCESSORS_FOLDER}/[0-9a-f]{{64}}/[A-Za-z0-9_.!+-]+\.whl$")


@dataclass(frozen=True, slots=True)
class JobProcessor:
    """One declared job's processor and integrity class, as the settings give them."""

    job: str
    processor: str | None
    """``package.module:Class``; None: the built-in table rebuild."""
    wheel: Path | None
    """The wheel that holds it (with ``processor``, and only then)."""
    integrity: str
    """``run --integrity``: strict, resync, ordered, once or none."""
    reads_own_input: bool = False
    """The settings name no ``schema``: the processor reads the messages with its own
    ``input`` (``schema-sha256`` is ``processor-input``, and run-job passes no --schema)."""


@dataclass(frozen=True, slots=True)
class ProcessorWheel:
    """A user's wheel, checked: pure Python, not ours, holding the processor's module."""

    path: Path
    sha256: str

    @property
    def key(self) -> str:
        """Where the deploy stores it, below ``artifacts-uri``; run-job's processor-wheel."""
        return f"{handoff.PROCESSORS_FOLDER}/{self.sha256}/{self.path.name}"


def read_processor_wheel(path: Path, processor: str) -> ProcessorWheel:
    """Check that ``path`` is a wheel run-job can install and ship that holds ``processor``'s
    module; :class:`ConfigurationError` saying what is wrong otherwise."""
    match = _PURE_WHEEL.match(path.name)
    if match is None:
        raise ConfigurationError(
            f"{path.name} is not a pure-Python wheel's name (<name>-<version>-py3-none-any.whl):"
            " the executors import it from a zip (--py-files), which holds no compiled module"
        )
    if match["distribution"].lower().replace("_", "-").replace(".", "-") == TABLECAST:
        raise ConfigurationError(
            f"{path.name} is tablecast's own wheel: give the wheel of the processor's package"
        )
    module, _ = loader.split(processor)
    module_file = module.replace(".", "/")
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
    except FileNotFoundError:
        raise ConfigurationError(f"{path} does not exist (build it: pip wheel --no-deps)") from None
    except OSError as exc:
        raise ConfigurationError(f"{path} cannot be read: {exc.strerror}") from None
    except zipfile.BadZipFile:
        raise ConfigurationError(f"{path} is not a wheel (not a zip archive)") from None
    if not any(name.count("/") == 1 and name.endswith(".dist-info/METADATA") for name in names):
        raise ConfigurationError(f"{path} is not a wheel (it has no .dist-info/METADATA)")
    if not {f"{module_file}.py", f"{module_file}/__init__.py"} & names:
        raise ConfigurationError(
            f"{path.name} holds no module {module} ({module_file}.py), which processor "
            f"{processor} names"
        )
    with path.open("rb") as stream:
        digest = hashlib.file_digest(stream, "sha256").hexdigest()
    return ProcessorWheel(path, digest)


def parameters(declared: JobProcessor, wheel: ProcessorWheel | None) -> dict[str, str]:
    """The job's processor parameters (``app.handoff.JOB_PROCESSOR``) for ``declared``, and
    its ``schema-sha256`` where the processor's own input reads the messages."""
    if wheel is None or declared.processor is None:
        shipped = dict.fromkeys(
            (handoff.PROCESSOR, handoff.PROCESSOR_WHEEL, handoff.PROCESSOR_WHEEL_SHA256),
            handoff.NO_PROCESSOR,
        )
    else:
        shipped = {
            handoff.PROCESSOR: declared.processor,
            handoff.PROCESSOR_WHEEL: wheel.key,
            handoff.PROCESSOR_WHEEL_SHA256: wheel.sha256,
        }
    if declared.reads_own_input:
        shipped[handoff.SCHEMA_SHA256] = handoff.PROCESSOR_INPUT
    return shipped | {handoff.INTEGRITY: declared.integrity}


def read_all(
    declared: Sequence[JobProcessor], jobs: Sequence[str], environment: str
) -> dict[str, tuple[JobProcessor, ProcessorWheel | None]]:
    """Each job's processor and its wheel read, by job, every one checked before any upload:
    ``declared`` must name exactly the jobs SSM declares (``jobs``)."""
    named = [job.job for job in declared]
    if sorted(named) != sorted(jobs):
        raise ConfigurationError(
            f"the deployment settings declare jobs {', '.join(named) or 'none'} for "
            f"{environment}, SSM's hand-off {', '.join(jobs) or 'none'}: apply the "
            "infrastructure of these settings first (docs/infra.md, 'Several jobs')"
        )
    found: dict[str, tuple[JobProcessor, ProcessorWheel | None]] = {}
    for job in declared:
        wheel = None
        if job.processor is not None and job.wheel is not None:
            try:
                wheel = read_processor_wheel(job.wheel, job.processor)
            except ConfigurationError as exc:
                raise ConfigurationError(f"job {job.job}: processor_wheel: {exc}") from None
        found[job.job] = (job, wheel)
    return found


@dataclass(frozen=True, slots=True)
class RecordedProcessor:
    """A job's processor as SSM records it, read as run-job reads it."""

    processor: str
    """``package.module:Class``, or ``none``: the built-in table rebuild."""
    wheel: str
    """Its wheel's key below ``artifacts-uri`` (``none``: no deploy shipped it)."""
    wheel_sha256: str
    integrity: str
    schema: str
    """The job's ``schema-sha256``: a digest, ``none`` (not deployed) or ``processor-input``."""

    @classmethod
    def of(cls, values: Mapping[str, str]) -> RecordedProcessor:
        """From a hand-off's values: the environment's one job has none of these, and runs
        the built-in table rebuild over its schema under ``strict``."""

        def value(name: str, default: str = handoff.NO_PROCESSOR) -> str:
            return values.get(name) or default

        return cls(
            processor=value(handoff.PROCESSOR),
            wheel=value(handoff.PROCESSOR_WHEEL),
            wheel_sha256=value(handoff.PROCESSOR_WHEEL_SHA256),
            integrity=value(handoff.INTEGRITY, "strict"),
            schema=value(handoff.SCHEMA_SHA256, ""),
        )

    def lines(self) -> list[str]:
        """``processor:``, ``integrity:`` and, for a declared job, ``schema:``."""
        if self.processor == handoff.NO_PROCESSOR:
            processor = "the built-in table rebuild"
        elif KEY.match(self.wheel) and len(self.wheel_sha256) == 64:
            processor = (
                f"{self.processor} ({self.wheel.rpartition('/')[2]}, "
                f"SHA-256 {self.wheel_sha256[:12]})"
            )
        else:
            processor = f"{self.processor}, no wheel deployed: the job does not start"
        lines = [f"processor:       {processor}", f"integrity:       {self.integrity}"]
        if self.schema == handoff.PROCESSOR_INPUT:
            lines.append("schema:          the processor's own input schema")
        elif self.schema == handoff.NO_SCHEMA:
            lines.append("schema:          none deployed: the job does not start")
        elif self.schema:
            lines.append(f"schema:          SHA-256 {self.schema[:12]}")
        return lines

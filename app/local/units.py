"""The image's systemd units, read and rendered for one machine.

The pipeline on loopback runs the services the AMI runs, from the unit files
the image's build installs (staged by :mod:`app.local.image`): their
``ExecStart`` command, ``Restart`` policy, ``RestartSec``,
``RestartPreventExitStatus`` and start limit (``StartLimitIntervalSec``,
``StartLimitBurst``), with the
image's paths mapped to this machine's (``/opt/spark`` to PySpark's own
Spark, ``/opt/tablecast/bin`` to the staged programs, ...) and the node's
variables filled in. A unit changed in the image is run changed here;
nothing is a second copy.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from app.errors import ConfigurationError

_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


@dataclass(frozen=True)
class ServiceSpec:
    """One service as systemd would run it."""

    name: str
    argv: tuple[str, ...]
    restart_on_failure: bool
    restart_sec: float
    stop_timeout_s: float
    restart_prevent_codes: frozenset[int] = frozenset()
    """Exit codes after which the service is not restarted (``RestartPreventExitStatus``)."""
    start_limit_burst: int = 0
    """At most this many starts within ``start_limit_interval_s``; 0: no limit."""
    start_limit_interval_s: float = 0.0


def read_unit(name: str, units: Path, section_name: str = "[Service]") -> dict[str, str]:
    """The ``[Service]`` (or another section's) settings of ``<name>.service`` (continuation
    lines joined)."""
    path = units / f"{name}.service"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigurationError(f"no unit {path}") from None
    settings: dict[str, str] = {}
    section = ""
    for raw in text.replace("\\\n", " ").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line
        elif section == section_name and "=" in line:
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    return settings


def render(
    name: str,
    variables: Mapping[str, str],
    paths: Mapping[str, str],
    *,
    units: Path,
    restart_sec_cap: float | None = None,
) -> ServiceSpec:
    """``<name>.service`` for this machine: variables filled in, image paths mapped.

    ``restart_sec_cap`` shortens a unit's ``RestartSec`` (the demo does not
    wait 30 seconds for a restart); the policy itself is the unit's.
    """
    unit = read_unit(name, units)
    if "ExecStart" not in unit:
        raise ConfigurationError(f"unit {name}.service has no ExecStart")

    def fill(match: re.Match[str]) -> str:
        key = match.group(1) or match.group(2)
        if key not in variables:
            raise ConfigurationError(f"unit {name}.service needs {key}, which is not set here")
        return variables[key]

    argv = [_local(_VARIABLE.sub(fill, word), paths) for word in shlex.split(unit["ExecStart"])]
    restart_sec = float(unit.get("RestartSec", "0.1").removesuffix("s"))
    if restart_sec_cap is not None:
        restart_sec = min(restart_sec, restart_sec_cap)
    limits = read_unit(name, units, "[Unit]")
    return ServiceSpec(
        name=name,
        argv=tuple(argv),
        restart_on_failure=unit.get("Restart", "no") in ("on-failure", "always"),
        restart_sec=restart_sec,
        stop_timeout_s=float(unit.get("TimeoutStopSec", "90").removesuffix("s")),
        restart_prevent_codes=frozenset(
            int(code) for code in unit.get("RestartPreventExitStatus", "").split()
        ),
        start_limit_burst=int(limits.get("StartLimitBurst", "0")),
        start_limit_interval_s=float(limits.get("StartLimitIntervalSec", "0").removesuffix("s")),
    )


def _local(word: str, paths: Mapping[str, str]) -> str:
    """``word`` with an image path at its start replaced by this machine's."""
    for image_path, local_path in sorted(paths.items(), key=lambda p: -len(p[0])):
        if word == image_path or word.startswith(image_path + "/"):
            return local_path + word[len(image_path) :]
    return word

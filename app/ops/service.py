"""The job's service on the driver: restart, start and stop ``tablecast-job.service``.

Each action is a short POSIX ``sh`` script sent through SSM Run Command
(``AWS-RunShellScript`` runs ``sh``); ``tests/ops`` runs shellcheck on every
one. A (re)start is done when the job publishes a heartbeat, which the
callers wait for (:func:`app.ops.metrics.wait_for_heartbeat`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from app.errors import ConfigurationError
from app.ops import remote
from app.ops.environment import VERSION_PATTERN

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ssm import SSMClient

UNIT = "tablecast-job.service"
ARCHIVER_UNIT = "tablecast-archiver.service"
VENV_PYTHON = "/opt/tablecast/venv/bin/python"
# run-job downloads and installs the wheel before spark-submit: allow it 3 minutes.
INSTALL_WAIT_S = 180
_INSTALL_POLL_S = 5
# The node's own clock when systemctl returned, on the clock the job's metrics use.
_STAMP = 'echo "done-at $(date -u +%Y-%m-%dT%H:%M:%SZ)"'
_STAMP_LINE = re.compile(r"^done-at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class ServiceAction:
    """What was done on the driver, and when (a heartbeat must be newer to count)."""

    action: str
    instance_id: str
    command_id: str
    done_at: datetime
    output: str


def restart_script(version: str, units: Sequence[str] = (UNIT,)) -> list[str]:
    """Restart the job's services (the environment's one job's, or each declared job's:
    ``app.handoff.job_unit``), then wait until they run with ``version`` installed."""
    if not VERSION_PATTERN.match(version):
        raise ConfigurationError(f"{version!r} is not a version")
    attempts = INSTALL_WAIT_S // _INSTALL_POLL_S
    names = " ".join(units)
    # is-active of several units succeeds where any is: ask each.
    active = " && ".join(f"systemctl is-active --quiet {unit}" for unit in units)
    # node-bootstrap enables the one job's service; a declared job's (a template's
    # instance) the deploy enables, so that it starts at the driver's next boot too.
    declared = [unit for unit in units if "@" in unit]
    return [
        "set -eu",
        *([f"systemctl enable --quiet {' '.join(declared)}"] if declared else []),
        f"systemctl restart {names}",
        _STAMP,
        'installed=""',
        f"for attempt in $(seq 1 {attempts}); do",
        f"  installed=$({VENV_PYTHON} -c "
        "'import importlib.metadata as m; print(m.version(\"tablecast\"))' 2>/dev/null || true)",
        f'  if [ "$installed" = "{version}" ] && {active}; then',
        f'    echo "{names} active with tablecast $installed (attempt $attempt)"',
        # The archiver service, where there is one, runs the same installed wheel: from
        # its start limit's failed state too (before the first deploy it had no wheel).
        f"    systemctl reset-failed {ARCHIVER_UNIT} 2>/dev/null || true",
        f"    if systemctl is-enabled --quiet {ARCHIVER_UNIT} 2>/dev/null; then",
        f"      systemctl restart {ARCHIVER_UNIT}",
        "    fi",
        "    exit 0",
        "  fi",
        f"  sleep {_INSTALL_POLL_S}",
        "done",
        f'echo "{names} is not active with tablecast {version} after {INSTALL_WAIT_S} s '
        '(installed: ${installed:-none})" >&2',
        f"systemctl status --no-pager --lines=20 {names} >&2 || true",
        "exit 1",
    ]


def start_script(unit: str = UNIT) -> list[str]:
    return [
        "set -eu",
        f"systemctl start {unit}",
        _STAMP,
        f"systemctl is-active {unit}",
    ]


def stop_script(unit: str = UNIT) -> list[str]:
    return [
        "set -eu",
        f"systemctl stop {unit}",
        f"if systemctl is-active --quiet {unit}; then echo '{unit} still active' >&2; exit 1; fi",
        f"echo '{unit} stopped'",
    ]


def _run(
    ssm: SSMClient,
    ec2: EC2Client,
    instance_id: str,
    action: str,
    script: list[str],
    poll_s: float,
    unit: str = UNIT,
) -> ServiceAction:
    # Check, then act: a stopped or terminated driver fails here, by name.
    remote.driver_running_check(ec2, instance_id)
    result = remote.run_shell(
        ssm,
        instance_id,
        script,
        what=f"{action} of {unit}",
        timeout_s=INSTALL_WAIT_S + 120,
        poll_s=poll_s,
    )
    return ServiceAction(
        action=action,
        instance_id=instance_id,
        command_id=result.command_id,
        done_at=_done_at(result.stdout),
        output=result.stdout,
    )


def _done_at(stdout: str) -> datetime:
    """When systemctl returned, as the node printed it; else now, which is later still."""
    match = _STAMP_LINE.search(stdout)
    if match is None:
        return datetime.now(UTC)
    # The stamp is cut to the second: the next second is surely after the restart.
    stamp = datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return stamp + timedelta(seconds=1)


def restart(
    ssm: SSMClient,
    ec2: EC2Client,
    instance_id: str,
    version: str,
    *,
    poll_s: float = 2.0,
    units: Sequence[str] = (UNIT,),
) -> ServiceAction:
    return _run(ssm, ec2, instance_id, "restart", restart_script(version, units), poll_s)


def start(
    ssm: SSMClient, ec2: EC2Client, instance_id: str, *, poll_s: float = 2.0, unit: str = UNIT
) -> ServiceAction:
    return _run(ssm, ec2, instance_id, "start", start_script(unit), poll_s, unit)


def stop(
    ssm: SSMClient, ec2: EC2Client, instance_id: str, *, poll_s: float = 2.0, unit: str = UNIT
) -> ServiceAction:
    return _run(ssm, ec2, instance_id, "stop", stop_script(unit), poll_s, unit)

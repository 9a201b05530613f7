"""Shell commands on the driver node through SSM Run Command (``AWS-RunShellScript``).

No SSH, no open port: the driver's instance profile lets the SSM agent take
commands, and the operator's IAM identity decides who may send them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError, WaiterError

from app.ops.errors import CommandError, DriverStateError

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ssm import SSMClient

DOCUMENT = "AWS-RunShellScript"


@dataclass(frozen=True, slots=True)
class CommandResult:
    command_id: str
    instance_id: str
    status: str
    response_code: int
    stdout: str
    stderr: str


def driver_running_check(ec2: EC2Client, instance_id: str) -> None:
    """Fail fast, naming the state found, unless the driver instance is running."""
    try:
        reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    except ClientError as exc:
        raise DriverStateError(
            instance_id, f"unknown to EC2 ({exc.response['Error']['Code']})"
        ) from None
    instances = [i for r in reservations for i in r["Instances"]]
    state = instances[0]["State"]["Name"] if instances else "not found"
    if state != "running":
        raise DriverStateError(instance_id, state)


def run_shell(
    ssm: SSMClient,
    instance_id: str,
    script: Sequence[str],
    *,
    what: str,
    timeout_s: int = 600,
    poll_s: float = 2.0,
) -> CommandResult:
    """Run ``script`` (lines of ``sh``) on the instance; wait for it; fail unless it succeeded.

    ``what`` names the action in errors, e.g. ``"restart of tablecast-job.service"``.
    botocore's ``command_executed`` waiter asks until the invocation is done (and
    while it does not exist yet, right after ``send_command``).
    """
    sent = ssm.send_command(
        InstanceIds=[instance_id],
        DocumentName=DOCUMENT,
        Comment=what[:100],
        Parameters={"commands": list(script), "executionTimeout": [str(timeout_s)]},
        TimeoutSeconds=max(30, timeout_s),
    )
    command_id = sent["Command"]["CommandId"]
    asked = {"CommandId": command_id, "InstanceId": instance_id}
    try:
        ssm.get_waiter("command_executed").wait(
            **asked,
            WaiterConfig={"Delay": poll_s, "MaxAttempts": math.ceil((timeout_s + 60) / poll_s)},  # type: ignore[typeddict-item]
        )
    except WaiterError as exc:
        last = exc.last_response
        # A final state, or SSM's error (not InvocationDoesNotExist), or still running.
        status = str(
            last.get("Status")
            or last.get("Error", {}).get("Code")
            or "still running at our deadline"
        )
        output = str(last.get("StandardErrorContent") or last.get("StandardOutputContent") or "")
        raise CommandError(instance_id, command_id, status, what, output) from None
    invocation = ssm.get_command_invocation(**asked)
    return CommandResult(
        command_id=command_id,
        instance_id=instance_id,
        status=invocation["Status"],
        response_code=invocation.get("ResponseCode", -1),
        stdout=invocation.get("StandardOutputContent", ""),
        stderr=invocation.get("StandardErrorContent", ""),
    )

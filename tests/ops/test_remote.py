"""Run Command on the driver as SSM answers it: not there yet, running, then done or failed.

moto answers every invocation ``Success`` at once; botocore's Stubber (the
library's own stand-in for AWS's answers) gives the states a real driver goes
through.
"""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from botocore.stub import Stubber

from app.ops import remote
from app.ops.errors import CommandError

INSTANCE = "i-0123456789abcdef0"
COMMAND = "0b6a1c2d-0000-4000-8000-000000000001"


@pytest.fixture
def ssm() -> Iterator[tuple[object, Stubber]]:
    client = boto3.client(
        "ssm",
        region_name="eu-west-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    with Stubber(client) as stubber:
        stubber.add_response("send_command", {"Command": {"CommandId": COMMAND}})
        yield client, stubber


def _invocation(status: str, stdout: str = "", stderr: str = "") -> dict[str, object]:
    return {
        "CommandId": COMMAND,
        "InstanceId": INSTANCE,
        "Status": status,
        "ResponseCode": 0 if status == "Success" else 1,
        "StandardOutputContent": stdout,
        "StandardErrorContent": stderr,
    }


def test_a_command_is_waited_for_until_it_succeeds_and_its_output_returned(
    ssm: tuple[object, Stubber],
) -> None:
    client, stubber = ssm
    stubber.add_client_error("get_command_invocation", "InvocationDoesNotExist")
    stubber.add_response("get_command_invocation", _invocation("InProgress"))
    for _ in range(2):  # the waiter's answer, and the result read once it is done
        stubber.add_response("get_command_invocation", _invocation("Success", stdout="ok\n"))
    result = remote.run_shell(client, INSTANCE, ["true"], what="a test", poll_s=0.01)  # type: ignore[arg-type]
    assert (result.command_id, result.status, result.stdout) == (COMMAND, "Success", "ok\n")


def test_a_failed_command_is_one_error_with_its_status_and_the_tail_of_its_output(
    ssm: tuple[object, Stubber],
) -> None:
    client, stubber = ssm
    stubber.add_response("get_command_invocation", _invocation("InProgress"))
    stubber.add_response(
        "get_command_invocation", _invocation("Failed", stderr="one\ntwo\nthree\nfour\n")
    )
    with pytest.raises(CommandError) as failed:
        remote.run_shell(client, INSTANCE, ["false"], what="restart of x", poll_s=0.01)  # type: ignore[arg-type]
    assert failed.value.status == "Failed"
    assert str(failed.value) == (
        f"restart of x on {INSTANCE} ended Failed (command {COMMAND}): two | three | four"
    )

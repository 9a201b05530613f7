"""A command's end as the operator sees it: app.cli.outcome."""

from __future__ import annotations

import contextlib
import os
import signal

import pytest

from app.cli.outcome import outcome
from app.errors import ExitCode


def _swallowed_ctrl_c() -> int:
    """A Ctrl-C whose KeyboardInterrupt a library takes for a failure of its own, as py4j's
    connection did mid-call while Spark started (the command then failed later)."""
    with contextlib.suppress(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
    raise RuntimeError("Error while obtaining a new communication channel")


def _plain_failure() -> int:
    raise RuntimeError("Error while obtaining a new communication channel")


def test_a_ctrl_c_a_library_swallowed_still_ends_as_interrupted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = signal.getsignal(signal.SIGINT)
    assert outcome("tablecast run", _swallowed_ctrl_c) == ExitCode.INTERRUPTED
    assert capsys.readouterr().err == "tablecast run: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is before  # the command's handler is gone with it
    # The same failure without a Ctrl-C is what it is: unexpected, one line.
    assert outcome("tablecast run", _plain_failure) == ExitCode.UNEXPECTED
    err = capsys.readouterr().err
    assert err.startswith("tablecast run: unexpected error RuntimeError: Error while obtaining")
    assert err.count("\n") == 1


def test_kafka_brokers_that_do_not_answer_an_admin_call_are_one_line_and_exit_5(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An operator tool's metadata call to brokers nobody listens for (tablecast-ops produce
    did this before it checked anything else) was an unexpected error with a traceback."""
    from confluent_kafka.admin import AdminClient

    from app.local.processes import LOOPBACK, free_port

    admin = AdminClient({"bootstrap.servers": f"{LOOPBACK}:{free_port()}", "log_level": 0})

    def produce() -> int:
        admin.list_topics(timeout=1)
        return 0

    assert outcome("tablecast-ops produce", produce) == ExitCode.UNAVAILABLE
    err = capsys.readouterr().err
    assert err == (
        "tablecast-ops produce: Kafka's brokers did not answer: Failed to get metadata: "
        "Local: Broker transport failure\n"
    )

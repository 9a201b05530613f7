"""The job's cleanup after Ctrl-C: a JVM call that fails while the interrupt unwinds (py4j's
connection cut by it) leaves the interrupt, exit 130, as what the user sees."""

from __future__ import annotations

import sys

import pytest
from py4j.protocol import Py4JNetworkError

from app.spark.job import _cleanup


def _jvm_gone() -> None:
    raise Py4JNetworkError("Answer from Java side is empty")


def test_a_cleanup_failing_while_ctrl_c_unwinds_leaves_the_interrupt() -> None:
    with pytest.raises(KeyboardInterrupt):
        try:
            raise KeyboardInterrupt
        finally:
            _cleanup(_jvm_gone, sys.exc_info()[1])


def test_a_cleanup_failing_after_a_clean_run_is_raised() -> None:
    with pytest.raises(Py4JNetworkError):
        try:
            pass
        finally:
            _cleanup(_jvm_gone, sys.exc_info()[1])

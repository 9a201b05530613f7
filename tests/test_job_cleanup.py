"""The job's cleanup after Ctrl-C: a JVM call that fails while the interrupt unwinds (py4j's
connection cut by it) leaves the interrupt, exit 130, as what the user sees."""

from __future__ import annotations

import logging
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


def test_after_ctrl_c_a_failed_cleanup_is_no_warning_after_a_failure_it_is(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The interrupt's one line is all a user who pressed Ctrl-C reads (the cut connection is
    logged at debug level); after a failure the cleanup's own failure is a warning."""
    with caplog.at_level(logging.DEBUG, logger="app.spark.job"), pytest.raises(KeyboardInterrupt):
        try:
            raise KeyboardInterrupt
        finally:
            _cleanup(_jvm_gone, sys.exc_info()[1])
    assert [(r.levelno, "Java side" in r.getMessage()) for r in caplog.records] == [
        (logging.DEBUG, True)
    ]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="app.spark.job"), pytest.raises(RuntimeError):
        try:
            raise RuntimeError("the batch failed")
        finally:
            _cleanup(_jvm_gone, sys.exc_info()[1])
    assert [r.levelno for r in caplog.records] == [logging.WARNING]

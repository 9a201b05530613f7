"""A test that runs the job as another version of it leaves the next test the package's.

The two tests run in this order (pytest keeps a module's order): the second
proves nothing alone, it checks what the first left behind.
"""

from __future__ import annotations

import pytest

import app
from app.code_version import job_version
from tests.spark.faulty_version import FIXED, as_version


def test_the_job_runs_as_the_version_a_test_names(monkeypatch: pytest.MonkeyPatch) -> None:
    as_version(monkeypatch, FIXED)
    assert job_version().version == FIXED


def test_the_next_test_runs_as_the_package_version() -> None:
    assert job_version().version == app.__version__

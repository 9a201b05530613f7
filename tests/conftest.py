"""Shared fixtures: one local SparkSession per test session, capture factories."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from app.spark_session import spark_session

    session = spark_session("local[2]")
    yield session
    session.stop()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path

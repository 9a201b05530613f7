"""Shared fixtures: one local SparkSession and one tansu broker per test session."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.code_version import job_version
from app.sources.kafka_client import KafkaEndpoint
from tests.tansu import running_broker

# Every test ends the threads and processes it starts (tests/leaks.py).
pytest_plugins = ["tests.leaks"]

# moto's servers log each request at INFO through werkzeug, whose handler keeps
# the stream of the test that made it: later tests' output would get "Logging error".
logging.getLogger("werkzeug").setLevel(logging.WARNING)

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from app.spark.session import spark_session

    session = spark_session("local[2]")
    yield session
    session.stop()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaEndpoint]:
    """A tansu broker on 127.0.0.1 for the whole session; topics are per test."""
    with running_broker(tmp_path_factory.mktemp("tansu") / "tansu.log") as running:
        yield running.endpoint


@pytest.fixture
def moto_aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto in this process (``mock_aws``), with credentials that can reach nothing real
    and no endpoint or profile of the caller's environment, in region eu-west-1."""
    from moto import mock_aws

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_REGION": "eu-west-1",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_CLOUDWATCH"):
        monkeypatch.delenv(name, raising=False)
    with mock_aws():
        yield


@pytest.fixture(autouse=True)
def _job_version_of_the_package() -> Iterator[None]:
    """A test that runs the job as another version (tests/spark/faulty_version.py sets it
    in the environment and clears the cache) leaves the next test the package's version:
    its environment is restored after it, and the cached version is dropped here."""
    yield
    job_version.cache_clear()


@pytest.fixture(autouse=True)
def _rewrites_retire_at_the_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rewrite in a test retires its old names right after its table snapshot, unless
    the test gives it a grace (the tests of readers during a rewrite do): the default
    would make each rewrite wait two minutes. Processes a test starts keep the default."""
    from app.sink import rewrite as rewrite_mod

    monkeypatch.setattr(rewrite_mod, "DEFAULT_GRACE_S", 0.0)

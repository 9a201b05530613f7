"""The moto server the run-job and node-jobs tests point AWS's clients at."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ami.run_job_harness import moto_aws


@pytest.fixture
def aws() -> Iterator[dict[str, str]]:
    """A fresh moto server on loopback for the test; the environment that reaches it."""
    with moto_aws() as env:
        yield env

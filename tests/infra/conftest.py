"""Synthesize every environment once per test session (importing the provider takes ~15 s)."""

import sys
from pathlib import Path

import pytest

# infra/ is not an installed package (pyproject installs app/ only) and the
# `pytest` script, unlike `python -m pytest`, does not put the working
# directory on sys.path; without pyproject's `pythonpath = ["."]`, do it here.
REPOSITORY = str(Path(__file__).resolve().parents[2])
if REPOSITORY not in sys.path:
    sys.path.insert(0, REPOSITORY)

from infra.config import ENVIRONMENTS, EnvironmentConfig  # noqa: E402
from infra.testing import SynthesizedEnvironment, synthesize  # noqa: E402


@pytest.fixture(scope="session")
def configs() -> dict[str, EnvironmentConfig]:
    """Every configured environment, by name."""
    return {name: make() for name, make in ENVIRONMENTS.items()}


@pytest.fixture(scope="session")
def synthesized(
    configs: dict[str, EnvironmentConfig], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, SynthesizedEnvironment]:
    """Every environment's stacks as ``make synth`` writes them, by environment name."""
    outdir: Path = tmp_path_factory.mktemp("cdktf.out")
    return synthesize(list(configs.values()), outdir)


@pytest.fixture(scope="session", params=sorted(ENVIRONMENTS))
def env(
    request: pytest.FixtureRequest, synthesized: dict[str, SynthesizedEnvironment]
) -> SynthesizedEnvironment:
    """Each environment in turn: tests that take it run once per environment."""
    name: str = request.param
    return synthesized[name]

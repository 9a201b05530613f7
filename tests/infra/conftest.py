"""Synthesize every environment once per test session (importing the provider takes ~15 s)."""

from pathlib import Path

import pytest

from infra.config import ENVIRONMENTS, EnvironmentConfig
from infra.testing import SynthesizedEnvironment, synthesize


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

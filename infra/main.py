"""Entry point: synthesize the environments' stacks (``cdktf.json`` and ``make synth`` run it).

``python -m infra.main`` writes ``cdktf.out/stacks/tablecast-<env>-<component>/cdk.tf.json``
(or under ``$CDKTF_OUTDIR``, which the cdktf CLI sets), for every environment
and every test pipeline that file declares, or those named in
``$TABLECAST_ENVIRONMENTS`` (comma-separated), with the deployment settings
of the file ``$TABLECAST_SETTINGS`` names. Anything
invalid or missing stops it with a one-line message and exit status 2.
"""

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from infra.cdk import App
from infra.config import ConfigError, EnvironmentConfig
from infra.config.environments import ENVIRONMENTS, EnvironmentFactory, configure
from infra.config.settings import (
    SETTINGS_VARIABLE,
    TESTING_SETTINGS,
    DeploymentSettings,
    load_settings,
)
from infra.config.test_pipelines import pipeline_configs
from infra.stacks import EnvironmentStacks, build_environment

ENVIRONMENTS_VARIABLE = "TABLECAST_ENVIRONMENTS"


def build_app(app: App, configs: list[EnvironmentConfig]) -> dict[str, EnvironmentStacks]:
    """Add every environment's stacks to ``app``."""
    return {config.name: build_environment(app, config) for config in configs}


def settings_from(environ: Mapping[str, str]) -> tuple[Path | None, dict[str, DeploymentSettings]]:
    """The settings file named by ``$TABLECAST_SETTINGS`` and its tables (none if unset)."""
    named = environ.get(SETTINGS_VARIABLE, "").strip()
    if not named:
        return None, {}
    path = Path(named)
    return path, load_settings(path)


def chosen_environments(environ: Mapping[str, str]) -> list[str] | None:
    """The names in ``$TABLECAST_ENVIRONMENTS``, or ``None`` for every environment."""
    named = environ.get(ENVIRONMENTS_VARIABLE, "").strip()
    return [name.strip() for name in named.split(",") if name.strip()] if named else None


def configure_all(
    path: Path | None,
    settings: Mapping[str, DeploymentSettings],
    chosen: list[str] | None,
    environments: Mapping[str, EnvironmentFactory] = ENVIRONMENTS,
) -> list[EnvironmentConfig]:
    """The chosen environments and the test pipelines the settings file declares (all: None).

    Every test pipeline's network is checked against every environment that has
    settings and against every other test pipeline, chosen or not.
    """
    declared = (
        []
        if path is None
        else pipeline_configs(
            path,
            settings,
            configure(settings, [n for n in environments if n in settings], environments),
        )
    )
    if chosen is None:
        return [*configure(settings, None, environments), *declared]
    by_name = {config.name: config for config in declared}
    fixed = configure(settings, [name for name in chosen if name not in by_name], environments)
    return [*fixed, *(by_name[name] for name in chosen if name in by_name)]


def main(
    environments: Mapping[str, EnvironmentFactory] = ENVIRONMENTS,
    outdir: str | None = None,
    environ: Mapping[str, str] = os.environ,
) -> int:
    """Synthesize; return the exit status.

    :param outdir: where to write; by default ``$CDKTF_OUTDIR`` or ``cdktf.out``.
    :param environ: where ``TABLECAST_SETTINGS`` and ``TABLECAST_ENVIRONMENTS`` are read.
    """
    try:
        path, settings = settings_from(environ)
        configs = configure_all(path, settings, chosen_environments(environ), environments)
    except ConfigError as error:
        print(f"infra: invalid configuration: {error}", file=sys.stderr)
        return 2
    app = App(outdir=outdir)
    build_app(app, configs)
    app.synth()
    if path is not None and path.resolve() == TESTING_SETTINGS:
        print(
            f"infra: synthesized with the throwaway settings of {TESTING_SETTINGS.name} "
            "(account 000000000000): for tests, never for deploying",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

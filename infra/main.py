"""Entry point: synthesize every environment's stacks (``cdktf.json`` and ``make synth`` run it).

``python -m infra.main`` writes ``cdktf.out/stacks/tablecast-<env>-<component>/cdk.tf.json``
(or under ``$CDKTF_OUTDIR``, which the cdktf CLI sets). An invalid
environment stops it with a one-line message and exit status 2.
"""

import sys
from collections.abc import Callable, Mapping

from cdktf import App

from infra.config import ENVIRONMENTS, ConfigError, EnvironmentConfig
from infra.stacks import EnvironmentStacks, build_environment


def build_app(
    app: App,
    environments: Mapping[str, Callable[[], EnvironmentConfig]] = ENVIRONMENTS,
) -> dict[str, EnvironmentStacks]:
    """Add every environment's stacks to ``app``; raises ``ConfigError`` on an invalid one."""
    configs = [make() for make in environments.values()]
    return {config.name: build_environment(app, config) for config in configs}


def main(
    environments: Mapping[str, Callable[[], EnvironmentConfig]] = ENVIRONMENTS,
    outdir: str | None = None,
) -> int:
    """Synthesize; return the exit status.

    :param outdir: where to write; by default ``$CDKTF_OUTDIR`` or ``cdktf.out``.
    """
    app = App(outdir=outdir)
    try:
        build_app(app, environments)
    except ConfigError as error:
        print(f"infra: invalid configuration: {error}", file=sys.stderr)
        return 2
    app.synth()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""infra's configuration of an environment, as the pipeline on one machine takes it.

The pipeline on one machine (``app/local``) stands in for infra's throwaway
environment or a test pipeline ``testing.toml`` declares; it writes the very
hand-off values infra's hand-off stack writes. ``app`` does not import
``infra``: this module makes the facts it needs (:class:`app.local.stand_in.StandIn`),
and the caller passes them in.
"""

from functools import partial

from app.errors import ConfigurationError
from app.local.stand_in import SANDBOX, StandIn
from infra.config import layout
from infra.config.environments import ENVIRONMENTS
from infra.config.handoff import handoff_values
from infra.config.model import EnvironmentConfig
from infra.config.settings import TESTING_SETTINGS, load_settings
from infra.config.test_pipelines import pipeline_configs


def environment_config(name: str = SANDBOX) -> EnvironmentConfig:
    """infra's throwaway environment or a test pipeline testing.toml declares, with the
    throwaway settings (no account is real)."""
    settings = load_settings(TESTING_SETTINGS)
    if name == SANDBOX:
        return ENVIRONMENTS[SANDBOX](settings[SANDBOX])
    declared = {config.name: config for config in pipeline_configs(TESTING_SETTINGS, settings)}
    if name not in declared:
        raise ConfigurationError(
            f"environment {name!r}: the pipeline on one machine stands in for {SANDBOX} or "
            f"a test pipeline of {TESTING_SETTINGS.name} ({', '.join(declared) or 'none'})"
        )
    return declared[name]


def stand_in(name: str = SANDBOX) -> StandIn:
    """What the pipeline on one machine needs of environment ``name``'s configuration."""
    config = environment_config(name)
    bucket = layout.bucket_name(config.resource_prefix, config.deployment.account_id, config.region)
    return StandIn(
        environment=name,
        region=config.region,
        bucket=bucket,
        alarm_topic=f"{config.resource_prefix}-alarms",
        handoff_values=partial(handoff_values, config=config, bucket_name=bucket),
    )

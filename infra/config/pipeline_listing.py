"""infra's test pipelines, as ``tablecast-ops pipelines`` lists them, and an
environment's jobs' processors, as ``tablecast-ops deploy`` ships them.

``app`` does not import ``infra``: this module reads the declarations of a
settings file and makes the facts the listing and the deploy need
(:class:`app.ops.pipelines.Declarations`); ``scripts/tablecast_ops.py`` and the
tests pass them in.
"""

from pathlib import Path

from app.errors import ConfigurationError
from app.ops.pipelines import Declaration, Declarations, Footprint
from app.ops.processors import JobProcessor
from infra.config.errors import ConfigError
from infra.config.model import EnvironmentConfig
from infra.config.node_services import interface_endpoint_services
from infra.config.settings import SETTINGS_VARIABLE, load_settings
from infra.config.sizing import ROOT_VOLUME_GIB
from infra.config.test_pipelines import destroy_command, pipeline_configs


def footprint(config: EnvironmentConfig) -> Footprint:
    """What ``config`` runs and stores on."""
    return Footprint(
        region=config.region,
        driver_instance_type=config.driver_instance_type,
        worker_instance_type=config.spark_worker_instance_type,
        worker_count=config.spark_worker_count,
        broker_instance_type=config.broker_instance_type,
        broker_count=config.broker_count,
        broker_volume_gib=config.effective_broker_volume_gib,
        node_volume_gib=ROOT_VOLUME_GIB + config.spark_data_volume_gib,
        # Each interface endpoint sits in every zone's Spark subnet (infra/stacks/network.py).
        interface_endpoint_zones=len(interface_endpoint_services(config))
        * len(config.availability_zones),
    )


def read(settings: Path) -> list[Declaration]:
    """Every test pipeline ``settings`` declares; one line naming what is invalid."""
    try:
        configs = pipeline_configs(settings, load_settings(settings))
    except ConfigError as exc:
        raise ConfigurationError(f"invalid configuration: {exc}") from None
    declarations = []
    for config in configs:
        declared = config.test_pipeline
        assert declared is not None  # pipeline_configs makes test pipelines only
        declarations.append(
            Declaration(
                name=config.name,
                owner=declared.owner.address,
                purpose=declared.purpose,
                created=declared.created,
                expires=declared.expires,
                footprint=footprint(config),
            )
        )
    return declarations


def job_processors(settings: Path, environment: str) -> list[JobProcessor]:
    """Each job ``settings`` declares in ``environment`` (none where it names no such
    environment, e.g. a test pipeline's), its processor; one line naming what is invalid."""
    try:
        found = load_settings(settings).get(environment)
    except ConfigError as exc:
        raise ConfigurationError(f"invalid configuration: {exc}") from None
    return [job.shipped() for job in found.jobs] if found is not None else []


def declarations() -> Declarations:
    """What ``tablecast-ops pipelines`` and ``deploy`` need of infra's configuration."""
    return Declarations(
        read=read,
        destroy_command=destroy_command,
        settings_variable=SETTINGS_VARIABLE,
        job_processors=job_processors,
    )

"""What the pipeline on one machine takes from infra's configuration of its environment.

``infra/`` imports ``app/`` (the hand-off's names, the Kafka client's
options), so nothing in ``app/`` imports ``infra/``: the caller reads infra's
configuration and passes these facts in (:func:`infra.config.stand_in.stand_in`
makes them; ``scripts/local_pipeline.py`` and the tests call it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

SANDBOX = "sandbox"
"""infra's throwaway environment: what the pipeline stands in for unless told otherwise."""


class HandoffValues(Protocol):
    """infra's hand-off values of the environment, given what only the running pipeline knows."""

    def __call__(
        self, *, bootstrap_brokers_iam: str, driver_private_ip: str, driver_instance_id: str
    ) -> dict[str, str]: ...


@dataclass(frozen=True)
class StandIn:
    """The environment the pipeline on one machine stands in for, as infra configures it."""

    environment: str
    """infra's throwaway environment (the sandbox) or a test pipeline testing.toml declares."""
    region: str
    bucket: str
    """The environment's bucket: output, archive, artifacts and checkpoint backups."""
    alarm_topic: str
    """The SNS topic the environment's alarms notify."""
    handoff_values: HandoffValues

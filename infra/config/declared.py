"""A test pipeline as the deployment settings declare it: who owns it, until when, and why.

Kept apart from its parsing (``infra/config/test_pipelines.py``) so that
:class:`infra.config.model.EnvironmentConfig` can carry it without a cycle.
"""

from dataclasses import dataclass
from datetime import date, timedelta

from app.ops.pipelines import EXPIRES_TAG, OWNER_TAG, PURPOSE_TAG, TEST_PIPELINE_TAG
from infra.config.settings import AlarmEndpoint

EXPIRY_NOTICE_HOUR_UTC = 9
"""The owner is told at 09:00 UTC on the expiry date, and every day after; the pipeline's
Spark nodes are stopped then too."""
ADVANCE_NOTICE_DAYS = 3
"""The owner is told daily this many days before the expiry date (from its creation at the
earliest)."""


@dataclass(frozen=True, kw_only=True)
class DeclaredPipeline:
    """The facts of one declared test pipeline that are not the environment's shape."""

    owner: AlarmEndpoint
    """Who is notified at expiry (an email address or an https:// URL), subscribed to the
    pipeline's own alarm topic."""
    purpose: str
    """One line: what the pipeline is for."""
    created: date
    """When it was declared; its age counts from this day."""
    expires: date
    """From this day on the owner is notified daily until it is destroyed."""
    source: str
    """The settings file it is declared in, for messages."""

    @property
    def tags(self) -> dict[str, str]:
        """Tags every resource of its stacks carries (the provider's default tags)."""
        # tablecast-ops pipelines finds what is deployed by these (app/ops/pipelines.py).
        return {
            OWNER_TAG: self.owner.address,
            EXPIRES_TAG: self.expires.isoformat(),
            PURPOSE_TAG: self.purpose,
            TEST_PIPELINE_TAG: "true",
        }

    @property
    def first_notice(self) -> str:
        """The first notification's moment, as EventBridge Scheduler's ``start_date`` takes it."""
        return _at_notice_hour(self.expires)

    @property
    def first_advance_notice(self) -> str:
        """The first notification before expiry (``ADVANCE_NOTICE_DAYS`` before it)."""
        return _at_notice_hour(max(self.created, self.expires - timedelta(ADVANCE_NOTICE_DAYS)))


def _at_notice_hour(day: date) -> str:
    return f"{day.isoformat()}T{EXPIRY_NOTICE_HOUR_UTC:02d}:00:00Z"

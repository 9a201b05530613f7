"""Rule 6 across topic-partitions: which partition owns each session.

Each partition's task sees only its own partition, so it cannot tell a new
session from one that lives elsewhere. It reports :class:`Claim` events
instead (a session first seen, or established again); the driver checks
them here against the :class:`Registry` of sessions the other partitions
own, before anything of the batch becomes visible.

Ownership is decided in processing order: a session belongs to the
partition that established it first, and within one micro-batch, where the
order across partitions is not defined, to the first partition in (topic,
partition) order. A session claimed by a second partition is a violation
there, at the offset of its first message in that partition.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from app.contract.offsets import TopicPartition
from app.engine.machine import Claim
from app.errors import Rule, Violation

log = logging.getLogger(__name__)

# Sessions each partition must treat as foreign: partition -> session -> owner.
Foreign = Mapping[TopicPartition, Mapping[str, TopicPartition]]
# A resync batch runs at most this often to settle rule 6 (each pass can only
# add foreign sessions, so it settles after one more pass in practice).
MAX_PASSES = 3


@dataclass(frozen=True, slots=True)
class Trespass:
    """A session seen in a partition that does not own it."""

    session: str
    tp: TopicPartition  # where it was seen
    offset: int  # its first message there
    owner: TopicPartition

    def violation(self) -> Violation:
        return Violation(
            self.tp.topic, self.tp.partition, self.offset, self.session, Rule.ONE_PARTITION,
            str(self.owner), str(self.tp),
        )  # fmt: skip


@dataclass
class Registry:
    """Every session some partition owns, with its partition."""

    owners: dict[str, TopicPartition] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.owners)

    def trespasses(self, claims: Mapping[TopicPartition, Sequence[Claim]]) -> list[Trespass]:
        """The claims of one batch that break rule 6, in (topic, partition, offset) order."""
        first: dict[str, TopicPartition] = {}  # established in this batch, by the first claimant
        for tp in sorted(claims):
            for claim in claims[tp]:
                if claim.established and claim.session not in self.owners:
                    first.setdefault(claim.session, tp)
        found: list[Trespass] = []
        for tp in sorted(claims):
            reported: set[str] = set()
            for claim in claims[tp]:
                owner = self.owners.get(claim.session) or first.get(claim.session)
                if owner is not None and owner != tp and claim.session not in reported:
                    reported.add(claim.session)
                    found.append(Trespass(claim.session, tp, claim.offset, owner))
        return found

    def apply(
        self,
        claims: Mapping[TopicPartition, Sequence[Claim]],
        dropped: Mapping[TopicPartition, Iterable[str]],
    ) -> None:
        """Record a published batch: sessions that expired, then sessions established."""
        for tp, sessions in dropped.items():
            for session in sessions:
                if self.owners.get(session) == tp:
                    del self.owners[session]
        for tp in sorted(claims):
            for claim in claims[tp]:
                if claim.established:
                    self.owners.setdefault(claim.session, tp)


class PassOutcome(Protocol):
    """What one pass over a batch's partitions reports (tasks on Spark, or in process)."""

    @property
    def claims(self) -> Mapping[TopicPartition, Sequence[Claim]]: ...

    violations: list[Violation]


OutcomeT = TypeVar("OutcomeT", bound=PassOutcome)


def settle(run_pass: Callable[[Foreign], OutcomeT], registry: Registry, strict: bool) -> OutcomeT:
    """Run a batch's partitions until no session is claimed by a second partition.

    Strict: one pass; a trespass becomes the violation at its record (in
    place of whatever the partition itself saw there). Resync: pass again
    with the trespassers' sessions foreign, so that they are quarantined.
    """
    foreign: Foreign = {}
    for _ in range(MAX_PASSES):
        outcome = run_pass(foreign)
        trespasses = registry.trespasses(outcome.claims)
        if not trespasses:
            return outcome
        if strict:
            outcome.violations = _with_trespasses(outcome.violations, trespasses)
            return outcome
        log.info("rule 6: %d sessions in a second partition; running the batch again",
                 len(trespasses))  # fmt: skip
        foreign = _foreign(trespasses, foreign)
    raise AssertionError(f"rule 6 did not settle in {MAX_PASSES} passes")


def _with_trespasses(violations: list[Violation], trespasses: list[Trespass]) -> list[Violation]:
    """The violations, rule 6 replacing a partition's own view of the same record."""
    found = {(t.tp, t.offset): t.violation() for t in trespasses}
    kept = [v for v in violations if (TopicPartition(v.topic, v.partition), v.offset) not in found]
    return sorted([*kept, *found.values()], key=lambda v: (v.topic, v.partition, v.offset))


def _foreign(trespasses: list[Trespass], known: Foreign) -> Foreign:
    foreign = {tp: dict(sessions) for tp, sessions in known.items()}
    for t in trespasses:
        foreign.setdefault(t.tp, {})[t.session] = t.owner
    return foreign

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
from app.engine.machine import Claim, Drop
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
            topic=self.tp.topic,
            partition=self.tp.partition,
            offset=self.offset,
            session=self.session,
            rule=Rule.ONE_PARTITION,
            expected=str(self.owner),
            got=str(self.tp),
        )


# One partition's claims and drops of a batch, in the order they happened there.
_Event = tuple[int, int, Claim | Drop]


def _events(claims: Sequence[Claim], dropped: Iterable[Drop]) -> list[_Event]:
    """Offset order; at one offset the drop comes first (the machine expires a
    session before it applies the message that finds it idle)."""
    found: list[_Event] = [(d.offset, 0, d) for d in dropped]
    found += [(c.offset, 1, c) for c in claims]
    return sorted(found, key=lambda e: (e[0], e[1]))


@dataclass
class Registry:
    """Every session some partition owns, with its partition.

    A batch's claims and drops are taken partition by partition in (topic,
    partition) order, each partition's in offset order: within a batch the
    order across partitions is not defined, so it is taken as that one. A
    session opened and expired in one batch is owned by nobody after it, as
    after a restart (the registry is then rebuilt from the states alone).
    """

    owners: dict[str, TopicPartition] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.owners)

    def trespasses(
        self,
        claims: Mapping[TopicPartition, Sequence[Claim]],
        dropped: Mapping[TopicPartition, Iterable[Drop]] | None = None,
    ) -> list[Trespass]:
        """The claims of one batch that break rule 6, in (topic, partition, offset) order."""
        owners = dict(self.owners)
        first: dict[str, TopicPartition] = {}  # established in this batch, by the first claimant
        found: dict[tuple[TopicPartition, str], Trespass] = {}
        unowned: list[tuple[TopicPartition, Claim]] = []  # stray first messages, owner unknown
        for tp in sorted(set(claims) | set(dropped or {})):
            for _, _, event in _events(claims.get(tp, ()), (dropped or {}).get(tp, ())):
                if isinstance(event, Drop):
                    if owners.get(event.session) == tp:
                        del owners[event.session]
                    continue
                owner = owners.get(event.session)
                if owner is not None and owner != tp:
                    found.setdefault(
                        (tp, event.session), Trespass(event.session, tp, event.offset, owner)
                    )
                elif event.established:
                    owners[event.session] = tp
                    first.setdefault(event.session, tp)
                elif owner is None:
                    unowned.append((tp, event))
        for tp, claim in unowned:
            owner = first.get(claim.session)
            if owner is not None and owner != tp:
                found.setdefault(
                    (tp, claim.session), Trespass(claim.session, tp, claim.offset, owner)
                )
        return sorted(found.values(), key=lambda t: (t.tp, t.offset))

    def apply(
        self,
        claims: Mapping[TopicPartition, Sequence[Claim]],
        dropped: Mapping[TopicPartition, Iterable[Drop]],
    ) -> None:
        """Record a published batch: its sessions established and expired, in order."""
        for tp in sorted(set(claims) | set(dropped)):
            for _, _, event in _events(claims.get(tp, ()), dropped.get(tp, ())):
                if isinstance(event, Drop):
                    if self.owners.get(event.session) == tp:
                        del self.owners[event.session]
                elif event.established:
                    self.owners.setdefault(event.session, tp)


class PassOutcome(Protocol):
    """What one pass over a batch's partitions reports (tasks on Spark, or in process)."""

    @property
    def claims(self) -> Mapping[TopicPartition, Sequence[Claim]]: ...

    @property
    def dropped(self) -> Mapping[TopicPartition, Sequence[Drop]]: ...

    violations: list[Violation]
    foreign: Foreign  # what the returned pass was told (a ledger entry records it)


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
        outcome.foreign = foreign
        trespasses = registry.trespasses(outcome.claims, outcome.dropped)
        if not trespasses:
            return outcome
        if strict:
            outcome.violations = _with_trespasses(outcome.violations, trespasses)
            return outcome
        log.info(
            "rule 6: %d sessions in a second partition; running the batch again", len(trespasses)
        )
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

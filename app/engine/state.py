"""What the engine remembers between micro-batches, per topic-partition.

Kafka delivers a session's messages in order inside one topic-partition
(CONTRACT.md section 1), so the state is kept per topic-partition: every
session seen there, and the partition's clock. A version of it is named by
the offset it reaches: :attr:`PartitionState.offset` is the next offset to
read, so the state holds the effect of every record before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic

from app.contract.offsets import TopicPartition
from app.contract.processor import StateT


@dataclass(slots=True)
class SessionState(Generic[StateT]):
    """One session, as its topic-partition remembers it."""

    session: str
    last_seq: int  # -1 while quarantined before any valid message
    # The offset of the last message applied; quarantined before any: the offset that
    # quarantined it.
    last_offset: int
    # The envelope's ts of the last message applied (ms); quarantined before any: the
    # record timestamp of the message that quarantined it.
    last_ts: int
    seen_ms: int  # the record timestamp of the session's last message: its idle clock
    closed: bool = False  # an `end` arrived; kept so that rule 5 can be enforced
    quarantine: str | None = None  # resync mode: why the session awaits a snapshot
    # Resync mode: the session lives in another topic-partition (rule 6), so
    # every message of it here is quarantined, snapshots included.
    owner: TopicPartition | None = None
    user: StateT | None = None  # the processor's state
    # Integrity classes ordered and once: messages dropped (a seq at or below the last
    # applied, or applied before) and seqs that never arrived, over the session's life.
    repeats: int = 0
    gaps: int = 0
    # Class once: the seqs applied above ``last_seq``, which is then the highest seq up to
    # which every one was applied (-1: none yet).
    ahead: set[int] | None = None

    @classmethod
    def opened(
        cls, session: str, seq: int, offset: int, ts: int, seen: int
    ) -> SessionState[StateT]:
        """A session opened by the message at ``offset`` (envelope ``ts``, record time ``seen``)."""
        return cls(session=session, last_seq=seq, last_offset=offset, last_ts=ts, seen_ms=seen)

    @classmethod
    def quarantined_at(cls, session: str, offset: int, seen: int) -> SessionState[StateT]:
        """A session whose first message, at ``offset``, broke a rule (resync mode)."""
        return cls(session=session, last_seq=-1, last_offset=offset, last_ts=seen, seen_ms=seen)

    def advance(self, seq: int, offset: int, ts: int, seen: int) -> None:
        """The message at ``offset`` (``seq``, envelope ``ts``, record time ``seen``) applied."""
        self.last_seq = seq
        self.last_offset = offset
        self.last_ts = ts
        self.seen_ms = seen

    @property
    def established(self) -> bool:
        """Whether this partition owns the session (it opened here and is not foreign)."""
        return self.owner is None and self.last_seq >= 0


@dataclass(slots=True)
class PartitionState(Generic[StateT]):
    """Every session of one topic-partition, after the records before ``offset``."""

    tp: TopicPartition
    offset: int  # the version: the next offset to read
    clock_ms: int = 0  # the largest record timestamp seen: idle time is measured on it
    sessions: dict[str, SessionState[StateT]] = field(default_factory=dict)

    @classmethod
    def empty(cls, tp: TopicPartition, offset: int) -> PartitionState[StateT]:
        return cls(tp, offset)


@dataclass(frozen=True, slots=True, order=True)
class StateVersion:
    """One saved state of a partition: the offset it reaches and the SHA-256 of its content.

    Two attempts that reach the same offset with different content (the
    passes of a resync batch, a late speculative task) save two versions;
    the ledger records which one a published batch left, and only that one
    is ever loaded. ``digest`` is empty for versions saved before digests
    were recorded (their file names carry none).
    """

    offset: int
    digest: str

    def describe(self) -> str:
        return f"{self.offset}" + (f" ({self.digest[:12]})" if self.digest else "")

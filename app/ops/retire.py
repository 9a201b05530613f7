"""``tablecast-ops retire-topic``: a topic the job reads to a recorded end, then never again.

A deleted topic stops the job as data loss: it cannot tell what was
produced to the topic after it last listed it. Retiring the topic first
records where it ends (:mod:`app.sources.retired`); the job reads it up to
there and carries on without it, whether or not Kafka still has it.

1. Refuse what is not a topic of this output: a name the job's pattern
   would not read, or one that neither Kafka nor the output's ledger knows.
2. Take its end: Kafka's high watermark of every partition, and its topic
   ID, while Kafka has it; else what the output's ledger says the job
   published of it (Kafka deleted it first: whatever came after that is
   lost with it, and the report says so).
3. Record it, once: a topic retired before keeps its first record.
4. Report its sessions still open in the state the job saved with its last
   published batch: they will never see another message (a resync or an
   ``end``), so their tables stay as they are in the output.

Stop the topic's producers before retiring it: records produced after its
end is taken are never read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.contract.offsets import Offsets, TopicPartition
from app.engine.state import SessionState
from app.engine.store import StateStore, state_root
from app.errors import ConfigurationError, TablecastError
from app.sink.ledger import Ledger
from app.sources.backend import Bounds
from app.sources.kafka import KafkaBackend
from app.sources.kafka_client import KafkaEndpoint
from app.sources.retired import EndsFrom, RetiredTopic, read_retired, retired_uri, write
from app.storage import resolve

__all__ = ["OpenSession", "Retirement", "retire_topic"]


@dataclass(frozen=True, slots=True)
class OpenSession:
    """A session of the retired topic that no ``end`` closed."""

    tp: TopicPartition
    session: str
    last_seq: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class Retirement:
    """What ``retire-topic`` recorded and found."""

    record: RetiredTopic
    uri: str  # the record's
    recorded_before: bool  # the topic was retired already: its first record stands
    open_sessions: tuple[OpenSession, ...] | None  # None: the state could not be read
    state_note: str  # where the sessions were read, or why they could not be
    transactions_open: tuple[TopicPartition, ...] = ()  # a last stable offset short of its end

    def lines(self) -> list[str]:
        """What the command prints."""
        record = self.record
        ends = ", ".join(f"{record.topic}:{p}@{end}" for p, end in sorted(record.ends.items()))
        first = (
            f"topic {record.topic} was retired before ({record.retired_at}) at {ends}: unchanged"
            if self.recorded_before
            else f"retired topic {record.topic} at {ends} ({self._where()}): {self.uri}"
        )
        lines = [first]
        if not self.recorded_before and record.ends_from is EndsFrom.LEDGER:
            lines.append(
                f"Kafka no longer has topic {record.topic}: retired at the offsets the job had "
                "published; records produced after them, if any, were lost with the topic"
            )
        for tp in self.transactions_open:
            lines.append(
                f"{tp} has a transaction open: the job reads up to its end once it commits "
                "or aborts"
            )
        if self.open_sessions is None:
            lines.append(f"sessions still open: not read ({self.state_note})")
        else:
            lines.append(f"{len(self.open_sessions)} sessions still open {self.state_note}")
            lines += [
                f"  {s.session} ({s.tp.key()}, last seq {s.last_seq} at offset {s.last_offset})"
                for s in self.open_sessions
            ]
        return lines

    def _where(self) -> str:
        if self.record.ends_from is EndsFrom.KAFKA:
            return "its high watermarks"
        return "the offsets the job had published"


def retire_topic(
    endpoint: KafkaEndpoint,
    output: str,
    topic: str,
    *,
    topic_pattern: str,
    checkpoint: str = "",
    timeout_s: float = 30.0,
) -> Retirement:
    """Retire ``topic`` of the job that writes ``output`` (steps in the module's docstring).

    ``checkpoint``: where the job's state is, if not where the output's
    ledger says (the checkpoint its last batch was written from).
    """
    # Step 1
    if re.fullmatch(topic_pattern, topic) is None:
        raise ConfigurationError(
            f"topic {topic} does not match the job's topics ({topic_pattern}): the job never "
            "reads it, there is nothing to retire"
        )
    where = retired_uri(output)
    found = read_retired(where).get(topic)
    uri = f"{where}/{topic}.json"
    ledger = Ledger(resolve(output)).head()
    if found is not None:
        sessions, note = _open_sessions(output, checkpoint, found.end_offsets())
        return Retirement(found, uri, True, sessions, note)

    # Step 2
    listed = KafkaBackend(endpoint, re.escape(topic), timeout_s).bounds()
    if listed:
        record = RetiredTopic(
            topic=topic,
            identity=next(iter(listed.values())).identity,
            ends={tp.partition: b.latest for tp, b in listed.items()},
            ends_from=EndsFrom.KAFKA,
        )
    else:
        published = {} if ledger is None else ledger.end
        ends = {tp.partition: end for tp, end in published.items() if tp.topic == topic}
        if not ends:
            raise ConfigurationError(
                f"topic {topic}: {endpoint.description} does not have it and the output "
                f"{output} never read it: there is nothing to retire"
            )
        record = RetiredTopic(topic=topic, identity="", ends=ends, ends_from=EndsFrom.LEDGER)

    # Step 3
    uri = write(where, record)

    # Step 4
    sessions, note = _open_sessions(output, checkpoint, record.end_offsets())
    return Retirement(record, uri, False, sessions, note, _open_transactions(listed))


def _open_transactions(listed: dict[TopicPartition, Bounds]) -> tuple[TopicPartition, ...]:
    return tuple(sorted(tp for tp, b in listed.items() if b.readable < b.latest))


def _open_sessions(
    output: str, checkpoint: str, ends: Offsets
) -> tuple[tuple[OpenSession, ...] | None, str]:
    """The topic's sessions no ``end`` closed, in the state of the output's last batch."""
    head = Ledger(resolve(output)).head()
    if head is None:
        return (), "(the output has no batch yet)"
    where = checkpoint or head.checkpoint or ""
    states = head.states or {}
    versions = {tp: states[tp] for tp in sorted(ends) if tp in states}
    if not versions:
        return (), f"(the output's ledger entry {head.number} holds no state of the topic)"
    if not where:
        return None, "the output's ledger names no checkpoint: give --checkpoint"
    found: list[OpenSession] = []
    try:
        store = StateStore(state_root(where))
        for tp, version in versions.items():
            for s in store.load(tp, version, None).sessions.values():
                if not s.closed:
                    found.append(_open(tp, s))
    except (TablecastError, OSError) as exc:
        return None, (
            f"the state beside {where} could not be read here: {exc}; where it can be "
            f"(the driver), `tablecast inspect --checkpoint {where} --output {output}` "
            "lists them"
        )
    found.sort(key=lambda s: (s.tp, s.session))
    return tuple(found), f"after the output's batch {head.batch_id} (ledger entry {head.number})"


def _open(tp: TopicPartition, state: SessionState[bytes]) -> OpenSession:
    return OpenSession(tp, state.session, state.last_seq, state.last_offset)

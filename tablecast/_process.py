"""``tablecast.process``: a processor run in this process over messages, as the job runs it.

For a processor's own tests: the job's engine (the integrity class, the
hooks, the output rows with their metadata columns) over one partition's
messages, without Spark or files. Each message's record time is its ``ts``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa

from app import defaults
from app.contract.offsets import TopicPartition
from app.contract.processor import Processor
from app.contract.schema import DEFAULT_SCHEMA
from app.engine.in_process import run_partitions
from app.engine.machine import IntegrityMode, RecordColumns, Rules
from app.engine.store import encode

_TP = TopicPartition("sensor-test", 0)


@dataclass(frozen=True)
class Outcome:
    """What :func:`process` produced."""

    rows: pa.Table  # the output rows: CONTRACT.md section 3's columns, then the output's
    violations: list[str] = field(default_factory=list)  # one line each
    quarantined: list[int] = field(default_factory=list)  # the offsets set aside
    dropped: int = 0  # messages the integrity class dropped for their seq
    missing: int = 0  # seqs that never arrived (ordered: skipped; once: at an end or timeout)
    states: dict[str, Any] = field(default_factory=dict)  # session -> its state at the end


def process(
    processor: Processor[Any],
    messages: Iterable[Mapping[str, Any] | bytes],
    *,
    integrity: str = "strict",
    session_timeout_ms: int = defaults.SESSION_TIMEOUT_MS,
) -> Outcome:
    """Run ``processor`` over ``messages`` (envelopes as dicts, or their JSON bytes), in
    order, as offsets 0, 1, ... of one partition: what the job writes for them."""
    if processor.input is None:
        processor.input = DEFAULT_SCHEMA
    values = [m if isinstance(m, bytes) else orjson.dumps(dict(m)) for m in messages]
    docs = [orjson.loads(v) for v in values]
    keys = [str(d.get("session", "")).encode() for d in docs]
    stamps = [int(d.get("ts", 0)) if isinstance(d.get("ts"), int) else 0 for d in docs]
    records = RecordColumns(keys, values, list(range(len(values))), stamps)
    rules = Rules(IntegrityMode(integrity), session_timeout_ms)
    outcome = run_partitions([_TP], lambda tp: [records], processor, rules)
    result = outcome.results[_TP]
    state = outcome.states[_TP]
    encode(state, processor)  # as the job saves it: a state it cannot save fails here too
    return Outcome(
        rows=outcome.rows(),
        violations=[v.describe() for v in outcome.violations],
        quarantined=[q.offset for q in result.quarantined],
        dropped=result.repeats,
        missing=result.gaps,
        states={name: s.user for name, s in state.sessions.items() if s.user is not None},
    )

"""What a partition task tells the driver, and the driver's typed view of it.

Each task returns a few report rows (never output rows): the files it
staged, the violations it found (a sample: the count is in the summary and
every violating record is in a quarantine file, so bad records cannot grow
the driver's memory), trace lines, the sessions it claimed or dropped (rule
6 across partitions: the driver's registry needs each), and a summary of
its partition. The
schema is defined once here; :func:`to_batch` writes it in a task and
:meth:`BatchOutcome.parse` reads it back on the driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson
import pyarrow as pa

from app.contract.offsets import TopicPartition
from app.engine.machine import Claim, Drop, Gap, TraceEvent
from app.engine.state import StateVersion
from app.errors import Rule, Violation


class ReportKind(StrEnum):
    OUTPUT_FILE = "output-file"
    QUARANTINE_FILE = "quarantine-file"
    VIOLATION = "violation"
    TRACE = "trace"
    CLAIM = "claim"
    DROPPED = "dropped"
    GAP = "gap"
    PARTITION = "partition"


REPORT_SCHEMA = pa.schema(
    [
        pa.field("kind", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("session", pa.string()),
        pa.field("path", pa.string()),
        pa.field("rows", pa.int64()),
        pa.field("bytes", pa.int64()),
        pa.field("detail", pa.string()),
    ]
)
# The same schema as Spark's DDL, for ``mapInArrow``.
REPORT_DDL = ", ".join(
    f"{f.name} {({'string': 'string', 'int32': 'int', 'int64': 'long'})[str(f.type)]}"
    for f in REPORT_SCHEMA
)


@dataclass(frozen=True, slots=True)
class StagedFile:
    path: str  # relative to the output (and to the batch's staging directory)
    rows: int
    bytes: int
    quarantine: bool


@dataclass(frozen=True, slots=True)
class PartitionSummary:
    """One task's partition: what it read and the state it left."""

    tp: TopicPartition
    start: int  # where the task's range began
    end: int  # the version saved (-1 if the state was not saved)
    messages: int
    sessions: int
    state_bytes: int
    cache: str  # "hit", "miss" (loaded), "new" (no earlier version)
    # Records per tier that served them (app.sources.records.Tier); empty
    # when the records did not say (frames built without the source).
    served: Mapping[str, int] = field(default_factory=dict)
    digest: str = ""  # the saved version's content digest ("" if not saved)
    records: str = ""  # the records' fingerprint: every pass of a batch must read the same
    violations: int = 0  # every violation found (the rows carry a sample)
    repeats: int = 0  # integrity classes ordered, once: messages dropped for their seq
    gaps: int = 0  # ordered: seqs skipped; once: seqs missing at sessions' ends or timeouts

    @property
    def version(self) -> StateVersion | None:
        """The state version the task saved, if it saved one."""
        return StateVersion(self.end, self.digest) if self.end >= 0 else None


class Reports:
    """The report rows of one task, built as it goes."""

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.rows: list[dict[str, Any]] = []

    def _add(self, kind: ReportKind, **values: Any) -> None:
        self.rows.append(
            {"kind": kind.value, "topic": self.tp.topic, "partition": self.tp.partition, **values}
        )

    def file(self, path: str, rows: int, size: int, quarantine: bool) -> None:
        kind = ReportKind.QUARANTINE_FILE if quarantine else ReportKind.OUTPUT_FILE
        self._add(kind, path=path, rows=rows, bytes=size)

    def violation(self, v: Violation) -> None:
        detail = {"rule": int(v.rule), "expected": v.expected, "got": v.got, "column": v.column}
        self._add(
            ReportKind.VIOLATION,
            offset=v.offset,
            session=v.session,
            detail=orjson.dumps(detail).decode(),
        )

    def trace(self, t: TraceEvent) -> None:
        detail = {
            "seq": t.seq,
            "type": t.type,
            "rows": t.rows,
            "outcome": t.outcome,
            "keys": t.keys,
        }
        self._add(
            ReportKind.TRACE,
            offset=t.offset,
            session=t.session,
            detail=orjson.dumps(detail).decode(),
        )

    def claim(self, c: Claim) -> None:
        self._add(ReportKind.CLAIM, offset=c.offset, session=c.session, rows=int(c.established))

    def dropped(self, d: Drop) -> None:
        self._add(ReportKind.DROPPED, offset=d.offset, session=d.session)

    def gap(self, g: Gap) -> None:
        self._add(ReportKind.GAP, offset=g.offset, session=g.session, rows=g.missing, path=g.seqs)

    def partition(self, s: PartitionSummary) -> None:
        detail = orjson.dumps(
            {
                "sessions": s.sessions,
                "cache": s.cache,
                "served": dict(s.served),
                "digest": s.digest,
                "records": s.records,
                "violations": s.violations,
                "repeats": s.repeats,
                "gaps": s.gaps,
            }
        ).decode()
        self._add(
            ReportKind.PARTITION,
            offset=s.end,
            rows=s.messages,
            bytes=s.state_bytes,
            path=str(s.start),
            detail=detail,
        )


def to_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=REPORT_SCHEMA)


@dataclass
class BatchOutcome:
    """Every task's reports of one micro-batch, typed, on the driver."""

    files: list[StagedFile] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    trace: list[tuple[TopicPartition, TraceEvent]] = field(default_factory=list)
    claims: dict[TopicPartition, list[Claim]] = field(default_factory=dict)
    dropped: dict[TopicPartition, list[Drop]] = field(default_factory=dict)
    gaps: list[tuple[TopicPartition, Gap]] = field(default_factory=list)  # a sample
    partitions: dict[TopicPartition, PartitionSummary] = field(default_factory=dict)
    # Sessions the tasks were told belong to another partition (rule 6, resync).
    foreign: Mapping[TopicPartition, Mapping[str, TopicPartition]] = field(default_factory=dict)

    @classmethod
    def parse(cls, rows: Iterable[Mapping[str, Any]]) -> BatchOutcome:
        outcome = cls()
        for r in rows:
            kind = ReportKind(r["kind"])
            tp = TopicPartition(r["topic"], r["partition"])
            if kind in (ReportKind.OUTPUT_FILE, ReportKind.QUARANTINE_FILE):
                outcome.files.append(
                    StagedFile(r["path"], r["rows"], r["bytes"], kind is ReportKind.QUARANTINE_FILE)
                )
            elif kind is ReportKind.VIOLATION:
                d = orjson.loads(r["detail"])
                outcome.violations.append(
                    Violation(
                        topic=tp.topic,
                        partition=tp.partition,
                        offset=r["offset"],
                        session=r["session"],
                        rule=Rule(d["rule"]),
                        expected=d["expected"],
                        got=d["got"],
                        column=d.get("column", ""),
                    )
                )
            elif kind is ReportKind.TRACE:
                d = orjson.loads(r["detail"])
                event = TraceEvent(
                    r["offset"],
                    r["session"],
                    d["seq"],
                    d["type"],
                    d["rows"],
                    d["outcome"],
                    d.get("keys", ""),
                )
                outcome.trace.append((tp, event))
            elif kind is ReportKind.CLAIM:
                outcome.claims.setdefault(tp, []).append(
                    Claim(r["session"], r["offset"], bool(r["rows"]))
                )
            elif kind is ReportKind.DROPPED:
                outcome.dropped.setdefault(tp, []).append(Drop(r["session"], r["offset"]))
            elif kind is ReportKind.GAP:
                gap = Gap(r["session"], r["offset"], r["rows"], r["path"])
                outcome.gaps.append((tp, gap))
            else:
                d = orjson.loads(r["detail"])
                outcome.partitions[tp] = PartitionSummary(
                    tp,
                    int(r["path"]),
                    r["offset"],
                    r["rows"],
                    d["sessions"],
                    r["bytes"],
                    d["cache"],
                    {str(tier): int(n) for tier, n in d.get("served", {}).items()},
                    d.get("digest", ""),
                    d.get("records", ""),
                    int(d.get("violations", 0)),
                    int(d.get("repeats", 0)),
                    int(d.get("gaps", 0)),
                )
        outcome.files.sort(key=lambda f: f.path)
        outcome.violations.sort(key=lambda v: (v.topic, v.partition, v.offset))
        outcome.trace.sort(key=lambda t: (t[0], t[1].offset))
        outcome.gaps.sort(key=lambda g: (g[0], g[1].offset))
        for claims in outcome.claims.values():
            claims.sort(key=lambda c: c.offset)
        return outcome

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files if not f.quarantine)

    @property
    def messages(self) -> int:
        """The records the tasks read and applied, over every partition of the batch."""
        return sum(s.messages for s in self.partitions.values())

    @property
    def violation_count(self) -> int:
        """Every violation of the batch (:attr:`violations` holds a sample of each partition's)."""
        return max(len(self.violations), sum(s.violations for s in self.partitions.values()))

    @property
    def repeats(self) -> int:
        """Messages the integrity class dropped for their seq (ordered, once)."""
        return sum(s.repeats for s in self.partitions.values())

    @property
    def gap_count(self) -> int:
        """Seqs that never arrived: skipped (ordered), or missing at an end or timeout (once)."""
        return sum(s.gaps for s in self.partitions.values())

    @property
    def quarantined(self) -> int:
        return sum(f.rows for f in self.files if f.quarantine)

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    @property
    def served(self) -> dict[str, int]:
        """Records read per tier that served them, over every partition of the batch."""
        total: dict[str, int] = {}
        for summary in self.partitions.values():
            for tier, count in summary.served.items():
                total[tier] = total.get(tier, 0) + count
        return total

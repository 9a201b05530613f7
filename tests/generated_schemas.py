"""Declared schemas and their captures, generated: for the property tests of the parsers."""

from __future__ import annotations

import json

from hypothesis import strategies as st

from app.contract.schema import TableSchema, parse_schema
from app.tools import generate as gen

_TYPES = ["string", "int64", "float64", "bool", "timestamp", "date", "decimal(18,3)"]
_KEY_TYPES = ["string", "int64", "timestamp", "date", "decimal(12,2)"]


@st.composite
def schemas(draw: st.DrawFn) -> TableSchema:
    """A declared schema: one or two key columns, up to six others of any type."""
    lines = [f'k0 = "{draw(st.sampled_from(_KEY_TYPES))}"']
    key = ["k0"]
    if draw(st.booleans()):
        lines.append(f'k1 = "{draw(st.sampled_from(_TYPES))}"')
        key.append("k1")
    for i in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(_TYPES))
        nullable = str(draw(st.booleans())).lower()
        renamed = f', output = "out_{i}"' if draw(st.booleans()) else ""
        lines.append(f'v{i} = {{ type = "{kind}", nullable = {nullable}{renamed} }}')
    text = f"[key]\ncolumns = {json.dumps(key)}\n[columns]\n" + "\n".join(lines)
    return parse_schema(text, "generated.toml")


def capture(schema: TableSchema, seed: int, resync: int) -> gen.Capture:
    """A small capture of ``schema`` (3 sessions over 2 partitions), with generate's edge
    values; ``resync``: a resync every that many messages (0: none)."""
    spec = gen.CaptureSpec(
        topics=1,
        partitions=2,
        sessions=3,
        rows_min=1,
        rows_max=6,
        updates=8,
        resync_every=resync,
        seed=seed,
        schema=schema,
    )
    return gen.generate(spec)

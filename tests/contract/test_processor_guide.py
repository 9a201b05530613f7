"""docs/processors.md's worked example, as a reader copies it: it runs as the page says."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path
from typing import Any

import tablecast

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "processors.md"


def _example() -> types.ModuleType:
    """The page's first Python block, as a module of its own (``basket_guide``)."""
    (code, *_) = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    module = types.ModuleType("basket_guide")
    sys.modules[module.__name__] = module
    try:
        exec(compile(code, str(GUIDE), "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return module


def _message(session: str, seq: int, kind: str, ts: int, *amounts: float) -> dict[str, Any]:
    rows = [{"item": f"i{n}", "amount": a} for n, a in enumerate(amounts)]
    return {"session": session, "seq": seq, "type": kind, "ts": ts, "rows": rows}


def test_the_worked_example_totals_a_session_at_its_end_and_at_its_timeout() -> None:
    guide = _example()
    processor = guide.BasketTotals()
    assert processor.name == "basket_guide:BasketTotals"
    assert processor.state_type is guide.Basket
    messages = [
        _message("a", 0, "snapshot", 1_000, 2.5, 1.5),
        _message("b", 0, "snapshot", 2_000, 10.0),
        _message("a", 1, "update", 3_000, 4.0),
        _message("a", 1, "update", 3_500, 4.0),  # a repeat: ordered drops it
        {"session": "a", "seq": 3, "type": "end", "ts": 4_000},  # seq 2 never arrived
        _message("c", 0, "snapshot", 9_000_000, 1.0),  # b has been idle for an hour
    ]
    outcome = tablecast.process(processor, messages, integrity="ordered")
    written = [
        (r["offset"], r["type"], r["basket"], r["messages"], r["total"], r["complete"])
        for r in outcome.rows.to_pylist()
    ]
    assert written == [
        (4, "end", "a", 2, 8.0, True),
        (5, "timeout", "b", 1, 10.0, False),
    ]
    assert (outcome.dropped, outcome.missing) == (1, 1)
    assert outcome.states == {"c": guide.Basket(messages=1, total=1.0)}

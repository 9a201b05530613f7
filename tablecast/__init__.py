"""tablecast's public API: your own ordered, stateful transformation of capture sessions.

Write a :class:`Processor` in your own package, install it beside tablecast
and run it with ``tablecast run --processor package.module:Class``: the job
feeds it each session's messages in order (as ``--integrity`` says), keeps
its state per session beside the checkpoint, and writes the rows it returns
exactly once to the output. ``docs/processors.md`` documents it on one page;
this module is everything you import::

    import msgspec
    import tablecast

    class Count(msgspec.Struct):
        messages: int = 0

    class Counter(tablecast.Processor[Count]):
        output = tablecast.schema(
            '[key]\\ncolumns = ["id"]\\n[columns]\\nid = "string"\\nmessages = "int64"'
        )

        def apply(
            self, state: Count, message: tablecast.Message
        ) -> tuple[Count, tablecast.Changes]:
            state.messages += 1
            return state, tablecast.Changes([(message.session, state.messages)])
"""

from __future__ import annotations

from app.contract.processor import (
    NO_CHANGES,
    Changes,
    Key,
    Message,
    MessageType,
    Processor,
    Reject,
    Row,
    schema,
)
from app.contract.schema import TableSchema
from tablecast._process import Outcome, process

__all__ = [
    "NO_CHANGES",
    "Changes",
    "Key",
    "Message",
    "MessageType",
    "Outcome",
    "Processor",
    "Reject",
    "Row",
    "TableSchema",
    "process",
    "schema",
]

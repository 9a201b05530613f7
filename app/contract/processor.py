"""A session's transformation: the :class:`Processor` a user writes (public as ``tablecast``).

The engine (:class:`app.engine.machine.PartitionMachine`) feeds a processor
one session's messages, one at a time and in the order the job's integrity
class allows (CONTRACT.md section 2 by default), and writes the rows it
returns as output rows (section 3's metadata columns, then the processor's
declared output columns). It carries the processor's state per session,
encodes it beside the checkpoint with the processor's state version, and
keeps everything else: ordering, integrity, exactly-once output, repair,
replay, corrections and verification.

A processor knows nothing of Spark, Kafka or files. The built-in table
rebuild (:class:`app.contract.table_processor.TableProcessor`) is one,
written against this module as a user's is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar, get_args, get_origin

import msgspec

from app.contract.envelope import Envelope, Key, MessageType, Row
from app.contract.schema import TableSchema, parse_schema

__all__ = [
    "NO_CHANGES",
    "Changes",
    "Key",
    "Message",
    "MessageType",
    "Processor",
    "Reject",
    "Row",
    "StateT",
    "schema",
]

S = TypeVar("S")
StateT = TypeVar("StateT")  # the engine's name for a processor's state type

# One producer message, validated (CONTRACT.md section 1): session, seq, type, ts, rows
# (tuples of the input schema's columns, in declared order) and deleted keys.
Message = Envelope


class Changes(NamedTuple):
    """The output rows of one call: one ``deleted=true`` row per key of ``deleted`` (its key
    columns set, every other column null), written before ``rows``.

    A row is a tuple of the output schema's columns in declared order, as
    :mod:`app.contract.values` stores them (str, int, float, bool, an aware
    ``datetime``, ``date``, ``Decimal``, or None where the column is nullable);
    a key is the key column's value, or a tuple of the key columns' values.
    """

    rows: Sequence[Row] = ()
    deleted: Sequence[Key] = ()


NO_CHANGES = Changes()


class Reject(Exception):
    """Raised by a processor that refuses a message: no rows are written for it. Raise it
    before changing the state in place: what was changed stays.

    The engine treats it as a violation of ``rule`` (CONTRACT.md section 2;
    7, the message's content, unless you name another): a strict job stops on
    it, a resync job quarantines the session until a snapshot, the other
    integrity classes quarantine the message alone.
    """

    def __init__(self, expected: str, got: str, *, rule: int = 7) -> None:
        if not 1 <= rule <= 7:
            raise ValueError(f"rule {rule} is not one of CONTRACT.md's rules 1 to 7")
        super().__init__(f"expected {expected}, got {got}")
        self.expected = expected
        self.got = got
        self.rule = rule


def schema(text: str, document: str = "(processor)") -> TableSchema:
    """A table schema from its TOML text (CONTRACT.md section 1a): an output schema, or the
    input schema a processor reads."""
    return parse_schema(text, document)


class Processor(Generic[S]):
    """Subclass it as ``Processor[State]`` and write :meth:`apply`; the rest is optional.

    ``output``: the schema of the rows it returns (the output's declared
    columns; its key columns are never null). ``input``: the schema its
    messages' rows are parsed with; None takes the job's ``--schema``.
    ``state_version``: raise it when the state's type changes, and write
    :meth:`migrate` from the versions before.
    """

    input: TableSchema | None = None
    output: TableSchema
    state_version: int = 1
    # The state's type, from ``Processor[State]``; set it where the subscript cannot say.
    state_type: ClassVar[Any] = None
    # How the ledger and the state files name it: "module:Class", the way --processor does.
    name: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = f"{cls.__module__}:{cls.__qualname__}"
        if "state_type" in cls.__dict__:
            return
        for base in cls.__dict__.get("__orig_bases__", ()):
            origin = get_origin(base)
            if isinstance(origin, type) and issubclass(origin, Processor):
                found = get_args(base)
                if found and not isinstance(found[0], TypeVar):
                    cls.state_type = found[0]

    def start(self, message: Message) -> S:
        """The state a session starts with, before its first message (or its first after an
        ``end``, or after :meth:`apply` returned None) is applied. By default the state
        type made without arguments."""
        kind = self.state_type
        if kind is None:
            raise TypeError(f"{self.name}: no state type (subclass Processor[State])")
        made: S = kind()
        return made

    def apply(self, state: S, message: Message) -> tuple[S | None, Changes]:
        """Apply one message (a snapshot or an update) to the session's state: the new state
        (or None: the session starts again at its next message) and the rows to write. It
        may change ``state`` in place: a failed batch never reuses it."""
        raise NotImplementedError(f"{self.name} does not implement apply()")

    def end(self, state: S, message: Message) -> Changes:
        """The session's ``end`` message arrived: the last rows it writes. Its state is
        dropped after."""
        return NO_CHANGES

    def timeout(self, state: S, session: str) -> Changes:
        """The session was idle for the job's ``--session-timeout`` (on its partition's
        clock): the last rows it writes. Its state is dropped after."""
        return NO_CHANGES

    def migrate(self, version: int, old: Any) -> S:
        """The state of an earlier ``state_version`` as this version's. ``old`` is the stored
        state decoded without a type (dicts, lists, strings, numbers): ``msgspec.convert``
        makes it a type again. Not written: a start on an older state is refused."""
        raise NotImplementedError(f"{self.name} has no migration from state version {version}")

    def encode_state(self, state: S) -> bytes:
        """The state as bytes (MessagePack); the job versions and checksums them. Raises
        ValueError where they would not read back as the state type."""
        encoder, decoder = _codec(type(self))
        encoded: bytes = encoder.encode(state)
        # msgspec encodes any value a field holds but decodes only what its type declares (a
        # float in an int field): a state saved so would fail every later load.
        try:
            decoder.decode(encoded)
        except msgspec.ValidationError as exc:
            kind = getattr(self.state_type, "__qualname__", repr(self.state_type))
            raise ValueError(f"it does not read back as {kind}: {exc}") from None
        return encoded

    def decode_state(self, data: bytes) -> S:
        """The state :meth:`encode_state` wrote, typed."""
        decoded: S = _codec(type(self))[1].decode(data)
        return decoded

    def decode_old(self, data: bytes) -> Any:
        """A state of an earlier version, untyped, for :meth:`migrate`."""
        return msgspec.msgpack.decode(data)


_Codec = tuple[msgspec.msgpack.Encoder, msgspec.msgpack.Decoder[Any]]
_CODECS: dict[type, _Codec] = {}


def _codec(cls: type) -> _Codec:
    """The encoder and the typed decoder of a processor class's state (made once a process)."""
    found = _CODECS.get(cls)
    if found is None:
        state_type = getattr(cls, "state_type", None)
        found = _CODECS[cls] = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(state_type)
    return found


def overrides(processor: Processor[Any], method: str) -> bool:
    """Whether ``processor``'s class writes ``method`` itself."""
    return getattr(type(processor), method) is not getattr(Processor, method)


def state_kind(state_type: Any) -> str | None:
    """What is wrong with a state type for the default codec, or None."""
    if isinstance(state_type, type) and (
        issubclass(state_type, msgspec.Struct) or dataclasses.is_dataclass(state_type)
    ):
        return None
    return f"{state_type!r} is neither a msgspec Struct nor a dataclass"

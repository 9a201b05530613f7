"""The processor an output was written with, as its ledger records it.

Every batch entry names its processor (:class:`~app.sink.ledger.ProcessorRecord`:
name, state version, input schema) beside the output schema of its rows
(``schema``; entries without a processor were written by the built-in table
processor over that schema). So a recompute, a repair, ``verify`` and
``inspect`` run or read the same processor, and a start is checked against
what the output holds: another processor is refused (an output is one
processor's), so is an output schema it cannot evolve to
(:func:`app.sink.schemas.check`), and so is a state version the processor
cannot migrate from, in one line naming both versions.
"""

from __future__ import annotations

import logging
from typing import Any

from app.contract import loader
from app.contract.processor import Processor, overrides
from app.contract.schema import DEFAULT_SCHEMA
from app.engine.store import refusal
from app.errors import ConfigurationError
from app.sink import schemas
from app.sink.ledger import BATCH, Ledger, LedgerEntry, ProcessorRecord
from app.storage import Location

log = logging.getLogger(__name__)


def record(processor: Processor[Any]) -> ProcessorRecord:
    """What a ledger entry records of ``processor``."""
    return ProcessorRecord(
        name=processor.name,
        state_version=processor.state_version,
        input=(processor.input or DEFAULT_SCHEMA).digest,
        version=loader.distribution_version(processor),
    )


def recorded(entry: LedgerEntry) -> ProcessorRecord:
    """The processor an entry ran with (an older entry's: the built-in over its schema)."""
    if entry.processor is not None:
        return entry.processor
    digest = entry.schema or DEFAULT_SCHEMA.digest
    return ProcessorRecord(loader.BUILT_IN, 1, digest)


def of_entry(location: Location, entry: LedgerEntry) -> Processor[Any]:
    """The processor ``entry`` ran with, loaded (its package must be importable here)."""
    found = recorded(entry)
    return loader.load(found.name, schemas.load(location, found.input))


def current(location: Location) -> Processor[Any] | None:
    """The processor of the output's newest entry; None for an output with no ledger."""
    if not location.exists(location.path):
        return None
    head = Ledger(location).head()
    return None if head is None else of_entry(location, head)


def resolve_name(location: Location, given: str | None) -> str | None:
    """The processor a command runs on an output: ``given`` (``--processor``), else the one
    its ledger names (None: no ledger; the built-in)."""
    if given is not None or not location.exists(location.path):
        return given
    head = Ledger(location).head()
    return None if head is None else recorded(head).name


def check(location: Location, processor: Processor[Any], document: str) -> None:
    """Refuse a run of ``processor`` that the output cannot take; writes nothing."""
    head = Ledger(location).head() if location.exists(location.path) else None
    if head is None:
        return
    held = recorded(head)
    if held.name != processor.name:
        raise ConfigurationError(
            f"output {location.uri} was written by processor {held.name}, not "
            f"{processor.name}: an output holds one processor's rows; give a new --output "
            "and --checkpoint"
        )
    schemas.check(location, processor.output, document)
    old, new = held.state_version, processor.state_version
    migrates = old < new and overrides(processor, "migrate")
    # A repair's entry starts the next run from empty state: no version to carry on from.
    if head.kind is BATCH and old != new and not migrates:
        raise ConfigurationError(refusal(processor.name, old, new))


def check_start(location: Location, processor: Processor[Any], document: str) -> None:
    """:func:`check`, then record the processor's schemas, so that every entry's digests
    resolve."""
    check(location, processor, document)
    schemas.check_start(location, processor.output, document)
    held = current_record(location)
    if held is not None and held.state_version != processor.state_version:
        log.info(
            "output %s: processor %s carries on from state version %d to %d (migrate)",
            location.uri,
            processor.name,
            held.state_version,
            processor.state_version,
        )
    source = processor.input or DEFAULT_SCHEMA
    if source.digest != DEFAULT_SCHEMA.digest:
        schemas.save(location, source)


def current_record(location: Location) -> ProcessorRecord | None:
    head = Ledger(location).head() if location.exists(location.path) else None
    return None if head is None else recorded(head)

"""The operator's table schema (CONTRACT.md section 1a), the one definition.

A job is given one TOML document: the key columns and every column's type,
nullability and output name. :func:`parse_schema` reads it (``tomllib``)
into a :class:`TableSchema`, refusing a malformed one in one line that names
the document, the column and the reason. Without a document the job takes
:data:`DEFAULT_SCHEMA`, the shape of versions 1.x.

The output records the schema each batch ran with (:mod:`app.sink.schemas`:
a document keyed by :attr:`TableSchema.digest`, named by the ledger entry);
:func:`check_evolution` says whether a restart may carry on with another:
only columns added as nullable, or columns made nullable.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from typing import Any

import orjson

from app.errors import ConfigurationError

__all__ = [
    "DEFAULT_SCHEMA",
    "METADATA_COLUMNS",
    "PARTITION_FIELD",
    "Column",
    "ColumnType",
    "TableSchema",
    "check_evolution",
    "load_schema",
    "parse_schema",
]


class ColumnType(StrEnum):
    STRING = "string"
    INT64 = "int64"
    FLOAT64 = "float64"
    BOOL = "bool"
    TIMESTAMP = "timestamp"
    DATE = "date"
    DECIMAL = "decimal"


# The output's own columns (CONTRACT.md section 3), the hive directory's ``date``, and the
# Iceberg table's partition field, ``day(ts)`` (app/table/catalog.py: Iceberg refuses a
# column named like a partition field of any spec its table ever had, so no schema of the
# output, first or later, may take it): no declared column may take one of these names.
METADATA_COLUMNS = ("topic", "partition", "offset", "session", "seq", "type", "ts", "deleted")
PARTITION_FIELD = "ts_day"
_RESERVED = {
    **dict.fromkeys(METADATA_COLUMNS, "an output metadata column"),
    "date": "the hive directory's column",
    PARTITION_FIELD: "the Iceberg table's partition field (the day of ts)",
}
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
# A name every reader takes unquoted (Glue and Athena fold case: names must differ in more).
_OUTPUT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MAX_PRECISION = 38  # decimal128


@dataclass(frozen=True, slots=True)
class Column:
    """One declared column: its JSON field ``name``, type, nullability and output name."""

    name: str
    type: ColumnType
    nullable: bool
    output: str
    precision: int = 0  # decimal only
    scale: int = 0  # decimal only

    @property
    def type_name(self) -> str:
        """The type as the document spells it (``decimal(12,4)``)."""
        if self.type is ColumnType.DECIMAL:
            return f"decimal({self.precision},{self.scale})"
        return self.type.value

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type_name,
            "nullable": self.nullable,
            "output": self.output,
        }


@dataclass(frozen=True)
class TableSchema:
    """A table's columns in declared order, and its key (one or more of them)."""

    columns: tuple[Column, ...]
    key: tuple[str, ...]

    @cached_property
    def key_indexes(self) -> tuple[int, ...]:
        """Where each key column sits in a row (a row holds every column in declared order)."""
        names = [c.name for c in self.columns]
        return tuple(names.index(k) for k in self.key)

    @cached_property
    def digest(self) -> str:
        """SHA-256 of the canonical document: what the output records the schema by."""
        return hashlib.sha256(self.to_json()).hexdigest()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(c.output for c in self.columns)

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    def to_json(self) -> bytes:
        """The canonical document (what :attr:`digest` hashes)."""
        doc = {"key": list(self.key), "columns": [c.to_json() for c in self.columns]}
        return orjson.dumps(doc)

    @classmethod
    def from_json(cls, data: bytes, document: str) -> TableSchema:
        """A schema from :meth:`to_json` (the output's record of it)."""
        try:
            doc = orjson.loads(data)
            columns = {
                str(c["name"]): {
                    "type": c["type"],
                    "nullable": c["nullable"],
                    "output": c["output"],
                }
                for c in doc["columns"]
            }
            return _build(document, {"key": {"columns": doc["key"]}, "columns": columns})
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise ConfigurationError(
                f"schema {document}: not a schema record ({exc})", document=document
            ) from None

    def describe(self) -> str:
        key = ", ".join(self.key)
        return f"key ({key}); " + ", ".join(
            f"{c.name} {c.type_name}{'' if c.nullable else ' not null'}"
            + (f" as {c.output}" if c.output != c.name else "")
            for c in self.columns
        )


def parse_schema(text: str | bytes, document: str) -> TableSchema:
    """The schema a TOML document declares; :class:`ConfigurationError` naming what is wrong."""
    try:
        raw = text.decode("utf-8") if isinstance(text, bytes) else text
        doc = tomllib.loads(raw)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise _refused(document, None, f"is not TOML: {exc}") from None
    return _build(document, doc)


def load_schema(uri: str) -> TableSchema:
    """The schema in a file: a local path or ``s3://bucket/key``."""
    from pyarrow import fs as pafs

    from app.storage import resolve

    parent, slash, name = uri.rstrip("/").rpartition("/")
    location = resolve(parent or slash or ".")  # "/sensors.toml": the root's
    path = location.child(name)
    found = location.fs.get_file_info(path).type if name else pafs.FileType.NotFound
    if found is pafs.FileType.NotFound:
        raise ConfigurationError(f"schema {uri}: no such file", document=uri)
    if found is not pafs.FileType.File:  # a local directory, or a prefix holding objects
        raise ConfigurationError(f"schema {uri}: is a directory, not a TOML document", document=uri)
    return parse_schema(location.read_bytes(path), uri)


def _refused(document: str, column: str | None, reason: str) -> ConfigurationError:
    where = f"schema {document}" + (f", column {column!r}" if column is not None else "")
    return ConfigurationError(f"{where}: {reason}", document=document, column=column or "")


def _build(document: str, doc: dict[str, Any]) -> TableSchema:
    unknown = sorted(set(doc) - {"key", "columns"})
    if unknown:
        raise _refused(document, None, f"unknown table [{unknown[0]}] (only [key] and [columns])")
    declared = doc.get("columns")
    if not isinstance(declared, dict) or not declared:
        raise _refused(document, None, "declares no [columns]")
    columns = tuple(_column(document, str(name), spec) for name, spec in declared.items())

    key_doc = doc.get("key")
    if not isinstance(key_doc, dict) or set(key_doc) != {"columns"}:
        raise _refused(document, None, '[key] must be columns = ["name", ...] and nothing else')
    key = key_doc["columns"]
    if not isinstance(key, list) or not key or not all(isinstance(k, str) for k in key):
        raise _refused(document, None, "[key] columns must be a non-empty list of column names")
    for name in key:
        found = next((c for c in columns if c.name == name), None)
        if found is None:
            raise _refused(document, name, "is a key column but not declared in [columns]")
        if found.nullable:
            raise _refused(document, name, "is a key column: it is never null (nullable = false)")
    if len(set(key)) != len(key):
        twice = next(k for k in key if key.count(k) > 1)
        raise _refused(document, twice, "is named twice in [key] columns")

    seen: dict[str, str] = {}
    for c in columns:
        folded = c.output.lower()
        if folded in seen:
            raise _refused(
                document,
                c.name,
                f"output name {c.output!r} is taken by column {seen[folded]!r} (readers fold case)",
            )
        seen[folded] = c.name
    return TableSchema(columns=columns, key=tuple(key))


def _column(document: str, name: str, spec: Any) -> Column:
    if isinstance(spec, str):
        spec = {"type": spec}
    if not isinstance(spec, dict):
        raise _refused(document, name, 'must be a type ("string") or { type = "...", ... }')
    unknown = sorted(set(spec) - {"type", "nullable", "output"})
    if unknown:
        raise _refused(document, name, f"unknown setting {unknown[0]!r} (type, nullable, output)")
    type_text = spec.get("type")
    nullable = spec.get("nullable", False)
    output = spec.get("output", name)
    if not isinstance(type_text, str):
        raise _refused(document, name, "has no type")
    if not isinstance(nullable, bool):
        raise _refused(document, name, "nullable must be true or false")
    if not isinstance(output, str) or not _OUTPUT_NAME.fullmatch(output):
        raise _refused(
            document,
            name,
            f"output name {output!r} is not a plain name (letters, digits, _): "
            'give output = "a_name"',
        )
    reserved = _RESERVED.get(output.lower())
    if reserved is not None:
        raise _refused(
            document, name, f'output name {output!r} is {reserved}: give output = "another"'
        )
    precision = scale = 0
    match = _DECIMAL.fullmatch(type_text.strip())
    if match is not None:
        column_type = ColumnType.DECIMAL
        precision, scale = int(match.group(1)), int(match.group(2))
        if not 1 <= precision <= MAX_PRECISION or scale > precision:
            raise _refused(
                document,
                name,
                f"type {type_text!r}: precision must be 1 to {MAX_PRECISION} and scale at most "
                "the precision",
            )
    else:
        try:
            column_type = ColumnType(type_text)
        except ValueError:
            raise _refused(
                document,
                name,
                f"unknown type {type_text!r} (string, int64, float64, bool, timestamp, date, "
                "decimal(p,s))",
            ) from None
        if column_type is ColumnType.DECIMAL:
            raise _refused(document, name, "type decimal needs its digits: decimal(p,s)")
    return Column(name, column_type, nullable, output, precision, scale)


DEFAULT_SCHEMA = parse_schema(
    """
    [key]
    columns = ["id"]

    [columns]
    id = { type = "string", output = "row_id" }
    value = { type = "float64", nullable = true }
    status = { type = "string", nullable = true }
    """,
    "(default)",
)


def check_evolution(recorded: TableSchema, new: TableSchema, document: str) -> None:
    """Refuse ``new`` unless it only adds nullable columns to ``recorded`` or makes some
    nullable (CONTRACT.md section 1a); the one line names the document, column and change."""
    if recorded.key != new.key:
        raise _refused(
            document,
            ", ".join(new.key),
            f"the key changed from ({', '.join(recorded.key)}) to ({', '.join(new.key)}); "
            "a new key needs a new output",
        )
    for old in recorded.columns:
        found = new.column(old.name)
        change = None
        if found is None:
            change = "was removed"
        elif found.type_name != old.type_name:
            change = f"was retyped from {old.type_name} to {found.type_name}"
        elif found.output != old.output:
            change = f"was renamed in the output from {old.output!r} to {found.output!r}"
        elif old.nullable and not found.nullable:
            change = "was made non-nullable"
        if change is not None:
            raise _refused(
                document,
                old.name,
                f"{change} (the output holds it as {old.type_name}"
                f"{'' if old.nullable else ' not null'}, output {old.output!r}); only adding "
                "nullable columns or making columns nullable carries on: this needs a new output",
            )
    for added in new.columns:
        if recorded.column(added.name) is None and not added.nullable:
            raise _refused(
                document,
                added.name,
                "is added as non-nullable: rows written before lack it; an added column "
                "must be nullable = true",
            )

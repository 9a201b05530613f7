"""The table schema (CONTRACT.md section 1a): parsing, refusals, evolution."""

from __future__ import annotations

import pytest

from app.contract.schema import (
    DEFAULT_SCHEMA,
    ColumnType,
    check_evolution,
    load_schema,
    parse_schema,
)
from app.errors import ConfigurationError

CONTRACT_EXAMPLE = """
[key]
columns = ["site", "id"]          # one or more columns, never null

[columns]
site    = "string"
id      = "int64"
reading = { type = "float64", nullable = true }
alarm   = { type = "bool", nullable = true }
seen_at = { type = "timestamp", nullable = true }
day     = { type = "date", nullable = true }
price   = { type = "decimal(12,4)", nullable = true }
label   = { type = "string", nullable = true, output = "site_label" }
"""


def test_the_contracts_example_parses_column_by_column() -> None:
    schema = parse_schema(CONTRACT_EXAMPLE, "example.toml")
    assert schema.key == ("site", "id")
    assert schema.key_indexes == (0, 1)
    assert [(c.name, c.type_name, c.nullable, c.output) for c in schema.columns] == [
        ("site", "string", False, "site"),
        ("id", "int64", False, "id"),
        ("reading", "float64", True, "reading"),
        ("alarm", "bool", True, "alarm"),
        ("seen_at", "timestamp", True, "seen_at"),
        ("day", "date", True, "day"),
        ("price", "decimal(12,4)", True, "price"),
        ("label", "string", True, "site_label"),
    ]
    price = schema.columns[6]
    assert (price.type, price.precision, price.scale) == (ColumnType.DECIMAL, 12, 4)


def test_the_default_schema_is_the_shape_of_versions_1() -> None:
    assert DEFAULT_SCHEMA.key == ("id",)
    assert [(c.name, c.type_name, c.nullable, c.output) for c in DEFAULT_SCHEMA.columns] == [
        ("id", "string", False, "row_id"),
        ("value", "float64", True, "value"),
        ("status", "string", True, "status"),
    ]


def test_a_schema_survives_its_record_and_its_digest_names_it() -> None:
    schema = parse_schema(CONTRACT_EXAMPLE, "example.toml")
    again = type(schema).from_json(schema.to_json(), "record")
    assert again == schema and again.digest == schema.digest
    assert parse_schema(CONTRACT_EXAMPLE.replace("12,4", "12,3"), "x").digest != schema.digest


def test_a_schema_file_is_read_from_its_path(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "schema.toml"
    path.write_text(CONTRACT_EXAMPLE)
    assert load_schema(str(path)).key == ("site", "id")
    with pytest.raises(ConfigurationError, match="no such file"):
        load_schema(str(path) + ".missing")


def test_a_directory_given_as_the_schema_is_refused_in_one_line(tmp_path: object) -> None:
    """Locally, and on S3 a prefix that holds objects (the folder of the document)."""
    from pathlib import Path

    from tests.s3_server import S3Server

    folder = Path(str(tmp_path)) / "schemas"
    folder.mkdir()
    with pytest.raises(ConfigurationError) as local:
        load_schema(str(folder))
    assert str(local.value) == f"schema {folder}: is a directory, not a TOML document"
    with S3Server() as server:
        server.create_bucket("lake")
        server.client().put_object(Bucket="lake", Key="jobs/sensors.toml", Body=b"")
        for uri in ("s3://lake/jobs", "s3://lake/jobs/"):
            with pytest.raises(ConfigurationError) as prefix:
                load_schema(uri)
            assert str(prefix.value) == f"schema {uri}: is a directory, not a TOML document"


_KEY = '[key]\ncolumns = ["id"]\n'


@pytest.mark.parametrize(
    ("text", "column", "reason"),
    [
        ("[key\n", None, "is not TOML"),
        (_KEY, None, "declares no [columns]"),
        ('[columns]\nid = "string"\n', None, "[key] must be columns"),
        (_KEY + '[columns]\nid = "uuid"\n', "id", "unknown type 'uuid'"),
        (_KEY + '[columns]\nid = "decimal"\n', "id", "needs its digits"),
        (_KEY + '[columns]\nid = "decimal(40,2)"\n', "id", "precision must be 1 to 38"),
        (_KEY + '[columns]\nid = "decimal(4,5)"\n', "id", "scale at most"),
        (_KEY + '[columns]\nid = { type = "string", size = 3 }\n', "id", "unknown setting"),
        (_KEY + '[columns]\nid = { type = "string", nullable = "no" }\n', "id", "true or false"),
        (
            _KEY + '[columns]\nid = "string"\nv = { type = "int64", output = "offset" }\n',
            "v",
            "'offset' is an output metadata column",
        ),
        (
            _KEY + '[columns]\nid = "string"\nv = { type = "date", output = "date" }\n',
            "v",
            "hive directory's",
        ),
        (
            _KEY + '[columns]\nid = "string"\nv = { type = "date", output = "Ts_Day" }\n',
            "v",
            "'Ts_Day' is the Iceberg table's partition field",
        ),
        (_KEY + '[columns]\nid = "string"\n"a b" = "int64"\n', "a b", "not a plain name"),
        (
            _KEY + '[columns]\nid = "string"\nA = "int64"\na = "int64"\n',
            "a",
            "taken by column 'A'",
        ),
        ('[key]\ncolumns = ["x"]\n[columns]\nid = "string"\n', "x", "not declared in [columns]"),
        (
            _KEY + '[columns]\nid = { type = "string", nullable = true }\n',
            "id",
            "is a key column",
        ),
        (_KEY + '[columns]\nid = "string"\n[extra]\n', None, "unknown table [extra]"),
    ],
)
def test_a_malformed_schema_is_refused_naming_document_column_and_reason(
    text: str, column: str | None, reason: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_schema(text, "s3://bucket/jobs/sensors.toml")
    message = str(info.value)
    assert message.startswith("schema s3://bucket/jobs/sensors.toml")
    assert "\n" not in message and reason in message
    if column is not None:
        assert f"column {column!r}" in message
    assert info.value.exit_code == 64


def _with(extra: str) -> str:
    return CONTRACT_EXAMPLE + extra


def test_adding_nullable_columns_or_making_one_nullable_carries_on() -> None:
    recorded = parse_schema(CONTRACT_EXAMPLE, "v1.toml")
    added = parse_schema(_with('extra = { type = "int64", nullable = true }\n'), "v2.toml")
    check_evolution(recorded, added, "v2.toml")
    relaxed_text = CONTRACT_EXAMPLE.replace(
        'alarm   = { type = "bool", nullable = true }', 'alarm   = { type = "bool" }'
    )
    strict_alarm = parse_schema(relaxed_text, "v0.toml")
    check_evolution(strict_alarm, recorded, "v1.toml")  # alarm made nullable


@pytest.mark.parametrize(
    ("change", "column", "said"),
    [
        (
            lambda t: t.replace(
                'label   = { type = "string", nullable = true, output = "site_label" }\n', ""
            ),
            "label",
            "was removed",
        ),
        (
            lambda t: t.replace("decimal(12,4)", "decimal(14,4)"),
            "price",
            "retyped from decimal(12,4) to decimal(14,4)",
        ),
        (
            lambda t: t.replace('output = "site_label"', 'output = "tag"'),
            "label",
            "renamed in the output",
        ),
        (
            lambda t: t.replace(
                'reading = { type = "float64", nullable = true }', 'reading = "float64"'
            ),
            "reading",
            "made non-nullable",
        ),
        (
            lambda t: t.replace('columns = ["site", "id"]', 'columns = ["site"]'),
            "site",
            "the key changed",
        ),
        (lambda t: t + 'extra = "int64"\n', "extra", "added as non-nullable"),
    ],
)
def test_any_other_change_is_refused_naming_document_column_and_change(
    change: object, column: str, said: str
) -> None:
    recorded = parse_schema(CONTRACT_EXAMPLE, "v1.toml")
    assert callable(change)
    new = parse_schema(change(CONTRACT_EXAMPLE), "v2.toml")
    with pytest.raises(ConfigurationError) as info:
        check_evolution(recorded, new, "v2.toml")
    message = str(info.value)
    assert message.startswith(f"schema v2.toml, column {column!r}")
    assert said in message and "\n" not in message

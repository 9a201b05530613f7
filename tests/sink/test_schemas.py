"""The table schemas an output records, and the start-up check against them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.contract.schema import DEFAULT_SCHEMA, parse_schema
from app.engine.writer import LAYOUT_FILE, DayLayout, layout_of
from app.errors import ConfigurationError, OutputStateError
from app.sink import ledger as ledger_mod
from app.sink import schemas
from app.sink.ledger import Ledger, LedgerEntry
from app.storage import resolve

V1 = '[key]\ncolumns = ["site"]\n[columns]\nsite = "string"\nprice = { type = "decimal(9,2)" }\n'
V2 = V1 + 'note = { type = "string", nullable = true }\n'
RETYPED = V1.replace("decimal(9,2)", "float64")


def _published(output: Path, text: str) -> None:
    """An output whose ledger's one batch ran with the schema ``text`` declares."""
    location = resolve(str(output))
    schema = parse_schema(text, "v1.toml")
    schemas.check_start(location, schema, "v1.toml")
    entry = LedgerEntry(number=0, kind=ledger_mod.BATCH, end={}, schema=schema.digest)
    Ledger(location).append(entry)


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_each_entry_names_the_schema_its_rows_were_computed_with(tmp_path: Path) -> None:
    output = tmp_path / "out"
    _published(output, V1)
    location = resolve(str(output))
    assert schemas.current(location) == parse_schema(V1, "v1.toml")
    entry = Ledger(location).head()
    assert entry is not None and LedgerEntry.from_json(entry.to_json()).schema == entry.schema
    # Entries written before the field: the default schema, the shape of versions 1.x.
    old = LedgerEntry(number=1, kind=ledger_mod.BATCH, end={})
    assert schemas.of_entry(location, LedgerEntry.from_json(old.to_json())) == DEFAULT_SCHEMA


def test_an_evolved_schema_is_recorded_beside_the_first(tmp_path: Path) -> None:
    output = tmp_path / "out"
    _published(output, V1)
    location = resolve(str(output))
    schemas.check_start(location, parse_schema(V2, "v2.toml"), "v2.toml")
    recorded = sorted(p.name for p in (output / schemas.SCHEMAS_DIR).iterdir())
    digests = {parse_schema(t, "x").digest + ".json" for t in (V1, V2)}
    assert set(recorded) == digests


def test_a_retyped_column_is_refused_and_the_output_left_untouched(tmp_path: Path) -> None:
    output = tmp_path / "out"
    _published(output, V1)
    before = _tree(output)
    with pytest.raises(ConfigurationError, match=r"^schema new\.toml, column 'price': was retyped"):
        schemas.check_start(resolve(str(output)), parse_schema(RETYPED, "new.toml"), "new.toml")
    assert _tree(output) == before


def test_a_missing_schema_record_is_named(tmp_path: Path) -> None:
    output = tmp_path / "out"
    _published(output, V2)
    for path in (output / schemas.SCHEMAS_DIR).iterdir():
        path.unlink()
    with pytest.raises(OutputStateError, match="no record of the table schema"):
        schemas.current(resolve(str(output)))


def test_the_command_line_refuses_before_starting_spark(tmp_path: Path) -> None:
    output, archive = tmp_path / "out", tmp_path / "archive"
    archive.mkdir()
    _published(output, V1)
    before = _tree(output)
    document = tmp_path / "retyped.toml"
    document.write_text(RETYPED)
    argv = [sys.executable, "-m", "app", "run", "--archive", str(archive)]
    argv += ["--output", str(output), "--checkpoint", str(tmp_path / "ckpt")]
    done = subprocess.run(
        [*argv, "--schema", str(document)], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 64
    line = done.stderr.strip()
    assert line.startswith(f"tablecast run: schema {document}, column 'price': was retyped")
    assert "\n" not in line
    assert _tree(output) == before
    assert not (tmp_path / "ckpt").exists()
    bad = tmp_path / "bad.toml"
    bad.write_text('[key]\ncolumns = ["id"]\n[columns]\nid = "uuid"\n')
    done = subprocess.run(
        [*argv, "--schema", str(bad)], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 64
    assert done.stderr.strip() == (
        f"tablecast run: schema {bad}, column 'id': unknown type 'uuid' (string, int64, float64, "
        "bool, timestamp, date, decimal(p,s))"
    )


def test_a_new_output_records_the_date_column_layout(tmp_path: Path) -> None:
    output = tmp_path / "out"
    _published(output, V1)
    location = resolve(str(output))
    assert layout_of(location) is DayLayout.DATE_COLUMN
    assert (output / LAYOUT_FILE).read_text().strip() == '"date-column"'
    # Recorded once: later starts keep it.
    schemas.check_start(location, parse_schema(V2, "v2.toml"), "v2.toml")
    assert layout_of(location) is DayLayout.DATE_COLUMN


@pytest.mark.parametrize("made", ["ledger", "files"])
def test_an_output_made_before_the_record_keeps_its_hive_directories(
    tmp_path: Path, made: str
) -> None:
    """Made before: a ledger, or published files a crash left without their entry."""
    output = tmp_path / "out"
    location = resolve(str(output))
    if made == "ledger":
        Ledger(location).append(LedgerEntry(number=0, kind=ledger_mod.BATCH, end={}))
    else:
        (output / "date=2026-01-01").mkdir(parents=True)
        (output / "date=2026-01-01" / "part-a.parquet").write_bytes(b"PAR1")
    assert layout_of(location) is DayLayout.HIVE_KEY
    schemas.check_start(location, DEFAULT_SCHEMA, "default")
    assert (output / LAYOUT_FILE).read_text().strip() == '"hive-key"'


def test_a_damaged_layout_record_is_named(tmp_path: Path) -> None:
    output = tmp_path / "out"
    (output / LAYOUT_FILE).parent.mkdir(parents=True)
    (output / LAYOUT_FILE).write_text('"sideways"\n')
    with pytest.raises(OutputStateError) as info:
        layout_of(resolve(str(output)))
    assert str(info.value) == (
        f"{output / LAYOUT_FILE} names the layout 'sideways', not one of 'date-column', 'hive-key'"
    )

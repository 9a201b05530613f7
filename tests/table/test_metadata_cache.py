"""A transaction's metadata is computed once per staged state (app/table/metadata_cache.py):
read again unchanged, it is the same object; a staged update or a commit gives the new state.

Without Spark: the embedded SQLite catalog of a local output.
"""

from __future__ import annotations

from pathlib import Path

from app.contract.schema import DEFAULT_SCHEMA
from app.storage import resolve
from app.table import catalog as catalog_mod


def _table(tmp_path: Path):  # type: ignore[no-untyped-def]
    location = resolve(str(tmp_path / "out"))
    return catalog_mod.open_table(location, catalog_mod.local_config(location), DEFAULT_SCHEMA)


def test_read_again_unchanged_is_the_same_metadata(tmp_path: Path) -> None:
    transaction = _table(tmp_path).transaction()

    first = transaction.table_metadata

    assert transaction.table_metadata is first


def test_a_staged_update_is_in_the_next_read_and_not_in_the_earlier_one(tmp_path: Path) -> None:
    transaction = _table(tmp_path).transaction()
    before = transaction.table_metadata

    transaction.set_properties(soak="1")
    after = transaction.table_metadata

    assert after is not before
    assert after.properties["soak"] == "1"
    assert "soak" not in before.properties
    transaction.set_properties(soak="2")
    assert transaction.table_metadata.properties["soak"] == "2"


def test_a_commit_is_read_by_the_next_transaction(tmp_path: Path) -> None:
    table = _table(tmp_path)
    with table.transaction() as transaction:
        transaction.set_properties(soak="1")
    unchanged = table.transaction()
    seen = unchanged.table_metadata

    table.transaction().set_properties(soak="2").commit_transaction()

    assert seen.properties["soak"] == "1"
    assert table.transaction().table_metadata.properties["soak"] == "2"
    assert _table(tmp_path).metadata.properties["soak"] == "2"

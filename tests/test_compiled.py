"""Which compiled modules the job uses: only those of the interface its Python was written for."""

from __future__ import annotations

from types import SimpleNamespace

from app import compiled
from app.contract import _envelope
from app.engine import _columns


def test_the_modules_make_setup_built_are_of_this_interface() -> None:
    assert compiled.usable(_envelope) and compiled.usable(_columns)


def test_a_module_built_from_older_source_or_none_is_left_unused() -> None:
    assert not compiled.usable(None)
    assert not compiled.usable(SimpleNamespace())  # built before the interface was numbered
    assert not compiled.usable(SimpleNamespace(INTERFACE=compiled.INTERFACE - 1))

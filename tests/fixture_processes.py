"""Processes that belong to a longer-lived fixture, though a test started them.

A module's broker that a test restarts (to expire its offsets) is started
during that test, yet the module's fixture stops it: the leak check of
``tests/leaks.py`` leaves these alone. Its own module, so that the helpers
that start such processes need not import the pytest plugin.
"""

from __future__ import annotations

__all__ = ["FIXTURE_OWNED", "owned_by_fixture"]

FIXTURE_OWNED: set[int] = set()


def owned_by_fixture(pid: int) -> None:
    """Count process ``pid`` as a longer-lived fixture's, not the running test's."""
    FIXTURE_OWNED.add(pid)

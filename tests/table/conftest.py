from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.table.catalog import threads_released


@pytest.fixture(autouse=True)
def _pyiceberg_pool_ended() -> Iterator[None]:
    """The tests read the table with pyiceberg directly: end its shared pool after each."""
    with threads_released():
        yield

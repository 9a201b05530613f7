"""Test seam: a longer fetch wait for a test broker that serves no fetch in 10 ms.

tansu keeping its log in S3 (the tests' broker behind tiered storage,
``tests/tansu.py``) reads nothing from S3 within the source's 10 ms
``fetch.wait.max.ms``. A test gives a longer wait to the
:class:`~app.sources.kafka.KafkaBackend` it makes (``fetch_wait_ms``), or,
for a job it runs, installs it here (:func:`fetch_wait`): the data source's
options carry it to the planner (:func:`app.sources.backend_options.kafka_options`,
the only reader), and each range it plans to its task. Nothing in production
installs one, and nothing here reads the environment.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_fetch_wait_ms: int | None = None


@contextmanager
def fetch_wait(ms: int) -> Iterator[None]:
    """Jobs started inside the block fetch with ``fetch.wait.max.ms`` = ``ms``."""
    global _fetch_wait_ms  # noqa: PLW0603 (a test seam: one per process)
    _fetch_wait_ms = ms
    try:
        yield
    finally:
        _fetch_wait_ms = None


def installed_fetch_wait_ms() -> int | None:
    """The installed wait, or None: the source's own."""
    return _fetch_wait_ms

"""Our errors raised in Spark's Python workers, back on the driver as themselves.

Spark hands the driver a worker's failure as text: the Python traceback of
an executor's task inside :class:`pyspark.errors.PythonException` (a
DataFrame's action, such as the sink's ``mapInArrow(...).collect()``) or
``py4j.protocol.Py4JJavaError`` (an RDD's, such as a recompute's), and the
traceback of the driver's Python planner process, which runs the source's
reader, inside :class:`pyspark.errors.StreamingQueryException`. None of them
keeps the Python exception. Every :class:`~app.errors.TablecastError` ends
that traceback with its :class:`~app.errors.ErrorMarker` line, and
:func:`worker_error` rebuilds the same error from it, class, message and
facts; a failure without one stays an unexpected error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from py4j.protocol import Py4JJavaError
from pyspark.errors import PythonException, StreamingQueryException

from app.errors import ErrorMarker, TablecastError

# Spark's exceptions that carry a Python worker's traceback in their text.
CARRIERS = (PythonException, StreamingQueryException, Py4JJavaError)


def worker_error(exc: BaseException) -> TablecastError | None:
    """The error of ours that ``exc`` reports from a worker, or None."""
    if not isinstance(exc, CARRIERS):
        return None
    marker = ErrorMarker.find(str(exc))
    return None if marker is None else marker.rebuild()


@contextmanager
def rebuilt() -> Iterator[None]:
    """Around a Spark action: our error raised in a worker comes out as itself."""
    try:
        yield
    except Exception as exc:
        error = worker_error(exc)
        if error is None:
            raise
        raise error from None

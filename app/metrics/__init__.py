"""Seeing the job run: metrics for alarms, live progress, and their sinks.

- :mod:`app.metrics.publisher`: where datums go (CloudWatch, JSON lines, nowhere).
- :mod:`app.metrics.listener`: Spark's progress events merged with the sink's
  reports into one :class:`~app.metrics.listener.BatchMetrics` per batch.
- :mod:`app.metrics.progress`: the live display of ``tablecast run``.

The metric names are in :mod:`app.metric_names`, shared with ``infra/``.
"""

__all__ = ["listener", "progress", "publisher"]

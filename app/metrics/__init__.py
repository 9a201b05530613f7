"""Seeing the job run: metrics for alarms, live progress, and where they go.

- :mod:`app.metrics.publisher`: where datums go (CloudWatch, JSON lines, nowhere).
- :mod:`app.metrics.listener`: Spark's progress events merged with the sink's
  reports into one :class:`~app.metrics.listener.BatchMetrics` per batch.
- :mod:`app.metrics.progress`: the live display of ``tablecast run``.
- :mod:`app.metrics.consumer_group`: each batch's end offsets committed to a Kafka
  consumer group, for others to see.

The metric names are in :mod:`app.metric_names`, shared with ``infra/``.
"""

__all__ = ["consumer_group", "listener", "progress", "publisher"]

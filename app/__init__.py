"""tablecast: ordered, stateful reconstruction of capture sessions.

The job reads Kafka records (or the raw archive that mirrors them), rebuilds
every capture session's table in strict (partition, offset) order and writes
the rows to a Parquet dataset exactly once. See ``../shared/CONTRACT.md`` for
the public interfaces and ``docs/`` for the design.
"""

__version__ = "0.1.0"

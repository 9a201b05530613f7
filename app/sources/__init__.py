"""Sources: one streaming source (``stream.py``) over the raw archive
(CONTRACT.md section 4) or Kafka itself (``kafka.py``).

Both backends give the columns of Spark's Kafka source (``records.py``), so
everything downstream of the source is one code path.
"""

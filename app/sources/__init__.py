"""Sources: the raw archive (CONTRACT.md section 4) and Spark's Kafka source.

Both produce the columns of Spark's Kafka source, so everything downstream of
the source is one code path.
"""

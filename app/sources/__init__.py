"""Sources: one streaming source (``stream.py``) over the raw archive
(CONTRACT.md section 4), Kafka itself (``kafka.py``), or both (``tiered.py``:
Kafka, and the archive for the offsets Kafka no longer holds).

Every backend gives the columns of Spark's Kafka source (``records.py``),
plus the tier that served each record, so everything downstream of the
source is one code path.
"""

"""The output as an Apache Iceberg table, committed with pyiceberg (no JVM).

- :mod:`app.table.catalog`: where the table is catalogued (SQLite beside a
  local output, Glue on AWS) and the table itself.
- :mod:`app.table.commit`: one snapshot per ledger entry, with the entry's
  end offsets in its summary; one overwrite snapshot per rewrite.
- :mod:`app.table.compact`: small files of closed days rewritten into large ones.
- :mod:`app.table.live`: what ``tablecast run`` does with the table beside its
  commits: the Glue table before the first batch, compaction on a schedule.
- :mod:`app.table.metadata_cache`: a pyiceberg transaction's metadata computed
  once per staged state, not deep-copied at each read.
"""

"""The Python workers the job warms while its query starts are those its first tasks get."""

from __future__ import annotations

import json
import subprocess
import sys

# A fresh local[2] session of its own: the suite's shared session has workers
# other tests started, and a task there could run in any of them.
PROBE = """
import json, os, sys
from app.spark.session import spark_session
from app.spark.warm import warm_workers
import pyarrow as pa

def probe(batches):
    for _ in batches:
        pass
    imported = "app.engine.task" in sys.modules and "app.sources.archive" in sys.modules
    yield pa.RecordBatch.from_pydict({"pid": [os.getpid()], "imported": [imported]})

spark = spark_session("local[2]")
warming = warm_workers(spark)
warming.thread.join(120)
rows = spark.range(0, 2, 1, 2).mapInArrow(probe, "pid long, imported boolean").collect()
print(json.dumps({"warmed": warming.workers, "probed": [[r.pid, r.imported] for r in rows]}))
spark.stop()
"""


def test_the_first_dataframe_tasks_run_in_the_warmed_workers_with_the_jobs_code_imported() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=300
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(found["warmed"]) == 2, "a worker per core of local[2]"
    probed = found["probed"]
    assert {pid for pid, _ in probed} <= set(found["warmed"])
    assert all(imported for _, imported in probed)

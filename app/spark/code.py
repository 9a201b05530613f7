"""The job's own code, as Spark ships it to the executors.

Spark's executors unpickle the job's functions and classes (the source's
range readers, the partition task) by reference, so they must import the
very ``app`` package the driver runs, and the AMI's workers hold the locked
dependencies only. The driver ships it:

- under ``run-job`` (spark-submit on the cluster) the wheel it installed is
  passed with ``--py-files`` (as ``tablecast-<version>.zip``: PySpark puts
  only ``.zip``, ``.egg`` and ``.jar`` files on the Python path);
- started any other way against a cluster (``tablecast run --master
  spark://...`` from a checkout), :func:`ship` zips the package the driver
  imported and adds it with ``SparkContext.addPyFile``.

Either way Spark puts the archive first on the executors' ``sys.path``.
The archive is named by the code's digest (:mod:`app.code_version`), which
every task checks against the driver's.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any

import app
from app.code_version import PACKAGE, code_digest, package_files


def package_zip(directory: Path | None = None) -> Path:
    """A zip of the ``app`` package, named by version and digest, made once per content."""
    out_dir = directory or Path(tempfile.gettempdir()) / "tablecast"
    path = out_dir / f"tablecast-{app.__version__}-{code_digest()[:16]}.zip"
    if path.is_file():
        return path
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, entry in package_files(resources.files(PACKAGE)):
            # A fixed date: the same code makes the same bytes.
            archive.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), entry.read_bytes())
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.part")
    partial.write_bytes(buffer.getvalue())
    os.replace(partial, path)
    return path


def shipped_by_submit(conf: Any) -> list[str]:
    """The tablecast archives spark-submit already ships (run-job's ``--py-files``)."""
    files = conf.get("spark.submit.pyFiles", "") or ""
    return [
        os.path.basename(f)
        for f in files.split(",")
        if f and os.path.basename(f).startswith("tablecast-")
    ]


def ships_itself(conf: Any) -> bool:
    return bool(shipped_by_submit(conf))


def ship(spark: Any) -> Path | None:
    """Make every Python worker import this driver's ``app`` package; returns the zip added."""
    from pyspark import SparkFiles

    context = spark.sparkContext
    conf = context.getConf()
    if conf.get("spark.master", "local").startswith("local"):
        return None  # local mode: the workers run the driver's own interpreter
    names = shipped_by_submit(conf)
    added: Path | None = None
    if not names:
        added = package_zip()
        context.addPyFile(str(added))
        names = [added.name]
    # Spark's streaming source runner (the driver-side Python process that plans
    # the source's offsets) looks for the Python includes under
    # <SparkFiles root>/streaming_job/, where Spark puts nothing; every other
    # Python worker looks in the root. Give it a copy.
    root = Path(SparkFiles.getRootDirectory())
    (root / "streaming_job").mkdir(exist_ok=True)
    for name in names:
        shutil.copyfile(root / name, root / "streaming_job" / name)
    return added

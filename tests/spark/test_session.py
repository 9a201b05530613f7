"""The session's JVM, as spark_session launches it in local mode."""

from __future__ import annotations

from typing import Any

from app.spark.session import LOCAL_JAVA_OPTIONS


def test_the_local_jvm_runs_with_c1_and_the_serial_collector(spark: Any) -> None:
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert set(LOCAL_JAVA_OPTIONS.split()) <= set(runtime.getInputArguments())

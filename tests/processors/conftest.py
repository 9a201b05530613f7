"""Fixtures of the tests of users' processors: the Spark tests' own."""

from tests.spark.conftest import iceberg_pool_ended

__all__ = ["iceberg_pool_ended"]

"""Fixtures of the runtime tests: one SparkSession in the test process to read sinks through Spark.

Runtime processes themselves are started by the tests through ``harness.RuntimeProcess`` and
killed (whole process group) in ``finally`` blocks.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from typing import Any

import pytest

if importlib.util.find_spec(f"{__package__}.conftest_kafka") is not None:  # the Kafka engineer's fixtures
    from .conftest_kafka import *  # noqa: F403


@pytest.fixture(scope="session")
def reader_spark() -> Iterator[Any]:
    """A small local SparkSession that reads the sinks the runtime processes write."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("headrace-runtime-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    try:
        yield spark
    finally:
        spark.stop()

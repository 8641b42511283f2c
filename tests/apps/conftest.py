"""Fixtures for the example apps' tests: a small local Spark session (helpers live in support.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

# `apps.common` and `tests.*` are imported from the repository root; pyproject's pytest `pythonpath`
# should say so (requested), this keeps the tests runnable meanwhile.
_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A small local Spark session for transform tests (UTC, 2 shuffle partitions, no UI)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("headrace-apps-tests")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    try:
        yield session
    finally:
        session.stop()

"""A waiting driver's warm-up query (issue 14): real PySpark in local mode, in this process.

It runs its micro-batches and stops, a promotion cuts it short, a failure to start it is reported rather than
raised, and it leaves the app's session as it found it: no active query, its state partitions unchanged, its
scratch directory gone.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.readwriter import DataStreamWriter

from headrace.runtime.warmup import MAX_PARTITIONS, QUERY_NAME, warm_up, warmup_partitions

pytestmark = pytest.mark.spark


def _query_threads(spark: Any) -> list[str]:
    """The JVM's live stream execution threads of the warm-up query (it runs in a session of its own, so the app's
    `spark.streams` would not show it)."""
    threads = spark.sparkContext._jvm.java.lang.Thread.getAllStackTraces().keySet().toArray()
    return [str(thread.getName()) for thread in threads if QUERY_NAME in str(thread.getName())]


def _untouched(spark: Any, outcome_scratch: str) -> None:
    assert spark.streams.active == []
    assert _query_threads(spark) == [], "the warm-up query is still running"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "1"  # the warm-up's own session set its partitions
    assert not Path(outcome_scratch).exists()


def test_the_warm_up_runs_its_batches_and_stops(reader_spark: Any) -> None:
    outcome = warm_up(reader_spark, threading.Event(), DataStreamWriter.start, batches=2)
    assert outcome.ended == "done", outcome
    assert outcome.batches >= 2
    _untouched(reader_spark, outcome.scratch)


def test_a_promotion_cuts_the_warm_up_short(reader_spark: Any) -> None:
    promoted = threading.Event()
    timer = threading.Timer(0.5, promoted.set)
    timer.start()
    try:
        began = time.monotonic()
        outcome = warm_up(reader_spark, promoted, DataStreamWriter.start, batches=10_000)
        took = time.monotonic() - began
    finally:
        timer.cancel()
    assert outcome.ended == "promoted", outcome
    assert took < 30, f"the warm-up went on {took:.1f}s after its promotion"
    _untouched(reader_spark, outcome.scratch)


def test_a_warm_up_that_cannot_start_is_reported_not_raised(reader_spark: Any) -> None:
    def refuse(writer: DataStreamWriter) -> Any:
        raise RuntimeError("no such source\nsecond line")

    outcome = warm_up(reader_spark, threading.Event(), refuse)
    assert (outcome.ended, outcome.batches) == ("failed: no such source", 0)
    _untouched(reader_spark, outcome.scratch)


@pytest.mark.parametrize(
    ("configured", "partitions"),
    [("1", 1), ("4", 4), (str(MAX_PARTITIONS), MAX_PARTITIONS), ("200", MAX_PARTITIONS), (None, MAX_PARTITIONS)],
)
def test_the_warm_up_uses_the_apps_partitions_up_to_a_bound(configured: str | None, partitions: int) -> None:
    assert warmup_partitions(configured) == partitions

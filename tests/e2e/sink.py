"""Reading the example's parquet sink the only correct way: through Spark and its `_spark_metadata` log."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pyspark.sql import SparkSession


def read_tumbling(path: Path) -> Counter[tuple[str, str]]:
    """(window start, page) -> views, failing if a window was emitted twice (a duplicate)."""
    spark = SparkSession.builder.master("local[1]").config("spark.sql.session.timeZone", "UTC").getOrCreate()
    if not (path / "_spark_metadata").exists():
        return Counter()
    seen: Counter[tuple[str, str]] = Counter()
    for row in spark.read.parquet(str(path)).collect():
        key = (row.window_start.strftime("%Y-%m-%d %H:%M:%S"), row.page)
        if key in seen:
            raise AssertionError(f"window {key} was emitted twice")
        seen[key] = row.views
    return seen

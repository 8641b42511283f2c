"""Reading the example's parquet sink the only correct way: through Spark and its `_spark_metadata` log."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pyspark.sql import SparkSession

SCHEMA = "window_start TIMESTAMP, window_end TIMESTAMP, page STRING, views LONG"


def read_tumbling(path: Path) -> Counter[tuple[str, str]]:
    """(window start, page) -> views, failing if a window was emitted twice (a duplicate)."""
    spark = SparkSession.builder.master("local[1]").config("spark.sql.session.timeZone", "UTC").getOrCreate()
    if not (path / "_spark_metadata").exists():
        return Counter()
    seen: Counter[tuple[str, str]] = Counter()
    # The schema is given: until the first window closes, the sink log lists no file to infer it from.
    frame = spark.read.schema(SCHEMA).parquet(str(path))
    for row in frame.collect():
        key = (row.window_start.strftime("%Y-%m-%d %H:%M:%S"), row.page)
        if key in seen:
            raise AssertionError(f"window {key} was emitted twice")
        seen[key] = row.views
    return seen

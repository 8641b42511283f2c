"""Pure DataFrame -> DataFrame steps of the windowed-counts app (clickstream page views per page).

Owns: the page-view schema, cleaning raw click events, and the tumbling and sliding event-time counts
with their watermark. Never: reads, writes or starts queries (app.py does).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

CLICK_SCHEMA = StructType(
    [
        StructField("event_id", StringType()),
        StructField("user_id", StringType()),
        StructField("event_type", StringType()),
        StructField("url", StringType()),
        StructField("referrer", StringType()),
        StructField("event_time", TimestampType()),
    ]
)


def page_views(clicks: DataFrame) -> DataFrame:
    """Page views only, with the page path normalised (lower case, no query string, no trailing slash)."""
    path = F.regexp_replace(F.lower(F.col("url")), r"[?#].*$", "")
    page = F.when(path == "/", F.lit("/")).otherwise(F.regexp_replace(path, r"/+$", ""))
    return clicks.where(
        (F.col("event_type") == "page_view") & F.col("event_time").isNotNull() & F.col("url").isNotNull()
    ).select("event_id", "user_id", page.alias("page"), "event_time")


def _counts(views: DataFrame, window: F.Column, watermark: str) -> DataFrame:
    counted = (
        views.withWatermark("event_time", watermark)
        .groupBy(window.alias("window"), F.col("page"))
        .agg(F.count(F.lit(1)).alias("views"))
    )
    return counted.select(
        F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "page", "views"
    )


def tumbling_counts(views: DataFrame, size: str, watermark: str) -> DataFrame:
    """Views per page in fixed windows of `size`; events older than the watermark are dropped."""
    return _counts(views, F.window("event_time", size), watermark)


def sliding_counts(views: DataFrame, size: str, slide: str, watermark: str) -> DataFrame:
    """Views per page in windows of `size` starting every `slide` (each view counts in size/slide windows)."""
    return _counts(views, F.window("event_time", size, slide), watermark)

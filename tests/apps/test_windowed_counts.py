"""windowed-counts: its transforms on static DataFrames, and the real app.py end to end on files."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from apps.common.generate import write_batches
from tests.apps.support import load_transforms, run_on_files

pytestmark = pytest.mark.spark
T = load_transforms("windowed-counts")


def at(clock: str) -> datetime:
    """A time on the test day (UTC), e.g. at("10:00:05")."""
    return datetime.fromisoformat(f"2026-11-21T{clock}")


def click(n: int, url: str, clock: str, kind: str = "page_view") -> dict[str, str]:
    return {
        "event_id": f"e{n}",
        "user_id": f"u{n % 3}",
        "event_type": kind,
        "url": url,
        "referrer": "",
        "event_time": f"2026-11-21T{clock}.000Z",
    }


def frame(spark: SparkSession, events: list[dict[str, str]]):
    return spark.createDataFrame(
        [{**e, "event_time": at(e["event_time"][11:19])} for e in events], schema=T.CLICK_SCHEMA
    )


def rows(df, *columns: str) -> list[tuple]:
    return sorted(tuple(r[c] for c in columns) for r in df.collect())


def test_page_views_keep_views_and_normalise_paths(spark: SparkSession) -> None:
    events = [
        click(1, "/A/", "10:00:01"),
        click(2, "/a?utm_source=mail", "10:00:02"),
        click(3, "/b#top", "10:00:03"),
        click(4, "/", "10:00:04"),
        click(5, "/a", "10:00:05", kind="click"),
    ]
    views = T.page_views(frame(spark, events))
    assert rows(views, "event_id", "page") == [("e1", "/a"), ("e2", "/a"), ("e3", "/b"), ("e4", "/")]


def test_tumbling_and_sliding_counts_on_a_static_frame(spark: SparkSession) -> None:
    events = [
        click(1, "/a", "10:00:05"),
        click(2, "/a", "10:00:30"),
        click(3, "/b", "10:00:50"),
        click(4, "/a", "10:01:10"),
        click(5, "/b", "10:03:20"),
    ]
    views = T.page_views(frame(spark, events))
    tumbling = T.tumbling_counts(views, "1 minute", "2 minutes")
    assert rows(tumbling, "window_start", "page", "views") == [
        (at("10:00:00"), "/a", 2),
        (at("10:00:00"), "/b", 1),
        (at("10:01:00"), "/a", 1),
        (at("10:03:00"), "/b", 1),
    ]
    sliding = T.sliding_counts(views, "2 minutes", "1 minute", "2 minutes")
    assert rows(sliding, "window_start", "window_end", "page", "views") == [
        (at("09:59:00"), at("10:01:00"), "/a", 2),
        (at("09:59:00"), at("10:01:00"), "/b", 1),
        (at("10:00:00"), at("10:02:00"), "/a", 3),
        (at("10:00:00"), at("10:02:00"), "/b", 1),
        (at("10:01:00"), at("10:03:00"), "/a", 1),
        (at("10:02:00"), at("10:04:00"), "/b", 1),
        (at("10:03:00"), at("10:05:00"), "/b", 1),
    ]


# One file per micro-batch (--max-files-per-trigger 1). Spark drops a late event from each window that
# had closed (window end <= the watermark of the previous batch). After file 1 the watermark is
# 10:03:20 - 2 min = 10:01:20, in force for late events from file 3 on: the view at 10:00:40 in file 3
# is dropped from [10:00, 10:01) and from the sliding [09:59, 10:01), but still counts in the sliding
# window [10:00, 10:02), which is open. The view at 10:06:00 moves the watermark to 10:04:00.
INPUT_FILES = [
    [
        click(1, "/a", "10:00:05"),
        click(2, "/a?x=1", "10:00:30"),
        click(3, "/b", "10:00:50"),
        click(4, "/b", "10:00:55", kind="click"),
    ],
    [click(5, "/a", "10:01:10"), click(6, "/b", "10:03:20")],
    [click(8, "/a/", "10:03:30")],
    [click(7, "/a", "10:00:40"), click(9, "/c", "10:06:00")],
]


def test_app_end_to_end_on_files_drops_late_events(spark: SparkSession, tmp_path: Path) -> None:
    write_batches(tmp_path / "in", INPUT_FILES, "clicks", first_mtime=1_700_000_000)
    out = run_on_files(
        "windowed-counts",
        tmp_path,
        "--window",
        "1 minute",
        "--sliding-window",
        "2 minutes",
        "--slide",
        "1 minute",
        "--watermark",
        "2 minutes",
    )

    tumbling = spark.read.parquet(str(out / "tumbling"))
    assert rows(tumbling, "window_start", "page", "views") == [
        (at("10:00:00"), "/a", 2),
        (at("10:00:00"), "/b", 1),
        (at("10:01:00"), "/a", 1),
        (at("10:03:00"), "/a", 1),
        (at("10:03:00"), "/b", 1),
    ]
    sliding = spark.read.parquet(str(out / "sliding"))
    assert rows(sliding, "window_start", "page", "views") == [
        (at("09:59:00"), "/a", 2),
        (at("09:59:00"), "/b", 1),
        (at("10:00:00"), "/a", 4),
        (at("10:00:00"), "/b", 1),
        (at("10:01:00"), "/a", 1),
        (at("10:02:00"), "/a", 1),
        (at("10:02:00"), "/b", 1),
    ]

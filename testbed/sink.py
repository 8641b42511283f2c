"""An independent reader of the example's parquet sink, and the sink compared with the input.

Owns: reading the tumbling-window output the only correct way (through Spark and its `_spark_metadata`
log, in a local Spark session of this process: it shares nothing with the app but the files), waiting
until the sink holds every expected window, and the pure comparison of what the sink holds with the
windows the input makes (duplicated, wrong and missing windows; which windows must be closed by now).
Never: writes the sink or input, or asserts (tests do).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from testbed import scenario

SCHEMA = "window_start TIMESTAMP, window_end TIMESTAMP, page STRING, views LONG"
WINDOW = timedelta(minutes=1)  # the scenario's `--window 1 minute`
WATERMARK = timedelta(seconds=30)  # the scenario's `--watermark 30 seconds`
Window = tuple[str, str]  # (window start "%Y-%m-%d %H:%M:%S", page)


def read_rows(path: Path) -> list[tuple[Window, int]]:
    """Every (window, views) row the sink's log lists, duplicates included; none before the first batch."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[1]").config("spark.sql.session.timeZone", "UTC")
    spark = builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()
    if not (path / "_spark_metadata").exists():
        return []
    # The schema is given: until the first window closes, the sink log lists no file to infer it from.
    frame = spark.read.schema(SCHEMA).parquet(str(path))
    return [((row.window_start.strftime("%Y-%m-%d %H:%M:%S"), row.page), int(row.views)) for row in frame.collect()]


def read_tumbling(path: Path) -> Counter[Window]:
    """(window start, page) -> views, failing if a window was emitted twice (a duplicate)."""
    seen: Counter[Window] = Counter()
    for key, views in read_rows(path):
        if key in seen:
            raise AssertionError(f"window {key} was emitted twice")
        seen[key] = views
    return seen


def wait_for_every_window(
    app: scenario.AppHandle, expected: Iterable[Window], output: str = "output", timeout: float = 300
) -> Counter[Window]:
    """Read `<data>/<output>/tumbling` until it holds every window of `expected`; what it then holds."""
    wanted = set(expected)

    def complete() -> Counter[Window] | None:
        seen = read_tumbling(app.data / output / "tumbling")
        return seen if set(seen) >= wanted else None

    return app.wait(complete, timeout, f"every expected window in {output}")


def closed_windows(expected: Mapping[Window, int], last_event: datetime) -> set[Window]:
    """The windows of `expected` the watermark has closed once the app has read up to `last_event` (their
    end is at least the watermark delay before it): the sink must hold each of them."""
    horizon = last_event - WATERMARK
    return {
        key
        for key in expected
        if datetime.strptime(key[0], "%Y-%m-%d %H:%M:%S") + WINDOW <= horizon.replace(tzinfo=None)
    }


def emitted_by_now(expected: Iterable[Window], rows: Iterable[tuple[Window, int]]) -> set[Window]:
    """The windows of `expected` the sink must hold already, judged by the sink itself: those starting no later
    than its newest window. Append mode emits a window once the watermark passes its end, together with every
    window ending earlier (the input is one partition in event-time order), so one missing behind the newest is
    lost, not late; a window after it may only be late (the app lagging after a fault)."""
    starts = [key[0] for key, _ in rows]
    if not starts:
        return set()
    newest = max(starts)  # "%Y-%m-%d %H:%M:%S" sorts as time
    return {key for key in expected if key[0] <= newest}


@dataclass(frozen=True)
class SinkCheck:
    """What an independent read of the sink found against the input."""

    windows: int  # distinct windows in the sink
    records: int  # input events the sink accounts for (the sum of its counts)
    duplicated: list[Window] = field(default_factory=list)  # emitted more than once
    wrong: list[tuple[Window, int, int]] = field(default_factory=list)  # (window, in the sink, from the input)
    missing: list[Window] = field(default_factory=list)  # closed by the watermark, not in the sink
    late: int = 0  # closed by the input's watermark, not in the sink yet, after its newest window (lag, not loss)

    @property
    def ok(self) -> bool:
        """Nothing lost, nothing duplicated, every count correct."""
        return not (self.duplicated or self.wrong or self.missing)


def compare(rows: list[tuple[Window, int]], expected: Mapping[Window, int], closed: Iterable[Window]) -> SinkCheck:
    """The sink's rows against the input's windows (`expected`, read after the rows: every window in the sink
    is closed, so all of its events were produced by then) and the windows that must be there (`closed`)."""
    seen: dict[Window, int] = {}
    duplicated: list[Window] = []
    for key, views in rows:
        if key in seen:
            duplicated.append(key)
        seen[key] = views
    wrong = sorted((key, views, expected.get(key, 0)) for key, views in seen.items() if views != expected.get(key, 0))
    missing = sorted(set(closed) - set(seen))
    return SinkCheck(len(seen), sum(seen.values()), sorted(duplicated), wrong, missing)

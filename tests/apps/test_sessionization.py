"""sessionization: the session rules, the keyed-state transform, and the real app.py end to end on files."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import SparkSession

from apps.common.generate import write_batches
from tests.apps.support import group_state, load_transforms, run_on_files

T = load_transforms("sessionization")
MINUTE = 60_000


def at(clock: str) -> datetime:
    return datetime.fromisoformat(f"2026-11-21T{clock}")


def ms(clock: str) -> int:
    return int(datetime.fromisoformat(f"2026-11-21T{clock}+00:00").timestamp() * 1000)


def click(user: str, url: str, clock: str, kind: str = "page_view") -> dict[str, str]:
    return {
        "event_id": f"{user}-{clock}",
        "user_id": user,
        "event_type": kind,
        "url": url,
        "referrer": "",
        "event_time": f"2026-11-21T{clock}.000Z",
    }


def test_advance_splits_on_gaps_and_keeps_the_open_session() -> None:
    events = [(ms("10:20:00"), "/cart"), (ms("10:00:00"), "/home"), (ms("11:00:00"), "/home")]
    session, closed = T.advance(None, events, 30 * MINUTE)
    assert closed == [T.Session(ms("10:00:00"), ms("10:20:00"), 2, "/home", "/cart")]
    assert session == T.Session(ms("11:00:00"), ms("11:00:00"), 1, "/home", "/home")


def test_advance_lets_an_on_time_out_of_order_event_join_the_session() -> None:
    open_session = T.Session(ms("10:10:00"), ms("10:20:00"), 2, "/a", "/b")
    session, closed = T.advance(open_session, [(ms("10:05:00"), "/first")], 30 * MINUTE)
    assert closed == []
    assert session == T.Session(ms("10:05:00"), ms("10:20:00"), 3, "/first", "/b")


@pytest.mark.spark
def test_page_views_on_a_static_frame(spark: SparkSession) -> None:
    events = [click("u1", "/home?utm=x", "10:00:00"), click("u2", "/blog", "10:10:00", kind="scroll")]
    frame = spark.createDataFrame([{**e, "event_time": at(e["event_time"][11:19])} for e in events], T.CLICK_SCHEMA)
    assert [tuple(r) for r in T.page_views(frame).collect()] == [("u1", at("10:00:00"), ms("10:00:00"), "/home")]


def test_updater_emits_closed_sessions_and_keeps_the_open_one_with_a_timeout() -> None:
    update = T.session_updater(30 * MINUTE)
    state = group_state(T.STATE_SCHEMA, (ms("10:00:00"), ms("10:05:00"), 2, "/home", "/products"), ms("09:58:00"))
    batch = pd.DataFrame({"event_ms": [ms("10:20:00"), ms("11:00:00")], "page": ["/cart", "/home"]})
    (emitted,) = list(update(("u1",), iter([batch]), state))
    assert emitted.to_dict("records") == [
        {
            "user_id": "u1",
            "session_start": pd.Timestamp("2026-11-21 10:00", tz="UTC"),
            "session_end": pd.Timestamp("2026-11-21 10:20", tz="UTC"),
            "duration_seconds": 1200,
            "events": 3,
            "landing_page": "/home",
            "exit_page": "/cart",
        }
    ]
    assert state.get == (ms("11:00:00"), ms("11:00:00"), 1, "/home", "/home")
    assert state.oldTimeoutTimestamp == -1 and state._timeout_timestamp == ms("11:30:00")


def test_updater_emits_the_session_when_it_times_out_and_forgets_it() -> None:
    state = group_state(T.STATE_SCHEMA, (ms("11:00:00"), ms("11:10:00"), 2, "/home", "/help"), ms("11:41:00"), True)
    (emitted,) = list(T.session_updater(30 * MINUTE)(("u1",), iter([]), state))
    assert emitted[["events", "duration_seconds", "exit_page"]].values.tolist() == [[2, 600, "/help"]]
    assert not state.exists


# One file per micro-batch. u1's first session is closed by the 40-minute gap in file 1; u2's and
# u1's second session time out when the watermark (max event time - 10 min) passes last event + 30 min;
# u3's session is still open at the end.
INPUT_FILES = [
    [
        click("u1", "/home", "10:00:00"),
        click("u1", "/products?x=1", "10:05:00"),
        click("u2", "/blog", "10:10:00"),
        click("u2", "/blog", "10:11:00", kind="scroll"),
    ],
    [click("u1", "/cart", "10:20:00"), click("u1", "/home", "11:00:00")],
    [click("u1", "/help", "11:10:00"), click("u3", "/", "12:30:00")],
]


@pytest.mark.spark
def test_app_end_to_end_on_files(spark: SparkSession, tmp_path: Path) -> None:
    write_batches(tmp_path / "in", INPUT_FILES, "clicks", first_mtime=1_700_000_000)
    out = run_on_files("sessionization", tmp_path, "--gap-seconds", "1800", "--watermark", "10 minutes")
    sessions = sorted(tuple(r) for r in spark.read.parquet(str(out)).collect())
    assert sessions == [
        ("u1", at("10:00:00"), at("10:20:00"), 1200, 3, "/home", "/cart"),
        ("u1", at("11:00:00"), at("11:10:00"), 600, 2, "/home", "/help"),
        ("u2", at("10:10:00"), at("10:10:00"), 0, 1, "/blog", "/blog"),
    ]

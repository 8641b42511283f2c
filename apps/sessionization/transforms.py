"""Pure steps of the sessionization app: user sessions from click events, closed after inactivity.

Owns: the click schema, the session rules as plain Python (`advance`, no Spark), and `sessionize`,
which runs them per user with keyed state and event-time timeouts (`applyInPandasWithState`).
Never: reads, writes or starts queries (app.py does).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import astuple, dataclass, replace

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

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
# The open session of one user, kept in Spark's state store (times in epoch milliseconds).
STATE_SCHEMA = StructType(
    [
        StructField("start_ms", LongType()),
        StructField("last_ms", LongType()),
        StructField("events", LongType()),
        StructField("landing_page", StringType()),
        StructField("exit_page", StringType()),
    ]
)
SESSION_SCHEMA = StructType(
    [
        StructField("user_id", StringType()),
        StructField("session_start", TimestampType()),
        StructField("session_end", TimestampType()),
        StructField("duration_seconds", LongType()),
        StructField("events", LongType()),
        StructField("landing_page", StringType()),
        StructField("exit_page", StringType()),
    ]
)


@dataclass(frozen=True)
class Session:
    """A run of one user's events with no gap longer than the inactivity timeout."""

    start_ms: int
    last_ms: int
    events: int
    landing_page: str
    exit_page: str


def advance(
    session: Session | None, events: Iterable[tuple[int, str]], gap_ms: int
) -> tuple[Session | None, list[Session]]:
    """Fold (time_ms, page) events into the open session; return it and the sessions the events closed.

    An event more than `gap_ms` after the session's last event closes it and opens a new one; an
    out-of-order event that is still on time joins the open session.
    """
    closed: list[Session] = []
    for time_ms, page in sorted(events):
        if session is None:
            session = Session(time_ms, time_ms, 1, page, page)
        elif time_ms > session.last_ms + gap_ms:
            closed.append(session)
            session = Session(time_ms, time_ms, 1, page, page)
        else:
            session = _join(session, time_ms, page)
    return session, closed


def _join(session: Session, time_ms: int, page: str) -> Session:
    landing = page if time_ms < session.start_ms else session.landing_page
    exit_page = page if time_ms >= session.last_ms else session.exit_page
    return replace(session, start_ms=min(session.start_ms, time_ms), last_ms=max(session.last_ms, time_ms),
                   events=session.events + 1, landing_page=landing, exit_page=exit_page)  # fmt: skip


def _summaries(user_id: str, sessions: list[Session]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "user_id": [user_id] * len(sessions),
            "session_start": pd.to_datetime([s.start_ms for s in sessions], unit="ms", utc=True),
            "session_end": pd.to_datetime([s.last_ms for s in sessions], unit="ms", utc=True),
            "duration_seconds": [(s.last_ms - s.start_ms) // 1000 for s in sessions],
            "events": [s.events for s in sessions],
            "landing_page": [s.landing_page for s in sessions],
            "exit_page": [s.exit_page for s in sessions],
        }
    )


def _stored(state: GroupState) -> Session | None:
    return Session(*state.get) if state.exists else None


def session_updater(gap_ms: int):
    """The per-user function for `applyInPandasWithState`: emits sessions as they close."""

    def update(key: tuple[str], batches: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        (user_id,) = key
        if state.hasTimedOut:
            session, closed = None, [s for s in [_stored(state)] if s is not None]
        else:
            events = [(int(t), str(p)) for b in batches for t, p in zip(b["event_ms"], b["page"], strict=True)]
            session, closed = advance(_stored(state), events, gap_ms)
        if session is None:
            state.remove()
        else:
            state.update(astuple(session))
            state.setTimeoutTimestamp(session.last_ms + gap_ms)
        yield _summaries(user_id, closed)

    return update


def page_views(clicks: DataFrame) -> DataFrame:
    """Page views with their path (query string removed) and event time in epoch milliseconds."""
    return clicks.where((F.col("event_type") == "page_view") & F.col("event_time").isNotNull()).select(
        "user_id",
        "event_time",
        F.unix_millis("event_time").alias("event_ms"),
        F.regexp_replace(F.col("url"), r"[?#].*$", "").alias("page"),
    )


def sessionize(clicks: DataFrame, gap_seconds: int, watermark: str) -> DataFrame:
    """One row per finished session, emitted once the watermark passes its last event plus the gap."""
    return (
        page_views(clicks)
        .withWatermark("event_time", watermark)
        .groupBy("user_id")
        .applyInPandasWithState(
            session_updater(gap_seconds * 1000),
            SESSION_SCHEMA,
            STATE_SCHEMA,
            "append",
            GroupStateTimeout.EventTimeTimeout,
        )
    )

"""fraud-detection: the pattern matcher, the keyed-state transform, and the real app.py end to end on files."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import SparkSession

from apps.common.generate import write_batches
from tests.apps.support import group_state, load_transforms, run_on_files

T = load_transforms("fraud-detection")
RULES = T.Rules(small_max=5.0, large_min=500.0, small_count=3, within_ms=10 * 60_000)


def at(clock: str) -> datetime:
    return datetime.fromisoformat(f"2026-11-21T{clock}")


def ms(clock: str) -> int:
    return int(datetime.fromisoformat(f"2026-11-21T{clock}+00:00").timestamp() * 1000)


def pay(payment_id: str, clock: str, amount: float):
    return T.Payment(ms(clock), amount, payment_id)


def test_three_small_then_large_within_the_bound_alerts() -> None:
    payments = [
        pay("p4", "10:05:00", 900.0),
        pay("p1", "10:00:00", 1.0),
        pay("p2", "10:01:00", 2.0),
        pay("p3", "10:02:00", 0.5),
    ]
    kept, alerts = T.match([], payments, RULES)
    assert kept == []
    assert alerts == [
        T.Alert(pay("p4", "10:05:00", 900.0), ((ms("10:00:00"), 1.0), (ms("10:01:00"), 2.0), (ms("10:02:00"), 0.5)))
    ]


def test_no_alert_with_too_few_or_expired_small_payments() -> None:
    too_few = [pay("p1", "10:00:00", 1.0), pay("p2", "10:01:00", 1.0), pay("p3", "10:03:00", 700.0)]
    assert T.match([], too_few, RULES)[1] == []
    # At 10:11 only the small payments from 10:01 on still count: two, not three.
    expired = [
        pay("p1", "10:00:00", 1.0),
        pay("p2", "10:01:00", 1.0),
        pay("p3", "10:02:00", 1.0),
        pay("p4", "10:11:00", 700.0),
    ]
    kept, alerts = T.match([], expired, RULES)
    assert alerts == []
    assert kept == [(ms("10:01:00"), 1.0), (ms("10:02:00"), 1.0)]


def test_medium_payments_do_not_break_the_pattern_and_state_carries_over() -> None:
    carried = [(ms("10:00:00"), 1.0), (ms("10:01:00"), 1.0)]
    kept, alerts = T.match(
        carried, [pay("m", "10:02:00", 45.0), pay("s", "10:03:00", 2.0), pay("L", "10:04:00", 600.0)], RULES
    )
    assert [a.payment.payment_id for a in alerts] == ["L"]
    assert kept == []


def payment(payment_id: str, card: str, amount: float, clock: str) -> dict[str, object]:
    return {
        "payment_id": payment_id,
        "card_id": card,
        "amount": amount,
        "merchant": "m01",
        "event_time": f"2026-11-21T{clock}.000Z",
    }


# Card A: three small payments over two files, a medium one, then a large one -> alert.
# Card B: a large payment without small ones. Card C: its small payments are more than 10 minutes
# older than its large one. Card D: the whole pattern inside one file -> alert.
INPUT_FILES = [
    [
        payment("pA1", "A", 1.00, "10:00:00"),
        payment("pA2", "A", 2.50, "10:01:00"),
        payment("pB1", "B", 40.0, "10:00:30"),
        payment("pC1", "C", 1.00, "10:00:00"),
    ],
    [
        payment("pA3", "A", 0.99, "10:02:00"),
        payment("pA4", "A", 45.0, "10:02:30"),
        payment("pC2", "C", 1.00, "10:01:00"),
        payment("pC3", "C", 1.00, "10:02:00"),
    ],
    [
        payment("pA5", "A", 950.0, "10:04:00"),
        payment("pB2", "B", 800.0, "10:04:10"),
        payment("pC4", "C", 700.0, "10:13:00"),
    ],
    [
        payment("pD1", "D", 1.10, "10:20:00"),
        payment("pD2", "D", 1.20, "10:21:00"),
        payment("pD3", "D", 1.30, "10:22:00"),
        payment("pD4", "D", 1200.0, "10:25:00"),
    ],
]
EXPECTED_ALERTS = [
    ("A", "pA5", at("10:04:00"), 950.0, 3, 4.49, at("10:00:00")),
    ("D", "pD4", at("10:25:00"), 1200.0, 3, 3.6, at("10:20:00")),
]


def test_matcher_carries_small_payments_in_state_and_alerts_across_batches() -> None:
    match_card = T.card_matcher(RULES)
    state = group_state(T.STATE_SCHEMA, watermark_ms=ms("09:50:00"))
    first = pd.DataFrame({"event_ms": [ms("10:00:00"), ms("10:01:00")], "amount": [1.0, 2.5], "payment_id": ["a", "b"]})
    (emitted,) = list(match_card(("A",), iter([first]), state))
    assert emitted.empty
    assert state._timeout_timestamp == ms("10:11:00")
    second = pd.DataFrame(
        {"event_ms": [ms("10:02:00"), ms("10:04:00")], "amount": [0.99, 950.0], "payment_id": ["c", "L"]}
    )
    state = group_state(T.STATE_SCHEMA, state.get, ms("09:59:00"))
    (emitted,) = list(match_card(("A",), iter([second]), state))
    assert emitted.to_dict("records") == [
        {
            "card_id": "A",
            "payment_id": "L",
            "alert_time": pd.Timestamp("2026-11-21 10:04", tz="UTC"),
            "amount": 950.0,
            "small_payments": 3,
            "small_total": 4.49,
            "first_small_time": pd.Timestamp("2026-11-21 10:00", tz="UTC"),
        }
    ]
    assert not state.exists


def test_matcher_forgets_a_card_when_its_small_payments_time_out() -> None:
    state = group_state(T.STATE_SCHEMA, ("[[1795255200000, 1.0]]",), ms("10:12:00"), timed_out=True)
    assert list(T.card_matcher(RULES)(("C",), iter([]), state)) == []
    assert not state.exists


@pytest.mark.spark
def test_app_end_to_end_on_files(spark: SparkSession, tmp_path: Path) -> None:
    write_batches(tmp_path / "in", INPUT_FILES, "payments", first_mtime=1_700_000_000)
    out = run_on_files(
        "fraud-detection",
        tmp_path,
        "--small-max",
        "5",
        "--large-min",
        "500",
        "--small-count",
        "3",
        "--within-seconds",
        "600",
    )
    assert sorted(tuple(r) for r in spark.read.parquet(str(out)).collect()) == EXPECTED_ALERTS

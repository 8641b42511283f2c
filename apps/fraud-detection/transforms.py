"""Pure steps of the fraud-detection app: a card-testing pattern over keyed state (CEP-like).

The pattern: at least N small payments on one card followed by a large one, all within a time
bound, raises an alert (fraudsters test a stolen card with small amounts, then cash out).
Owns: the payment schema, the rules, the matcher as plain Python (`match`, no Spark), and
`detect`, which runs it per card with keyed state and event-time timeouts (`applyInPandasWithState`).
Never: reads, writes or starts queries (app.py does).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import (
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

PAYMENT_SCHEMA = StructType(
    [
        StructField("payment_id", StringType()),
        StructField("card_id", StringType()),
        StructField("amount", DoubleType()),
        StructField("merchant", StringType()),
        StructField("event_time", TimestampType()),
    ]
)
# Recent small payments of one card, oldest first, as JSON [[epoch_ms, amount], ...]. A string, because
# PySpark 4.3's Python worker cannot read an ArrayType in an applyInPandasWithState state schema
# (KeyError: 'elementType' in StructType.fromJson).
STATE_SCHEMA = StructType([StructField("smalls_json", StringType())])
ALERT_SCHEMA = StructType(
    [
        StructField("card_id", StringType()),
        StructField("payment_id", StringType()),
        StructField("alert_time", TimestampType()),
        StructField("amount", DoubleType()),
        StructField("small_payments", LongType()),
        StructField("small_total", DoubleType()),
        StructField("first_small_time", TimestampType()),
    ]
)


@dataclass(frozen=True)
class Rules:
    """What counts as small and large, how many small payments, and within how long."""

    small_max: float = 5.0
    large_min: float = 500.0
    small_count: int = 3
    within_ms: int = 10 * 60_000


@dataclass(frozen=True)
class Payment:
    time_ms: int
    amount: float
    payment_id: str


@dataclass(frozen=True)
class Alert:
    payment: Payment
    smalls: tuple[tuple[int, float], ...]


def match(
    smalls: list[tuple[int, float]], payments: Iterable[Payment], rules: Rules
) -> tuple[list[tuple[int, float]], list[Alert]]:
    """Run one card's payments (any order) through the pattern; return the small payments kept and the alerts.

    Small payments older than `within_ms` before a payment no longer count; an alert consumes them.
    """
    alerts: list[Alert] = []
    for payment in sorted(payments, key=lambda p: (p.time_ms, p.payment_id)):
        smalls = [s for s in smalls if s[0] >= payment.time_ms - rules.within_ms]
        if payment.amount <= rules.small_max:
            smalls.append((payment.time_ms, payment.amount))
        elif payment.amount >= rules.large_min and len(smalls) >= rules.small_count:
            alerts.append(Alert(payment, tuple(smalls)))
            smalls = []
    return smalls, alerts


def _alert_frame(card_id: str, alerts: list[Alert]) -> pd.DataFrame:
    def times(values: list[int]) -> pd.DatetimeIndex:
        return pd.to_datetime(values, unit="ms", utc=True)

    return pd.DataFrame(
        {
            "card_id": [card_id] * len(alerts),
            "payment_id": [a.payment.payment_id for a in alerts],
            "alert_time": times([a.payment.time_ms for a in alerts]),
            "amount": [a.payment.amount for a in alerts],
            "small_payments": [len(a.smalls) for a in alerts],
            "small_total": [round(sum(amount for _, amount in a.smalls), 2) for a in alerts],
            "first_small_time": times([a.smalls[0][0] for a in alerts]),
        }
    )


def card_matcher(rules: Rules):
    """The per-card function for `applyInPandasWithState`: emits alerts, forgets stale small payments."""

    def update(key: tuple[str], batches: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        (card_id,) = key
        if state.hasTimedOut:  # nothing happened on this card for `within_ms`: its small payments expired
            state.remove()
            return
        stored = json.loads(state.get[0]) if state.exists else []
        payments = [Payment(int(t), float(a), str(i)) for b in batches
                    for t, a, i in zip(b["event_ms"], b["amount"], b["payment_id"], strict=True)]  # fmt: skip
        smalls, alerts = match([(int(t), float(a)) for t, a in stored], payments, rules)
        if smalls:
            state.update((json.dumps(smalls),))
            state.setTimeoutTimestamp(smalls[-1][0] + rules.within_ms)
        else:
            state.remove()
        yield _alert_frame(card_id, alerts)

    return update


def detect(payments: DataFrame, rules: Rules, watermark: str) -> DataFrame:
    """One alert per large payment that completes the pattern on its card."""
    return (
        payments.where(F.col("card_id").isNotNull() & F.col("event_time").isNotNull() & F.col("amount").isNotNull())
        .withColumn("event_ms", F.unix_millis("event_time"))
        .withWatermark("event_time", watermark)
        .groupBy("card_id")
        .applyInPandasWithState(
            card_matcher(rules), ALERT_SCHEMA, STATE_SCHEMA, "append", GroupStateTimeout.EventTimeTimeout
        )
    )

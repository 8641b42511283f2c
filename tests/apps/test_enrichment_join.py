"""enrichment-join: the stream-stream and stream-static joins, static and through the real app.py on files."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from apps.common.generate import write_batches
from tests.apps.support import load_transforms, run_on_files

pytestmark = pytest.mark.spark
T = load_transforms("enrichment-join")


def at(clock: str) -> datetime:
    return datetime.fromisoformat(f"2026-11-21T{clock}")


def order(order_id: str, customer: str, amount: float, clock: str) -> dict[str, object]:
    return {"order_id": order_id, "customer_id": customer, "amount": amount, "order_time": f"2026-11-21T{clock}.000Z"}


def payment(payment_id: str, order_id: str, method: str, clock: str) -> dict[str, object]:
    return {
        "payment_id": payment_id,
        "order_id": order_id,
        "method": method,
        "payment_time": f"2026-11-21T{clock}.000Z",
    }


# One orders file and one payments file per micro-batch. o3's payment comes 18 minutes late (the
# bound is 15), so o3 is unpaid like o2; "ox" has no order. With 5-minute watermarks on both sides the
# final watermark is 10:55, so unpaid orders placed before 10:40 are emitted; o5 is paid.
ORDERS = [
    [order("o1", "c1", 50.0, "10:00:00"), order("o2", "c2", 20.0, "10:01:00"), order("o3", "c1", 75.5, "10:02:00")],
    [order("o4", "c3", 10.0, "10:30:00")],
    [order("o5", "c2", 99.9, "11:00:00")],
]
PAYMENTS = [
    [payment("p1", "o1", "card", "10:03:00")],
    [payment("p3", "o3", "card", "10:20:00"), payment("p4", "o4", "paypal", "10:31:00")],
    [payment("p5", "o5", "transfer", "11:00:30"), payment("p9", "ox", "card", "10:59:00")],
]
CUSTOMERS = [
    {"customer_id": "c1", "segment": "gold", "country": "DE"},
    {"customer_id": "c2", "segment": "silver", "country": "FR"},
]
EXPECTED = [  # order_id, customer_id, amount, status, payment_id, method, seconds_to_pay, segment, country
    ("o1", "c1", 50.0, "paid", "p1", "card", 180, "gold", "DE"),
    ("o2", "c2", 20.0, "unpaid", None, None, None, "silver", "FR"),
    ("o3", "c1", 75.5, "unpaid", None, None, None, "gold", "DE"),
    ("o4", "c3", 10.0, "paid", "p4", "paypal", 60, None, None),
    ("o5", "c2", 99.9, "paid", "p5", "transfer", 30, "silver", "FR"),
]
COLUMNS = (
    "order_id",
    "customer_id",
    "amount",
    "status",
    "payment_id",
    "method",
    "seconds_to_pay",
    "segment",
    "country",
)


def static(spark: SparkSession, batches: list[list[dict[str, object]]], schema, time_field: str):
    rows = [{**r, time_field: at(str(r[time_field])[11:19])} for batch in batches for r in batch]
    return spark.createDataFrame(rows, schema)


def selected(frame) -> list[tuple]:
    return sorted(tuple(r[c] for c in COLUMNS) for r in frame.collect())


def test_joins_on_static_frames(spark: SparkSession) -> None:
    orders = static(spark, ORDERS, T.ORDER_SCHEMA, "order_time")
    payments = static(spark, PAYMENTS, T.PAYMENT_SCHEMA, "payment_time")
    joined = T.orders_with_payments(orders, payments, "15 minutes", "5 minutes", "5 minutes")
    enriched = T.with_customers(joined, spark.createDataFrame(CUSTOMERS, T.CUSTOMER_SCHEMA))
    assert selected(enriched) == EXPECTED


def test_app_end_to_end_on_files(spark: SparkSession, tmp_path: Path) -> None:
    write_batches(tmp_path / "in" / "orders", ORDERS, "orders", first_mtime=1_700_000_000)
    write_batches(tmp_path / "in" / "payments", PAYMENTS, "payments", first_mtime=1_700_000_000)
    customers = tmp_path / "customers.json"
    customers.write_text("".join(json.dumps(c) + "\n" for c in CUSTOMERS))
    out = run_on_files(
        "enrichment-join",
        tmp_path,
        "--customers",
        str(customers),
        "--pay-within",
        "15 minutes",
        "--orders-watermark",
        "5 minutes",
        "--payments-watermark",
        "5 minutes",
    )
    assert selected(spark.read.parquet(str(out))) == EXPECTED

"""Pure steps of the enrichment-join app: orders joined with their payments, then with customer data.

Owns: the order, payment and customer schemas; the stream-stream left outer join of orders with
payments made within a time bound (watermarks on both sides, so state is bounded and unpaid orders
are emitted once no payment can arrive any more); the stream-static join with the customer table.
Never: reads, writes or starts queries (app.py does).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention
from pyspark.sql.types import DoubleType, StringType, StructField, StructType, TimestampType

ORDER_SCHEMA = StructType(
    [
        StructField("order_id", StringType()),
        StructField("customer_id", StringType()),
        StructField("amount", DoubleType()),
        StructField("order_time", TimestampType()),
    ]
)
PAYMENT_SCHEMA = StructType(
    [
        StructField("payment_id", StringType()),
        StructField("order_id", StringType()),
        StructField("method", StringType()),
        StructField("payment_time", TimestampType()),
    ]
)
CUSTOMER_SCHEMA = StructType(
    [
        StructField("customer_id", StringType()),
        StructField("segment", StringType()),
        StructField("country", StringType()),
    ]
)


def orders_with_payments(
    orders: DataFrame, payments: DataFrame, pay_within: str, orders_watermark: str, payments_watermark: str
) -> DataFrame:
    """Every order once: with the payment made within `pay_within` after it ("paid"), or none ("unpaid")."""
    o = orders.where(F.col("order_time").isNotNull()).withWatermark("order_time", orders_watermark).alias("o")
    p = (
        payments.where(F.col("payment_time").isNotNull())
        .withWatermark("payment_time", payments_watermark)
        .withColumnRenamed("order_id", "paid_order_id")
        .alias("p")
    )
    condition = (
        (F.col("o.order_id") == F.col("p.paid_order_id"))
        & (F.col("p.payment_time") >= F.col("o.order_time"))
        & (F.col("p.payment_time") <= F.col("o.order_time") + F.expr(f"INTERVAL {pay_within}"))
    )
    joined = o.join(p, condition, "leftOuter")
    paid = F.col("p.payment_id").isNotNull()
    return joined.select(
        "o.order_id",
        "o.customer_id",
        "o.amount",
        "o.order_time",
        F.when(paid, "paid").otherwise("unpaid").alias("status"),
        "p.payment_id",
        "p.method",
        "p.payment_time",
        (F.unix_timestamp("p.payment_time") - F.unix_timestamp("o.order_time")).alias("seconds_to_pay"),
    )


def with_customers(orders: DataFrame, customers: DataFrame) -> DataFrame:
    """Add each order's customer segment and country (null for customers missing from the table)."""
    return orders.join(customers.dropDuplicates(["customer_id"]), "customer_id", "left")

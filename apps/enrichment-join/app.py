"""Orders enriched with their payments (stream-stream join within a time bound) and customer data.

An ordinary PySpark Structured Streaming program: `python app.py --help`. With `--source files`,
`--input DIR` holds `orders/` and `payments/` subdirectories of JSON lines files.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import SparkSession

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # transforms.py, and the apps' shared common/

import transforms  # noqa: E402

from common import streaming_io  # noqa: E402


def main(argv: Sequence[str] | None = None) -> None:
    parser = streaming_io.base_parser(__doc__ or "")
    parser.add_argument("--orders-topic", default="orders", help="Kafka topic of orders")
    parser.add_argument("--payments-topic", default="payments", help="Kafka topic of order payments")
    parser.add_argument("--customers", default=None, help="JSON lines file or directory of customers (optional)")
    parser.add_argument("--pay-within", default="15 minutes", help="a payment later than this does not count")
    parser.add_argument("--orders-watermark", default="5 minutes", help="how late an order may be")
    parser.add_argument("--payments-watermark", default="5 minutes", help="how late a payment may be")
    args = streaming_io.parse(parser, argv)

    spark = SparkSession.builder.appName("enrichment-join").getOrCreate()
    orders = streaming_io.read_events(spark, args, transforms.ORDER_SCHEMA, args.orders_topic, "orders")
    payments = streaming_io.read_events(spark, args, transforms.PAYMENT_SCHEMA, args.payments_topic, "payments")
    joined = transforms.orders_with_payments(
        orders, payments, args.pay_within, args.orders_watermark, args.payments_watermark
    )
    if args.customers:
        joined = transforms.with_customers(joined, spark.read.schema(transforms.CUSTOMER_SCHEMA).json(args.customers))
    streaming_io.await_all(spark, [streaming_io.write_parquet(joined, args, "orders_enriched")])


if __name__ == "__main__":
    main()

"""Card-testing fraud alerts: N small payments then a large one on the same card within a time bound.

An ordinary PySpark Structured Streaming program: `python app.py --help`.
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
    parser.add_argument("--topic", default="payments", help="Kafka topic of card payments")
    parser.add_argument("--small-max", type=float, default=5.0, help="a payment up to this amount is small")
    parser.add_argument("--large-min", type=float, default=500.0, help="a payment from this amount is large")
    parser.add_argument("--small-count", type=int, default=3, help="small payments needed before the large one")
    parser.add_argument("--within-seconds", type=int, default=600, help="time bound of the whole pattern")
    parser.add_argument("--watermark", default="2 minutes", help="how late a payment may be and still count")
    args = streaming_io.parse(parser, argv)
    rules = transforms.Rules(args.small_max, args.large_min, args.small_count, args.within_seconds * 1000)

    spark = SparkSession.builder.appName("fraud-detection").getOrCreate()
    spark.sparkContext.addPyFile(str(HERE / "transforms.py"))  # the state function runs on executors
    payments = streaming_io.read_events(spark, args, transforms.PAYMENT_SCHEMA, args.topic)
    alerts = transforms.detect(payments, rules, args.watermark)
    streaming_io.await_all(spark, [streaming_io.write_parquet(alerts, args, "fraud_alerts")])


if __name__ == "__main__":
    main()

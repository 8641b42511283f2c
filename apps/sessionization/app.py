"""User sessions from a clickstream: keyed state per user, closed after a period of inactivity.

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
    parser.add_argument("--topic", default="clicks", help="Kafka topic of click events")
    parser.add_argument("--gap-seconds", type=int, default=1800, help="inactivity that ends a session")
    parser.add_argument("--watermark", default="5 minutes", help="how late an event may be and still count")
    args = streaming_io.parse(parser, argv)

    spark = SparkSession.builder.appName("sessionization").getOrCreate()
    spark.sparkContext.addPyFile(str(HERE / "transforms.py"))  # the state function runs on executors
    clicks = streaming_io.read_events(spark, args, transforms.CLICK_SCHEMA, args.topic)
    sessions = transforms.sessionize(clicks, args.gap_seconds, args.watermark)
    streaming_io.await_all(spark, [streaming_io.write_parquet(sessions, args, "user_sessions")])


if __name__ == "__main__":
    main()

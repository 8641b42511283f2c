"""Clickstream page views per page in tumbling and sliding event-time windows, late events dropped.

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
    parser.add_argument("--window", default="1 minute", help="tumbling window size")
    parser.add_argument("--sliding-window", default="5 minutes", help="sliding window size")
    parser.add_argument("--slide", default="1 minute", help="sliding window step")
    parser.add_argument("--watermark", default="2 minutes", help="how late an event may be and still count")
    args = streaming_io.parse(parser, argv)

    spark = SparkSession.builder.appName("windowed-counts").getOrCreate()
    views = transforms.page_views(streaming_io.read_events(spark, args, transforms.CLICK_SCHEMA, args.topic))
    queries = [
        streaming_io.write_parquet(
            transforms.tumbling_counts(views, args.window, args.watermark), args, "page_views_tumbling", "tumbling"
        ),
        streaming_io.write_parquet(
            transforms.sliding_counts(views, args.sliding_window, args.slide, args.watermark),
            args,
            "page_views_sliding",
            "sliding",
        ),
    ]
    streaming_io.await_all(spark, queries)


if __name__ == "__main__":
    main()

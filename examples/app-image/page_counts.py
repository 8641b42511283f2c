"""Page views per page and one-minute event-time window, from JSON click files into parquet.

A small third-party PySpark Structured Streaming job, unaware of Headrace: the operator gives its query a
managed checkpoint. Run it in an image built FROM the Headrace Spark image (docs/app-image.md).
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.types import StringType, StructField, StructType

SCHEMA = StructType([StructField("url", StringType()), StructField("event_time", StringType())])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--input", required=True, help="directory of JSON-lines click files")
    parser.add_argument("--output", required=True, help="parquet output directory")
    parser.add_argument("--trigger-seconds", type=int, default=5)
    args = parser.parse_args()

    spark = SparkSession.builder.appName("page-counts").getOrCreate()
    clicks = spark.readStream.schema(SCHEMA).json(args.input)
    views = clicks.select(
        F.regexp_replace("url", r"\?.*$", "").alias("page"), F.to_timestamp("event_time").alias("event_time")
    )
    counts = views.withWatermark("event_time", "30 seconds").groupBy(F.window("event_time", "1 minute"), "page").count()
    query = (
        counts.writeStream.queryName("page_counts")
        .format("parquet")
        .outputMode("append")
        .option("path", args.output)
        .trigger(processingTime=f"{args.trigger_seconds} seconds")
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    main()

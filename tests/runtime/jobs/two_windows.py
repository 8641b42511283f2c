"""A plain PySpark job with two stateful queries into two parquet file sinks, like windowed-counts.

Reads JSON events (id, key, ts) from a directory one file per batch, counts them per key in
10-second tumbling windows (query ``tumbling``) and in 20-second windows sliding every 10 seconds
(query ``sliding``), each appended to ``<output>/<query>`` with a processing-time trigger, and
waits for both with the example apps' ``await_all``. It knows nothing about Headrace.
"""

import argparse
import sys
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's idiom

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "apps"))  # the apps' shared common/

from common.streaming_io import await_all

parser = argparse.ArgumentParser()
parser.add_argument("--input", required=True)
parser.add_argument("--output", required=True)
parser.add_argument("--trigger-seconds", type=float, default=1.0)
arguments = parser.parse_args()

spark = SparkSession.builder.appName("two-windows").getOrCreate()
events = (
    spark.readStream.schema("id long, key string, ts double")
    .option("maxFilesPerTrigger", 1)
    .json(arguments.input)
    .withColumn("ts", F.col("ts").cast("timestamp"))
    .withWatermark("ts", "5 seconds")
)
windows = {"tumbling": F.window("ts", "10 seconds"), "sliding": F.window("ts", "20 seconds", "10 seconds")}
queries = []
for name, window in windows.items():
    counts = events.groupBy(window.alias("window"), "key").count()
    queries.append(
        counts.select(F.col("window.start").cast("double").alias("window_start"), "key", "count")
        .writeStream.queryName(name)
        .format("parquet")
        .outputMode("append")
        .option("path", f"{arguments.output}/{name}")
        .trigger(processingTime=f"{arguments.trigger_seconds} seconds")
        .start()
    )
await_all(spark, queries)
spark.stop()

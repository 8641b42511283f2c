"""A plain PySpark streaming job used by the runtime tests; it knows nothing about Headrace.

Reads JSON events (id, key, ts) from a directory, counts them per 10-second event-time window and
key (``--variant window``) or drops duplicate ids (``--variant dedupe``), and appends to parquet.
It sets no checkpointLocation, awaits its query and stops its session, like many real scripts.
"""

import argparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's idiom

parser = argparse.ArgumentParser()
parser.add_argument("--input", required=True)
parser.add_argument("--output", required=True)
parser.add_argument("--variant", choices=["window", "dedupe"], default="window")
parser.add_argument("--files-per-batch", type=int, default=1)
parser.add_argument("--name", default=None)
arguments = parser.parse_args()

spark = SparkSession.builder.appName("windowed-counts").getOrCreate()
events = (
    spark.readStream.schema("id long, key string, ts double")
    .option("maxFilesPerTrigger", arguments.files_per_batch)
    .json(arguments.input)
    .withColumn("ts", F.col("ts").cast("timestamp"))
)
if arguments.variant == "window":
    result = (
        events.withWatermark("ts", "5 seconds")
        .groupBy(F.window("ts", "10 seconds"), "key")
        .count()
        .select(F.col("window.start").cast("double").alias("window_start"), "key", "count")
    )
else:
    result = events.dropDuplicates(["id"]).select("id", "key")
writer = result.writeStream.format("parquet").option("path", arguments.output).outputMode("append")
if arguments.name:
    writer = writer.queryName(arguments.name)
query = writer.start()
query.awaitTermination()
spark.stop()

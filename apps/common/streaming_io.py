"""Sources, sinks and the run loop shared by the example apps.

Owns: the common command-line options, reading JSON events from Kafka or from a directory of JSON
lines files, writing each query to a parquet file sink (exactly-once through its `_spark_metadata`
log), and waiting for the queries. Never: transforms data beyond parsing it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructType


def base_parser(description: str) -> argparse.ArgumentParser:
    """Options every app understands; apps add their own (topics, tuning) on top."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--source", choices=["kafka", "files"], default="files", help="where events come from")
    parser.add_argument("--bootstrap", default="localhost:9092", help="Kafka bootstrap servers (--source kafka)")
    parser.add_argument("--starting-offsets", default="earliest", help="Kafka startingOffsets for a new query")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None, help="Kafka rate limit per batch")
    parser.add_argument("--input", default=None, help="directory of JSON lines files (--source files)")
    parser.add_argument("--max-files-per-trigger", type=int, default=None, help="file source rate limit")
    parser.add_argument("--output", required=True, help="output directory (parquet file sink)")
    parser.add_argument("--checkpoint", default=None, help="checkpoint root; omit when the platform manages it")
    parser.add_argument("--trigger-seconds", type=float, default=5.0, help="micro-batch interval")
    parser.add_argument("--available-now", action="store_true", help="process what is there now, then exit")
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse and check that the chosen source has what it needs."""
    args = parser.parse_args(argv)
    if args.source == "files" and not args.input:
        parser.error("--source files needs --input DIR")
    return args


def join_uri(base: str, child: str) -> str:
    """`base/child` for paths and URIs alike (pathlib would turn s3a://bucket into s3a:/bucket)."""
    return f"{base.rstrip('/')}/{child}" if child else base


def read_events(
    spark: SparkSession, args: argparse.Namespace, schema: StructType, topic: str, subdirectory: str = ""
) -> DataFrame:
    """A streaming DataFrame of JSON events with `schema`, from Kafka `topic` or `<input>/<subdirectory>`."""
    if args.source == "files":
        reader = spark.readStream.schema(schema)
        if args.max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", args.max_files_per_trigger)
        return reader.json(join_uri(args.input, subdirectory))
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", args.starting_offsets)
        .option("failOnDataLoss", "true")
    )
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
    raw = reader.load()
    return raw.select(F.from_json(F.col("value").cast("string"), schema).alias("event")).select("event.*")


def write_parquet(frame: DataFrame, args: argparse.Namespace, name: str, subdirectory: str = "") -> StreamingQuery:
    """Start query `name` appending `frame` to parquet under `<output>/<subdirectory>`."""
    writer = (
        frame.writeStream.queryName(name)
        .format("parquet")
        .outputMode("append")
        .option("path", join_uri(args.output, subdirectory))
    )
    if args.checkpoint:
        writer = writer.option("checkpointLocation", join_uri(args.checkpoint, name))
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{args.trigger_seconds} seconds")
    return writer.start()


def await_all(spark: SparkSession, queries: Sequence[StreamingQuery]) -> None:
    """Block until every query has ended; the first query that fails raises here (non-zero exit)."""
    while any(query.isActive for query in queries):
        spark.streams.awaitAnyTermination()
        spark.streams.resetTerminated()
    for query in queries:
        error = query.exception()
        if error is not None:
            raise error

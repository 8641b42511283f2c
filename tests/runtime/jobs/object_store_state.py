"""A stateful query checkpointing to an object store (s3a:// through the image's S3A jars, gs:// through its Cloud
Storage connector), in two runs, then a savepoint-style copy.

Usage: object_store_state.py <endpoint> <checkpoint URI> <copy URI> <input dir> <result json> <jar,jar,...>
Run 1 reads the input files present; its last commit is then deleted, as if its driver had died after writing
the batch's state but before its commit, so run 2 (same checkpoint, one more file) first replays that batch over
state files that already exist, then must continue the counts from the state the first run left in the store; then
the checkpoint is copied with the runtime's HadoopFileSystem. On S3, credentials come from AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY, as the operator passes them, or from the provider named by S3A_CREDENTIALS_PROVIDER (the
test of web identity), and the session has the defaults the operator renders for state on S3
(`manifests.S3A_CHECKPOINT_DEFAULTS`). STATE_CONF (a JSON object of Spark settings) replaces all of that: the
settings the operator renders for the store (the test of gs://), endpoint included. With DISPOSE_COPY the copy is
deleted at the end (a savepoint's disposal).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession, functions

from headrace.render.manifests import S3A_CHECKPOINT_DEFAULTS
from headrace.runtime.hadoop_fs import HadoopFileSystem

ENV_PROVIDER = "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"


def s3a_conf(endpoint: str) -> dict[str, str]:
    """The S3A settings for the test's server, with the operator's checkpoint defaults for S3."""
    return {
        **S3A_CHECKPOINT_DEFAULTS,
        "spark.hadoop.fs.s3a.endpoint": endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.aws.credentials.provider": os.environ.get("S3A_CREDENTIALS_PROVIDER", ENV_PROVIDER),
    }


def main() -> None:
    endpoint, checkpoint, copy_target, input_dir, result_path, jars = sys.argv[1:7]
    builder = SparkSession.builder
    rendered = os.environ.get("STATE_CONF")
    store_conf = json.loads(rendered) if rendered else s3a_conf(endpoint)
    for key, value in store_conf.items():
        builder = builder.config(key, value)
    spark = (
        builder.master("local[2]")
        .appName("object-store-state")
        .config("spark.jars", jars)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .getOrCreate()
    )
    batches: list[dict[str, int]] = []

    def collect(frame, _batch_id):  # type: ignore[no-untyped-def]
        batches.append({row["key"]: row["count"] for row in frame.collect()})

    fs = HadoopFileSystem.of_session(spark)
    runs = []
    for run in (1, 2):
        if run == 2:
            commits = f"{checkpoint}/commits"
            fs.delete(f"{commits}/{max(int(name) for name in fs.list_names(commits) if name.isdigit())}")
            (Path(input_dir) / "c.txt").write_text("a\nb\nb\n")
        lines = spark.readStream.format("text").load(input_dir)
        counts = lines.groupBy(functions.col("value").alias("key")).count()
        query = (
            counts.writeStream.outputMode("update")
            .foreachBatch(collect)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        runs.append(dict(batches[-1]) if batches else {})
    files = fs.list_files(checkpoint)
    missing = fs.copy_files(checkpoint, copy_target, [*sorted(files), "offsets/999"])
    copied = fs.list_files(copy_target)
    result = {"runs": runs, "batches": batches, "files": sorted(files), "missing": missing, "copied": sorted(copied)}
    result["server_side"] = fs.server_side_copies
    if os.environ.get("DISPOSE_COPY"):  # then delete the copy, as a savepoint's disposal does
        fs.delete(copy_target)
        result["copy_left"] = fs.exists(copy_target)
    Path(result_path).write_text(json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main()

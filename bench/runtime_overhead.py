"""Benchmark: the same stateful query plain vs under ``python -m headrace.runtime``.

Prints: throughput of each (rows/s over the batches after the first), their ratio, savepoint copy
throughput (MB/s, taken while the query runs), and process start -> first committed batch under
the runtime. No pass/fail: figures only. ``python bench/runtime_overhead.py [--seconds 40]``.
Run with ``--job`` this file is the benchmark's streaming job itself (a plain PySpark script).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from testbed import procs

ROWS_PER_BATCH = 200_000
KEYS = 200_000
TOKEN = "bench"


def job(seconds: float, plain_checkpoint: str | None) -> None:
    """The streaming job: rate-micro-batch -> count per key (RocksDB state) -> noop sink."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F  # noqa: N812

    builder = SparkSession.builder.appName("runtime-overhead")
    if plain_checkpoint:  # what the runtime would configure, set by hand for the plain run
        builder = (
            builder.master("local[2]")
            .config(
                "spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
            )
            .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.ui.showConsoleProgress", "false")
        )
    spark = builder.getOrCreate()
    counts = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", ROWS_PER_BATCH)
        .option("numPartitions", 2)
        .load()
        .select((F.col("value") % KEYS).alias("key"))
        .groupBy("key")
        .count()
    )
    writer = counts.writeStream.format("noop").outputMode("update")
    if plain_checkpoint:
        writer = writer.option("checkpointLocation", plain_checkpoint)
    query = writer.start()
    time.sleep(seconds)
    query.stop()
    batches = [progress for progress in query.recentProgress if progress["numInputRows"] > 0][1:]
    rows = sum(progress["numInputRows"] for progress in batches)
    busy = sum(progress["durationMs"]["triggerExecution"] for progress in batches) / 1000.0
    print("BENCH " + json.dumps({"batches": len(batches), "rows": rows, "rows_per_second": rows / busy if busy else 0}))


def bench_result(output: str) -> dict[str, Any]:
    for line in output.splitlines():
        if line.startswith("BENCH "):
            return dict(json.loads(line[len("BENCH ") :]))
    raise RuntimeError(f"the job printed no result:\n{output[-3000:]}")


def run_plain(workdir: Path, seconds: float) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--job",
        "--seconds",
        str(seconds),
        "--plain-checkpoint",
        str(workdir / "plain"),
    ]
    completed = subprocess.run(command, capture_output=True, text=True, check=True, timeout=seconds + 300)
    return bench_result(completed.stdout)


def first_commit_seconds(checkpoint: Path, started: float, process: subprocess.Popen[str]) -> float:
    while process.poll() is None:
        if (checkpoint / "commits" / "0").exists():
            return time.monotonic() - started
        time.sleep(0.05)
    raise RuntimeError("the runtime exited before its first commit")


def savepoint(control_port: int, path: Path) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{control_port}/v1/savepoint",
        data=json.dumps({"path": str(path), "reason": "bench"}).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as response:  # noqa: S310 - loopback
        return dict(json.loads(response.read()))


def run_under_runtime(workdir: Path, seconds: float) -> dict[str, Any]:
    control_port = procs.free_port()
    env = {
        **os.environ,
        "HEADRACE_CHECKPOINT_DIR": str(workdir / "managed"),
        "HEADRACE_STATE_PARTITIONS": "2",
        "HEADRACE_CONTROL_TOKEN": TOKEN,
        "HEADRACE_CONTROL_PORT": str(control_port),
        "HEADRACE_METRICS_PORT": str(procs.free_port()),
        "HEADRACE_CONTROL_BIND": "127.0.0.1",
        "HEADRACE_TERMINATION_MESSAGE_PATH": str(workdir / "termination"),
    }
    command = [sys.executable, "-m", "headrace.runtime", __file__, "--job", "--seconds", str(seconds)]
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        to_first_commit = first_commit_seconds(workdir / "managed" / "q0", started, process)
        time.sleep(max(0.0, seconds / 2))
        record = savepoint(control_port, workdir / "savepoint")
        output, _ = process.communicate(timeout=seconds + 300)
    finally:
        if process.poll() is None:
            process.kill()
    result = bench_result(output)
    result.update(
        start_to_first_commit_seconds=to_first_commit,
        savepoint_bytes=record["sizeBytes"],
        savepoint_seconds=record["durationSeconds"],
        savepoint_files=sum(query["files"] for query in record["queries"]),
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--job", action="store_true", help="run as the benchmark's streaming job")
    parser.add_argument("--plain-checkpoint", default=None)
    arguments = parser.parse_args()
    if arguments.job:
        job(arguments.seconds, arguments.plain_checkpoint)
        return
    workdir = Path(tempfile.mkdtemp(prefix="headrace-bench-"))
    try:
        plain = run_plain(workdir, arguments.seconds)
        managed = run_under_runtime(workdir, arguments.seconds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    megabytes = managed["savepoint_bytes"] / 1e6
    print(f"plain:    {plain['rows_per_second']:>12,.0f} rows/s over {plain['batches']} batches")
    print(f"runtime:  {managed['rows_per_second']:>12,.0f} rows/s over {managed['batches']} batches")
    print(f"ratio runtime/plain: {managed['rows_per_second'] / plain['rows_per_second']:.3f}")
    print(
        f"savepoint while running: {megabytes:.2f} MB, {managed['savepoint_files']} files in "
        f"{managed['savepoint_seconds']:.2f} s = {megabytes / managed['savepoint_seconds']:.2f} MB/s"
    )
    print(f"process start -> first committed batch: {managed['start_to_first_commit_seconds']:.1f} s")


if __name__ == "__main__":
    main()

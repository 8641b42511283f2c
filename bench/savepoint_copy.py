"""Savepoint copy throughput: the runtime's copy (HadoopFileSystem.copy_files) against plain copies, same run.

Writes one state of `--files` files totalling `--megabytes` MB (a checkpoint's shape: a few metadata and
offset files, many state files) on local disk and into the testbed's S3 server (versitygw over a
directory), then copies it, in this order, and prints MB/s and files/s for each:

- local disk: `cp -r`, then the runtime's copy (file:// to file://, through Hadoop's FileUtil);
- S3: the server's own copy (CopyObject requests from a plain SigV4 client, as many in parallel as the
  runtime uses), then the runtime's copy (s3a:// to s3a://: CopyObject through S3A's client, in parallel);
- and a 2 MB state through the runtime on S3 and on local disk (the target is under 1 s).

Run: `uv run python bench/savepoint_copy.py [--files 2000 --megabytes 500]` (local-mode Spark, no cluster).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from headrace.runtime.hadoop_fs import SERVER_SIDE_COPY_THREADS, HadoopFileSystem
from testbed import objectstore


def _layout(files: int, megabytes: float) -> list[tuple[str, int]]:
    """(relative path, size) of a checkpoint-shaped state: 1% small log files, the rest state files."""
    logs = max(files // 100, 1)
    state = files - logs
    size = int(megabytes * 1_000_000 / state)
    entries = [(f"offsets/{index}", 200) for index in range(logs)]
    entries += [(f"state/0/{index % 64}/{index}.changelog", size) for index in range(state)]
    return entries


def _write_local(root: Path, entries: list[tuple[str, int]]) -> None:
    block = os.urandom(1 << 20)
    for relative, size in entries:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((block * (size // len(block) + 1))[:size])


def _put_all(client: objectstore.S3Client, bucket: str, prefix: str, root: Path, names: list[str]) -> None:
    def put(relative: str) -> None:
        client.put_object(bucket, f"{prefix}/{relative}", (root / relative).read_bytes())

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(put, names))


def _measure(label: str, total_bytes: int, files: int, copy: Callable[[], Any]) -> float:
    began = time.monotonic()
    copy()
    seconds = time.monotonic() - began
    print(
        f"{label:<48} {seconds:7.2f} s  {total_bytes / 1e6 / seconds:8.1f} MB/s  {files / seconds:8.0f} files/s",
        flush=True,
    )
    return seconds


def _spark(store: objectstore.ObjectStore) -> Any:
    from pyspark.sql import SparkSession

    os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = store.access_key, store.secret_key
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    settings = {
        "spark.jars": ",".join(str(jar) for jar in objectstore.s3a_jars()),
        "spark.hadoop.fs.s3a.endpoint": store.endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": objectstore.REGION,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.aws.credentials.provider": (
            "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
        ),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _bench_one(  # noqa: PLR0917 - one state's run
    work: Path, store: objectstore.ObjectStore, fs: HadoopFileSystem, label: str, files: int, megabytes: float
) -> None:
    s3 = store.client()
    entries = _layout(files, megabytes)
    names = [relative for relative, _ in entries]
    total = sum(size for _, size in entries)
    tag = f"{files}-{megabytes:g}"
    source = work / f"local-{tag}"
    _write_local(source, entries)
    _put_all(s3, store.bucket, f"state-{tag}", source, names)
    print(f"state{label}: {len(entries)} files, {total / 1e6:.0f} MB", flush=True)

    def cp_r() -> None:
        subprocess.run(["cp", "-r", str(source), str(work / f"cp-{tag}")], check=True)

    def runtime_local() -> None:
        fs.copy_files(f"file://{source}", f"file://{work}/runtime-{tag}", names)

    def server_copy() -> None:
        def one(name: str) -> None:
            s3.copy_object(store.bucket, f"state-{tag}/{name}", f"plain-{tag}/{name}")

        with ThreadPoolExecutor(max_workers=SERVER_SIDE_COPY_THREADS) as pool:
            list(pool.map(one, names))

    def runtime_s3() -> None:
        fs.copy_files(f"s3a://{store.bucket}/state-{tag}", f"s3a://{store.bucket}/runtime-{tag}", names)

    # A running driver's S3A client is warm (its queries use it): warm it the same way, outside the timings.
    fs.copy_files(f"s3a://{store.bucket}/state-{tag}", f"s3a://{store.bucket}/warm-{tag}", names[:1])
    if not label:
        _measure("local: cp -r", total, files, cp_r)
    _measure(f"local: runtime copy (file://){label}", total, files, runtime_local)
    if not label:
        _measure("S3: the server's own copy (CopyObject)", total, files, server_copy)
    before = fs.server_side_copies
    _measure(f"S3: runtime copy (s3a://){label}", total, files, runtime_s3)
    assert fs.server_side_copies - before == files, "the runtime copy was not server-side"
    copied = sorted(s3.list_keys(store.bucket, f"runtime-{tag}/"))
    assert copied == sorted(f"runtime-{tag}/{name}" for name in names)


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--megabytes", type=float, default=500)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="headrace-bench-copy-", dir="/var/tmp"))
    try:
        with objectstore.ObjectStore(work / "s3") as store:
            spark = _spark(store)
            fs = HadoopFileSystem.of_session(spark)
            for label, files, megabytes in (("", args.files, args.megabytes), (" (2 MB state)", 20, 2.0)):
                _bench_one(work, store, fs, label, files, megabytes)
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Writes files on file:// paths through Hadoop's FileSystem, FileContext and a streaming query with a
checkpoint, first with Hadoop's local file system and then with the session's (argv[1]: a directory).

Prints one JSON line: the `chmod` commands each part forked (a `chmod` first on PATH logs them to
$CHMOD_LOG) and the modes of the files each wrote.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

from pyspark.sql import SparkSession


def forks() -> int:
    log = Path(os.environ["CHMOD_LOG"])
    count = len(log.read_text().splitlines()) if log.exists() else 0
    log.write_text("")
    return count


def modes(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): oct(stat.S_IMODE(path.stat().st_mode)) for path in sorted(root.rglob("*"))}


def write_files(spark: SparkSession, conf: object, root: Path) -> None:
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    path = jvm.org.apache.hadoop.fs.Path
    fs = path(f"file://{root}").getFileSystem(conf)
    for index in range(3):
        stream = fs.create(path(f"file://{root}/fs/part-{index}"), True)
        stream.write(bytearray(b"x"))
        stream.close()
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(conf)
    options = spark.sparkContext._gateway.new_array(jvm.org.apache.hadoop.fs.Options.CreateOpts, 1)  # type: ignore[attr-defined]
    options[0] = jvm.org.apache.hadoop.fs.Options.CreateOpts.createParent()
    flags = jvm.java.util.EnumSet.of(jvm.org.apache.hadoop.fs.CreateFlag.CREATE)
    stream = context.create(path(f"file://{root}/fc/file"), flags, options)
    stream.write(bytearray(b"x"))
    stream.close()


def main() -> None:
    out = Path(sys.argv[1])
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    session_conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    hadoops = spark.sparkContext._jvm.org.apache.hadoop.conf.Configuration(session_conf)  # type: ignore[attr-defined]
    hadoops.set("fs.file.impl", "org.apache.hadoop.fs.LocalFileSystem")
    hadoops.set("fs.AbstractFileSystem.file.impl", "org.apache.hadoop.fs.local.LocalFs")
    for conf in (hadoops, session_conf):
        conf.setBoolean("fs.file.impl.disable.cache", True)
    forks()
    write_files(spark, hadoops, out / "hadoop")
    result: dict[str, object] = {"hadoop_forks": forks()}
    write_files(spark, session_conf, out / "session")
    result["session_forks"] = forks()
    query = (
        spark.readStream.format("rate").option("rowsPerSecond", 5).load()
        .writeStream.format("parquet").option("checkpointLocation", f"file://{out}/stream/checkpoint")
        .option("path", f"file://{out}/stream/sink").trigger(processingTime="1 second").start()
    )  # fmt: skip
    while query.lastProgress is None or query.lastProgress["batchId"] < 1:
        query.awaitTermination(0.5)
    query.stop()
    result["stream_forks"] = forks()
    result["hadoop_modes"], result["session_modes"] = modes(out / "hadoop"), modes(out / "session")
    result["file_system"] = (
        spark.sparkContext._jvm.org.apache.hadoop.fs.Path(f"file://{out}")
        .getFileSystem(session_conf)
        .getClass()
        .getName()
    )  # type: ignore[attr-defined]
    print(json.dumps(result), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()

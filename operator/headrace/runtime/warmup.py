"""A waiting driver's warm-up: a short synthetic stateful query, run before it waits at its first query start.

A standby (or a pre-warmed upgrade's new driver) has its JVMs, SparkContext and executors up long before it is
promoted, but nothing has run on them: the promoted driver's first batch used to pay for cold code (the JIT, the
planner's and the code generator's first use, the state store's native library and first instances) with
seconds of the recovery. The warm-up runs those paths once while nobody waits: a windowed count with a
watermark over Spark's ``rate-micro-batch`` source, in the session's own state store (RocksDB by default), into
a parquet file sink, for a few micro-batches, in a separate SQL session with at most ``MAX_PARTITIONS`` state
partitions.

Owns: the warm-up query, its bounds (batches, time, promotion cutting it short) and its scratch directory.
Never: touches the app's checkpoints, sources or outputs (everything lives in a fresh directory under the pod's
scratch ``/tmp``, an emptyDir of the driver and of each executor; the driver removes its side, an executor's side
goes with its pod), goes through the runtime's query-start interception, or fails the driver: any error is
logged and the driver waits at its gate as before.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's own convention
from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

BATCHES = 3  # the first creates the state, the later ones load, update and commit it as a restored query does
MAX_PARTITIONS = 8  # state partitions of the warm-up (never more than the app's)
TIMEOUT_SECONDS = 60.0
POLL_SECONDS = 0.05
ROWS_PER_BATCH = 2000
QUERY_NAME = "headrace-warmup"


@dataclass(frozen=True)
class WarmupOutcome:
    """What the warm-up did: batches completed, seconds spent, and why it ended."""

    batches: int
    seconds: float
    ended: str  # "done" | "promoted" | "timeout" | "failed: <error>"
    scratch: str  # the driver's scratch directory, removed

    def describe(self) -> str:
        return f"{self.batches} micro-batches in {self.seconds:.1f} s ({self.ended}; scratch {self.scratch} removed)"


def warmup_partitions(session_partitions: str | None) -> int:
    """The warm-up's state partitions: the app's (spark.sql.shuffle.partitions), at most MAX_PARTITIONS."""
    try:
        partitions = int(session_partitions or MAX_PARTITIONS)
    except ValueError:
        partitions = MAX_PARTITIONS
    return max(1, min(partitions, MAX_PARTITIONS))


def _query(session: SparkSession, scratch: Path, start: Callable[..., StreamingQuery]) -> StreamingQuery:
    counts = (
        session.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", ROWS_PER_BATCH)
        .option("advanceMillisPerBatch", 1000)
        .load()
        .withWatermark("timestamp", "0 seconds")
        .groupBy(F.window("timestamp", "1 second"), (F.col("value") % 97).alias("key"))
        .agg(F.count(F.lit(1)).alias("count"), F.max("value").alias("last"))
    )
    writer = (
        counts.writeStream.format("parquet")
        .outputMode("append")
        .queryName(QUERY_NAME)
        .option("checkpointLocation", (scratch / "checkpoint").as_uri())
        .option("path", (scratch / "output").as_uri())
        .trigger(processingTime="0 seconds")
    )
    return start(writer)


def _first_line(error: BaseException) -> str:
    text = str(error)
    return text.splitlines()[0][:300] if text else type(error).__name__


def _remove(scratch: Path, settle: float = 0.25, within: float = 5.0) -> None:
    """Remove the scratch directory, again while it reappears: a query stopped mid-batch leaves its cancelled tasks
    to end on their own, and where they share the driver's file system (local mode) they may still write into it."""
    deadline = time.monotonic() + within
    while True:
        shutil.rmtree(scratch, ignore_errors=True)
        time.sleep(settle)
        if not scratch.exists() or time.monotonic() > deadline:
            return


def _completed_batches(query: StreamingQuery) -> int:
    progress: dict[str, Any] | None = query.lastProgress
    return 0 if progress is None else int(progress.get("batchId", -1)) + 1


def warm_up(
    spark: SparkSession,
    promoted: threading.Event,
    start: Callable[..., StreamingQuery],
    *,
    batches: int = BATCHES,
    timeout: float = TIMEOUT_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> WarmupOutcome:
    """Run the warm-up until `batches` micro-batches completed, `promoted` is set or `timeout` passed; stop it and
    remove the driver's scratch directory. `start` starts a DataStreamWriter without the runtime's interception."""
    began = clock()
    scratch = Path(tempfile.mkdtemp(prefix="headrace-warmup-"))
    query: StreamingQuery | None = None
    done, ended = 0, "timeout"
    try:
        session = spark.newSession()  # its own SQL settings: the app's session keeps its partitions
        session.conf.set(
            "spark.sql.shuffle.partitions", str(warmup_partitions(spark.conf.get("spark.sql.shuffle.partitions")))
        )
        session.conf.set("spark.sql.streaming.metricsEnabled", "false")  # no metrics source for this query
        query = _query(session, scratch, start)
        while clock() - began < timeout:
            done = _completed_batches(query)
            if promoted.is_set():
                ended = "promoted"
                break
            if done >= batches:
                ended = "done"
                break
            if not query.isActive:
                error = query.exception()
                ended = f"failed: {_first_line(error) if error else 'the query ended'}"
                break
            time.sleep(POLL_SECONDS)
    except Exception as error:  # a warm-up never fails the driver
        ended = f"failed: {_first_line(error)}"
    finally:
        if query is not None:
            try:
                query.stop()
            except Exception as error:
                log.warning("warm-up: stopping its query failed: %s", _first_line(error))
        _remove(scratch)
    return WarmupOutcome(batches=done, seconds=clock() - began, ended=ended, scratch=str(scratch))

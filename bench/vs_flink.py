"""Stream processing beside Apache Flink: the same job on Flink and on Headrace's runtime, one run, one machine.

The job: a Kafka topic of click events (JSON, event time = the moment the bench produced it; 2 partitions) ->
one-minute tumbling event-time windows with a 5 s watermark -> clicks per user and window -> exactly-once JSON
files; keyed state in RocksDB. On Flink it is Flink SQL in PyFlink's local mini-cluster (the Kafka SQL connector from
Maven Central, parallelism 2, RocksDB, a checkpoint every 2 s, the filesystem sink); on Headrace it is a PySpark
script under ``python -m headrace.runtime`` (local[2], RocksDB state in 2 partitions, a 2 s trigger, the file sink),
as bench/runtime_overhead.py runs it. Both read the same local broker (testbed.kafka), each its own topic.

For each it measures, one after the other (Flink first):
- sustained rate: the producer steps its rate up (x1.5 each step); a step holds when the lag (end offsets minus
  the offsets the engine has made durable: Flink's committed at its checkpoints, the runtime's in its last committed
  batch) does not grow over the step's last two thirds (slope under 5% of the rate) or ends under two triggers and a
  second of input, and stays under 30 s of input;
  the figure is the highest step that held ("producer-bound" when the producer could not go faster);
- end-to-end latency at half of Flink's sustained rate: per window, from the production of the event that closed
  it (the first one past the window's end plus the watermark) to the moment its rows were readable in the sink
  (Flink: part files committed at a checkpoint; Headrace: files in the sink's log); p50 and p99 over the windows;
- checkpoint duration (Flink: end-to-end, from its REST API) beside the runtime's micro-batch (its whole duration,
  and the part that makes it durable: offset log, state commit, commit log), p50 at that rate;
- savepoint duration: trigger to completion (Flink's REST API; the runtime's control endpoint);
- recovery after ``kill -9`` of the whole process group (JVM included), the bench restarting it at once (Flink from
  its latest retained checkpoint): from the kill to the first checkpoint (Flink) or batch (Headrace) the new process
  completed;
- the sink against every event produced, for the windows both closed: exactly once or not.
Then Spark's real-time mode: whether ``trigger(realTime=...)`` accepts the job, Spark's reason when it does not, and
the nearest shape it accepts (update mode into a Kafka topic) with its latency from an event's production to its
updated count in the topic (real-time batches last 5 s at least: Spark's minimum).

Flink runs in an environment of its own (PyFlink pins pandas below the runtime's): ``uv sync --only-group flink``
into ~/.cache/headrace/flink-venv, made on first use; its Kafka connector jar goes to ~/.cache/headrace/maven.
Run: ``uv run python bench/vs_flink.py`` (about 45 min) or ``--quick`` (10 s windows, 12 s rate steps, 2 latency
windows: a smoke test of some minutes). The machine's cores are shared: compare the ratios, not the
seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

REPOSITORY = Path(__file__).resolve().parents[1]
FLINK_KAFKA_CONNECTOR = "org.apache.flink:flink-sql-connector-kafka:5.0.0-2.2"  # built for Flink 2.2 (pyproject)
PARTITIONS = 2  # Kafka partitions = Flink parallelism = Spark cores and state partitions
USERS = 10_000  # keys
TOKEN = "vs-flink"
WINDOW_FORMAT = "%Y-%m-%d %H:%M:%S"
LAG_SLOPE = 0.05  # a step holds while the lag grows by less than this share of the rate
LAG_CAP_SECONDS = 30.0  # ... and stays under this much input
REAL_TIME_MIN_BATCH_SECONDS = 5  # spark.sql.streaming.realTimeMode.minBatchDuration's default
REAL_TIME_START_SECONDS = 180.0  # how long the real-time query may take to write its first count


@dataclass(frozen=True)
class Shape:
    """The job and the measurement's lengths."""

    window_seconds: int = 60
    watermark_seconds: int = 5
    trigger_seconds: int = 2  # Flink's checkpoint interval = the runtime's trigger
    start_rate: float = 5_000.0
    steps: int = 9
    step_seconds: float = 60.0
    latency_windows: int = 8  # windows closed during the latency phase
    warmup_seconds: float = 30.0


QUICK = Shape(window_seconds=10, start_rate=4_000.0, steps=2, step_seconds=12.0, latency_windows=2, warmup_seconds=5)


# --- the jobs (run in their own processes) ------------------------------------------------------------------------


def flink_job(config: dict[str, Any]) -> None:
    """The Flink job: Kafka -> tumbling event-time windows -> filesystem sink, in PyFlink's mini-cluster (runs in
    the Flink environment: only the standard library and pyflink)."""
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    settings = Configuration()
    options = {
        "parallelism.default": str(PARTITIONS),
        "state.backend.type": "rocksdb",
        "execution.checkpointing.interval": f"{config['trigger_seconds']} s",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.dir": f"file://{config['checkpoints']}",
        "execution.checkpointing.savepoint-dir": f"file://{config['savepoints']}",
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "web.checkpoints.history": "10000",
        "rest.address": "127.0.0.1",
        "rest.bind-address": "127.0.0.1",
        "rest.port": str(config["rest_port"]),
        "pipeline.jars": ";".join(f"file://{jar}" for jar in config["jars"]),
        "table.local-time-zone": "UTC",
    }
    if config.get("restore"):
        options["execution.state-recovery.path"] = f"file://{config['restore']}"
    for key, value in options.items():
        settings.set_string(key, value)
    tables = TableEnvironment.create(
        EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(settings).build()
    )
    tables.execute_sql(f"""
        CREATE TABLE clicks (user_id STRING, page STRING, ts BIGINT, rt AS TO_TIMESTAMP_LTZ(ts, 3),
          WATERMARK FOR rt AS rt - INTERVAL '{config["watermark_seconds"]}' SECOND)
        WITH ('connector' = 'kafka', 'topic' = '{config["topic"]}',
          'properties.bootstrap.servers' = '{config["bootstrap"]}', 'properties.group.id' = '{config["group"]}',
          'scan.startup.mode' = 'earliest-offset', 'format' = 'json')""")
    # JSON is a row format: its part files roll by time (checked every second here), and a rolled file is
    # committed by the next checkpoint.
    tables.execute_sql(f"""
        CREATE TABLE counts (window_start STRING, user_id STRING, hits BIGINT)
        WITH ('connector' = 'filesystem', 'path' = 'file://{config["output"]}', 'format' = 'json',
          'sink.rolling-policy.rollover-interval' = '1 s', 'sink.rolling-policy.check-interval' = '1 s')""")
    insert = f"""
        INSERT INTO counts
        SELECT DATE_FORMAT(window_start, 'yyyy-MM-dd HH:mm:ss'), user_id, COUNT(*)
        FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(rt), INTERVAL '{config["window_seconds"]}' SECOND))
        GROUP BY window_start, window_end, user_id"""  # noqa: S608 - the bench's own numbers
    result = tables.execute_sql(insert)
    print(f"JOB {result.get_job_client().get_job_id()}", flush=True)
    result.wait()


def _spark_counts(spark: Any, config: dict[str, Any]) -> Any:
    """The windowed counts over the topic, as a streaming DataFrame (window_start, user_id, hits, last_ts)."""
    from pyspark.sql import functions as F  # noqa: N812

    events = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", config["bootstrap"])
        .option("subscribe", config["topic"])
        .option("startingOffsets", "earliest")
        .load()
        .select(F.from_json(F.col("value").cast("string"), "user_id STRING, page STRING, ts BIGINT").alias("e"))
        .select("e.*")
        .withColumn("rt", F.timestamp_millis("ts"))
        .withWatermark("rt", f"{config['watermark_seconds']} seconds")
    )
    return (
        events.groupBy(F.window("rt", f"{config['window_seconds']} seconds"), "user_id")
        .agg(F.count("*").alias("hits"), F.max("ts").alias("last_ts"))
        .select(
            F.date_format("window.start", "yyyy-MM-dd HH:mm:ss").alias("window_start"), "user_id", "hits", "last_ts"
        )
    )


def spark_job(config: dict[str, Any]) -> None:
    """The Headrace job: an ordinary PySpark script (the runtime manages its checkpoint); each query progress is
    appended to config['progress'] as a JSON line."""
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.listener import StreamingQueryListener

    spark = SparkSession.builder.appName("vs-flink").getOrCreate()
    progress = Path(config["progress"])

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:  # noqa: N802
            pass

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802
            with progress.open("a") as log:
                log.write(event.progress.json.replace("\n", " ") + "\n")

        def onQueryIdle(self, event: Any) -> None:  # noqa: N802
            pass

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
            pass

    spark.streams.addListener(Progress())
    (
        _spark_counts(spark, config)
        .drop("last_ts")
        .writeStream.format("json")
        .option("path", config["output"])
        .outputMode("append")
        .queryName("counts")
        .trigger(processingTime=f"{config['trigger_seconds']} seconds")
        .start()
    )
    spark.streams.awaitAnyTermination()


def realtime_probe(config: dict[str, Any]) -> None:
    """Plain local-mode PySpark: does `trigger(realTime=...)` take the job as it is (append, file sink), and the
    nearest shape it allows (update mode into a Kafka topic)? Prints one JSON line per attempt; an accepted update
    query keeps running (the parent measures it, then kills this process)."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F  # noqa: N812

    spark = (
        SparkSession.builder.master(f"local[{2 * PARTITIONS}]")  # cores for every Kafka and shuffle partition
        .appName("vs-flink-realtime")
        .config("spark.sql.shuffle.partitions", str(PARTITIONS))
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.sql.streaming.stateStore.checkpointFormatVersion", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    batch = f"{max(REAL_TIME_MIN_BATCH_SECONDS, config['trigger_seconds'])} seconds"
    counts = _spark_counts(spark, config)
    attempts: list[tuple[str, Callable[[], Any]]] = [
        (
            "the job as it is: append mode, exactly-once file sink",
            lambda: (
                counts.drop("last_ts")
                .writeStream.format("json")
                .option("path", config["output"])
                .option("checkpointLocation", config["checkpoints"] + "/append")
                .outputMode("append")
                .trigger(realTime=batch)
                .start()
            ),
        ),
        (
            "update mode, Kafka sink",
            lambda: (
                counts.select(F.to_json(F.struct("window_start", "user_id", "hits", "last_ts")).alias("value"))
                .writeStream.format("kafka")
                .option("kafka.bootstrap.servers", config["bootstrap"])
                .option("topic", config["sink_topic"])
                .option("checkpointLocation", config["checkpoints"] + "/update")
                .outputMode("update")
                .trigger(realTime=batch)
                .start()
            ),
        ),
    ]
    for shape, start in attempts:
        try:
            query = start()
            time.sleep(5)  # refusals of a running query come with its first batch
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
        except Exception as error:
            reason = " ".join(str(error).split())[:600]
            print("PROBE " + json.dumps({"shape": shape, "accepted": False, "reason": reason}), flush=True)
            continue
        print("PROBE " + json.dumps({"shape": shape, "accepted": True}), flush=True)
        if query.isActive and shape.startswith("update"):
            query.awaitTermination()
        query.stop()


# --- the producer --------------------------------------------------------------------------------------------------


class Producer:
    """Produces click events at a settable rate in a thread (event time = now), counting them per window."""

    TICK = 0.05

    def __init__(self, bootstrap: str, window_seconds: int) -> None:
        from confluent_kafka import Producer as KafkaProducer

        self.window_ms = window_seconds * 1000
        self.rate = 0.0
        self.topic = ""
        self.produced: Counter[tuple[str, int]] = Counter()  # (topic, window start in epoch ms) -> events
        self.total = 0
        self.behind_since: float | None = None  # when the producer last fell a second behind its rate
        self._aimed = 0  # how many times the rate or topic changed
        self._client = KafkaProducer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 20,
                "enable.idempotence": True,  # a retried request never adds copies (the sink check counts events)
                "queue.buffering.max.messages": 2_000_000,
            }
        )
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def aim(self, topic: str, rate: float) -> None:
        """Produce to `topic` at `rate` events/s from now on."""
        with self._lock:
            self.topic, self.rate, self.behind_since = topic, rate, None
            self._aimed += 1

    def _run(self) -> None:
        owed, last, aimed = 0.0, time.monotonic(), 0
        while not self._stop.is_set():
            now = time.monotonic()
            with self._lock:
                topic, rate = self.topic, self.rate
                if aimed != self._aimed:  # a new rate starts from nothing owed
                    owed, last, aimed = 0.0, now, self._aimed
            owed = owed + rate * (now - last) if topic and rate else 0.0
            last = now
            if owed > rate and self.behind_since is None:
                self.behind_since = time.time()
            count = int(min(owed, rate * 0.5 + 1))
            if count:
                self._send(topic, count)
                owed -= count
            self._client.poll(0)
            time.sleep(max(0.0, self.TICK - (time.monotonic() - now)))

    def _send(self, topic: str, count: int) -> None:
        stamp = int(time.time() * 1000)
        first = self.total
        for number in range(first, first + count):
            value = f'{{"user_id":"u{number % USERS}","page":"/p{number % 7}","ts":{stamp}}}'
            while True:
                try:
                    self._client.produce(topic, value=value, partition=number % PARTITIONS)
                    break
                except BufferError:
                    self._client.poll(0.05)
        self.total += count
        self.produced[topic, stamp - stamp % self.window_ms] += count

    def close(self) -> None:
        """Stop producing and flush."""
        self._stop.set()
        self._thread.join()
        self._client.flush(60)
        del self._client  # its handle would keep calling the broker once it is gone


def end_offsets(consumer: Any, topic: str) -> dict[int, int]:
    """The topic's end offset per partition."""
    from confluent_kafka import TopicPartition

    return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}


# --- the sink ------------------------------------------------------------------------------------------------------


class SinkWatcher:
    """Reads a sink's committed files as they appear (every 0.1 s): when each window's rows were first readable, and
    the hits per window."""

    def __init__(self, committed: Callable[[], list[Path]]) -> None:
        self.committed = committed
        self.first_seen: dict[int, float] = {}  # window start (epoch ms) -> wall clock
        self.hits: Counter[int] = Counter()
        self.rows: Counter[tuple[int, str]] = Counter()  # (window start, user) -> rows read: 1 when exactly once
        self._read: set[Path] = set()
        self._scanning = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            with contextlib.suppress(OSError, ValueError):
                self.scan()

    def scan(self) -> None:
        """Read the files committed since the last scan (one scan at a time: check_sink scans beside the thread, and
        a file both listed before either read it was counted twice)."""
        with self._scanning:
            self._scan()

    def _scan(self) -> None:
        for path in self.committed():
            if path in self._read:
                continue
            seen = time.time()
            for line in path.read_text().splitlines():
                if not line.strip():
                    continue
                row = json.loads(line)
                moment = datetime.strptime(row["window_start"], WINDOW_FORMAT).replace(tzinfo=UTC)
                start = int(moment.timestamp()) * 1000
                self.first_seen.setdefault(start, seen)
                self.hits[start] += int(row["hits"])
                self.rows[start, row["user_id"]] += 1
            self._read.add(path)

    def close(self) -> None:
        """Stop watching."""
        self._stop.set()
        self._thread.join()


def flink_files(output: Path) -> Callable[[], list[Path]]:
    """Flink's committed part files (in-progress and pending ones start with a dot)."""
    return lambda: sorted(p for p in output.glob("*") if p.is_file() and not p.name.startswith((".", "_")))


def spark_files(output: Path) -> Callable[[], list[Path]]:
    """The files Spark's file-sink log lists (a file not in the log is not part of the output)."""

    def listed() -> list[Path]:
        paths: set[Path] = set()
        for entry in sorted((output / "_spark_metadata").glob("[0-9]*")):
            if entry.name.endswith(".tmp") or entry.name.startswith("."):
                continue
            for line in entry.read_text().splitlines()[1:]:
                if line.strip():
                    paths.add(Path(json.loads(line)["path"].removeprefix("file://").removeprefix("file:")))
        return sorted(paths)

    return listed


# --- the engines ---------------------------------------------------------------------------------------------------


class Engine(Protocol):
    """One system running the job."""

    name: str
    output: Path

    def start(self) -> None: ...
    def kill_and_restart(self) -> None: ...
    def durable_offsets(self) -> dict[int, int]: ...
    def durable_times(self) -> list[float]: ...
    def commit_durations(self, since: float, until: float) -> dict[str, float]: ...
    def savepoint(self) -> float: ...
    def settle(self) -> None: ...
    def committed_files(self) -> Callable[[], list[Path]]: ...
    def stop(self) -> None: ...


def _http(url: str, body: dict[str, Any] | None = None, token: str | None = None, timeout: float = 300) -> Any:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    method = "POST" if body is not None else "GET"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310 - loopback
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - loopback
        return json.loads(response.read() or b"null")


def _wait(check: Callable[[], Any], timeout: float, what: str, alive: Callable[[], bool] = lambda: True) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError):
            value = check()
            if value:
                return value
        if not alive():
            raise RuntimeError(f"the job exited while waiting for {what}")
        time.sleep(0.1)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


class FlinkEngine:
    """The job in PyFlink's mini-cluster, in the Flink environment's Python."""

    name = "Flink"

    def __init__(
        self, python: Path, jars: list[Path], shape: Shape, *, bootstrap: str, topic: str, workdir: Path
    ) -> None:
        from testbed import procs

        self.python, self.workdir, self.topic, self.bootstrap = python, workdir, topic, bootstrap
        self.output = workdir / "output"
        self.rest_port = procs.free_port()
        self.config: dict[str, Any] = {
            "bootstrap": bootstrap, "topic": topic, "group": f"vs-flink-{topic}", "jars": [str(j) for j in jars],
            "checkpoints": str(workdir / "checkpoints"), "savepoints": str(workdir / "savepoints"),
            "output": str(self.output), "rest_port": self.rest_port, "window_seconds": shape.window_seconds,
            "watermark_seconds": shape.watermark_seconds, "trigger_seconds": shape.trigger_seconds,
        }  # fmt: skip
        self.process: Any = None
        self.job_id = ""
        self.attempt = 0
        from confluent_kafka import Consumer

        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": self.config["group"]})

    def _rest(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return _http(f"http://127.0.0.1:{self.rest_port}{path}", body)

    def start(self, restore: Path | None = None) -> None:
        """Start the job (from `restore`, a retained checkpoint) and wait until it runs."""
        from testbed import procs

        self.attempt += 1
        config = {**self.config, "restore": str(restore) if restore else None}
        command = [str(self.python), __file__, "--flink-job", json.dumps(config)]
        env = {**os.environ, "PYTHONPATH": ""}
        self.process = procs.spawn("flink", command, self.workdir / f"flink-{self.attempt}.log", env)

        def running() -> str:
            jobs = self._rest("/jobs")["jobs"]
            return next((job["id"] for job in jobs if job["status"] == "RUNNING"), "")

        self.job_id = _wait(running, 300, "the Flink job to run", self.process.alive)

    def durable_offsets(self) -> dict[int, int]:
        from confluent_kafka import TopicPartition

        committed = self._consumer.committed([TopicPartition(self.topic, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: max(tp.offset, 0) for tp in committed}

    def durable_times(self) -> list[float]:
        return sorted(p.stat().st_mtime for p in (self.workdir / "checkpoints").glob("*/chk-*/_metadata"))

    def commit_durations(self, since: float, until: float) -> dict[str, float]:
        history = self._rest(f"/jobs/{self.job_id}/checkpoints")["history"]
        durations = [
            h["end_to_end_duration"] / 1000
            for h in history
            if h["status"] == "COMPLETED" and since <= h["trigger_timestamp"] / 1000 <= until
        ]
        return {"checkpoint_s": statistics.median(durations) if durations else float("nan"), "n": len(durations)}

    def savepoint(self) -> float:
        began = time.monotonic()
        request = self._rest(f"/jobs/{self.job_id}/savepoints", {"cancel-job": False})["request-id"]

        def done() -> bool:
            state = self._rest(f"/jobs/{self.job_id}/savepoints/{request}")
            if state["status"]["id"] == "COMPLETED" and "failure-cause" in state.get("operation", {}):
                raise RuntimeError(f"the savepoint failed: {state['operation']['failure-cause']}")
            return bool(state["status"]["id"] == "COMPLETED")

        _wait(done, 300, "the savepoint")
        return time.monotonic() - began

    def settle(self) -> None:
        """Two checkpoints complete from now: every part file rolled before now is committed."""
        now = time.time()
        _wait(lambda: len([t for t in self.durable_times() if t > now]) >= 2, 120, "two checkpoints")

    def latest_checkpoint(self) -> Path:
        """The newest completed checkpoint (its directory)."""
        found = sorted((self.workdir / "checkpoints").glob("*/chk-*/_metadata"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise RuntimeError("Flink retained no checkpoint")
        return found[-1].parent

    def kill_and_restart(self) -> None:
        _kill(self.process)
        self.start(restore=self.latest_checkpoint())

    def committed_files(self) -> Callable[[], list[Path]]:
        return flink_files(self.output)

    def stop(self) -> None:
        from testbed import procs

        if self.process is not None:
            procs.stop(self.process, grace_seconds=5)
        self._consumer.close()


class HeadraceEngine:
    """The job as a PySpark script under ``python -m headrace.runtime`` (local[2])."""

    name = "Headrace"

    def __init__(self, jars: list[Path], shape: Shape, bootstrap: str, topic: str, workdir: Path) -> None:
        self.workdir, self.topic = workdir, topic
        self.output = workdir / "output"
        self.checkpoints = workdir / "checkpoints"
        self.progress = workdir / "progress.jsonl"
        self.config: dict[str, Any] = {
            "bootstrap": bootstrap, "topic": topic, "output": f"file://{self.output}", "progress": str(self.progress),
            "window_seconds": shape.window_seconds, "watermark_seconds": shape.watermark_seconds,
            "trigger_seconds": shape.trigger_seconds,
        }  # fmt: skip
        self.jars = jars
        self.process: Any = None
        self.attempt = 0
        self.control_port = 0

    def start(self) -> None:
        """Start the runtime (resuming its checkpoint when there is one) and wait for its control endpoint."""
        from headrace.api import runtime_contract as contract
        from testbed import procs

        self.attempt += 1
        self.control_port = procs.free_port()
        env = {key: value for key, value in os.environ.items() if not key.startswith("HEADRACE_")}
        env |= {
            contract.ENV_CHECKPOINT_DIR: str(self.checkpoints),
            contract.ENV_APP_NAME: "vs-flink",
            contract.ENV_STATE_BACKEND: "rocksdb",
            contract.ENV_STATE_PARTITIONS: str(PARTITIONS),
            contract.ENV_ATTEMPT: str(self.attempt),
            contract.ENV_CONTROL_TOKEN: TOKEN,
            contract.ENV_CONTROL_PORT: str(self.control_port),
            contract.ENV_METRICS_PORT: str(procs.free_port()),
            "HEADRACE_CONTROL_BIND": "127.0.0.1",
            "HEADRACE_TERMINATION_MESSAGE_PATH": str(self.workdir / "termination"),
            "PYSPARK_PYTHON": sys.executable,
            "TZ": "UTC",
            "PYSPARK_SUBMIT_ARGS": " ".join([
                "--master", f"local[{PARTITIONS}]", "--jars", ",".join(map(str, self.jars)),
                "--conf", "spark.ui.showConsoleProgress=false", "--conf", "spark.sql.session.timeZone=UTC",
                "pyspark-shell",
            ]),
        }  # fmt: skip
        command = [sys.executable, "-m", "headrace.runtime", __file__, "--spark-job", json.dumps(self.config)]
        self.process = procs.spawn("headrace", command, self.workdir / f"runtime-{self.attempt}.log", env)
        _wait(self._healthy, 300, "the runtime's control endpoint", self.process.alive)

    def _healthy(self) -> bool:
        _http(f"http://127.0.0.1:{self.control_port}/healthz", timeout=2)
        return True

    def _commits(self) -> list[Path]:
        return [
            p for p in self.checkpoints.glob("**/commits/[0-9]*") if "." not in p.parents[1].name and p.name.isdigit()
        ]

    def durable_offsets(self) -> dict[int, int]:
        commits = self._commits()
        if not commits:
            return dict.fromkeys(range(PARTITIONS), 0)
        last = max(commits, key=lambda p: int(p.name))
        lines = (last.parents[1] / "offsets" / last.name).read_text().splitlines()
        offsets = json.loads(lines[2])[self.topic]
        return {int(partition): int(offset) for partition, offset in offsets.items()}

    def durable_times(self) -> list[float]:
        return sorted(p.stat().st_mtime for p in self._commits())

    def commit_durations(self, since: float, until: float) -> dict[str, float]:
        batches, commits = [], []
        for line in self.progress.read_text().splitlines() if self.progress.exists() else []:
            progress = json.loads(line)
            moment = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()
            if not since <= moment <= until or not progress.get("numInputRows"):
                continue
            durations = progress["durationMs"]
            batches.append(durations.get("triggerExecution", 0) / 1000)
            state = sum(operator.get("commitTimeMs", 0) for operator in progress.get("stateOperators", []))
            commits.append((durations.get("walCommit", 0) + durations.get("commitOffsets", 0) + state) / 1000)
        return {
            "batch_s": statistics.median(batches) if batches else float("nan"),
            "commit_s": statistics.median(commits) if commits else float("nan"),
            "n": len(batches),
        }

    def savepoint(self) -> float:
        began = time.monotonic()
        path = self.workdir / "savepoints" / f"sp-{int(time.time())}"
        _http(f"http://127.0.0.1:{self.control_port}/v1/savepoint", {"path": str(path), "reason": "bench"}, token=TOKEN)
        return time.monotonic() - began

    def kill_and_restart(self) -> None:
        _kill(self.process)
        self.start()

    def settle(self) -> None:
        """A batch's files are committed with it: only the batch running now may still commit."""
        time.sleep(3 * float(self.config["trigger_seconds"]))

    def committed_files(self) -> Callable[[], list[Path]]:
        return spark_files(self.output)

    def stop(self) -> None:
        from testbed import procs

        if self.process is not None:
            procs.stop(self.process, grace_seconds=10)


def _kill(process: Any) -> None:
    """kill -9 of the process group (the Python process and its JVM)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.popen.wait(timeout=60)


# --- the measurement -----------------------------------------------------------------------------------------------


@dataclass
class Figures:
    """One engine's figures."""

    sustained: float = 0.0
    producer_bound: bool = False
    steps: list[tuple[float, float, float]] = field(default_factory=list)  # rate, lag slope / rate, lag s at end
    latency_rate: float = 0.0
    latencies: list[float] = field(default_factory=list)
    durations: dict[str, float] = field(default_factory=dict)
    savepoint_s: float = float("nan")
    recovery_s: float = float("nan")
    windows_checked: int = 0
    windows_wrong: int = 0
    wrong: list[tuple[int, int, int]] = field(default_factory=list)  # window start, hits in the sink, events
    repeated_rows: dict[int, int] = field(default_factory=dict)  # wrong window start -> its rows read more than once
    produced_events: int = 0  # events the producer sent to the engine's topic
    topic_events: int = 0  # events the topic holds (more than sent: the producer's retries duplicated some)


def _lag(engine: Engine, consumer: Any, topic: str) -> int:
    ends, durable = end_offsets(consumer, topic), engine.durable_offsets()
    return sum(max(0, ends[p] - durable.get(p, 0)) for p in ends)


def _slope(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (time, value) samples."""
    if len(samples) < 2:
        return 0.0
    mean_t = statistics.fmean(t for t, _ in samples)
    mean_v = statistics.fmean(v for _, v in samples)
    spread = sum((t - mean_t) ** 2 for t, _ in samples)
    return sum((t - mean_t) * (v - mean_v) for t, v in samples) / spread if spread else 0.0


def sustained_rate(engine: Engine, producer: Producer, consumer: Any, *, topic: str, shape: Shape, log: Any) -> Figures:
    """Step the rate up (x1.5) until the lag grows; the highest step that held. When the first step does not hold,
    step down (/2, at most 3 times) until one does."""
    figures = Figures()
    rate, factor = shape.start_rate, 1.5
    for _ in range(shape.steps + 3):
        producer.aim(topic, rate)
        began = time.monotonic()
        samples: list[tuple[float, float]] = []
        while (elapsed := time.monotonic() - began) < shape.step_seconds:
            samples.append((elapsed, float(_lag(engine, consumer, topic))))
            time.sleep(0.5)
        tail = [s for s in samples if s[0] >= shape.step_seconds / 3]
        growth = _slope(tail) / rate
        lag_seconds = statistics.fmean(v for _, v in samples[-3:]) / rate
        small = lag_seconds < 2 * shape.trigger_seconds + 1  # a checkpoint's or batch's worth: bounded as it is
        held = lag_seconds < LAG_CAP_SECONDS and (growth < LAG_SLOPE or small)
        figures.steps.append((rate, growth, lag_seconds))
        behind = producer.behind_since is not None
        log(
            f"  {engine.name} {rate:,.0f} events/s: lag grows {growth:.1%} of the rate, {lag_seconds:.1f} s of input "
            f"at the end -> {'held' if held else 'not held'}{' (producer behind)' if behind else ''}"
        )
        if held:
            figures.sustained = rate
            figures.producer_bound = behind
            if behind or factor < 1 or len(figures.steps) >= shape.steps:
                break
        elif figures.sustained or len(figures.steps) > 3:
            break
        else:
            factor = 0.5
            _drain(engine, producer, consumer, topic=topic, rate=rate * factor / 2, shape=shape)
        rate *= factor
    return figures


def _drain(engine: Engine, producer: Producer, consumer: Any, *, topic: str, rate: float, shape: Shape) -> None:
    """Lower the rate to `rate` and wait (up to 5 min) until the lag is under a few triggers' worth."""
    producer.aim(topic, rate)
    bound = max(1000.0, rate * (shape.trigger_seconds * 3 + 2))
    with contextlib.suppress(TimeoutError):
        _wait(lambda: _lag(engine, consumer, topic) < bound, 300, "the backlog to drain")


def latency_phase(
    engine: Engine, producer: Producer, *, topic: str, watcher: SinkWatcher, rate: float, shape: Shape
) -> list[float]:
    """Produce at `rate` while `shape.latency_windows` windows close; each window's latency (seconds)."""
    producer.aim(topic, rate)
    window, close = shape.window_seconds, shape.watermark_seconds
    began = time.time()
    time.sleep((shape.latency_windows + 1) * window + close + 1)  # the first window opens up to one window in
    ended = time.time()
    first = (int(began) // window + 1) * window  # the first window starting in the phase
    starts = [start for start in range(first, int(ended) - close, window) if start + window + close <= ended]
    with contextlib.suppress(TimeoutError):
        _wait(lambda: all(s * 1000 in watcher.first_seen for s in starts), 120, "the phase's windows in the sink")
    return [watcher.first_seen[s * 1000] - (s + window + close) for s in starts if s * 1000 in watcher.first_seen]


def recovery(engine: Engine) -> float:
    """kill -9, restart at once; seconds to the new process's first checkpoint or committed batch."""
    killed = time.time()
    engine.kill_and_restart()
    first = _wait(lambda: [t for t in engine.durable_times() if t > killed], 600, "a durable checkpoint after the kill")
    return float(min(first)) - killed


def check_sink(
    engine: Engine, producer: Producer, topic: str, watcher: SinkWatcher, figures: Figures, *, consumer: Any
) -> None:
    """With the producer stopped and the engine settled: the windows emitted before the last one (every row of
    theirs is committed by then) against the events produced in them. Also what tells a wrong window's cause: the
    events in the topic against those sent (the producer's retries after a timed-out request would add copies:
    hence its idempotence), and the rows of the window read more than once (the sink emitted it twice) rather than
    counted twice (the state did)."""
    engine.settle()
    watcher.scan()
    latest = max(watcher.first_seen, default=0)
    windows = sorted(start for start in watcher.first_seen if start < latest)
    figures.wrong = [
        (start, watcher.hits[start], producer.produced[topic, start])
        for start in windows
        if watcher.hits[start] != producer.produced[topic, start]
    ]
    figures.windows_checked, figures.windows_wrong = len(windows), len(figures.wrong)
    wrong = {start for start, _, _ in figures.wrong}
    repeated = Counter(start for (start, _), count in watcher.rows.items() if start in wrong and count > 1)
    figures.repeated_rows = {start: repeated[start] for start in sorted(wrong)}
    figures.produced_events = sum(count for (into, _), count in producer.produced.items() if into == topic)
    figures.topic_events = sum(end_offsets(consumer, topic).values())


def measure(
    engine: Engine, producer: Producer, *, bootstrap: str, shape: Shape, latency_rate: float | None, log: Any
) -> Figures:
    """Every figure of one engine (reading its own topic, named after it), its job started here and stopped at the
    end."""
    from confluent_kafka import Consumer

    topic = engine.name.lower()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lag-{topic}"})
    log(f"{engine.name}: starting")
    engine.start()
    watcher = SinkWatcher(engine.committed_files())
    try:
        producer.aim(topic, shape.start_rate / 2)
        _wait(engine.durable_times, 300, f"{engine.name}'s first checkpoint")
        time.sleep(shape.warmup_seconds)
        figures = sustained_rate(engine, producer, consumer, topic=topic, shape=shape, log=log)
        lowest = min(rate for rate, _, _ in figures.steps)
        figures.latency_rate = latency_rate or (figures.sustained or lowest) / 2
        _drain(engine, producer, consumer, topic=topic, rate=figures.latency_rate, shape=shape)
        log(f"  {engine.name}: latency at {figures.latency_rate:,.0f} events/s")
        began = time.time()
        figures.latencies = latency_phase(
            engine, producer, topic=topic, watcher=watcher, rate=figures.latency_rate, shape=shape
        )
        figures.durations = engine.commit_durations(began, time.time())
        figures.savepoint_s = engine.savepoint()
        log(f"  {engine.name}: savepoint {figures.savepoint_s:.2f} s; kill -9")
        figures.recovery_s = recovery(engine)
        log(f"  {engine.name}: recovered in {figures.recovery_s:.1f} s")
        time.sleep(shape.window_seconds + shape.watermark_seconds + 2 * shape.trigger_seconds)  # a window after it
        producer.aim("", 0)
        check_sink(engine, producer, topic, watcher, figures, consumer=consumer)
        return figures
    finally:
        producer.aim("", 0)
        watcher.close()
        engine.stop()
        consumer.close()


# --- real-time mode ------------------------------------------------------------------------------------------------


def realtime_row(
    producer: Producer, *, bootstrap: str, jars: list[Path], shape: Shape, rate: float, workdir: Path, log: Any
) -> dict[str, Any]:
    """Probe `trigger(realTime=...)` with the job's shape, then with update mode into Kafka; the latter's latency."""
    from confluent_kafka import Consumer

    from testbed import kafka, procs

    topic, sink_topic = "realtime", "realtime-out"
    kafka.create_topic(bootstrap, topic, PARTITIONS)
    kafka.create_topic(bootstrap, sink_topic, 1)
    config = {
        "bootstrap": bootstrap, "topic": topic, "sink_topic": sink_topic, "output": str(workdir / "output"),
        "checkpoints": str(workdir / "checkpoints"), "window_seconds": shape.window_seconds,
        "watermark_seconds": shape.watermark_seconds, "trigger_seconds": shape.trigger_seconds,
    }  # fmt: skip
    env = {
        **os.environ, "TZ": "UTC", "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_SUBMIT_ARGS": f"--jars {','.join(map(str, jars))} pyspark-shell",
    }  # fmt: skip
    log_path = workdir / "realtime.log"
    process = procs.spawn("realtime", [sys.executable, __file__, "--realtime-probe", json.dumps(config)], log_path, env)
    result: dict[str, Any] = {"attempts": []}
    try:

        def probes() -> list[dict[str, Any]]:
            found = [json.loads(line[6:]) for line in log_path.read_text().splitlines() if line.startswith("PROBE ")]
            return found if len(found) == 2 or not process.alive() else []

        result["attempts"] = _wait(probes, 300, "the real-time probes")
        for attempt in result["attempts"]:
            log(f"  real-time mode, {attempt['shape']}: " + ("accepted" if attempt["accepted"] else attempt["reason"]))
        if result["attempts"][-1]["accepted"]:  # it runs: events from now on, measured once its output flows
            producer.aim(topic, rate)
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rt", "auto.offset.reset": "earliest"})
            consumer.subscribe([sink_topic])
            latencies: list[float] = []
            updates = 0
            settled, deadline = math.inf, time.monotonic() + REAL_TIME_START_SECONDS
            while time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None or message.error():
                    continue
                if settled == math.inf:  # the first output: count what is produced from now on, for a while
                    settled, deadline = time.time() * 1000, time.monotonic() + max(20.0, shape.window_seconds)
                row = json.loads(message.value() or b"{}")
                updates += 1
                if row["last_ts"] >= settled:
                    latencies.append(message.timestamp()[1] / 1000 - row["last_ts"] / 1000)
            consumer.close()
            result["latencies"], result["updates"] = latencies, updates
            result["measured_s"] = REAL_TIME_START_SECONDS if settled == math.inf else max(20.0, shape.window_seconds)
    finally:
        producer.aim("", 0)
        procs.stop(process, grace_seconds=5)
    return result


# --- the report ----------------------------------------------------------------------------------------------------


def _pct(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))] if ordered else math.nan


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}" if theirs and not math.isnan(theirs) and not math.isnan(ours) else "-"


def report(flink: Figures, headrace: Figures, realtime: dict[str, Any], shape: Shape) -> str:
    """The table: Flink, Headrace, Headrace/Flink."""

    notes: list[str] = []

    def rate(figures: Figures) -> str:
        return f"{figures.sustained:,.0f}" + (" (producer-bound)" if figures.producer_bound else "")

    rows = [
        ("sustained rate, events/s (higher is better)", rate(flink), rate(headrace),
         _ratio(headrace.sustained, flink.sustained)),
        (f"latency p50 at {flink.latency_rate:,.0f} events/s, s", f"{_pct(flink.latencies, 0.5):.2f}",
         f"{_pct(headrace.latencies, 0.5):.2f}", _ratio(_pct(headrace.latencies, 0.5), _pct(flink.latencies, 0.5))),
        (f"latency p99 (n = {len(flink.latencies)} / {len(headrace.latencies)} windows), s",
         f"{_pct(flink.latencies, 0.99):.2f}", f"{_pct(headrace.latencies, 0.99):.2f}",
         _ratio(_pct(headrace.latencies, 0.99), _pct(flink.latencies, 0.99))),
        ("checkpoint (Flink) / micro-batch (Headrace) p50, s", f"{flink.durations.get('checkpoint_s', 0):.2f}",
         f"{headrace.durations.get('batch_s', 0):.2f} (durable part {headrace.durations.get('commit_s', 0):.2f})",
         _ratio(headrace.durations.get("batch_s", 0), flink.durations.get("checkpoint_s", 0))),
        ("savepoint, s", f"{flink.savepoint_s:.2f}", f"{headrace.savepoint_s:.2f}",
         _ratio(headrace.savepoint_s, flink.savepoint_s)),
        ("recovery after kill -9 -> first checkpoint / batch, s", f"{flink.recovery_s:.1f}",
         f"{headrace.recovery_s:.1f}",
         _ratio(headrace.recovery_s, flink.recovery_s)),
        ("sink exactly once (windows checked, wrong)", f"{flink.windows_checked}, {flink.windows_wrong}",
         f"{headrace.windows_checked}, {headrace.windows_wrong}", ""),
    ]  # fmt: skip
    for figures, name in ((flink, "Flink"), (headrace, "Headrace")):
        if figures.topic_events != figures.produced_events:
            notes.append(
                f"{name}'s topic holds {figures.topic_events:,} events, the producer sent {figures.produced_events:,}"
            )
        for start, hits, produced in figures.wrong:
            moment = datetime.fromtimestamp(start / 1000, UTC).strftime(WINDOW_FORMAT)
            repeated = figures.repeated_rows.get(start, 0)
            notes.append(
                f"{name}: window {moment} holds {hits} events in the sink, {produced} were produced; "
                f"{repeated} of its rows read more than once"
            )
    widths = [max(len(str(row[i])) for row in [("", "Flink", "Headrace", "Headrace/Flink"), *rows]) for i in range(4)]
    lines = [
        f"{shape.window_seconds} s tumbling windows, {shape.watermark_seconds} s watermark, checkpoint/trigger "
        f"{shape.trigger_seconds} s, {PARTITIONS} partitions, {USERS:,} keys",
    ]
    for row in [("", "Flink", "Headrace", "Headrace/Flink"), *rows]:
        lines.append("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)))
    lines += notes
    for attempt in realtime.get("attempts", []):
        verdict = "accepted" if attempt["accepted"] else f"refused: {attempt['reason']}"
        lines.append(f"Spark real-time mode, {attempt['shape']}: {verdict}")
    if realtime.get("measured_s") and not realtime.get("latencies"):
        lines.append(
            f"Spark real-time mode (update mode into Kafka): {realtime['updates']:,} count updates read, none of an "
            f"event produced after its first one within {realtime['measured_s']:.0f} s (it fell behind the input)"
        )
    if realtime.get("latencies"):
        values = realtime["latencies"]
        lines.append(
            f"Spark real-time mode (update mode into Kafka: every count update, not exactly once), latency from an "
            f"event's production to its updated count in the topic: p50 {_pct(values, 0.5) * 1000:.0f} ms, p99 "
            f"{_pct(values, 0.99) * 1000:.0f} ms (n = {len(values)})"
        )
    return "\n".join(lines)


# --- setup and main ------------------------------------------------------------------------------------------------


def flink_python() -> Path:
    """The Flink environment's Python: the lock's `flink` group in ~/.cache/headrace/flink-venv (made once)."""
    from testbed.build import cache_root

    venv = cache_root() / "flink-venv"
    uv = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    subprocess.run(
        [uv, "sync", "--frozen", "--only-group", "flink", "--quiet"],
        cwd=REPOSITORY,
        env={**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)},
        check=True,
    )
    return venv / "bin" / "python"


@contextlib.contextmanager
def _workdir(keep: bool) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="headrace-vs-flink-"))
    try:
        yield path
    finally:
        if keep:
            print(f"kept: {path} (sinks, checkpoints, logs)", flush=True)
        else:
            shutil.rmtree(path, ignore_errors=True)


def run(shape: Shape, log: Any = print, keep: bool = False) -> str:
    """The whole comparison; returns the report."""
    from testbed import maven
    from testbed.kafka import KafkaBroker, create_topic, spark_kafka_jars

    python = flink_python()
    flink_jars = maven.resolve([FLINK_KAFKA_CONNECTOR], exclude_provided_by_spark=False)
    spark_jars = spark_kafka_jars()
    with _workdir(keep) as workdir, KafkaBroker() as broker:
        bootstrap = broker.bootstrap_servers
        producer = Producer(bootstrap, shape.window_seconds)
        try:
            for topic in ("flink", "headrace"):
                create_topic(bootstrap, topic, PARTITIONS)
            (workdir / "flink").mkdir()
            (workdir / "headrace").mkdir()
            (workdir / "realtime").mkdir()
            engine = FlinkEngine(
                python, flink_jars, shape, bootstrap=bootstrap, topic="flink", workdir=workdir / "flink"
            )
            flink = measure(engine, producer, bootstrap=bootstrap, shape=shape, latency_rate=None, log=log)
            log("Flink: " + json.dumps(asdict(flink)))
            ours = HeadraceEngine(spark_jars, shape, bootstrap, "headrace", workdir / "headrace")
            headrace = measure(
                ours, producer, bootstrap=bootstrap, shape=shape, latency_rate=flink.latency_rate, log=log
            )
            log("Headrace: " + json.dumps(asdict(headrace)))
            realtime = realtime_row(
                producer, bootstrap=bootstrap, jars=spark_jars, shape=shape, rate=flink.latency_rate,
                workdir=workdir / "realtime", log=log,
            )  # fmt: skip
        finally:
            producer.close()
    return report(flink, headrace, realtime, shape)


def main() -> None:
    """Print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a smoke test of minutes (10 s windows, short steps)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (sinks, checkpoints, logs)")
    parser.add_argument("--flink-job", metavar="CONFIG", help=argparse.SUPPRESS)
    parser.add_argument("--spark-job", metavar="CONFIG", help=argparse.SUPPRESS)
    parser.add_argument("--realtime-probe", metavar="CONFIG", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.flink_job:
        flink_job(json.loads(options.flink_job))
        return
    if options.spark_job:
        spark_job(json.loads(options.spark_job))
        return
    if options.realtime_probe:
        realtime_probe(json.loads(options.realtime_probe))
        return
    from testbed import procs

    began = time.monotonic()
    with procs.terminated_as_interrupt():  # the clean-up below runs on a plain kill too
        print(run(QUICK if options.quick else Shape(), keep=options.keep), flush=True)
    print(f"({time.monotonic() - began:.0f} s)", flush=True)


if __name__ == "__main__":
    main()

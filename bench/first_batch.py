"""Benchmark: the first batch after a recovery, on the quick start's configuration, per Spark configuration.

Runs the quick start's app (apps/windowed-counts, both queries, 8 state partitions) as real local PySpark with one
task slot (the example's one executor core), its checkpoints and state in a real S3 server over S3A (the testbed's
versitygw, the cluster's bucket in the quick start) and its clicks from a real Kafka broker (a producer adds 120
every 1.5 s, as the quick start's does). For each configuration (the current one first: what the runtime and the
operator's rendering set; then each candidate) the driver is SIGKILLed and started again `--rounds` times; each
start is timed from process start and split into phases from Spark's own listener events:

  jvm      process start -> SparkSession ready (the driver waits at a gate there, like a warm standby; with
           --warmup after the standby's warm-up query, as Headrace's standby runs it)
  start    gate opened -> both queries started (checkpoint metadata and state schema read from S3)
  trigger  query started -> its first trigger began (offset and commit logs read back)
  latest   the trigger's latestOffset (Kafka)      plan  queryPlanning
  batch    addBatch: state loaded from S3, the backlog processed, the sink written
  steady   the same query's second addBatch (state loaded, code warm): batch - steady bounds the cold part
  commit   walCommit + commitOffsets (offset and commit log written to S3)
  upload   the state stores' time writing their files to S3 (RocksDB's commit file sync)
  s3       S3 requests from the gate to the second commit (the server's access log; by operation per run)

"standby" is gate -> both queries' first committed batch (a warm JVM with cold state, as a promoted standby
has), "cold" is process start -> the same. Each candidate's ratio is its median over the current
configuration's median in the same run. The configurations take turns within each round, so load drift hits all.
Figures come with the load average; figures taken at a load above 6 are flagged and are not figures.
``nice -n 19 uv run python bench/first_batch.py [--rounds 3] [--only before-26,two-cores]``.
With ``--driver`` this file is the driver process itself (a plain PySpark program running the app).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))  # testbed/ (run as `python bench/first_batch.py` from anywhere)
APP = REPOSITORY / "apps" / "windowed-counts" / "app.py"
PARTITIONS = 8
# the quick start's app arguments (testbed/scenario.py's windowed_counts_manifest)
QUICK_START_ARGS = ["--trigger-seconds", "2", "--window", "1 minute", "--watermark", "30 seconds"]
BUSY_LOAD = 6.0
START_TIMEOUT = 240.0
ACCESS_LOG = "s3-access.log"
WARMUP_ENV = "FIRST_BATCH_WARMUP"


def runtime_conf() -> dict[str, str]:
    """What headrace.runtime sets for the example today (state backend, partitions, cold-start defaults), as a
    plain dict: the baseline every candidate is measured against."""
    from headrace.runtime import sparkconf
    from headrace.runtime.settings import RuntimeSettings

    settings = RuntimeSettings(state_backend="rocksdb", state_partitions=PARTITIONS, local_master="local[1]")
    return sparkconf.merged_conf(settings, {})


FILE_CONTEXT_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
# Each candidate: settings added on top of the current configuration (one idea each).
CANDIDATES: dict[str, dict[str, str]] = {
    "baseline": {},
    # the configuration before issue 26: Spark's FileContext-based checkpoint manager, no S3A performance flags
    "before-26": {
        "spark.sql.streaming.checkpointFileManagerClass": FILE_CONTEXT_MANAGER,
        "spark.hadoop.fs.s3a.performance.flags": "",
    },
    "hdfs-provider": {
        "spark.sql.streaming.stateStore.providerClass": (
            "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
        ),
    },
    "two-cores": {"spark.master": "local[2]"},
    "s3a-create": {"spark.hadoop.fs.s3a.performance.flags": "create,mkdir"},
    "snapshots-10s": {
        "spark.sql.streaming.stateStore.maintenanceInterval": "10s",
        "spark.sql.streaming.stateStore.minDeltasForSnapshot": "5",
    },
}


def _s3_conf(endpoint: str) -> dict[str, str]:
    return {
        "spark.hadoop.fs.s3a.endpoint": endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    }


# ---- the driver process ---------------------------------------------------------------------------------


def driver(conf_path: Path, events_path: Path, gate: Path, app_args: list[str]) -> None:
    """Build the session with the configuration, wait at the gate, then run the app with a listener that appends
    every query event (with this clock's time) to `events_path`."""
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQueryListener

    events = events_path.open("a", buffering=1)

    def emit(kind: str, **fields: Any) -> None:
        events.write(json.dumps({"kind": kind, "t": time.time(), **fields}) + "\n")

    builder = SparkSession.builder.appName("first-batch")
    for key, value in json.loads(conf_path.read_text()).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if os.environ.get(WARMUP_ENV):  # a Headrace standby's warm-up query, run before it waits at its gate
        import threading

        from pyspark.sql.streaming import DataStreamWriter

        from headrace.runtime import warmup

        warmup.warm_up(spark, threading.Event(), DataStreamWriter.start)
    watched = ["spark.sql.streaming.checkpoint.fileChecksum.enabled", "spark.sql.streaming.stateStore.providerClass"]
    emit("session", conf={key: spark.conf.get(key, None) for key in watched})

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's name
            emit("started", name=event.name)

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802 - Spark's name
            progress = event.progress
            emit(
                "progress",
                name=progress.name,
                batch=progress.batchId,
                timestamp=progress.timestamp,
                durations=dict(progress.durationMs),
                rows=progress.numInputRows,
                state=[
                    {"commitTimeMs": op.commitTimeMs, "custom": dict(op.customMetrics)}
                    for op in progress.stateOperators
                ],
            )

        def onQueryIdle(self, event: Any) -> None:  # noqa: N802 - Spark's name
            pass

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802 - Spark's name
            emit("terminated", exception=event.exception)

    spark.streams.addListener(Listener())
    while not gate.exists():
        time.sleep(0.02)
    emit("gate")
    spec = importlib.util.spec_from_file_location("windowed_counts_app", APP)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(app_args)


# ---- the bench ----------------------------------------------------------------------------------------------


def load() -> float:
    return os.getloadavg()[0]


def _read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def _iso_millis(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class Run:
    """One driver process of one configuration on its checkpoint."""

    def __init__(self, workdir: Path, name: str, index: int, conf: Mapping[str, str], app_args: list[str]) -> None:
        self.dir = workdir / f"{name}-{index}"
        self.dir.mkdir(parents=True)
        self.events = self.dir / "events.jsonl"
        self.gate = self.dir / "gate"
        (self.dir / "conf.json").write_text(json.dumps(dict(conf)))
        command = [sys.executable, __file__, "--driver", str(self.dir / "conf.json"), str(self.events), str(self.gate)]
        self.spawned = time.time()
        self.log = (self.dir / "driver.log").open("w")
        self.process = subprocess.Popen(
            [*command, "--", *app_args], stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_for(self, predicate: Any, what: str, timeout: float = START_TIMEOUT) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            events = _read_events(self.events)
            if predicate(events):
                return events
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        tail = (self.dir / "driver.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{self.dir.name}: no {what} (exit {self.process.poll()}):\n{tail}")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.log.close()


def _committed(events: list[dict[str, Any]], batches: int = 1) -> bool:
    """Both queries have committed `batches` batches with data or state (a progress event each)."""
    counts: dict[str, int] = {}
    for event in events:
        if event["kind"] == "progress":
            counts[event["name"]] = counts.get(event["name"], 0) + 1
    return len(counts) == 2 and min(counts.values()) >= batches


def phases(run: Run, events: list[dict[str, Any]]) -> dict[str, float]:
    """The phase split (seconds) of the run's first committed batch, the slower query's where per query; `steady`
    is the same query's second batch (its addBatch once state is loaded and code warm), so `batch - steady`
    bounds what loading state and cold code cost the first."""
    first = {kind: next(e for e in events if e["kind"] == kind) for kind in ("session", "gate")}
    started = {e["name"]: e["t"] for e in events if e["kind"] == "started"}
    progress: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        if event["kind"] == "progress":
            progress.setdefault(event["name"], []).append(event)
    gate = first["gate"]["t"]
    done = max(batches[0]["t"] for batches in progress.values())
    slowest, second = max(progress.values(), key=lambda batches: batches[0]["t"])[:2]
    durations = slowest["durations"]
    custom: dict[str, float] = {}
    for operator in slowest["state"]:
        for key, value in operator["custom"].items():
            custom[key] = custom.get(key, 0) + value
    return {
        "jvm": first["session"]["t"] - run.spawned,
        "start": max(started.values()) - gate,
        "trigger": _iso_millis(slowest["timestamp"]) - started[slowest["name"]],
        "latest": durations.get("latestOffset", 0) / 1000,
        "plan": durations.get("queryPlanning", 0) / 1000,
        "batch": durations.get("addBatch", 0) / 1000,
        "steady": second["durations"].get("addBatch", 0) / 1000,
        "commit": (durations.get("walCommit", 0) + durations.get("commitOffsets", 0)) / 1000,
        "state_commit": sum(op["commitTimeMs"] for op in slowest["state"]) / 1000,
        "upload": custom.get("rocksdbCommitFileSyncLatencyMs", 0) / 1000,
        "rows": float(slowest["rows"]),
        "standby": done - gate,
        "cold": done - run.spawned,
        "load": load(),
    }


def s3_requests(access_log: Path) -> list[str]:
    """The S3 operation of every request the server has logged so far (its access log, one line a request)."""
    if not access_log.exists():
        return []
    lines = access_log.read_text(errors="replace").splitlines()
    return [next((word for word in line.split() if word.startswith("s3_")), "?") for line in lines[1:]]


def one_start(
    workdir: Path, name: str, index: int, conf: Mapping[str, str], app_args: list[str]
) -> tuple[dict[str, float], dict[str, int]]:
    """Start a driver on the configuration's checkpoint, open its gate once its session is up, wait for two
    committed batches of both queries, then SIGKILL it (a lost driver). Returns the phases and the S3 requests
    (by operation) from the gate to the second commit."""
    run = Run(workdir, name, index, conf, app_args)
    access_log = workdir / ACCESS_LOG
    try:
        run.wait_for(lambda events: any(e["kind"] == "session" for e in events), "session")
        before = len(s3_requests(access_log))
        run.gate.touch()
        events = run.wait_for(lambda events: _committed(events, 2), "two committed batches")
        requests = s3_requests(access_log)[before:]
        row = phases(run, events)
    finally:
        run.kill()
    row["s3"] = float(len(requests))
    return row, dict(collections.Counter(requests))


@contextlib.contextmanager
def services(workdir: Path, s3_latency: float) -> Iterator[tuple[str, str, dict[str, str], list[Path], Any]]:
    """The S3 server (behind a proxy adding `s3_latency` seconds to each request), the Kafka broker with its
    producer (120 clicks every 1.5 s) and the jars."""
    from urllib.parse import urlsplit

    from testbed import kafka, objectstore, scenario
    from testbed.tcpproxy import TcpProxy

    jars = [*objectstore.s3a_jars(), *kafka.spark_kafka_jars()]
    os.environ["VGW_ACCESS_LOG"] = str(workdir / ACCESS_LOG)  # the gateway logs every request there
    with objectstore.ObjectStore() as store, kafka.KafkaBroker() as broker:
        server = urlsplit(store.endpoint)
        with TcpProxy((server.hostname or "127.0.0.1", server.port or 80), delay_seconds=s3_latency) as proxy:
            topic = scenario.ClickTopic(broker.bootstrap_servers, "clicks").resume()
            for _ in range(10):
                topic.next_file()
            env = {
                "AWS_ACCESS_KEY_ID": store.access_key,
                "AWS_SECRET_ACCESS_KEY": store.secret_key,
                "bootstrap": broker.bootstrap_servers,
            }
            with scenario.Writer(topic, 1.5):
                yield f"http://127.0.0.1:{proxy.port}", f"s3a://{store.bucket}", env, jars, topic


def sink_check(output: Path, events: list[dict[str, Any]]) -> str:
    """The configuration's tumbling-window sink against the input: duplicated, wrong or missing windows."""
    from testbed import scenario, sink

    rows = sink.read_rows(output / "tumbling")
    expected = scenario.expected_tumbling_counts(events)
    check = sink.compare(rows, expected, sink.emitted_by_now(expected, rows))
    verdict = "exact" if check.ok else "NOT EXACT"
    wrong = f"duplicated {check.duplicated[:3]} wrong {check.wrong[:3]} missing {check.missing[:3]}"
    return f"{verdict}: {check.windows} windows, {check.records} records; {wrong}"


def _summary(rows: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(row[key] for row in rows) for key in rows[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="measured restarts per configuration")
    parser.add_argument(
        "--s3-latency-ms", type=float, default=0.0, help="added to each S3 request (a round trip to a real S3)"
    )
    parser.add_argument(
        "--warmup", action="store_true", help="each driver runs the standby's warm-up query before its gate"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every row here")
    parser.add_argument("--only", default=None, help="comma-separated configurations (baseline is always run)")
    args = parser.parse_args(argv)
    names = ["baseline", *[n for n in (args.only or ",".join(CANDIDATES)).split(",") if n and n != "baseline"]]
    unknown = [name for name in names if name not in CANDIDATES]
    if unknown:
        parser.error(f"unknown configurations {unknown}; known: {sorted(CANDIDATES)}")
    from headrace.render import manifests

    print(f"{time.strftime('%H:%M:%S')} starting, S3 latency {args.s3_latency_ms} ms (load {load():.1f})", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="headrace-first-batch-"))
    results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    operations: dict[str, list[dict[str, int]]] = {name: [] for name in names}
    try:
        if args.warmup:
            os.environ[WARMUP_ENV] = "1"  # inherited by the drivers
        with services(workdir, args.s3_latency_ms / 1000) as (endpoint, bucket, env, jars, topic):
            bootstrap = env.pop("bootstrap")
            os.environ.update(env)  # S3A's default chain reads the credentials from the environment
            base = {
                **runtime_conf(),
                **_s3_conf(endpoint),
                **manifests.S3A_CHECKPOINT_DEFAULTS,  # what the operator renders with spec.state.s3
                "spark.jars": ",".join(map(str, jars)),
                "spark.ui.enabled": "false",
                "spark.sql.session.timeZone": "UTC",
                "spark.pyspark.python": sys.executable,
            }
            confs = {name: {**base, **CANDIDATES[name]} for name in names}
            app = ["--source", "kafka", "--bootstrap", bootstrap, "--topic", "clicks", *QUICK_START_ARGS]

            def app_args(name: str) -> list[str]:
                root = f"{bucket}/{name}"
                return [*app, "--output", f"{workdir}/{name}-output", "--checkpoint", f"{root}/checkpoints"]

            for name in names:  # seed: each configuration's first start creates its checkpoint and state
                seeded, _ = one_start(workdir, name, 0, confs[name], app_args(name))
                print(f"{time.strftime('%H:%M:%S')} seeded {name}: {seeded['cold']:.1f} s (load {load():.1f})")
            for round_index in range(1, args.rounds + 1):
                order = names[round_index % len(names) :] + names[: round_index % len(names)]
                for name in order:
                    row, ops = one_start(workdir, name, round_index, confs[name], app_args(name))
                    results[name].append(row)
                    operations[name].append(ops)
                    flag = " BUSY: not a figure" if row["load"] > BUSY_LOAD else ""
                    split = " ".join(f"{key} {row[key]:.2f}" for key in row if key not in ("load",))
                    print(f"{time.strftime('%H:%M:%S')} {name} #{round_index}: {split} (load {row['load']:.1f}){flag}")
                    print(f"    S3 requests gate -> second commit: {dict(sorted(ops.items()))}")
                    sys.stdout.flush()
            checks = {name: sink_check(workdir / f"{name}-output", topic.counted()) for name in names}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report(results)
    print("\nsinks after every SIGKILL, read through Spark (exactly once: none duplicated, wrong or missing)")
    for name, check in checks.items():
        print(f"{name:20} {check}")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "operations": operations}, indent=1))
    return 0


def report(results: dict[str, list[dict[str, float]]]) -> None:
    medians = {name: _summary(rows) for name, rows in results.items() if rows}
    base = medians["baseline"]
    keys = ["jvm", "start", "trigger", "latest", "plan", "batch", "steady", "commit", "upload", "s3", "standby", "cold"]
    print("\nmedians (s) and ratio to the baseline's standby / cold, same run")
    print("config          " + " ".join(f"{key:>8}" for key in keys) + "  standby/b  cold/b   load")
    for name, row in medians.items():
        cells = " ".join(f"{row[key]:8.2f}" for key in keys)
        ratios = f"{row['standby'] / base['standby']:9.2f} {row['cold'] / base['cold']:7.2f}"
        print(f"{name:15} {cells} {ratios} {row['load']:6.1f}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--driver":
        separator = sys.argv.index("--")
        driver(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), sys.argv[separator + 1 :])
    else:
        sys.exit(main())

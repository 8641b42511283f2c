"""Kafka source to parquet sink, exactly once across repeated SIGKILLs of the driver and its JVM.

A real KRaft broker and a 3-partition topic receive 30,000 click events with unique ids, in bursts,
while `python -m headrace.runtime apps/windowed-counts/app.py --source kafka ...` runs; the job's
whole process group is SIGKILLed at random points (twice: each kill and restart costs a JVM start,
about a minute under CI's load, and the chaos e2e kills a driver on Kafka again) and restarted on the
same checkpoint. At the end every event is counted exactly once in every window it belongs to, read
through Spark (which follows the sink's `_spark_metadata` log).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from headrace.api import runtime_contract as contract
from testbed import procs
from testbed.kafka import KafkaBroker

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

APP = Path(__file__).resolve().parents[2] / "apps" / "windowed-counts" / "app.py"
PAGES = ["/", "/search", "/products/shoes", "/products/hats", "/cart", "/checkout", "/help", "/blog/spark"]
BASE = 1_795_255_200  # 2026-11-21T10:00:00Z, on a minute boundary
EVENTS, BURSTS, STEP_MS = 30_000, 30, 60  # each burst of 1,000 events covers exactly one minute of event time
FLUSH_TIME = BASE + 40 * 60  # one late-enough event closes every window (watermark 2 min, sliding 5 min)
KILLS = 2


def event_ms(index: int) -> int:
    return BASE * 1000 + index * STEP_MS


def events(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)  # noqa: S311 - test data, not security
    return [
        {
            "event_id": f"c{i:08d}",
            "user_id": f"u{rng.randrange(200):03d}",
            "event_type": "page_view",
            "url": rng.choice(PAGES),
            "referrer": "",
            "event_time": _iso(event_ms(i)),
        }
        for i in range(EVENTS)
    ]


def _iso(epoch_ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_ms // 1000)) + f".{epoch_ms % 1000:03d}Z"


def expected(all_events: list[dict[str, Any]]) -> tuple[Counter[tuple[int, str]], Counter[tuple[int, str]]]:
    """(tumbling 1 min, sliding 5 min every 1 min) view counts keyed by (window start, page)."""
    tumbling: Counter[tuple[int, str]] = Counter()
    sliding: Counter[tuple[int, str]] = Counter()
    for index, event in enumerate(all_events):
        start = event_ms(index) // 60_000 * 60
        tumbling[(start, event["url"])] += 1
        for back in range(5):
            sliding[(start - back * 60, event["url"])] += 1
    return tumbling, sliding


def sink(spark: Any, path: Path) -> list[tuple[int, str, int]]:
    """Committed rows of a sink, through Spark (which reads only files named in `_spark_metadata`)."""
    frame = spark.read.parquet(str(path)).selectExpr("unix_timestamp(window_start) AS start", "page", "views")
    return sorted((r.start, r.page, r.views) for r in frame.collect() if r.page != "/flush")


def as_rows(counts: Counter[tuple[int, str]]) -> list[tuple[int, str, int]]:
    return sorted((start, page, views) for (start, page), views in counts.items())


def committed_batches(checkpoint: Path) -> int:
    return sum(len([n for n in os.listdir(d) if n.isdigit()]) for d in checkpoint.rglob("commits") if d.is_dir())


class Job:
    """The app under `python -m headrace.runtime`, restartable, killed as a whole process group."""

    def __init__(self, workdir: Path, args: list[str], jars: list[Path]) -> None:
        self.workdir, self.args, self.attempt = workdir, args, 0
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("HEADRACE_")}
        self.env.update(
            {
                contract.ENV_CHECKPOINT_DIR: str(workdir / "checkpoints"),
                contract.ENV_APP_NAME: "test",
                contract.ENV_STATE_PARTITIONS: "4",
                contract.ENV_CONTROL_TOKEN: "t",
                "HEADRACE_CONTROL_BIND": "127.0.0.1",
                "HEADRACE_TERMINATION_MESSAGE_PATH": str(workdir / "termination"),
                "PYSPARK_PYTHON": sys.executable,
                "TZ": "UTC",
                "PYSPARK_SUBMIT_ARGS": " ".join(
                    [
                        "--jars",
                        ",".join(map(str, jars)),
                        "--conf",
                        "spark.ui.showConsoleProgress=false",
                        "pyspark-shell",
                    ]
                ),
            }
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.attempt += 1
        self.control_port = procs.free_port()
        env = {
            **self.env,
            contract.ENV_ATTEMPT: str(self.attempt),
            contract.ENV_CONTROL_PORT: str(self.control_port),
            contract.ENV_METRICS_PORT: str(procs.free_port()),
        }
        with (self.workdir / f"attempt-{self.attempt}.log").open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "headrace.runtime", str(APP), *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def status(self) -> dict[str, Any]:
        """The runtime's status document (its control endpoint, token "t")."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.control_port}{contract.PATH_STATUS}")
        request.add_header("Authorization", "Bearer t")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback
                return json.loads(response.read())  # type: ignore[no-any-return]
        except OSError:
            return {}  # not serving yet

    def kill(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def log(self) -> str:
        return (self.workdir / f"attempt-{self.attempt}.log").read_text(errors="replace")[-4000:]

    def wait_for(self, condition: Any, timeout: float, what: str, interval: float = 0.25) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.process is not None
            assert self.process.poll() is None, (
                f"job exited ({self.process.returncode}) waiting for {what}:\n{self.log()}"
            )
            assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{self.log()}"
            time.sleep(interval)


def produce_in_bursts(broker: KafkaBroker, topic: str, all_events: list[dict[str, Any]], pause: float) -> None:
    size = len(all_events) // BURSTS
    for index in range(BURSTS):
        burst = all_events[index * size : (index + 1) * size]
        broker.produce(topic, [(e["user_id"], json.dumps(e)) for e in burst])
        time.sleep(pause)


def test_kafka_windowed_counts_exactly_once_across_sigkills(
    kafka_broker: KafkaBroker, kafka_jars: list[Path], reader_spark: Any, tmp_path: Path
) -> None:
    seed = int(os.environ.get("HEADRACE_TEST_SEED", time.time_ns() % 10_000))
    rng, all_events = random.Random(seed), events(seed)  # noqa: S311 - test data
    topic = f"clicks-{seed}"
    kafka_broker.create_topic(topic, partitions=3)
    output = tmp_path / "out"
    args = [
        "--source",
        "kafka",
        "--bootstrap",
        kafka_broker.bootstrap_servers,
        "--topic",
        topic,
        "--output",
        str(output),
        "--trigger-seconds",
        "1",
        "--max-offsets-per-trigger",
        "4000",
    ]
    job = Job(tmp_path, args, kafka_jars)
    producer = threading.Thread(target=produce_in_bursts, args=(kafka_broker, topic, all_events, 2.0), daemon=True)
    kill_log = []
    try:
        job.start()
        producer.start()  # a batch runs only when data arrives
        job.wait_for(lambda: committed_batches(tmp_path / "checkpoints") > 0, 240, "the first committed batch")
        for _ in range(KILLS):
            before = committed_batches(tmp_path / "checkpoints")
            job.wait_for(lambda b=before: committed_batches(tmp_path / "checkpoints") > b, 240, "a new commit")
            delay = rng.uniform(0.0, 3.0)  # lands before, inside or after the next batch
            time.sleep(delay)
            job.kill()
            kill_log.append((committed_batches(tmp_path / "checkpoints"), round(delay, 2)))
            job.start()
        producer.join(timeout=300)
        assert not producer.is_alive(), "the producer did not finish"
        kafka_broker.produce(
            topic,
            [
                (
                    "flush",
                    json.dumps(
                        {**all_events[-1], "event_id": "flush", "url": "/flush", "event_time": _iso(FLUSH_TIME * 1000)}
                    ),
                )
            ],
        )
        tumbling, sliding = expected(all_events)

        def complete() -> bool:
            try:
                return len(sink(reader_spark, output / "tumbling")) >= len(tumbling) and len(
                    sink(reader_spark, output / "sliding")
                ) >= len(sliding)
            except Exception:
                return False

        job.wait_for(complete, 420, "every window in both sinks", interval=3.0)
    finally:
        job.kill()
    print(f"seed {seed}; kills (commits so far, delay s): {kill_log}")
    assert len(kill_log) >= KILLS
    assert sink(reader_spark, output / "tumbling") == as_rows(tumbling)
    assert sink(reader_spark, output / "sliding") == as_rows(sliding)
    assert sum(v for _, _, v in sink(reader_spark, output / "tumbling")) == EVENTS


def test_status_reports_kafka_partitions_backlog_and_trigger(
    kafka_broker: KafkaBroker, kafka_jars: list[Path], tmp_path: Path
) -> None:
    """The autoscaler's signals from a real Kafka source: the topic's partitions, the backlog a rate limit leaves,
    the processing-time trigger, and batch totals that add up the rows read."""
    topic = f"signals-{time.time_ns() % 100_000}"
    kafka_broker.create_topic(topic, partitions=3)
    kafka_broker.produce(topic, [(e["user_id"], json.dumps(e)) for e in events(7)[:6000]])
    args = ["--source", "kafka", "--bootstrap", kafka_broker.bootstrap_servers, "--topic", topic]
    args += ["--output", str(tmp_path / "out"), "--trigger-seconds", "2", "--max-offsets-per-trigger", "600"]
    job = Job(tmp_path, args, kafka_jars)
    seen: list[dict[str, Any]] = []

    def read_with_backlog() -> bool:
        queries = job.status().get("queries") or []
        progressed = [query for query in queries if (query.get("progress") or {}).get("input_rows")]
        seen[:] = progressed
        return len(progressed) == 2 and all(query["progress"]["source_backlog"] > 0 for query in progressed)

    try:
        job.start()
        job.wait_for(read_with_backlog, 240, "both queries reading with a backlog left", interval=1.0)
        status = job.status()
    finally:
        job.kill()
    for query in seen:
        progress, totals = query["progress"], query["totals"]
        assert progress["source_partitions"] == 3
        assert 0 < progress["input_rows"] <= 600 and progress["source_backlog"] <= 6000 - progress["input_rows"]
        assert query["triggerIntervalSeconds"] == 2.0
        assert totals["inputRows"] >= progress["input_rows"] and totals["busySeconds"] > 0
        assert progress["state_operators"] == 1
    assert status["executors"]["cores"] >= 1  # local mode: the local master's threads


def test_broker_round_trip_and_cleanup() -> None:
    """The testbed broker itself: keyed records come back once each, and stop() leaves nothing behind."""
    with KafkaBroker() as broker:
        broker.create_topic("round-trip", partitions=3)
        sent = [(f"k{n % 5}", f"v{n}") for n in range(3000)]
        assert broker.produce("round-trip", sent) == 3000
        received = broker.consume_all("round-trip")
        pid, workdir = broker.pid, broker.workdir
    assert sorted(r.value.decode() for r in received) == sorted(value for _, value in sent)
    by_key = {r.key: r.partition for r in received}
    assert all(by_key[r.key] == r.partition for r in received), "one key, one partition"
    assert pid is not None
    assert not workdir.exists()
    assert not procs.pid_exists(pid)

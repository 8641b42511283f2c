"""A load ramp for the autoscaler on the local cluster: an app whose rows cost what more executors share, a Kafka
producer that follows a schedule of rates, and a record of what the app and the operator did meanwhile.

Owns: the ramp app (the windowed-counts example's tumbling query, each row made to cost `row_cost_ms` of one
executor core in `tasks` tasks, so that its capacity grows with its executors whatever the node's CPU is doing:
the cost is a JVM sleep, `reflect('java.lang.Thread', 'sleep', ...)`), deploying it with a `spec.autoscaler`,
producing at the schedule's rates, sampling status and Events every few seconds, and the figures a run gives.
Used by tests/e2e/test_autoscaler.py and bench/autoscaler.py. Never: asserts anything.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from headrace.api import names
from testbed import chaos, scenario
from testbed.controlplane import delete_namespace
from testbed.environment import Environment

RAMP_APP = '''"""The windowed-counts example's tumbling query, each row costing --row-cost-ms of a core (testbed)."""
import sys

sys.path[:0] = ["/opt/headrace/apps/windowed-counts", "/opt/headrace/apps"]
import transforms
from common import streaming_io
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

parser = streaming_io.base_parser(__doc__)
parser.add_argument("--topic", default="clicks")
parser.add_argument("--row-cost-ms", type=int, default=1)
parser.add_argument("--tasks", type=int, default=12)
parser.add_argument("--window", default="1 minute")
parser.add_argument("--watermark", default="30 seconds")
args = streaming_io.parse(parser, None)
spark = SparkSession.builder.appName("autoscale-ramp").getOrCreate()
events = streaming_io.read_events(spark, args, transforms.CLICK_SCHEMA, args.topic)
# a JVM sleep per row (nondeterministic, so never folded away): the cost is shared by the executors' task slots
work = F.expr(f"coalesce(reflect('java.lang.Thread', 'sleep', bigint({args.row_cost_ms})), 'x') != ''")
views = transforms.page_views(events.repartition(args.tasks).where(work))
counts = transforms.tumbling_counts(views, args.window, args.watermark)
streaming_io.await_all(spark, [streaming_io.write_parquet(counts, args, "page_views_tumbling", "tumbling")])
'''
PRODUCE_EVERY = 0.5  # seconds between two chunks of the producer
SAMPLE_EVERY = 5.0  # seconds between two samples of status


@dataclass(frozen=True)
class Phase:
    """Produce `rate` rows per second for `seconds`."""

    seconds: float
    rate: float


@dataclass(frozen=True)
class Point:
    """One sample of an app during the ramp (seconds since the ramp began)."""

    at: float
    rate: float
    executors: int | None  # registered
    target: int | None  # what the app is asked to have (status.executors)
    backlog: float | None
    reason: str | None  # the autoscaler's last decision
    recommended: int | None  # the executors it decided for (passive: would have)
    message: str = ""  # why (the decision's message: its utilization, input, backlog, capacity, fixed cost)


@dataclass(frozen=True)
class Action:
    """An autoscaler Event (AutoscalerScaled, AutoscalerRefused, AutoscalerRecommends), seconds since the ramp."""

    at: float
    reason: str
    message: str


@dataclass
class Trace:
    """What one app did during the ramp."""

    name: str
    points: list[Point] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)

    def scaled(self) -> list[Action]:
        return [action for action in self.actions if action.reason == "AutoscalerScaled"]

    def executor_seconds(self) -> float:
        """Executors registered, integrated over the ramp."""
        total = 0.0
        for before, after in zip(self.points, self.points[1:], strict=False):
            total += (before.executors or 0) * (after.at - before.at)
        return total

    def peak_backlog(self, start: float = 0.0, end: float = float("inf")) -> float:
        return max((point.backlog or 0.0 for point in self.points if start <= point.at < end), default=0.0)


def ramp_manifest(
    data: Path,
    topic: str,
    *,
    row_cost_ms: int,
    tasks: int,
    trigger_seconds: float,
    max_offsets_per_trigger: int | None = None,
    **spec: Any,
) -> Any:
    """The example's manifest running the ramp app (written into `data`, which the pods mount) on `topic`; with
    `max_offsets_per_trigger`, a batch reads at most that many records, so that the backlog shows (Spark reports
    none without it: docs/autoscaler.md, "The signals")."""
    (data / "ramp_app.py").write_text(RAMP_APP)
    (data / "ramp_app.py").chmod(0o644)
    manifest = scenario.windowed_counts_manifest(data, topic, **spec)
    args = manifest["spec"]["application"]["args"]
    source = args[: args.index("--output")]
    manifest["spec"]["application"] = {
        "file": f"local://{data}/ramp_app.py",
        "args": [
            *source, "--output", f"file://{data}/output", "--trigger-seconds", str(trigger_seconds),
            "--row-cost-ms", str(row_cost_ms), "--tasks", str(tasks),
            "--window", "1 minute", "--watermark", "30 seconds",
            *(["--max-offsets-per-trigger", str(max_offsets_per_trigger)] if max_offsets_per_trigger else []),
        ],
    }  # fmt: skip
    # the executors resolve nothing of the example's Python (no UDF), but keep its path as the example has it
    manifest["spec"].setdefault("sparkConf", {})["spark.executorEnv.PYTHONPATH"] = (
        "/opt/headrace/apps/windowed-counts:/opt/headrace/apps"
    )
    return manifest


@contextlib.contextmanager
def ramp_app(
    target: Environment,
    prefix: str,
    *,
    row_cost_ms: int = 1,
    tasks: int = 12,
    trigger_seconds: float = 8.0,
    max_offsets_per_trigger: int | None = None,
    **spec: Any,
) -> Iterator[scenario.AppHandle]:
    """The ramp app in a namespace of its own reading a topic of that name (the handle's `input` produces to it),
    state on the node; running and past its first committed batch. The namespace is deleted afterwards."""
    namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    data = scenario.prepare_data_dir(target.data_root, namespace)
    topic = scenario.ClickTopic(target.kafka_bootstrap, namespace).resume()
    manifest = ramp_manifest(
        data,
        namespace,
        row_cost_ms=row_cost_ms,
        tasks=tasks,
        trigger_seconds=trigger_seconds,
        max_offsets_per_trigger=max_offsets_per_trigger,
        **spec,
    )
    with target.api_client() as api:
        try:
            (data / "namespace.yaml").write_text(
                yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
            )
            target.kubectl("apply", "-f", str(data / "namespace.yaml"))
            (data / "streamingapp.yaml").write_text(yaml.safe_dump(manifest))
            target.kubectl("apply", "-n", namespace, "-f", str(data / "streamingapp.yaml"))
            handle = scenario.AppHandle(api, namespace, data)
            handle.input = topic
            topic.next_file()
            handle.wait(handle.commits, 600, f"{namespace}'s first committed batch")
            yield handle
        finally:
            delete_namespace(api, namespace)


class Producer:
    """Produces clicks to the apps' topics at a rate that can change, in a thread, until stopped."""

    def __init__(self, topics: list[scenario.ClickTopic]) -> None:
        self.topics, self.rate = topics, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._owed = 0.0

    def _run(self) -> None:
        while not self._stop.wait(PRODUCE_EVERY):
            self._owed += self.rate * PRODUCE_EVERY
            count = int(self._owed)
            if count <= 0:
                continue
            self._owed -= count
            for topic in self.topics:
                first = topic.first + len(topic.counted())
                topic.write([scenario.click(number) for number in range(first, first + count)])

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def _events(app: scenario.AppHandle, since: float) -> list[Action]:
    found = app.core.list_namespaced_event(app.namespace).items
    actions = []
    for event in found:
        reason = str(event.reason or "")
        if not reason.startswith("Autoscaler") or event.involved_object.name != app.name:
            continue
        moment = event.last_timestamp or event.event_time or event.metadata.creation_timestamp
        actions.append(Action(moment.timestamp() - since if moment else 0.0, reason, event.message or ""))
    return sorted(actions, key=lambda action: action.at)


def _point(app: scenario.AppHandle, at: float, rate: float) -> Point:
    status = app.status()
    progress, decided = status.get("progress") or {}, status.get("autoscaler") or {}
    return Point(
        at=at,
        rate=rate,
        executors=progress.get("registeredExecutors"),
        target=status.get("executors"),
        backlog=progress.get("sourceBacklog"),
        reason=decided.get("reason"),
        message=str(decided.get("message") or ""),
        recommended=decided.get("executors"),
    )


def run_ramp(apps: list[scenario.AppHandle], phases: list[Phase], log: Any = print) -> tuple[list[Trace], float]:
    """Produce the phases' rates to every app's topic (the same rows to each), sampling each app meanwhile; the
    traces (Events included) and the ramp's start (epoch seconds)."""
    traces = [Trace(app.namespace) for app in apps]
    topics = [app.input for app in apps if isinstance(app.input, scenario.ClickTopic)]
    started = time.time()
    with Producer(topics) as producer:
        for phase in phases:
            producer.rate = phase.rate
            log(f"{time.time() - started:6.0f} s: {phase.rate:.0f} rows/s for {phase.seconds:.0f} s")
            until = time.monotonic() + phase.seconds
            while time.monotonic() < until:
                for app, trace in zip(apps, traces, strict=True):
                    point = chaos.retrying(functools.partial(_point, app, time.time() - started, producer.rate))
                    if point is not None:
                        new = not trace.points or point.message != trace.points[-1].message
                        said = f": {point.message}" if new else ""
                        trace.points.append(point)
                        log(
                            f"{point.at:6.0f} s {trace.name}: {point.rate:.0f} rows/s, executors {point.executors}"
                            f" (asked {point.target}), backlog {point.backlog}, {point.reason} -> {point.recommended}"
                            + said
                        )
                time.sleep(min(SAMPLE_EVERY, max(0.0, until - time.monotonic())))
    for app, trace in zip(apps, traces, strict=True):
        trace.actions = _events(app, started)
    return traces, started


def executor_pods(app: scenario.AppHandle) -> int:
    """Executor pods of the app running now."""
    return len(app.running(names.ROLE_EXECUTOR))

"""Scenario helpers for end-to-end tests and benchmarks of the windowed-counts example on a cluster.

Owns: click events with known content written as files a pod reads (atomically, with distinct
increasing modification times) or produced to the cluster's Kafka topic (`ClickTopic`), the example's
StreamingApp pointed at a hostPath shared with this process (reading files or Kafka), watching the
app's pods and committed batches, and the exact expected window counts.
Never: asserts (tests do) or starts clusters (the cluster module does).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import yaml
from kubernetes import client

from headrace.api import models, names
from testbed import REPOSITORY, kafka
from testbed.cluster_kafka import SERVICE_ADDRESS as KAFKA_SERVICE

APP = "windowed-counts"
BASE = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
EVENTS_PER_FILE = 120
PAGES = ("/", "/pricing", "/docs/start", "/blog/launch", "/signup")

OPERATOR_NAMESPACE = "headrace-system"
T = TypeVar("T")


def click(number: int) -> dict[str, Any]:
    """Click event `number`: a page view every 0.5 s of event time, cycling through PAGES."""
    moment = BASE + timedelta(milliseconds=500 * number)
    page = PAGES[number % len(PAGES)]
    return {
        "event_id": f"e{number}",
        "user_id": f"u{number % 17}",
        "event_type": "page_view",
        "url": page + ("?utm=x" if number % 3 == 0 else ""),
        "referrer": None,
        "event_time": moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
    }


FLUSH = 10_000_000  # an event this far in event time moves the watermark past every earlier window


class ClickFiles:
    """Writes JSON-lines files atomically with distinct increasing modification times (thread-safe)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.files = 0
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def write(self, events: list[dict[str, Any]]) -> None:
        """One new file holding `events`."""
        with self._lock:
            name = f"part-{self.files:05d}.json"
            hidden = self.directory / f".{name}.tmp"
            hidden.write_text("".join(json.dumps(event) + "\n" for event in events))
            stamp = time.time() + self.files * 0.001
            os.utime(hidden, (stamp, stamp))
            hidden.rename(self.directory / name)
            self.files += 1
            self.events += events

    def next_file(self) -> None:
        """A file of the next EVENTS_PER_FILE clicks."""
        first = len([event for event in self.events if event["event_id"] != f"e{FLUSH}"])
        self.write([click(number) for number in range(first, first + EVENTS_PER_FILE)])

    def flush(self) -> None:
        """The far-future event that closes every window."""
        self.write([click(FLUSH)])

    def counted(self) -> list[dict[str, Any]]:
        """The events that land in closed windows (all but the flush event)."""
        return [event for event in self.events if event["event_id"] != f"e{FLUSH}"]


class ClickTopic:
    """Produces click events to a Kafka topic, `EVENTS_PER_FILE` per chunk, in event-time order (thread-safe).

    The topic has one partition: every micro-batch then reads a prefix of the stream, so no event arrives
    behind the watermark and the window counts are exact. `resume()` continues the numbering of a topic that
    already holds events (the quick start run again)."""

    def __init__(self, bootstrap_servers: str, topic: str = "clicks") -> None:
        self.bootstrap_servers, self.topic = bootstrap_servers, topic
        self.first = 0
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        kafka.create_topic(bootstrap_servers, topic, 1, exist_ok=True)

    def resume(self) -> ClickTopic:
        """Start numbering after the events already in the topic (made here, with one partition, if missing).

        A topic the broker has just made answers "not leader" until its partition's leader is elected, an error the
        client does not flag retriable (the lifecycle bench failed on it at load 27): it and retriable errors are
        retried for up to two minutes."""
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

        electing = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE}
        kafka.create_topic(self.bootstrap_servers, self.topic, 1, exist_ok=True)
        consumer = Consumer({"bootstrap.servers": self.bootstrap_servers, "group.id": "headrace-click-producer"})
        deadline = time.monotonic() + 120
        try:
            while True:
                try:
                    self.first = consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=10)[1]
                    break
                except KafkaException as error:
                    retriable = error.args[0].retriable() or error.args[0].code() in electing
                    if not retriable or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        finally:
            consumer.close()
        return self

    def write(self, events: list[dict[str, Any]]) -> None:
        """Produce `events` (acknowledged by the broker before this returns)."""
        with self._lock:
            kafka.produce(self.bootstrap_servers, self.topic, [json.dumps(event) for event in events], partition=0)
            self.events += events

    def next_file(self) -> None:
        """The next EVENTS_PER_FILE clicks (named like `ClickFiles.next_file`, so `Writer` drives either)."""
        first = self.first + len(self.counted())
        self.write([click(number) for number in range(first, first + EVENTS_PER_FILE)])

    def flush(self) -> None:
        """The far-future event that closes every window."""
        self.write([click(FLUSH)])

    def counted(self) -> list[dict[str, Any]]:
        """The events this producer wrote that land in closed windows (all but the flush event)."""
        return [event for event in self.events if event["event_id"] != f"e{FLUSH}"]


class Writer:
    """Keeps adding click files (or chunks to a topic) every `interval` seconds in a thread, until stopped."""

    def __init__(self, files: ClickFiles | ClickTopic, interval: float = 1.5) -> None:
        self.files, self.interval = files, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.files.next_file()

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def expected_tumbling_counts(events: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    """Views per (1-minute window start, page), computed directly from the input."""
    counts: Counter[tuple[str, str]] = Counter()
    for event in events:
        moment = datetime.strptime(event["event_time"], "%Y-%m-%dT%H:%M:%S.%fZ")
        window = moment.replace(second=0, microsecond=0).strftime("%Y-%m-%d %H:%M:%S")
        counts[(window, event["url"].split("?")[0])] += 1
    return counts


def windowed_counts_manifest(
    data_dir: Path, kafka_topic: str | None = None, /, **spec_overrides: Any
) -> dict[str, Any]:
    """The example's own streamingapp.yaml, writing files on a hostPath shared with us and reading either
    files there or (`kafka_topic`) that topic of the cluster's Kafka, ``kafka.kafka.svc:9092``."""
    manifest: dict[str, Any] = yaml.safe_load((REPOSITORY / "apps" / APP / "streamingapp.yaml").read_text())
    manifest["metadata"].pop("namespace", None)
    spec = manifest["spec"]
    # The directory is mounted at the same path in the pods as here: the file sink's log records absolute
    # paths, so the output is readable (through that log) from this process too.
    root = str(data_dir)
    if kafka_topic is None:
        source = ["--source", "files", "--input", f"{root}/input"]
    else:
        source = ["--source", "kafka", "--bootstrap", KAFKA_SERVICE, "--topic", kafka_topic]
    spec["application"]["args"] = [
        *source, "--output", f"file://{root}/output",
        "--trigger-seconds", "2", "--window", "1 minute", "--watermark", "30 seconds",
    ]  # fmt: skip
    # State on the shared hostPath (single node); the quick start and the object-storage tests use the bucket.
    spec["state"] = {
        **{key: value for key, value in spec["state"].items() if key != "s3"},
        "checkpointDir": f"file://{root}/state",
        "savepointDir": f"file://{root}/savepoints",
        "allowNodeLocal": True,
    }
    spec["volumes"] = [{"name": "data", "hostPath": {"path": root, "type": "Directory"}}]
    spec["volumeMounts"] = [{"name": "data", "mountPath": root}]
    spec["driver"] = {"cores": 1, "memory": "768m", "coreRequest": "250m"}
    spec["executor"] = {"instances": 1, "cores": 1, "memory": "768m", "coreRequest": "250m"}
    spec["upgradeMode"] = "last-state"
    spec["savepoints"] = {"retain": 3}
    spec.update(spec_overrides)
    with_test_jvm_options(spec)
    return manifest


# JVM options for the drivers and executors of the apps the tests deploy, set by tests/conftest.py (never by the
# quick start or the benches, which run what users run): `-XX:TieredStopAtLevel=1`. A test's JVM lives for seconds
# to minutes on 2 cores shared by two workers, where C2's compiler threads cost more than they save: a short Spark
# job's JVM used half the CPU with C1 alone (25-28 s against 49-55 s, measured 2026-12-02).
TEST_JVM_OPTIONS_ENV = "TESTBED_JVM_OPTIONS"
JVM_OPTION_KEYS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")


def with_test_jvm_options(spec: dict[str, Any]) -> None:
    """Append `$TESTBED_JVM_OPTIONS` (if set) to the spec's driver and executor JVM options."""
    options = os.environ.get(TEST_JVM_OPTIONS_ENV, "").strip()
    if not options:
        return
    conf = spec.setdefault("sparkConf", {})
    for key in JVM_OPTION_KEYS:
        conf[key] = " ".join(part for part in (str(conf.get(key, "")).strip(), options) if part)


# Directories pods read through a hostPath live here: every ancestor is world-traversable, wherever the
# checkout or the home directory is (a home directory of mode 700 hides its contents from uid 185).
POD_DATA_BASE = Path("/var/tmp/headrace")


def unreadable_ancestor(path: Path) -> Path | None:
    """The first existing ancestor of `path` that other users (the image's uid 185) cannot traverse."""
    for ancestor in reversed(path.resolve().parents):
        if ancestor.exists() and not ancestor.stat().st_mode & 0o001:
            return ancestor
    return None


def pod_data_root(name: str) -> Path:
    """A directory for data that pods mount through a hostPath (world-traversable all the way up)."""
    POD_DATA_BASE.mkdir(parents=True, exist_ok=True)
    POD_DATA_BASE.chmod(0o1777)
    root = POD_DATA_BASE / name
    root.mkdir(exist_ok=True)
    root.chmod(0o777)
    return root


def prepare_data_dir(root: Path, name: str) -> Path:
    """A data directory (input, output, state, savepoints) writable by the Spark image's user.

    Refuses a root the image's user could not reach, naming the directory that blocks it."""
    blocked = unreadable_ancestor(root / name)
    if blocked is not None:
        raise PermissionError(
            f"{root} is not reachable by the Spark image's user (uid 185): {blocked} is not world-traversable "
            f"(mode {blocked.stat().st_mode & 0o777:o}); use a directory under {POD_DATA_BASE}"
        )
    data = root / name
    for sub in ("input", "output", "state", "savepoints"):
        path = data / sub
        if path.is_symlink() and not path.exists():
            path.unlink()  # a link into the bucket of a cluster since taken down (the quick start's state)
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o777)
    data.chmod(0o777)
    return data


def clear_directory(directory: Path) -> bool:
    """Remove what `directory` holds, keeping the directory itself (and its mode); True if it held anything."""
    entries = list(directory.iterdir()) if directory.is_dir() else []
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    return bool(entries)


def app_exists(api: client.ApiClient, namespace: str, name: str = APP) -> bool:
    """Whether the StreamingApp `name` exists in `namespace`."""
    try:
        client.CustomObjectsApi(api).get_namespaced_custom_object(
            models.GROUP, models.VERSION, namespace, models.APP_PLURAL, name
        )
    except client.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def modified(paths: Iterable[Path]) -> list[tuple[float, Path]]:
    """(modification time, path) of each of `paths` that still exists, oldest first. Spark deletes a query's old
    log entries while it runs (all but the last `spark.sql.streaming.minBatchesToRetain`, 100 by default), so a
    file listed a moment ago may be gone when it is looked at: it is left out, never an error."""
    found = []
    for path in paths:
        try:
            found.append((path.stat().st_mtime, path))
        except FileNotFoundError:
            continue
    return sorted(found)


def query_log(checkpoint: Path, log: str) -> list[Path]:
    """The entries of one log (`commits`, `offsets`) of every query in a run's checkpoint, in batch order;
    never the runtime's temporary `<query>.restoring` copies."""
    found = [path for path in checkpoint.glob(f"*/{log}/[0-9]*") if "." not in path.parents[1].name]
    return sorted(found, key=lambda path: int(path.name))


class AppHandle:
    """One StreamingApp on a cluster, seen through the API and the shared data directory."""

    def __init__(self, api: client.ApiClient, namespace: str, data: Path, name: str = APP) -> None:
        self.namespace, self.data, self.name = namespace, data, name
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.input: ClickFiles | ClickTopic = ClickFiles(data / "input")

    def app(self) -> dict[str, Any]:
        """The StreamingApp as stored."""
        result: Any = self.custom.get_namespaced_custom_object(
            models.GROUP, models.VERSION, self.namespace, models.APP_PLURAL, self.name
        )
        return dict(result)

    def status(self) -> dict[str, Any]:
        """Its status (empty until the operator writes one)."""
        return dict(self.app().get("status") or {})

    def patch_spec(self, spec: dict[str, Any]) -> None:
        """Merge-patch its spec."""
        self.custom.patch_namespaced_custom_object(
            models.GROUP, models.VERSION, self.namespace, models.APP_PLURAL, self.name, {"spec": spec}
        )

    def pods(self, role: str) -> list[Any]:
        """Its driver or executor pods."""
        label = f"{names.APP}={self.name},{names.ROLE}={role}"
        return list(self.core.list_namespaced_pod(self.namespace, label_selector=label).items)

    def running(self, role: str) -> list[Any]:
        """Its running pods of a role that are not being deleted."""
        return [
            pod for pod in self.pods(role) if pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None
        ]

    def commits(self) -> list[Path]:
        """Committed batches of every query of every run, oldest first (those Spark has not purged)."""
        return [path for _, path in modified(self.data.glob("state/**/commits/[0-9]*"))]

    def commit_times_after(self, moment: float) -> list[float]:
        """When each batch committed after a wall-clock time was committed, oldest first."""
        return [stamp for stamp, _ in modified(self.data.glob("state/**/commits/[0-9]*")) if stamp > moment]

    def commits_after(self, moment: float) -> list[Path]:
        """Batches committed after a wall-clock time."""
        return [path for stamp, path in modified(self.data.glob("state/**/commits/[0-9]*")) if stamp > moment]

    def local_path(self, uri: str) -> Path:
        """Where a state URI of the app lies on this machine: a file:// path as it is; an s3a:// key in the bucket's
        directory, which `data/state` links into (``<bucket dir>/<namespace>/state``)."""
        parsed = urlparse(uri)
        if parsed.scheme != "s3a":
            return Path(parsed.path)
        return (self.data / "state").resolve().parents[1] / parsed.path.lstrip("/")

    def run_checkpoint(self) -> Path | None:
        """The local directory of the current run's checkpoint (from status.run.checkpointDir)."""
        run = self.status().get("run") or {}
        return self.local_path(run["checkpointDir"]) if run.get("checkpointDir") else None

    def driver_commits(self) -> list[Path]:
        """Batches the current driver committed: in its run's checkpoint, written after its pod started, and not
        copied there from the savepoint it restored (an offline repartition's batch counts)."""
        run = self.status().get("run") or {}
        checkpoint = self.run_checkpoint()
        if not run.get("driverPod") or checkpoint is None:
            return []
        try:
            pod = self.core.read_namespaced_pod(run["driverPod"], self.namespace)
        except client.ApiException:
            return []
        start_time = pod.status.start_time if pod.status is not None else None
        if start_time is None:
            return []
        started = start_time.timestamp()
        copied: set[tuple[str, str]] = set()
        if run.get("restoredFrom"):  # the restore copies the savepoint's commits into the run first
            savepoint = self.local_path(run["restoredFrom"])
            copied = {(path.parents[1].name, path.name) for path in query_log(savepoint, "commits")}
        return [
            path
            for stamp, path in modified(query_log(checkpoint, "commits"))
            if stamp > started and (path.parents[1].name, path.name) not in copied
        ]

    def first_commit_of_new_driver(self, moment: float, old_driver: str, timeout: float = 900) -> float:
        """Seconds from `moment` (wall clock) to the first batch committed by a driver other than `old_driver`.
        Counted: commits after `moment`, after the new driver's pod started (`driver_commits`), and after the status
        first named it (less one poll). A promoted warm standby started long before `moment`, so the old driver's
        commits since then were counted as its own (the node-fault bench's standby runs came out negative); the
        operator names it only once the old driver is fenced, and it commits seconds after its promotion."""
        named: list[float] = []

        def committed() -> list[float]:
            run = self.status().get("run") or {}
            if run.get("driverPod") in (None, old_driver):
                return []
            if not named:
                named.append(time.time() - 1.0)  # seen up to one poll after the status was written
            since = max(moment, named[0])
            return [stamp for stamp, _ in modified(self.driver_commits()) if stamp > since]

        return min(self.wait(committed, timeout, "a batch by the new driver")) - moment

    def first_batch_events(self) -> list[str]:
        """The operator's FirstBatch events in its namespace (where each attempt's start-up went), oldest first."""
        events = self.core.list_namespaced_event(self.namespace, field_selector="reason=FirstBatch").items
        return [str(event.message) for event in sorted(events, key=lambda event: str(event.last_timestamp))]

    def diagnostics(self) -> str:
        """Status, events, the operator's log and the tail of each pod's log, for failure messages."""
        status = {key: value for key, value in self.status().items() if not key.startswith("last")}
        lines = [json.dumps(status, indent=1)[:4000], "--- events"]
        events = self.core.list_namespaced_event(self.namespace).items
        for event in sorted(events, key=lambda item: str(item.last_timestamp or item.event_time)):
            lines.append(
                f"{event.last_timestamp} {event.type} {event.reason} {event.involved_object.name}: {event.message}"
            )
        operators: list[Any] = self.core.list_namespaced_pod(OPERATOR_NAMESPACE).items
        for operator in operators:
            lines.append(f"--- operator {operator.metadata.name}")
            log = self.core.read_namespaced_pod_log(operator.metadata.name, OPERATOR_NAMESPACE, tail_lines=80)
            lines.append("\n".join(line for line in log.splitlines() if "urllib3" not in line))
        for pod in self.pods(names.ROLE_DRIVER) + self.pods(names.ROLE_EXECUTOR):
            ended = [
                f"{state.reason} exit {state.exit_code}: {(state.message or '').strip()[:300]}"
                for state in (container.state.terminated for container in pod.status.container_statuses or [])
                if state is not None
            ]
            deleting = f", deleting since {pod.metadata.deletion_timestamp}" if pod.metadata.deletion_timestamp else ""
            lines.append(f"--- {pod.metadata.name} on {pod.spec.node_name}: {pod.status.phase}{deleting} {ended or ''}")
            try:
                log = self.core.read_namespaced_pod_log(pod.metadata.name, self.namespace, tail_lines=60)
                lines.append("\n".join(line for line in log.splitlines() if not line.startswith("\tat ")))
            except client.ApiException as error:
                lines.append(f"(no log: {error.reason})")
        try:
            kept = self.core.read_namespaced_config_map(names.driver_log(self.name), self.namespace).data or {}
            for key, text in kept.items():
                lines.append(f"--- the last ended driver's log ({key})\n{text[-4000:]}")
        except client.ApiException as error:
            lines.append(f"(no kept driver log: {error.reason})")
        return "\n".join(lines)

    def wait(self, check: Callable[[], T | None], timeout: float, what: str) -> T:
        """Poll `check` every second until truthy; raise with diagnostics after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(1)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{self.diagnostics()}")

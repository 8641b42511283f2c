"""The windowed-counts example on a real cluster: real Spark drivers and executors in real pods.

One app run, in steps: it runs its driver and executors as pods and commits batches; its driver pod
is deleted and it recovers from the checkpoint; an executor pod is deleted and the job carries on;
the sink then holds every input event exactly once; deleting the app removes everything it owned.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from headrace.api import models, names

from .conftest import E2E, REPO

pytestmark = pytest.mark.e2e

APP = "windowed-counts"
BASE = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
EVENTS_PER_FILE = 120
PAGES = ["/", "/pricing", "/docs/start", "/blog/launch", "/signup"]


def _event(number: int) -> dict[str, Any]:
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


class Input:
    """Writes JSON-lines files atomically with distinct increasing modification times."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.files = 0
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def write(self, events: list[dict[str, Any]]) -> None:
        with self.lock:
            name = f"part-{self.files:05d}.json"
            hidden = self.directory / f".{name}.tmp"
            hidden.write_text("".join(json.dumps(event) + "\n" for event in events))
            stamp = time.time() + self.files * 0.001
            os.utime(hidden, (stamp, stamp))
            hidden.rename(self.directory / name)
            self.files += 1
            self.events += events

    def next_file(self) -> None:
        first = len(self.events)
        self.write([_event(number) for number in range(first, first + EVENTS_PER_FILE)])


def _manifest(data_dir: Path) -> dict[str, Any]:
    """The example's own streamingapp.yaml, pointed at files on a hostPath shared with the test."""
    manifest: dict[str, Any] = yaml.safe_load((REPO / "apps" / APP / "streamingapp.yaml").read_text())
    manifest["metadata"].pop("namespace", None)
    spec = manifest["spec"]
    spec["application"]["args"] = [
        "--source", "files", "--input", "/data/input", "--output", "file:///data/output",
        "--trigger-seconds", "2", "--window", "1 minute", "--watermark", "30 seconds",
    ]  # fmt: skip
    spec["state"].update({"checkpointDir": "file:///data/state", "savepointDir": "file:///data/savepoints"})
    spec["volumes"] = [{"name": "data", "hostPath": {"path": str(data_dir), "type": "Directory"}}]
    spec["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    spec["driver"] = {"cores": 1, "memory": "768m", "coreRequest": "250m"}
    spec["executor"] = {"instances": 1, "cores": 1, "memory": "768m", "coreRequest": "250m"}
    spec["upgradeMode"] = "last-state"
    spec["savepoints"] = {"retain": 2}
    return manifest


class Deployed:
    """The running example and what the steps share."""

    def __init__(self, e2e: E2E, namespace: str) -> None:
        self.e2e, self.namespace = e2e, namespace
        self.data = e2e.data_root / namespace
        for sub in ("input", "output", "state", "savepoints"):
            (self.data / sub).mkdir(parents=True, exist_ok=True)
            (self.data / sub).chmod(0o777)
        self.data.chmod(0o777)
        self.input = Input(self.data / "input")
        self.api = e2e.api_client()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def app(self) -> dict[str, Any]:
        result: dict[str, Any] = self.custom.get_namespaced_custom_object(
            models.GROUP, models.VERSION, self.namespace, models.APP_PLURAL, APP
        )
        return result

    def pods(self, role: str) -> list[client.V1Pod]:
        label = f"{names.APP}={APP},{names.ROLE}={role}"
        return list(self.core.list_namespaced_pod(self.namespace, label_selector=label).items)

    def running(self, role: str) -> list[client.V1Pod]:
        return [
            pod for pod in self.pods(role) if pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None
        ]

    def commits(self) -> list[Path]:
        return sorted(self.data.glob("state/**/commits/[0-9]*"), key=lambda path: path.stat().st_mtime)

    def commits_after(self, moment: float) -> list[Path]:
        return [path for path in self.commits() if path.stat().st_mtime > moment]

    def diagnostics(self) -> str:
        lines = [json.dumps(self.app().get("status", {}), indent=1)[:3000]]
        for pod in self.pods(names.ROLE_DRIVER) + self.pods(names.ROLE_EXECUTOR):
            lines.append(f"{pod.metadata.name}: {pod.status.phase}")
            try:
                lines.append(self.core.read_namespaced_pod_log(pod.metadata.name, self.namespace, tail_lines=40))
            except client.ApiException as error:
                lines.append(f"(no log: {error.reason})")
        return "\n".join(lines)

    def wait(self, check: Any, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(1)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{self.diagnostics()}")


@pytest.fixture(scope="module")
def deployed(e2e: E2E) -> Iterator[Deployed]:
    from headrace.testbed.controlplane import create_namespace, delete_namespace

    with e2e.api_client() as api:
        namespace = create_namespace(api)
    state = Deployed(e2e, namespace)
    try:
        for _ in range(5):
            state.input.next_file()
        manifest_path = state.data / "streamingapp.yaml"
        manifest_path.write_text(yaml.safe_dump(_manifest(state.data)))
        e2e.kubectl("apply", "-n", namespace, "-f", str(manifest_path))
        yield state
    finally:
        with e2e.api_client() as api:
            delete_namespace(api, namespace)


def test_driver_and_executors_run_as_pods_and_commit_batches(deployed: Deployed) -> None:
    started = time.monotonic()
    deployed.wait(lambda: deployed.running(names.ROLE_DRIVER), 300, "the driver pod to run")
    deployed.wait(lambda: deployed.app().get("status", {}).get("phase") == "Running", 60, "phase Running")
    deployed.wait(lambda: deployed.running(names.ROLE_EXECUTOR), 300, "an executor pod to run")
    deployed.wait(deployed.commits, 300, "the first committed batch")
    print(f"apply -> first committed batch: {time.monotonic() - started:.1f}s")
    table = deployed.e2e.kubectl("get", "sapp", "-n", deployed.namespace)
    assert "Running" in table


def test_driver_deleted_recovers_from_checkpoint(deployed: Deployed) -> None:
    writer_stop = threading.Event()

    def keep_writing() -> None:
        while not writer_stop.wait(1.5):
            deployed.input.next_file()

    writer = threading.Thread(target=keep_writing, daemon=True)
    writer.start()
    try:
        old = deployed.running(names.ROLE_DRIVER)[0]
        deleted_at = time.time()
        clock = time.monotonic()
        deployed.core.delete_namespaced_pod(old.metadata.name, deployed.namespace)
        new = deployed.wait(
            lambda: [pod for pod in deployed.running(names.ROLE_DRIVER) if pod.metadata.name != old.metadata.name],
            300,
            "a new driver attempt",
        )[0]
        assert new.metadata.labels[names.ATTEMPT] == str(int(old.metadata.labels[names.ATTEMPT]) + 1)
        assert new.metadata.labels[names.RUN] == old.metadata.labels[names.RUN]
        deployed.wait(lambda: deployed.commits_after(deleted_at + 1), 300, "a batch committed by the new driver")
        print(f"driver deleted -> first batch committed by the new driver: {time.monotonic() - clock:.1f}s")
        status = deployed.app()["status"]
        assert status["restarts"]["total"] >= 1
    finally:
        writer_stop.set()
        writer.join()


def test_executor_deleted_job_carries_on(deployed: Deployed) -> None:
    executor = deployed.wait(lambda: deployed.running(names.ROLE_EXECUTOR), 300, "an executor")[0]
    deleted_at = time.time()
    deployed.core.delete_namespaced_pod(executor.metadata.name, deployed.namespace)
    deployed.wait(
        lambda: [pod for pod in deployed.running(names.ROLE_EXECUTOR) if pod.metadata.name != executor.metadata.name],
        300,
        "a replacement executor",
    )
    deployed.input.next_file()
    deployed.wait(lambda: deployed.commits_after(deleted_at + 1), 300, "a batch after the executor loss")
    assert deployed.running(names.ROLE_DRIVER), "the driver must survive an executor loss"


def _expected(events: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    counts: Counter[tuple[str, str]] = Counter()
    for event in events:
        moment = datetime.strptime(event["event_time"], "%Y-%m-%dT%H:%M:%S.%fZ")
        window = moment.replace(second=0, microsecond=0).strftime("%Y-%m-%d %H:%M:%S")
        counts[(window, event["url"].split("?")[0])] += 1
    return counts


def test_sink_holds_every_event_exactly_once(deployed: Deployed) -> None:
    from pyspark.sql import SparkSession

    expected = _expected(deployed.input.events)
    flush = _event(10_000_000)  # far in event time: moves the watermark past every window
    deployed.input.write([flush])
    spark = SparkSession.builder.master("local[1]").config("spark.sql.session.timeZone", "UTC").getOrCreate()
    try:

        def actual() -> Counter[tuple[str, str]] | None:
            rows = spark.read.parquet(str(deployed.data / "output" / "tumbling")).collect()
            seen: Counter[tuple[str, str]] = Counter()
            for row in rows:
                key = (row.window_start.strftime("%Y-%m-%d %H:%M:%S"), row.page)
                assert key not in seen, f"window {key} emitted twice"
                seen[key] = row.views
            return seen if set(seen) >= set(expected) else None

        result = deployed.wait(actual, 300, "every window in the sink")
    finally:
        spark.stop()
    assert {key: result[key] for key in expected} == dict(expected)
    assert sum(expected.values()) == len(deployed.input.events) - 1


def test_deleting_the_app_removes_everything_it_owned(deployed: Deployed) -> None:
    deployed.e2e.kubectl("delete", "sapp", APP, "-n", deployed.namespace, "--wait=true")
    selector = f"{names.APP}={APP}"

    def leftovers() -> list[str]:
        found = [pod.metadata.name for pod in deployed.core.list_namespaced_pod(deployed.namespace).items]
        found += [
            s.metadata.name
            for s in deployed.core.list_namespaced_service(deployed.namespace, label_selector=selector).items
        ]
        found += [
            c.metadata.name
            for c in deployed.core.list_namespaced_config_map(deployed.namespace, label_selector=selector).items
        ]
        return found

    deployed.wait(lambda: not leftovers(), 180, "pods, services and configmaps to be collected")

"""A driver stand-in at the unit boundary, and a kubelet that runs one for each driver pod of an app.

The operator talks to a driver at `https://<pod IP>:<DEFAULT_CONTROL_PORT>` with the token and the
certificate it put in the app's Secret. Here the runtime's real `ControlServer` (routing, bearer-token check) serves
`ScriptedDriver`: one query whose batches advance, savepoints that record the request and return
a record shaped like the runtime's, stop-with-savepoint after which the pod terminates with the
runtime's termination message, rescale, and savepoint disposal through the runtime's own
`dispose_savepoint` (its path checks) on `LocalStore`, a local directory standing in for the bucket
(given `storage`, savepoints are written there as a directory with the metadata file).

`Kubelet` plays the node for one app: each new driver pod gets a stand-in on a loopback address
of its own (127.x.y.z, so parallel sessions, and a standby beside its driver, never share a port), built from the
pod's resolved
environment (token, run, attempt, restore source), mounted Spark configuration and mounted control
certificate and key (served over TLS), and is
reported Running with that pod IP. A stopped driver exits `exit_delay` seconds after its answer
(a real driver needs a few seconds to shut Spark down) and its pod is reported terminated
`report_delay` seconds later (the kubelet notices exits periodically); a deleted pod's stand-in stops.
It also records the most driver pods it ever saw live at once.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import secrets
import shutil
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from headrace.api import runtime_contract as contract
from headrace.core.timefmt import format_time
from headrace.runtime import termination
from headrace.runtime.control import ActionError, ControlServer, server_context
from headrace.runtime.savepoint import SavepointError, dispose_savepoint

from .kube import (
    container_env,
    driver_pods,
    live_driver_pods,
    mounted_secret_files,
    mounted_spark_defaults,
    set_pod_running,
    set_pod_terminated,
)

POLL_SECONDS = 0.05


@dataclass(frozen=True)
class Request:
    """One control request a driver received (`kind`: savepoint, stop, rescale, promote, dispose), or its start."""

    pod: str
    kind: str
    path: str | None = None
    executors: int | None = None


class LocalStore:
    """`<scheme>://<bucket>/<key>` as files below a local directory; qualifies URIs as Hadoop does (normalised)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def qualify(self, uri: str) -> str:
        split = urlsplit(uri)
        return f"{split.scheme}://{split.netloc}{posixpath.normpath(split.path or '/')}"

    def local(self, uri: str) -> Path:
        split = urlsplit(self.qualify(uri))
        return self.root / split.netloc / split.path.lstrip("/")

    def exists(self, uri: str) -> bool:
        return self.local(uri).exists()

    def delete(self, uri: str) -> None:
        shutil.rmtree(self.local(uri))


class ScriptedDriver:
    """The control actions of one driver process, scripted (the `ControlActions` the server calls)."""

    def __init__(self, pod: str, env: dict[str, str], executors: int | None, requests: list[Request]) -> None:
        self.pod = pod
        self.env = env
        self.requests = requests
        self.phase: contract.RuntimePhase = "Standby" if env.get(contract.ENV_STANDBY) == "true" else "Running"
        self.promoted = False  # a standby that was promoted
        self.batch = 0
        self.requested_executors = executors
        self.registered_executors: int | None = None  # fewer than requested: Spark removed a lost executor
        self.last_savepoint: contract.LastSavepoint | None = None
        self.exit_due: float | None = None  # monotonic time at which the process exits
        self.exit_delay = 0.0
        self.savepoint_delay = 0.0  # seconds a savepoint takes (the driver copying), phase Savepointing meanwhile
        self.exit_reported = False
        self.store: LocalStore | None = None  # where savepoints are written and disposed of
        self._lock = threading.Lock()

    def status(self) -> contract.StatusDocument:
        with self._lock:
            if self.phase == "Running":
                self.batch += 1
            now = format_time(datetime.now(UTC))
            query = {
                "key": "counts",
                "id": f"{self.pod}-counts",
                "name": "counts",
                "checkpoint": f"{self.env[contract.ENV_CHECKPOINT_DIR]}/counts",
                "managedCheckpoint": True,
                "active": self.phase == "Running",
                "lastCommittedBatchId": self.batch,
                "lastCommittedAt": now,
                "progress": {
                    "batch_id": self.batch,
                    "input_rows_per_second": 10.0,
                    "processed_rows_per_second": 12.0,
                    "state_rows": 5,
                    "source_backlog": 0.0,
                    "committed_at": now,
                },
            }
            return {
                "app": {"name": self.env[contract.ENV_APP_NAME], "namespace": self.env[contract.ENV_APP_NAMESPACE]},
                "runId": self.env[contract.ENV_RUN_ID],
                "attempt": int(self.env[contract.ENV_ATTEMPT]),
                "mode": self.env.get(contract.ENV_MODE, "continuous"),
                "phase": self.phase,
                "atGate": self.phase == "Standby",
                "queries": [] if self.phase == "Standby" else [query],  # a standby waits before its first query
                "executors": {
                    "requested": self.requested_executors,
                    "registered": self.requested_executors
                    if self.registered_executors is None
                    else self.registered_executors,
                },
                "restoredFrom": self.env.get(contract.ENV_RESTORE_FROM),
                "lastSavepoint": self.last_savepoint,
            }

    def _snapshot(self, path: str | None, reason: str, *, stopped: bool) -> dict[str, Any]:
        if path is None:
            raise ActionError(HTTPStatus.BAD_REQUEST, "no 'path' given")
        now = format_time(datetime.now(UTC))
        record = {
            "formatVersion": 1,
            "path": path,
            "reason": reason,
            "stopped": stopped,
            "completedAt": now,
            "sizeBytes": 1234,
            "queries": [{"key": "counts", "batchId": self.batch, "files": 3, "bytes": 1234}],
        }
        self.last_savepoint = contract.LastSavepoint(path=path, completedAt=now, sizeBytes=1234, reason=reason)
        if self.store is not None:
            directory = self.store.local(path)
            (directory / "counts" / "offsets").mkdir(parents=True, exist_ok=True)
            (directory / contract.SAVEPOINT_METADATA_FILE).write_text(json.dumps(record))
        return record

    def savepoint(self, path: str | None, reason: str) -> dict[str, Any]:
        with self._lock:
            self.requests.append(Request(self.pod, "savepoint", path))
            if self.phase != "Running":
                raise ActionError(HTTPStatus.CONFLICT, "the job is stopping")
            if not self.savepoint_delay:
                return self._snapshot(path, reason, stopped=False)
            self.phase = "Savepointing"
        time.sleep(self.savepoint_delay)  # status calls are answered meanwhile
        with self._lock:
            self.phase = "Running"
            return self._snapshot(path, reason, stopped=False)

    def stop_with_savepoint(self, path: str | None, reason: str) -> dict[str, Any]:
        with self._lock:
            self.requests.append(Request(self.pod, "stop", path))
            if self.phase != "Running":
                raise ActionError(HTTPStatus.CONFLICT, "the job is stopping")
            self.phase = "Stopping"
            return self._snapshot(path, reason, stopped=True)

    def after_stop_response(self) -> None:
        with self._lock:
            self.exit_due = time.monotonic() + self.exit_delay

    def promote(self, restore_from: str | None = None, allow_repartition: bool = False) -> dict[str, Any]:
        with self._lock:
            self.requests.append(Request(self.pod, "promote", restore_from))
            waiting = self.phase == "Standby"
            if waiting:
                self.phase = "Running"
                self.promoted = True
            return {"promoted": waiting, "phase": self.phase}

    def dispose_savepoint(self, path: str) -> dict[str, Any]:
        with self._lock:
            self.requests.append(Request(self.pod, "dispose", path))
            if self.store is None:
                raise ActionError(HTTPStatus.CONFLICT, "no storage")
            try:
                return dispose_savepoint(self.store, self.env.get(contract.ENV_SAVEPOINT_DIR), path)  # type: ignore[arg-type]
            except SavepointError as error:
                raise ActionError(HTTPStatus.BAD_REQUEST, str(error)) from None

    def rescale(self, executors: int) -> dict[str, Any]:
        with self._lock:
            self.requests.append(Request(self.pod, "rescale", executors=executors))
            self.requested_executors = executors
            return {"requested": executors, "killed": [], "executors": {"requested": executors}}


def _loopback_address() -> str:
    """A 127.x.y.z address whose control port is free (all of 127/8 is loopback on Linux)."""
    for _ in range(50):
        address = f"127.{1 + secrets.randbelow(254)}.{secrets.randbelow(255)}.{1 + secrets.randbelow(254)}"
        with socket.socket() as probe:
            try:
                probe.bind((address, contract.DEFAULT_CONTROL_PORT))
            except OSError:
                continue
        return address
    raise RuntimeError("no free loopback address for the driver stand-in")


class Kubelet:
    """Runs a `ScriptedDriver` for each driver pod of one app, from a background thread."""

    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        app: str,
        *,
        exit_delay: float = 0.0,
        report_delay: float = 0.0,
        savepoint_delay: float = 0.0,
        storage: Path | None = None,
        never_start: Callable[[Any], bool] = lambda pod: False,
    ) -> None:
        self.api = api
        self.never_start = never_start  # pods it leaves Pending (as if their image could not be pulled)
        self.store = LocalStore(storage) if storage is not None else None
        self.savepoint_delay = savepoint_delay
        self.namespace = namespace
        self.app = app
        self.exit_delay = exit_delay
        self.report_delay = report_delay
        self.requests: list[Request] = []
        self.drivers: dict[str, ScriptedDriver] = {}
        self.tls: dict[str, bool] = {}  # pod -> whether its stand-in served the control endpoint over TLS
        self.max_live = 0
        self.live_seen: list[list[str]] = []  # every sample with more than one live driver
        self.live_at_promotion: dict[str, list[str]] = {}  # promoted standby -> the live driver pods seen just after
        self.errors: list[BaseException] = []
        self._servers: dict[str, ControlServer] = {}  # pod -> its stand-in's endpoint, on an address of its own
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"kubelet-{app}", daemon=True)

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for pod in list(self._servers):
            self._stop_server(pod)
        if self.errors:
            raise AssertionError(f"the stand-in kubelet failed: {self.errors[0]!r}") from self.errors[0]

    def freeze(self, pod: str) -> None:
        """The driver stops answering (SIGSTOP): its endpoint is gone, its pod stays Running."""
        self._stop_server(pod)

    def requests_of(self, pod: str, kind: str) -> list[Request]:
        """The control requests of one kind a driver received."""
        return [request for request in list(self.requests) if request.pod == pod and request.kind == kind]

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except Exception as error:  # reported when the test leaves the context
                self.errors.append(error)
                return
            self._stop.wait(POLL_SECONDS)

    def _step(self) -> None:
        promoted = [name for name, driver in self.drivers.items() if driver.promoted]
        live = [pod.metadata.name for pod in live_driver_pods(self.api, self.namespace, self.app)]
        for name in promoted:  # listed after the promotion was seen
            self.live_at_promotion.setdefault(name, live)
        self.max_live = max(self.max_live, len(live))
        if len(live) > 1:
            self.live_seen.append(live)
        pods = {pod.metadata.name: pod for pod in driver_pods(self.api, self.namespace, self.app)}
        for name in list(self._servers):
            serving = pods.get(name)
            if serving is None or serving.metadata.deletion_timestamp is not None:
                self._stop_server(name)  # the pod was deleted: its process is gone
        for driver in self.drivers.values():
            self._maybe_exit(driver, pods.get(driver.pod))
        for name, pod in pods.items():
            if name not in self.drivers and pod.metadata.deletion_timestamp is None and not self.never_start(pod):
                self._start(pod)

    def _start(self, pod: Any) -> None:
        env = container_env(self.api, self.namespace, pod)
        instances = mounted_spark_defaults(self.api, self.namespace, pod).get("spark.executor.instances")
        driver = ScriptedDriver(pod.metadata.name, env, int(instances) if instances else None, self.requests)
        driver.exit_delay = self.exit_delay
        driver.savepoint_delay = self.savepoint_delay
        driver.store = self.store
        self.drivers[pod.metadata.name] = driver
        self.requests.append(Request(pod.metadata.name, "start"))  # not a request: when its process started
        tls = self._tls(env, pod)
        self.tls[pod.metadata.name] = tls is not None
        address = _loopback_address()
        server = ControlServer(driver, env[contract.ENV_CONTROL_TOKEN], address, contract.DEFAULT_CONTROL_PORT, tls=tls)
        server.start()
        self._servers[pod.metadata.name] = server
        with contextlib.suppress(ApiException):  # deleted meanwhile: the next step stops the stand-in
            set_pod_running(self.api, self.namespace, pod.metadata.name, ip=address)

    def _tls(self, env: dict[str, str], pod: Any) -> ssl.SSLContext | None:
        """The runtime's TLS settings from the certificate and key the pod mounts (files written as the kubelet
        would), when its environment names their directory."""
        directory = env.get(contract.ENV_CONTROL_TLS_DIR)
        if directory is None:
            return None
        with tempfile.TemporaryDirectory(prefix="headrace-standin-tls-") as files:
            for name, content in mounted_secret_files(self.api, self.namespace, pod, directory).items():
                Path(files, name).write_text(content)
            return server_context(files)

    def _maybe_exit(self, driver: ScriptedDriver, pod: Any) -> None:
        """After stop-with-savepoint the runtime exits 0 with a termination message naming the savepoint;
        the kubelet reports it `report_delay` seconds later."""
        if driver.exit_due is None or driver.exit_reported or time.monotonic() < driver.exit_due:
            return
        self._stop_server(driver.pod)  # the process exited: its port is closed
        if time.monotonic() < driver.exit_due + self.report_delay or driver.last_savepoint is None:
            return
        driver.exit_reported = True
        if pod is None or pod.metadata.deletion_timestamp is not None:
            return
        outcome = termination.stopped_with_savepoint(driver.last_savepoint["path"])
        with contextlib.suppress(ApiException):  # the pod may be gone already
            set_pod_terminated(self.api, self.namespace, driver.pod, outcome.exit_code, outcome.to_json())

    def _stop_server(self, pod: str) -> None:
        server = self._servers.pop(pod, None)
        if server is not None:
            server.stop()

"""Run the real operator (`python -m headrace`) as a child process against a cluster, and install CRDs.

Owns: the operator's process (its own group, log file, free ports for metrics and health), killing
it hard or stopping it, and applying the generated CRDs (waiting until they are established).
Never: reaches into the operator's internals; tests see it only through the Kubernetes API.
"""

from __future__ import annotations

import os
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from headrace.api import crd
from testbed import procs

START_TIMEOUT_SECONDS = 60.0
START_ATTEMPTS = 3
HTTP_CONFLICT = 409


def install_crds(api: ApiClient, timeout_seconds: float = 30.0) -> None:
    """Create or replace the Headrace CRDs and wait until the API server serves them."""
    extensions = client.ApiextensionsV1Api(api)
    manifests: dict[str, Any] = crd.all_crds()
    for manifest in manifests.values():
        name = manifest["metadata"]["name"]
        try:
            extensions.create_custom_resource_definition(manifest)
        except ApiException as error:
            if error.status != HTTP_CONFLICT:
                raise
            current: Any = extensions.read_custom_resource_definition(name)
            version = current.metadata.resource_version
            replacement: Any = {**manifest, "metadata": {**manifest["metadata"], "resourceVersion": version}}
            extensions.replace_custom_resource_definition(name, replacement)
        _wait_established(extensions, name, timeout_seconds)


def _wait_established(extensions: Any, name: str, timeout_seconds: float) -> None:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        status = extensions.read_custom_resource_definition(name).status
        conditions = {condition.type: condition.status for condition in (status.conditions or [])}
        if conditions.get("Established") == "True":
            return
        time.sleep(0.2)
    raise TimeoutError(f"CRD {name} not established within {timeout_seconds}s")


class OperatorProcess:
    """The operator as a child process; `kill()` is SIGKILL (a crash), `stop()` is a clean stop."""

    def __init__(
        self, kubeconfig: Path, workdir: Path, env: dict[str, str] | None = None, *, verbose: bool = True
    ) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.extra_env = env or {}
        self.verbose = verbose
        self.metrics_port = procs.free_port()
        self.health_port = procs.free_port()
        self.process: procs.Process | None = None
        self.starts = 0

    @property
    def log_path(self) -> Path:
        """Where the operator writes its log (appended across restarts)."""
        return self.workdir / "operator.log"

    def start(self) -> OperatorProcess:
        """Start it and wait until its health endpoint answers.

        If its metrics or health port was taken between `free_port`'s probe and the operator's bind, it
        starts again on new ports (only then: any other exit, a failpoint's included, is raised)."""
        for attempt in range(1, START_ATTEMPTS + 1):
            logged = self.log_path.stat().st_size if self.log_path.exists() else 0
            try:
                return self._start_once()
            except procs.ProcessFailedError:
                if attempt == START_ATTEMPTS or not self._lost_a_port(logged):
                    raise
            self.metrics_port, self.health_port = procs.free_port(), procs.free_port()
        raise AssertionError("unreachable")

    def _lost_a_port(self, logged: int) -> bool:
        """True if the process exited with a bind conflict written after the log's first `logged` bytes."""
        if self.process is None or self.process.alive():
            return False
        with self.log_path.open("rb") as log:
            log.seek(logged)
            return procs.bind_conflict(log.read().decode(errors="replace"))

    def _start_once(self) -> OperatorProcess:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "HEADRACE_METRICS_PORT": str(self.metrics_port),
            "HEADRACE_HEALTH_PORT": str(self.health_port),
            **self.extra_env,
        }
        self.workdir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "headrace", *(["--verbose"] if self.verbose else [])]
        self.process = procs.spawn("operator", command, self.log_path, env)
        self.starts += 1
        procs.wait_until_healthy(
            self.process, self._healthy, timeout_seconds=START_TIMEOUT_SECONDS, interval_seconds=0.2
        )
        return self

    def _healthy(self) -> bool:
        return _http_ok(f"http://127.0.0.1:{self.health_port}/healthz")

    def metrics(self) -> str:
        """The text of the operator's /metrics."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            return str(response.read().decode())

    def kill(self) -> None:
        """SIGKILL: the operator dies wherever it is."""
        if self.process is not None:
            procs.stop(self.process, grace_seconds=0)
            self.process = None

    def stop(self) -> None:
        """Stop cleanly (SIGTERM, then SIGKILL after a grace period)."""
        if self.process is not None:
            procs.stop(self.process, grace_seconds=10)
            self.process = None

    def __enter__(self) -> OperatorProcess:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - loopback
            return bool(response.status == 200)
    except OSError:
        return False

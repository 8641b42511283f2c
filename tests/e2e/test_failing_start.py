"""Apps that fail at every start, on the real cluster: Degraded StartupFailing with the error, and Degraded to the
chart's Argo CD health check on the real status.

Two copies of the example, each failing in its own way before it can commit anything: one with an argument its
argparse refuses (the script exits with 2), one with an executor JVM option Spark itself refuses
(``-Xmx`` in spark.executor.extraJavaOptions: INVALID_SPARK_CONFIG when the SparkContext starts). The shipped Lua
runs, in Argo CD's sandbox (tests/gitops/lua.py), on the status the real operator wrote. With
HEADRACE_RECORD_STATUSES=DIR the statuses are written there as JSON (how tests/gitops/recorded/ was made).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from headrace.api import names
from testbed import scenario
from testbed.controlplane import create_namespace, delete_namespace
from tests.gitops.lua import assess
from tests.gitops.recording import record_status

from .conftest import E2E

pytestmark = pytest.mark.e2e

LUA = Path(__file__).resolve().parents[2] / "charts" / "headrace" / "argocd" / "streamingapp.lua"
FAST_RESTARTS = {"backoff": {"initialSeconds": 2, "maxSeconds": 4}}


@pytest.fixture(scope="module")
def failing(e2e: E2E) -> Iterator[dict[str, scenario.AppHandle]]:
    with e2e.api_client() as api:
        namespace = create_namespace(api)
        data = scenario.prepare_data_dir(e2e.data_root, namespace)
        handles = {}
        try:
            for name, change in (("bad-args", _bad_args), ("bad-conf", _bad_conf)):
                manifest = scenario.windowed_counts_manifest(data, restartPolicy=FAST_RESTARTS)
                manifest["metadata"]["name"] = name
                change(manifest["spec"])
                e2e.apply(namespace, data / f"{name}.yaml", manifest)
                handles[name] = scenario.AppHandle(api, namespace, data, name=name)
            yield handles
        finally:
            delete_namespace(api, namespace)


def _bad_args(spec: dict[str, Any]) -> None:
    spec["application"]["args"] = [*spec["application"]["args"], "--no-such-option"]


def _bad_conf(spec: dict[str, Any]) -> None:
    spec["sparkConf"] = {**spec.get("sparkConf", {}), "spark.executor.extraJavaOptions": "-Xmx1g"}


def _startup_failing(app: scenario.AppHandle) -> dict[str, Any] | None:
    conditions = app.status().get("conditions") or []
    degraded = next((c for c in conditions if c["type"] == "Degraded"), None)
    return degraded if degraded and degraded["reason"] == "StartupFailing" else None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("bad-args", "the script exited with 2"),
        ("bad-conf", "INVALID_SPARK_CONFIG"),
    ],
)
def test_an_app_failing_at_start_is_startup_failing_and_degraded_to_argo_cd(
    failing: dict[str, scenario.AppHandle], name: str, expected: str, tmp_path: Path
) -> None:
    app = failing[name]
    degraded = app.wait(lambda: _startup_failing(app), 300, f"{name}: Degraded StartupFailing")
    assert expected in degraded["message"], degraded
    assert "restarting cannot fix this" in degraded["message"], degraded
    status = app.status()
    assert status["restarts"]["startupFailures"] >= 1, status["restarts"]
    resource = record_status(app.app(), f"{name}-{status.get('phase', 'none').lower()}")
    health, message = assess(LUA, resource, tmp_path, now=datetime.now(UTC))
    assert health == "Degraded" and "StartupFailing" in message, (health, message)

    def failed_events() -> list[str] | None:
        events = app.core.list_namespaced_event(app.namespace, field_selector=f"involvedObject.name={name}").items
        failed = [str(event.message) for event in events if event.reason == "DriverFailed"]
        return failed if any(expected in message for message in failed) else None

    failed = app.wait(failed_events, 60, f"{name}: a DriverFailed event naming {expected}")
    assert all(len(message) <= 1024 for message in failed)
    print(f"{name}: {degraded['message'][:300]}\nDriverFailed event: {failed[-1][:600]}")


def test_logs_previous_shows_the_crashed_attempts_log(e2e: E2E, failing: dict[str, scenario.AppHandle]) -> None:
    """A later attempt's start deleted the crashed driver's pod; the operator kept its log's tail first, and
    `headrace logs --previous` prints it (the script's own argparse error)."""
    app = failing["bad-args"]

    def kept() -> dict[str, str] | None:
        try:
            data = app.core.read_namespaced_config_map(names.driver_log(app.name), app.namespace).data
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return dict(data) if data else None

    log = app.wait(kept, 300, "the kept log of the crashed driver")
    assert "unrecognized arguments: --no-such-option" in log["log"], log["log"][-2000:]
    command = [sys.executable, "-m", "headrace.cli", "logs", app.name, "--previous", "-n", app.namespace]
    shown = subprocess.run(
        [*command, "--kubeconfig", str(e2e.kubeconfig)], capture_output=True, text=True, timeout=60, check=False
    )
    assert shown.returncode == 0, shown.stderr
    assert "unrecognized arguments: --no-such-option" in shown.stdout, shown.stdout[-2000:]
    print(f"headrace logs --previous: {shown.stderr.strip()}")

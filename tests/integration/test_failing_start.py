"""An app failing at every start, with the real operator against the real API server: Degraded StartupFailing from
the first failure no restart heals, kept while the next (doomed) driver runs, and Degraded to the chart's Argo CD
health check on each status the operator wrote. The driver's failure is what the real runtime reports for a script
refusing its arguments (tests/runtime/test_failing_start.py); the kubelet's part is the test's.

With HEADRACE_RECORD_STATUSES=DIR the statuses are written there as JSON (tests/gitops/recorded/README.md).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes.client import ApiClient

from testbed.operator_process import OperatorProcess
from tests.gitops.lua import assess
from tests.gitops.recording import record_status

from .kube import (
    app_manifest,
    condition,
    create_app,
    driver_pods,
    events_for,
    get_app,
    set_pod_failed,
    set_pod_running,
    wait_for,
)

LUA = Path(__file__).resolve().parents[2] / "charts" / "headrace" / "argocd" / "streamingapp.lua"
USAGE_EXIT = json.dumps({"reason": "ScriptExited", "message": "the script exited with 2"})


def _degraded_reason(app: dict[str, Any]) -> str | None:
    found = condition(app, "Degraded")
    return found.get("reason") if found else None


def test_a_usage_error_is_startup_failing_while_it_restarts_and_while_the_next_driver_runs(
    operator: OperatorProcess, api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    create_app(api, namespace, app_manifest("doomed"))
    first = wait_for(lambda: driver_pods(api, namespace, "doomed"), what="attempt 1")[0]
    set_pod_running(api, namespace, first.metadata.name)
    set_pod_failed(api, namespace, first.metadata.name, exit_code=1, message=USAGE_EXIT)

    def startup_failing() -> dict[str, Any] | None:
        app = get_app(api, namespace, "doomed")
        return app if _degraded_reason(app) == "StartupFailing" else None

    failing = wait_for(startup_failing, what="Degraded StartupFailing")
    message = condition(failing, "Degraded")["message"]
    assert "usage error" in message and "the script exited with 2" in message, message
    assert failing["status"]["restarts"]["startupFailures"] == 1
    health, said = assess(
        LUA, record_status(failing, "integration-usage-error-restarting"), tmp_path, now=datetime.now(UTC)
    )
    assert health == "Degraded" and "StartupFailing" in said, said

    def second_attempt() -> Any:
        return next(
            (pod for pod in driver_pods(api, namespace, "doomed") if pod.metadata.name.endswith("a2-driver")), None
        )

    second = wait_for(second_attempt, what="attempt 2")
    set_pod_running(api, namespace, second.metadata.name)

    def running_again() -> dict[str, Any] | None:
        app = get_app(api, namespace, "doomed")
        return app if app["status"].get("phase") == "Running" else None

    running = wait_for(running_again, what="attempt 2 Running")
    assert _degraded_reason(running) == "StartupFailing", running["status"]["conditions"]
    health, said = assess(
        LUA, record_status(running, "integration-usage-error-running"), tmp_path, now=datetime.now(UTC)
    )
    assert health == "Degraded", said  # not Healthy while the next doomed driver runs

    failed_events = [event.message for event in events_for(api, namespace, "doomed") if event.reason == "DriverFailed"]
    assert failed_events and "the script exited with 2" in failed_events[0], failed_events

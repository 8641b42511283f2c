"""The Argo CD health checks of the chart, run by the real Lua interpreter on status fixtures.

Every fixture's status is validated against the operator's status models first, so the fixtures
have the shape the operator really writes; a second table takes statuses from the real planner.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from headrace.api.models import RestartPolicy, StreamingAppSpec, StreamingAppStatus, StreamingSavepointStatus
from headrace.core.observation import DriverPod, Observation
from headrace.core.planner import AppView, decide

from .lua import INTERPRETERS, NOW_DEFAULT, assess, to_lua

CHART = Path(__file__).resolve().parents[2] / "charts" / "headrace"
APP_SCRIPT = CHART / "argocd" / "streamingapp.lua"
SAVEPOINT_SCRIPT = CHART / "argocd" / "streamingsavepoint.lua"
NOW = "2026-11-21T12:00:00Z"


def condition(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": NOW}


def app(status: dict[str, Any] | None, generation: int = 3) -> dict[str, Any]:
    resource: dict[str, Any] = {
        "apiVersion": "headrace.dev/v1alpha1",
        "kind": "StreamingApp",
        "metadata": {"name": "clicks", "namespace": "analytics", "generation": generation},
        "spec": {"image": "x", "application": {"file": "/app.py"}, "state": {"checkpointDir": "s3a://b/c"}},
    }
    if status is not None:
        StreamingAppStatus.model_validate(status)
        resource["status"] = status
    return resource


def app_status(phase: str, *conditions: dict[str, Any], observed: int = 3) -> dict[str, Any]:
    return {"observedGeneration": observed, "phase": phase, "conditions": list(conditions)}


READY = condition("Ready", "True", "DriverRunning", "driver clicks-r1-a1-driver is running")
NOT_READY = condition("Ready", "False", "DriverStarting", "driver clicks-r1-a2-driver is starting")
HEALTHY = condition("Degraded", "False", "Healthy")


def degraded(phase: str, reason: str, message: str, *others: dict[str, Any]) -> dict[str, Any]:
    """An app in `phase` with its other conditions and Degraded True for `reason`."""
    return app(app_status(phase, *others, condition("Degraded", "True", reason, message)))


def restarting(ready: tuple[str, str], next_attempt: str, reason: str, message: str) -> dict[str, Any]:
    """A Restarting app: why it is not Ready, when its next attempt is, why it is Degraded."""
    progressing = condition("Progressing", "True", "Restarting", next_attempt)
    return degraded("Restarting", reason, message, condition("Ready", "False", *ready), progressing)


FINISHED = condition("Ready", "False", "Completed", "the job finished")

APP_CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "no status yet": (app(None), "Progressing", "waiting for the operator"),
    "running and ready": (app(app_status("Running", READY, HEALTHY)), "Healthy", "DriverRunning"),
    "running, recent restarts": (
        degraded("Running", "RecentRestarts", "restarted 2 times", READY),
        "Healthy",
        "driver clicks-r1-a1-driver is running",
    ),
    "completed": (app(app_status("Completed", FINISHED)), "Healthy", "the job finished"),
    "running, not ready yet": (app(app_status("Running", NOT_READY)), "Progressing", "DriverStarting"),
    "stale generation": (app(app_status("Running", READY, observed=2)), "Progressing", "generation 3"),
    "no observed generation": (app({"phase": "Running", "conditions": [READY]}), "Progressing", "generation 3"),
    "deploying": (
        app(app_status("Deploying", NOT_READY, condition("Progressing", "True", "Deploying", "run 1, attempt 1"))),
        "Progressing",
        "run 1, attempt 1",
    ),
    "upgrading": (app(app_status("Upgrading", NOT_READY)), "Progressing", "phase Upgrading"),
    "restarting after a failure": (
        restarting(("DriverFailed", "exit code 1"), "next attempt in 4s", "DriverFailed", "exit code 1"),
        "Progressing",
        "next attempt in 4s",
    ),
    "restarting past the restart budget": (
        restarting(
            ("DriverFailed", "exit code 1"),
            "next attempt at 2026-11-21T12:05:00Z (in 300s)",
            "RestartsExhausted",
            "more than 10 failures within 30m",
        ),
        "Degraded",
        "more than 10 failures within 30m",
    ),
    "savepointing": (app(app_status("Savepointing", READY)), "Progressing", "phase Savepointing"),
    "rescaling": (app(app_status("Rescaling", READY)), "Progressing", "phase Rescaling"),
    "failed": (
        degraded(
            "Failed",
            "DriverFailed",
            "boom; not restarting: more than 3 failures",
            condition("Ready", "False", "DriverFailed", "boom"),
        ),
        "Degraded",
        "not restarting: more than 3 failures",
    ),
    "failed without conditions": (app(app_status("Failed")), "Degraded", "phase Failed"),
    "rolled back": (degraded("RolledBack", "RolledBack", "rolled back to r1", READY), "Degraded", "rolled back to r1"),
    "running an older spec, the update is invalid": (
        degraded("Running", "InvalidSpec", "spec.sparkConf: owned", READY),
        "Degraded",
        "InvalidSpec",
    ),
    "upgrade refused": (
        degraded("Running", "UpgradeRefused", "needs a savepoint", READY),
        "Degraded",
        "needs a savepoint",
    ),
    "a rolled-back spec is not retried": (
        degraded("Running", "UpgradeNotRetried", "change the spec", READY),
        "Degraded",
        "UpgradeNotRetried",
    ),
    "the savepoint to restore is missing": (
        degraded("Deploying", "RestoreSourceMissing", "no sp-9", NOT_READY),
        "Degraded",
        "no sp-9",
    ),
    "suspended": (
        app(app_status("Suspended", condition("Ready", "False", "Suspended", "savepoint sp-1"))),
        "Suspended",
        "savepoint sp-1",
    ),
    "completed after restarts": (
        degraded("Completed", "RecentRestarts", "restarted 1 times", FINISHED),
        "Healthy",
        "the job finished",
    ),
    "failing at start": (
        restarting(
            ("ScriptExited", "the script exited with 2"),
            "next attempt in 8s",
            "StartupFailing",
            "the script exited with 2, the exit code of a usage",
        ),
        "Degraded",
        "StartupFailing",
    ),
    "the next doomed driver runs": (
        degraded("Running", "StartupFailing", "does not compile", READY),
        "Degraded",
        "does not compile",
    ),
}


@pytest.fixture(params=INTERPRETERS)
def interpreter(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_lua_54_is_installed() -> None:
    assert "lua5.4" in INTERPRETERS


@pytest.mark.parametrize("case", APP_CASES, ids=list(APP_CASES))
def test_streaming_app_health(case: str, interpreter: str, tmp_path: Path) -> None:
    resource, expected_status, expected_text = APP_CASES[case]
    status, message = assess(APP_SCRIPT, resource, tmp_path, interpreter)
    assert status == expected_status, message
    assert expected_text in message


GRACE = timedelta(seconds=600)  # the script's DEGRADED_GRACE_SECONDS (the chart's default)
TRANSITION = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)  # NOW, when the fixtures' conditions last changed
ZONES = ["UTC", "Asia/Kolkata", "America/New_York", "Pacific/Chatham"]  # the Argo CD controller's TZ

# (case of APP_CASES, health past the grace period)
PAST_GRACE: dict[str, tuple[str, str]] = {
    "restarting after a failure": ("Degraded", "Degraded for more than 600s since 2026-11-21T12:00:00Z"),
    "running, recent restarts": ("Degraded", "RecentRestarts"),
    "running and ready": ("Healthy", "DriverRunning"),  # Degraded False: no grace period applies
    "suspended": ("Suspended", "savepoint sp-1"),
    "failing at start": ("Degraded", "StartupFailing"),
    "completed after restarts": ("Healthy", "the job finished"),  # a bounded job's old RecentRestarts
}


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("case", PAST_GRACE, ids=list(PAST_GRACE))
def test_degraded_for_longer_than_the_grace_period(case: str, zone: str, interpreter: str, tmp_path: Path) -> None:
    """Within the grace period a restarting app is Progressing; a second past it, Degraded, whatever the time
    zone of the controller (Argo CD's os.date formats an explicit time in it)."""
    resource, within_status, _ = APP_CASES[case]
    just_within = assess(APP_SCRIPT, resource, tmp_path, interpreter, now=TRANSITION + GRACE - timedelta(seconds=1),
                         zone=zone)  # fmt: skip
    assert just_within[0] == within_status, just_within
    status, message = assess(APP_SCRIPT, resource, tmp_path, interpreter, now=TRANSITION + GRACE + timedelta(seconds=1),
                             zone=zone)  # fmt: skip
    assert (status, PAST_GRACE[case][1] in message) == (PAST_GRACE[case][0], True), message


def test_sub_second_transition_times_count_from_their_second(tmp_path: Path) -> None:
    degraded = condition("Degraded", "True", "DriverFailed", "exit code 1")
    degraded["lastTransitionTime"] = "2026-11-21T12:00:00.734512Z"  # what the operator writes (format_time)
    resource = app(app_status("Restarting", degraded))
    assert assess(APP_SCRIPT, resource, tmp_path, now=TRANSITION + GRACE - timedelta(seconds=1))[0] == "Progressing"
    assert assess(APP_SCRIPT, resource, tmp_path, now=TRANSITION + GRACE + timedelta(seconds=1))[0] == "Degraded"


def test_the_default_clock_is_within_the_grace_period() -> None:
    assert TRANSITION < NOW_DEFAULT < TRANSITION + GRACE


def _savepoint(status: dict[str, Any] | None, generation: int = 1) -> dict[str, Any]:
    resource: dict[str, Any] = {
        "apiVersion": "headrace.dev/v1alpha1",
        "kind": "StreamingSavepoint",
        "metadata": {"name": "clicks-sp-1", "namespace": "analytics", "generation": generation},
        "spec": {"appName": "clicks"},
    }
    if status is not None:
        StreamingSavepointStatus.model_validate(status)
        resource["status"] = status
    return resource


SAVEPOINT_CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "no status yet": (_savepoint(None), "Progressing", "waiting for the operator"),
    "pending": (_savepoint({"phase": "Pending"}), "Progressing", "phase Pending"),
    "in progress": (_savepoint({"phase": "InProgress", "message": "copying"}), "Progressing", "copying"),
    "succeeded": (
        _savepoint({"phase": "Succeeded", "path": "s3a://b/sp/1", "batchId": 41, "observedGeneration": 1}),
        "Healthy",
        "s3a://b/sp/1 (batch 41)",
    ),
    "failed": (_savepoint({"phase": "Failed", "message": "no space left"}), "Degraded", "no space left"),
    "stale generation": (
        _savepoint({"phase": "Succeeded", "observedGeneration": 1}, generation=2),
        "Progressing",
        "generation 2",
    ),
}


@pytest.mark.parametrize("case", SAVEPOINT_CASES, ids=list(SAVEPOINT_CASES))
def test_streaming_savepoint_health(case: str, interpreter: str, tmp_path: Path) -> None:
    resource, expected_status, expected_text = SAVEPOINT_CASES[case]
    status, message = assess(SAVEPOINT_SCRIPT, resource, tmp_path, interpreter)
    assert status == expected_status, message
    assert expected_text in message


# --- statuses written by the real planner ------------------------------------------------------

T0 = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
SPEC = StreamingAppSpec.model_validate(
    {
        "image": "localhost/headrace/spark:0.1.0",
        "application": {"file": "local:///opt/app.py"},
        "state": {"checkpointDir": "s3a://bucket/checkpoints"},
        "restartPolicy": {"maxRestartsInWindow": 1, "whenExhausted": "Fail"},
    }
)


def _planned(status: StreamingAppStatus, *pods: DriverPod, spec: StreamingAppSpec = SPEC) -> StreamingAppStatus:
    view = AppView(name="clicks", namespace="analytics", generation=1, spec=spec, status=status)
    return decide(view, Observation(drivers=pods), T0).status


def _pod(attempt: int, phase: str, **fields: Any) -> DriverPod:
    return DriverPod(name=f"clicks-r1-a{attempt}-driver", run=1, attempt=attempt, phase=phase, **fields)  # type: ignore[arg-type]


def _planner_statuses() -> dict[str, tuple[StreamingAppStatus, str]]:
    deploying = _planned(StreamingAppStatus())
    running = _planned(deploying, _pod(1, "Running", running_since=T0, ip="10.0.0.9"))
    restarting = _planned(running, _pod(1, "Failed", exit_code=1, message="boom"))
    failed = _planned(
        restarting.model_copy(update={"pendingOperation": None}), _pod(1, "Failed", exit_code=1, message="boom")
    )
    invalid = SPEC.model_copy(update={"sparkConf": {"spark.master": "local[2]"}})
    refused = _planned(running, _pod(1, "Running", running_since=T0, ip="10.0.0.9"), spec=invalid)
    usage = _pod(1, "Failed", exit_code=1, reason="ScriptExited", message="the script exited with 2")
    startup = _planned(deploying, usage, spec=SPEC.model_copy(update={"restartPolicy": RestartPolicy()}))
    return {
        "failing at start": (startup, "Degraded"),
        "deploying": (deploying, "Progressing"),
        "running": (running, "Healthy"),
        "restarting": (restarting, "Progressing"),
        "failed": (failed, "Degraded"),
        "invalid update while running": (refused, "Degraded"),
    }


@pytest.mark.parametrize(
    "case", ["deploying", "running", "restarting", "failed", "invalid update while running", "failing at start"]
)
def test_statuses_from_the_planner(case: str, tmp_path: Path) -> None:
    status, expected = _planner_statuses()[case]
    resource = app(status.model_dump(mode="json", exclude_none=True), generation=1)
    assert assess(APP_SCRIPT, resource, tmp_path)[0] == expected, status


def test_lua_literal_escapes_strings() -> None:
    assert to_lua({"a": 'quote " and \\ and\nnewline', "b": [1, 2.5, True, None]}) == (
        '{["a"] = "quote \\" and \\\\ and\\010newline", ["b"] = {1, 2.5, true, nil}}'
    )

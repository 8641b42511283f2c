"""The `headrace` command's own logic: when suspend, resume, rescale, restart and redeploy `--wait` see their effect
(`cli.outcome`), the redeploy patch, the event and savepoint tables, `-o json|yaml`."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from headrace import cli
from headrace.render import manifests
from tests.unit.builders import attempt


def app(phase: str, *, observed: int = 2, ready: str = "True", executors: int = 2, registered: int | None = 2,
        degraded: str = "") -> dict[str, Any]:  # fmt: skip
    conditions = [{"type": "Ready", "status": ready}, {"type": "Degraded", "status": "True", "message": degraded}]
    progress = {"registeredExecutors": registered} if registered is not None else {}
    status = {"observedGeneration": observed, "phase": phase, "conditions": conditions, "executors": executors,
              "progress": progress}  # fmt: skip
    return {"metadata": {"generation": 2}, "status": status}


CASES: list[tuple[str, dict[str, Any], int | None, tuple[bool, str | None]]] = [
    ("suspend", app("Savepointing"), None, (False, None)),
    ("suspend", app("Suspended", ready="False"), None, (True, None)),
    ("suspend", app("Suspended", observed=1), None, (False, None)),  # the change not observed yet
    ("resume", app("Deploying", ready="False"), None, (False, None)),
    ("resume", app("Running", ready="False"), None, (False, None)),
    ("resume", app("Running"), None, (True, None)),
    ("resume", app("Failed", ready="False", degraded="boom"), None, (False, "the app is Failed: boom")),
    ("rescale", app("Running", executors=2, registered=1), 2, (False, None)),  # asked, not registered yet
    ("rescale", app("Running", executors=2, registered=2), 2, (True, None)),
    ("rescale", app("Running", executors=2, registered=None), 2, (True, None)),  # no progress reported
    ("rescale", app("Running", executors=1, registered=1), 2, (False, None)),
]


@pytest.mark.parametrize(("verb", "resource", "executors", "expected"), CASES)
def test_outcome(verb: str, resource: dict[str, Any], executors: int | None, expected: tuple[bool, str | None]) -> None:
    assert cli.outcome(verb, resource, executors) == expected


def _with_run(attempt: int | None) -> dict[str, Any]:
    run = {"number": 2, "attempt": attempt, "driverPod": f"clicks-r2-a{attempt}-driver"} if attempt else None
    restarts = {"lastFailureReason": "ScriptExited", "lastFailureMessage": "the script exited with 2"}
    return {"metadata": {"name": "clicks"}, "status": {"run": run, "restarts": restarts}}


def test_which_pods_log() -> None:
    assert cli.log_source(_with_run(3), previous=False) == ("clicks-r2-a3-driver", "driver", "run 2, attempt 3")
    pod, container, about = cli.log_source(_with_run(3), previous=True)
    assert (pod, container) == ("clicks-r2-a2-driver", "driver") and "ScriptExited: the script exited with 2" in about
    assert cli.log_source(_with_run(1), previous=True)[0] is None  # none in this run: the kept log tail is read
    assert cli.log_source(_with_run(None), previous=False)[::2] == (None, "no driver has been started yet")
    # Spark names executor pods <spark.kubernetes.executor.podNamePrefix>-exec-<id>; their container is "executor".
    assert cli.log_source(_with_run(3), previous=False, executor=4)[:2] == ("clicks-r2a3-exec-4", "executor")


def _at(run: int, attempt: int, *, pending: bool = False, refused: str = "") -> dict[str, Any]:
    resource = app("Running")
    resource["status"]["run"] = {"number": run, "attempt": attempt, "driverPod": f"clicks-r{run}-a{attempt}-driver"}
    if pending:
        resource["status"]["pendingOperation"] = {"kind": "StartDriver", "step": "CreateDriver"}
    if refused:
        resource["status"]["conditions"][1]["reason"] = "RedeployRefused"
        resource["status"]["error"] = refused
    return resource


@pytest.mark.parametrize(
    ("verb", "now", "expected"),
    [
        ("restart", _at(1, 1), (False, None)),  # still the driver it had
        ("restart", _at(1, 2, pending=True), (False, None)),  # the new attempt is starting
        ("restart", _at(1, 2), (True, None)),
        ("redeploy", _at(1, 2), (False, None)),  # a restart is not a redeploy: the run must change
        ("redeploy", _at(2, 1), (True, None)),
        (
            "redeploy",
            _at(1, 1, refused="spec.restoreFrom is unset"),
            (False, "redeploy refused: spec.restoreFrom is unset"),
        ),
    ],
)
def test_restart_and_redeploy_are_done_once_another_driver_runs(
    verb: str, now: dict[str, Any], expected: tuple[bool, str | None]
) -> None:
    assert cli.outcome(verb, now, since=_at(1, 1)) == expected


def test_redeploy_replaces_the_restore_source_and_bumps_the_nonce() -> None:
    before = {"redeployNonce": 4, "restoreFrom": {"path": "s3a://b/old"}}
    patch = cli.redeploy_patch(before, "before-bug", None, repartition=False)
    assert patch == {
        "restoreFrom": {"savepoint": "before-bug", "path": None, "allowRepartition": None},  # null: merge patch removes
        "redeployNonce": 5,
    }
    assert cli.redeploy_patch({}, None, "s3a://b/sp", repartition=True)["restoreFrom"]["allowRepartition"] is True


def test_event_and_savepoint_tables() -> None:
    now = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
    events = [
        {"metadata": {}, "type": "Warning", "reason": "RedeployRefused", "message": "a\nb",
         "lastTimestamp": "2026-11-27T11:59:00Z"},
        {"metadata": {}, "type": "Normal", "reason": "Running", "count": 2, "lastTimestamp": "2026-11-27T11:00:00Z"},
    ]  # fmt: skip
    assert cli.event_rows(events, now) == [
        ["1h", "Normal", "Running", "2", ""],
        ["1m", "Warning", "RedeployRefused", "1", "a"],
    ]
    taken = {"phase": "Succeeded", "path": "s3a://b/sp-1", "batchId": 7, "time": "2026-11-27T11:58:00Z"}
    savepoints = [
        {"metadata": {"name": "sp-1"}, "spec": {"appName": "clicks", "reason": "deletion"}, "status": taken},
        {"metadata": {"name": "sp-2", "creationTimestamp": "2026-11-27T11:59:30Z"}, "spec": {"appName": "clicks"}},
    ]
    assert cli.savepoint_rows(savepoints, now) == [
        ["sp-2", "clicks", "", "Pending", "-", "30s", "no", ""],
        ["sp-1", "clicks", "deletion", "Succeeded", "7", "2m", "no", "s3a://b/sp-1"],
    ]


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_objects_print_as_kubectl_prints_them(output: str, capsys: pytest.CaptureFixture[str]) -> None:
    one = {"kind": "StreamingApp", "metadata": {"name": "clicks"}}
    cli.print_objects([one], output, single=True)
    text = capsys.readouterr().out
    assert (json.loads(text) if output == "json" else yaml.safe_load(text)) == one
    cli.print_objects([one, one], output, single=False)
    text = capsys.readouterr().out
    listed = json.loads(text) if output == "json" else yaml.safe_load(text)
    assert listed == {"apiVersion": "v1", "kind": "List", "items": [one, one]}


def test_ui_forwards_to_the_driver_its_service_selects() -> None:
    (service,) = [obj for obj in manifests.app_objects(attempt()) if obj["kind"] == "Service"]
    selector = ",".join(f"{key}={value}" for key, value in service["spec"]["selector"].items())
    assert cli.ui_selector("clicks") == selector
    parsed = argparse.Namespace(namespace="analytics", port=8040, address="127.0.0.1", kubeconfig="/k", context=None)
    command = cli.port_forward_command(parsed, "kubectl", "clicks-r1-a2-driver")
    assert command == [
        "kubectl", "port-forward", "-n", "analytics", "pod/clicks-r1-a2-driver", "8040:4040",
        "--address", "127.0.0.1", "--kubeconfig", "/k",
    ]  # fmt: skip

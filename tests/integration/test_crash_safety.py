"""Crash safety: the operator killed at each step of every multi-step operation resumes it correctly.

Each case arms failpoints (HEADRACE_FAILPOINTS) in a real operator process against the real API
server, triggers the operation, checks that the process died at the point (exit code and log line),
then starts a fresh operator without failpoints and checks that the operation finished as it does
without a crash. Drivers are stand-ins at their control endpoint (`driver_standin`); its kubelet
thread checks that never two driver pods of the app were live at once.

Upgrade cases (`legacy`): the operator is stopped right after writing each pending operation, whose
entry is then put in the form the release before the typed log wrote it (`legacy_form`, checked
against that release's own statuses in tests/unit/api/test_log_migration.py); the new operator reads
it and finishes the operation.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from headrace.api import models, names
from headrace.api import runtime_contract as contract
from headrace.controller.failpoints import ENV, FAILPOINT_EXIT_CODE
from headrace.core.savepoints import INTERRUPTED
from testbed.controlplane import ControlPlane
from testbed.operator_process import OperatorProcess
from testbed.procs import ProcessFailedError
from tests.unit.api.legacy_log import legacy_form

from .driver_standin import Kubelet
from .kube import (
    app_manifest,
    create_app,
    driver_pods,
    events_for,
    get_app,
    live_driver_pods,
    patch_spec,
    savepoints,
    set_pod_terminated,
    wait_for,
    watching,
)

APP = "crash"
DRIVER_1 = f"{APP}-r1-a1-driver"
DRIVER_2 = f"{APP}-r2-a1-driver"
EXIT_DELAY_SECONDS = 4.0  # a stopped driver shuts Spark down for a few seconds before it exits
REPORT_DELAY_SECONDS = 0.5  # and its kubelet reports the exit a moment later
CRASH_TIMEOUT_SECONDS = 30.0
DONE_TIMEOUT_SECONDS = 30.0
HTTP_NOT_FOUND = 404
# Points that the first deployment passes too: their operator is started only once the app runs.
ENSURE_DRIVER_STEPS = ("Secret", "ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Service")
DEPLOY_POINTS = {"after-status:StartDriver/CreateDriver", "after:EnsureDriver"} | {
    f"inside:EnsureDriver/{step}" for step in ENSURE_DRIVER_STEPS
}

RESTARTED = f"{APP}-r1-a3-driver"  # the restart case's driver after two failures in a row
CHOSEN = "s3a://bucket/savepoints/elsewhere/chosen"  # the redeploy case's savepoint, a path
UPGRADE = {"application": {"file": "local:///opt/headrace/apps/windowed-counts/app.py", "args": ["--v2"]}}
TRIGGERS: dict[str, dict[str, Any]] = {
    "upgrade": UPGRADE,
    "prewarm": UPGRADE,
    "suspend": {"job": {"state": "suspended"}},
    "savepoint": {"savepoints": {"triggerNonce": 1}},
    "rescale": {"executor": {"instances": 3}},
    "redeploy": {"restoreFrom": {"path": CHOSEN}, "redeployNonce": 1},
}
MANIFESTS: dict[str, dict[str, Any]] = {  # spec fields of the operation's app beside the common ones
    "prewarm": {"standby": {"prewarmUpgrades": True}},
    "delete": {"savepoints": {"onDeletion": True}},
}


@dataclass(frozen=True)
class Case:
    """One operation, and the failpoints its operators die at, one operator each, in order."""

    operation: str
    points: tuple[str, ...]
    interrupted: bool = False  # the crash left the savepoint InProgress before the driver was asked
    legacy: bool = False  # the log is put in the previous release's form before the next operator starts
    exit_delay: float = EXIT_DELAY_SECONDS
    report_delay: float = REPORT_DELAY_SECONDS
    label: str = ""

    @property
    def id(self) -> str:
        label = "-".join(item for item in (self.label, "legacy" if self.legacy else "") if item)
        return f"{self.operation}-{'+'.join(self.points)}" + (f"-{label}" if label else "")


CASES = [
    Case("upgrade", ("after-status:Upgrade/TakeSavepoint",)),
    Case("upgrade", ("after:CreateSavepointResource",)),
    Case("upgrade", ("before:TakeSavepoint",), interrupted=True),
    Case("upgrade", ("after:TakeSavepoint",), label="stopping"),  # the next operator sees the driver stopping
    Case("upgrade", ("after:TakeSavepoint",), exit_delay=0, report_delay=6, label="exited-unreported"),
    # the driver exited at once: the next operator learns the savepoint from its termination message
    Case("upgrade", ("after:TakeSavepoint", "after:SetSavepointStatus"), exit_delay=0, report_delay=0),
    Case("upgrade", ("after-status:StartDriver/CreateDriver",)),
    Case("upgrade", ("after:DeletePod",)),
    Case("upgrade", ("after:EnsureDriver",)),
    # between the objects of run 2's first attempt: the restarted operator creates what is missing, once
    Case("upgrade", ("inside:EnsureDriver/Secret",)),
    Case("upgrade", ("inside:EnsureDriver/pruned",)),
    Case("upgrade", ("inside:EnsureDriver/RoleBinding",)),
    Case("upgrade", ("inside:EnsureDriver/Service",)),
    Case("suspend", ("after-status:Suspend/TakeSavepoint",)),
    Case("suspend", ("after:CreateSavepointResource",)),
    Case("suspend", ("before:TakeSavepoint",), interrupted=True),
    Case("suspend", ("after:TakeSavepoint",)),
    Case("suspend", ("after:TakeSavepoint", "after:SetSavepointStatus"), exit_delay=0, report_delay=0),
    Case("suspend", ("before:DeletePod",)),
    Case("suspend", ("after:DeletePod",)),
    Case("savepoint", ("after-status:Savepoint/TakeSavepoint",)),
    Case("savepoint", ("after:CreateSavepointResource",)),
    Case("savepoint", ("before:TakeSavepoint",), interrupted=True),
    Case("savepoint", ("after:TakeSavepoint",)),
    Case("savepoint", ("after:TakeSavepoint", "after:SetSavepointStatus")),
    Case("rescale", ("before:RescaleInPlace",)),
    Case("rescale", ("after:RescaleInPlace",)),
    Case("restart", ("after-status:Restart/Backoff",)),
    Case("prewarm", ("after-status:Upgrade/Prewarm",)),
    Case("redeploy", ("after-status:StartDriver/CreateDriver",)),
    Case("redeploy", ("after:DeletePod",)),
    Case("redeploy", ("after:EnsureDriver",)),
    Case("delete", ("after-status:Delete/TakeSavepoint",)),
    Case("delete", ("before:TakeSavepoint",), interrupted=True),
    Case("delete", ("after:TakeSavepoint",)),
    # an operator upgrade under a running app: every kind and step the previous release writes
    Case("upgrade", ("after-status:Upgrade/TakeSavepoint",), legacy=True),
    Case("upgrade", ("before:TakeSavepoint",), interrupted=True, legacy=True),
    Case("upgrade", ("after-status:StartDriver/CreateDriver",), legacy=True),
    Case("suspend", ("after-status:Suspend/TakeSavepoint",), legacy=True),
    Case("savepoint", ("after-status:Savepoint/TakeSavepoint",), legacy=True),
    Case("restart", ("after-status:Restart/Backoff",), legacy=True),
    Case("prewarm", ("after-status:Upgrade/Prewarm",), legacy=True),
]


class Stopwatch:
    """Seconds spent in each stage of a case."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.laps: list[tuple[str, float]] = []

    def lap(self, stage: str) -> None:
        now = time.monotonic()
        self.laps.append((stage, now - self.last))
        self.last = now

    def __str__(self) -> str:
        return ", ".join(f"{stage} {seconds:.1f}s" for stage, seconds in self.laps)


class Operators:
    """Operator processes of one case, each with its own log; all stopped at the end."""

    def __init__(self, control_plane: ControlPlane, namespace: str, workdir: Path, bytecode: Path) -> None:
        self.control_plane = control_plane
        self.workdir = workdir
        # Each case starts two or three operators: compiled modules are kept (outside the tree) even where
        # the environment says not to write bytecode, or every start compiles the Kubernetes client again.
        # Each watches only the case's namespace: an armed one must hit its point on this case's app.
        self.env = {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(bytecode), **watching(namespace)}
        self.started: list[OperatorProcess] = []

    def new(self, label: str, points: tuple[str, ...] = ()) -> OperatorProcess:
        env = {**self.env, ENV: ",".join(points)} if points else self.env
        process = OperatorProcess(self.control_plane.kubeconfig, self.workdir / f"{len(self.started)}-{label}", env)
        self.started.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.started:
            process.stop()


@pytest.fixture(scope="module")
def bytecode(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the module's operator processes keep compiled modules."""
    return tmp_path_factory.mktemp("bytecode")


@pytest.fixture
def operators(
    control_plane: ControlPlane, crds: None, namespace: str, tmp_path: Path, bytecode: Path
) -> Iterator[Operators]:
    """Operator processes started by a case; stopped (and their logs named) afterwards."""
    started = Operators(control_plane, namespace, tmp_path, bytecode)
    try:
        yield started
    finally:
        started.stop_all()
        print("operator logs: " + ", ".join(str(process.log_path) for process in started.started))


def _status(api: ApiClient, namespace: str) -> dict[str, Any]:
    return dict(get_app(api, namespace, APP).get("status") or {})


def _running_with_driver(api: ApiClient, namespace: str, pod: str) -> dict[str, Any] | None:
    status = _status(api, namespace)
    run = status.get("run") or {}
    done = status.get("phase") == "Running" and run.get("driverPod") == pod and "pendingOperation" not in status
    return status if done else None


def _start_armed(operator: OperatorProcess) -> None:
    with contextlib.suppress(ProcessFailedError):  # a point reached at once may end it before it is healthy
        operator.start()


def _expect_crash(operator: OperatorProcess, point: str) -> None:
    """The armed operator dies at `point`: the failpoint's exit code, and its log names the point."""
    process = operator.process
    assert process is not None
    code = process.popen.wait(timeout=CRASH_TIMEOUT_SECONDS)
    assert code == FAILPOINT_EXIT_CODE, f"operator exited with {code}, not at {point}:\n{process.tail()}"
    assert f"headrace failpoint {point} hit" in operator.log_path.read_text(errors="replace")
    operator.stop()


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_operator_killed_at_a_step_resumes_the_operation(
    case: Case, operators: Operators, api: ApiClient, namespace: str
) -> None:
    clock = Stopwatch()
    with Kubelet(api, namespace, APP, exit_delay=case.exit_delay, report_delay=case.report_delay) as kubelet:
        armed = operators.new("crash", case.points[:1])
        deployer = operators.new("deploy") if case.points[0] in DEPLOY_POINTS else armed
        overrides = MANIFESTS.get(case.operation, {})
        create_app(api, namespace, app_manifest(APP, upgradeMode="savepoint", executor={"instances": 2}, **overrides))
        deployer.start()
        wait_for(lambda: _running_with_driver(api, namespace, DRIVER_1), what="the app running")
        if deployer is not armed:
            deployer.kill()
            _start_armed(armed)
        clock.lap("deploy")
        _trigger(api, namespace, case.operation)
        _expect_crash(armed, case.points[0])
        for point in case.points[1:]:
            again = operators.new("crash", (point,))
            _start_armed(again)
            _expect_crash(again, point)
        clock.lap("crash")
        if case.legacy:
            _write_legacy_log(api, namespace)
        operators.new("recover").start()
        clock.lap("restart")
        try:
            CHECKS[case.operation](api, namespace, kubelet, case)
        except AssertionError:
            _describe(api, namespace, kubelet)
            raise
        clock.lap("resume and check")
    print(f"{case.id}: {clock}")
    if case.operation != "prewarm":  # a pre-warmed driver waits beside the running one (`_check_prewarm`)
        assert kubelet.max_live <= 1, kubelet.live_seen


def _trigger(api: ApiClient, namespace: str, operation: str) -> None:
    """Start the operation: a spec change, or (restart) two failures of the driver in a row, the second of which
    waits out the backoff (a first restart is immediate and never leaves a Restart in the log)."""
    if operation == "delete":
        wait_for(
            lambda: names.FINAL_SAVEPOINT_FINALIZER in get_app(api, namespace, APP)["metadata"].get("finalizers", [])
        )
        CustomObjectsApi(api).delete_namespaced_custom_object(
            models.GROUP, models.VERSION, namespace, models.APP_PLURAL, APP
        )
        return
    if operation != "restart":
        patch_spec(api, namespace, APP, TRIGGERS[operation])
        return
    set_pod_terminated(api, namespace, DRIVER_1, 1, "the query failed")
    second = f"{APP}-r1-a2-driver"
    wait_for(lambda: _running_with_driver(api, namespace, second), what="attempt 2 running")
    set_pod_terminated(api, namespace, second, 1, "the query failed again")


def _write_legacy_log(api: ApiClient, namespace: str) -> None:
    """Put the pending operation in the form the previous release wrote, as the API server stores it (the CRD keeps
    its `detail`)."""
    app = get_app(api, namespace, APP)
    assert app["status"].get("pendingOperation"), app["status"]
    old = legacy_form(app["status"])
    CustomObjectsApi(api).replace_namespaced_custom_object_status(
        models.GROUP, models.VERSION, namespace, models.APP_PLURAL, APP, {**app, "status": old}
    )
    assert _status(api, namespace)["pendingOperation"] == old["pendingOperation"]


def _describe(api: ApiClient, namespace: str, kubelet: Kubelet) -> None:
    """What the case left behind, printed when a check fails."""
    status = _status(api, namespace)
    print("status:", json.dumps({key: value for key, value in status.items() if key != "lastReconciledSpec"}))
    print("savepoints:", [(item["metadata"]["name"], item.get("status")) for item in savepoints(api, namespace)])
    print(
        "pods:",
        [
            (pod.metadata.name, pod.status.phase, pod.metadata.deletion_timestamp)
            for pod in driver_pods(api, namespace, APP)
        ],
    )
    print("requests:", kubelet.requests, "kubelet errors:", kubelet.errors)
    print("events:", [(event.reason, event.message) for event in events_for(api, namespace, APP)])


def _live(api: ApiClient, namespace: str) -> list[str]:
    return [pod.metadata.name for pod in live_driver_pods(api, namespace, APP)]


def _settled_savepoints(api: ApiClient, namespace: str) -> list[dict[str, Any]] | None:
    """The app's StreamingSavepoints once there is one and none is pending or in progress."""
    records = savepoints(api, namespace)
    done = records and all((record.get("status") or {}).get("phase") in ("Succeeded", "Failed") for record in records)
    return records if done else None


def _phase(record: dict[str, Any]) -> str | None:
    return (record.get("status") or {}).get("phase")


def _the_succeeded_savepoint(api: ApiClient, namespace: str, case: Case) -> dict[str, Any]:
    """Exactly one savepoint succeeded; with `interrupted`, after the first one failed as interrupted."""
    records = wait_for(lambda: _settled_savepoints(api, namespace), what="savepoints settled")
    succeeded = [record for record in records if _phase(record) == "Succeeded"]
    failed = [record for record in records if _phase(record) == "Failed"]
    assert len(succeeded) == 1, records
    if case.interrupted:
        assert [record["status"]["message"] for record in failed] == [INTERRUPTED]
        assert succeeded[0]["metadata"]["name"] == failed[0]["metadata"]["name"] + "-2"  # try 2
    else:
        assert failed == []
    return succeeded[0]


def _check_upgrade(api: ApiClient, namespace: str, kubelet: Kubelet, case: Case) -> None:
    """One live driver of run 2, restored from the one Succeeded savepoint; the old driver stopped once."""
    status = wait_for(lambda: _running_with_driver(api, namespace, DRIVER_2), DONE_TIMEOUT_SECONDS, what="run 2")
    assert _live(api, namespace) == [DRIVER_2]
    done = _the_succeeded_savepoint(api, namespace, case)
    path = done["status"]["path"]
    assert status["run"]["restoredFrom"] == path
    assert kubelet.drivers[DRIVER_2].env[contract.ENV_RESTORE_FROM] == path
    assert status["latestSavepoint"]["name"] == done["metadata"]["name"]
    assert [request.path for request in kubelet.requests_of(DRIVER_1, "stop")] == [path]
    assert kubelet.requests_of(DRIVER_2, "stop") == []
    assert [pod.metadata.name for pod in driver_pods(api, namespace, APP)] == [DRIVER_2]  # the old one is gone


def _check_suspend(api: ApiClient, namespace: str, kubelet: Kubelet, case: Case) -> None:
    """Suspended without a live driver, remembering the savepoint; resuming restores it in run 2."""
    status = wait_for(
        lambda: (s := _status(api, namespace)).get("phase") == "Suspended" and "pendingOperation" not in s and s,
        DONE_TIMEOUT_SECONDS,
        what="Suspended",
    )
    done = _the_succeeded_savepoint(api, namespace, case)
    path = done["status"]["path"]
    assert status["suspendedSavepoint"] == path
    wait_for(lambda: not _live(api, namespace), what="no live driver while suspended")
    assert [request.path for request in kubelet.requests_of(DRIVER_1, "stop")] == [path]
    patch_spec(api, namespace, APP, {"job": {"state": "running"}})
    resumed = wait_for(lambda: _running_with_driver(api, namespace, DRIVER_2), DONE_TIMEOUT_SECONDS, what="resumed")
    assert resumed["run"]["restoredFrom"] == path
    assert kubelet.drivers[DRIVER_2].env[contract.ENV_RESTORE_FROM] == path
    assert "suspendedSavepoint" not in resumed
    assert _live(api, namespace) == [DRIVER_2]


def _check_savepoint(api: ApiClient, namespace: str, kubelet: Kubelet, case: Case) -> None:
    """The driver keeps running; the savepoint succeeded (or failed as interrupted: not retried)."""
    wait_for(lambda: _settled_savepoints(api, namespace), DONE_TIMEOUT_SECONDS, what="savepoints settled")
    status = wait_for(lambda: _running_with_driver(api, namespace, DRIVER_1), what="Running, nothing pending")
    assert _live(api, namespace) == [DRIVER_1]
    assert kubelet.requests_of(DRIVER_1, "stop") == []
    taken = [request.path for request in kubelet.requests_of(DRIVER_1, "savepoint")]
    if case.interrupted:
        records = savepoints(api, namespace)
        assert [(_phase(record), record["status"]["message"]) for record in records] == [("Failed", INTERRUPTED)]
        assert taken == []
        assert "latestSavepoint" not in status
        return
    done = _the_succeeded_savepoint(api, namespace, case)
    assert taken == [done["status"]["path"]]
    assert status["latestSavepoint"]["name"] == done["metadata"]["name"]


def _check_rescale(api: ApiClient, namespace: str, kubelet: Kubelet, case: Case) -> None:
    """The same driver runs with 3 executors, asked once, without a restart."""
    driver = kubelet.drivers[DRIVER_1]
    wait_for(lambda: driver.requested_executors == 3, DONE_TIMEOUT_SECONDS, what="3 executors requested")
    status = wait_for(lambda: _running_with_driver(api, namespace, DRIVER_1), what="Running")
    assert status["executors"] == 3
    assert [request.executors for request in kubelet.requests_of(DRIVER_1, "rescale")] == [3]
    assert kubelet.requests_of(DRIVER_1, "stop") == kubelet.requests_of(DRIVER_1, "savepoint") == []
    assert _live(api, namespace) == [DRIVER_1]
    assert status["restarts"].get("total", 0) == 0


def _check_restart(api: ApiClient, namespace: str, kubelet: Kubelet, case: Case) -> None:
    """Attempt 3 of the same run runs, on the same checkpoint, after both failures were counted."""
    status = wait_for(lambda: _running_with_driver(api, namespace, RESTARTED), DONE_TIMEOUT_SECONDS, what="attempt 3")
    assert _live(api, namespace) == [RESTARTED]
    assert status["restarts"]["total"] == 2
    assert status["run"]["checkpointDir"].endswith("/r1")


def _check_prewarm(api: ApiClient, namespace: str, kubelet: Kubelet, case: Case) -> None:
    """The pre-warmed driver of run 2 is promoted with the savepoint the old driver stopped with, once it is gone."""
    status = wait_for(lambda: _running_with_driver(api, namespace, DRIVER_2), DONE_TIMEOUT_SECONDS, what="run 2")
    assert _live(api, namespace) == [DRIVER_2]
    done = _the_succeeded_savepoint(api, namespace, case)
    path = done["status"]["path"]
    assert [request.path for request in kubelet.requests_of(DRIVER_1, "stop")] == [path]
    assert [request.path for request in kubelet.requests_of(DRIVER_2, "promote")] == [path]
    assert status["run"]["restoredFrom"] == path
    wait_for(lambda: DRIVER_2 in kubelet.live_at_promotion, what="the kubelet's sample after the promotion")
    assert DRIVER_1 not in kubelet.live_at_promotion[DRIVER_2]  # the old driver was gone before the promotion


def _check_redeploy(api: ApiClient, namespace: str, kubelet: Kubelet, case: Case) -> None:
    """One live driver of run 2, restoring the chosen path; the old driver was deleted without a savepoint, once."""
    status = wait_for(lambda: _running_with_driver(api, namespace, DRIVER_2), DONE_TIMEOUT_SECONDS, what="run 2")
    assert _live(api, namespace) == [DRIVER_2]
    assert status["run"]["restoredFrom"] == CHOSEN
    assert kubelet.drivers[DRIVER_2].env[contract.ENV_RESTORE_FROM] == CHOSEN
    assert kubelet.requests_of(DRIVER_1, "stop") == kubelet.requests_of(DRIVER_1, "savepoint") == []
    assert savepoints(api, namespace) == []
    assert [pod.metadata.name for pod in driver_pods(api, namespace, APP)] == [DRIVER_2]
    # posted once at most (an operator that died at the point never posted its events), never again
    assert [event.reason for event in events_for(api, namespace, APP)].count("Redeploying") <= 1


def _check_delete(api: ApiClient, namespace: str, kubelet: Kubelet, case: Case) -> None:
    """The app is gone once its driver stopped with the final savepoint (after one interrupted try, try 2)."""
    wait_for(lambda: not _exists(api, namespace), DONE_TIMEOUT_SECONDS, what="the app gone")
    done = _the_succeeded_savepoint(api, namespace, case)
    assert done["spec"]["reason"] == "deletion"
    assert not done["spec"].get("disposeOnDelete")
    assert [request.path for request in kubelet.requests_of(DRIVER_1, "stop")] == [done["status"]["path"]]


def _exists(api: ApiClient, namespace: str) -> bool:
    try:
        get_app(api, namespace, APP)
    except ApiException as error:
        if error.status == HTTP_NOT_FOUND:
            return False
        raise
    return True


CHECKS: dict[str, Callable[[ApiClient, str, Kubelet, Case], None]] = {
    "restart": _check_restart,
    "prewarm": _check_prewarm,
    "upgrade": _check_upgrade,
    "suspend": _check_suspend,
    "savepoint": _check_savepoint,
    "rescale": _check_rescale,
    "redeploy": _check_redeploy,
    "delete": _check_delete,
}

"""The status recorder is the one writer of `.status` (a test of the source), writes a decision only when its
status says something the recorded one does not, with its answer into the cache, then reaches the write-ahead
log's failpoint."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from headrace.api.models import StreamingAppStatus
from headrace.controller import failpoints
from headrace.controller import status_recorder as recorder_module
from headrace.controller.metrics import OperatorMetrics
from headrace.controller.status_recorder import StatusRecorder
from headrace.core.planner import decide
from tests.unit.builders import T0, later, pod, seen, view

from .fakes import FakeCache, FakeKube
from .test_reconciler import APP, NAMESPACE, app_body

PACKAGE = Path(recorder_module.__file__).parents[1]
RECORDER = Path(recorder_module.__file__)
KUBE_ADAPTER = PACKAGE / "adapters" / "kube.py"
STATUS_WRITES = {"replace_app_status", "patch_app_status", "patch_savepoint_status"}  # the adapter's
SUBRESOURCE_WRITES = {"replace_namespaced_custom_object_status", "patch_namespaced_custom_object_status"}


def _called(path: Path) -> set[str]:
    """Names of the attributes `path` calls (`x.name(...)`) or passes on (`f(x.name)`)."""
    return {node.attr for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Attribute)}


def test_only_the_recorder_writes_statuses() -> None:
    writers = {
        str(path.relative_to(PACKAGE)): sorted(_called(path) & STATUS_WRITES)
        for path in PACKAGE.rglob("*.py")
        if path not in (RECORDER, KUBE_ADAPTER) and _called(path) & STATUS_WRITES
    }
    assert writers == {}, "write statuses through headrace.controller.status_recorder"
    assert _called(RECORDER) & STATUS_WRITES == STATUS_WRITES  # the check looks for the names the recorder uses


def test_only_the_kube_adapter_calls_the_status_subresource() -> None:
    callers = sorted(
        str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py") if _called(path) & SUBRESOURCE_WRITES
    )
    assert callers == ["adapters/kube.py"]


def recorder() -> tuple[FakeKube, FakeCache, StatusRecorder]:
    kube = FakeKube()
    kube.apps[(NAMESPACE, APP)] = app_body()
    cache = FakeCache(kube)
    return kube, cache, StatusRecorder(kube, cache, OperatorMetrics(CollectorRegistry()))


def test_a_decision_that_changes_nothing_is_not_written(monkeypatch: pytest.MonkeyPatch) -> None:
    kube, _, recording = recorder()
    hits: list[str] = []
    monkeypatch.setattr(failpoints, "hit", hits.append)
    plan = decide(view(), seen(), T0)
    assert recording.decision(kube.apps[(NAMESPACE, APP)], plan.status, plan, seen(), later(1)) is None
    assert kube.calls == [] and hits == []


def test_a_start_whose_pod_waits_with_nothing_to_say_is_not_written() -> None:
    """What the planner's status adds (Ready DriverPending "driver pod X is Pending") the recorded one says."""
    kube, _, recording = recorder()
    intent = decide(view(), seen(), T0).status
    created = seen(pod(phase="Pending", created_at=later(1)))
    quiet = decide(view(status=intent), created, later(1))
    assert quiet.status != intent
    assert recording.decision(kube.apps[(NAMESPACE, APP)], intent, quiet, created, later(1)) is None
    assert kube.calls == []
    waiting = seen(pod(phase="Pending", created_at=later(1), waiting="ContainerCreating"))
    said = decide(view(status=intent), waiting, later(2))
    assert recording.decision(kube.apps[(NAMESPACE, APP)], intent, said, waiting, later(2)) is not None
    assert kube.calls == [("replace_app_status", APP)]


def test_a_decision_is_written_then_its_log_entry_reaches_the_failpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    kube, _, recording = recorder()
    hits: list[str] = []
    monkeypatch.setattr(failpoints, "hit", lambda name: hits.append(f"{name} after {len(kube.calls)} write(s)"))
    plan = decide(view(), seen(), T0)  # run 1's first attempt: StartDriver/CreateDriver
    written = recording.decision(kube.apps[(NAMESPACE, APP)], StreamingAppStatus(), plan, seen(), T0)
    assert written is not None and StreamingAppStatus.model_validate(written["status"]) == plan.status
    assert kube.calls == [("replace_app_status", APP)]
    assert hits == ["after-status:StartDriver/CreateDriver after 1 write(s)"]


def test_a_decision_without_a_pending_operation_reaches_no_failpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    kube, _, recording = recorder()
    hits: list[str] = []
    monkeypatch.setattr(failpoints, "hit", hits.append)
    started = decide(view(), seen(), T0).status
    running = decide(view(status=started), seen(pod()), later(1))
    assert running.status.pendingOperation is None
    assert recording.decision(kube.apps[(NAMESPACE, APP)], started, running, seen(pod()), later(1)) is not None
    assert hits == []

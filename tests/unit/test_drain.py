"""Drains as handovers (issue 23, item 3) as decisions of the planner: a driver on a node being drained moves off it
through a pre-warmed driver, the same spec on the run's checkpoint; a standby there is removed; a bounded job's
driver restarts elsewhere; a failed move blames no spec."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from headrace.api.models import PrewarmUpgrade, StreamingAppSpec, StreamingAppStatus
from headrace.controller.nodes import REFRESH_SECONDS, NodeStates, node_draining, node_lost
from headrace.core.builder import spec_hash
from headrace.core.observation import DriverPod, DriverProgress, Observation
from headrace.core.plan import DeletePod, EnsureDriver, MarkWriter, PromoteDriver
from headrace.core.planner import decide

from .builders import T0, later, pod, spec, view

SPEC = spec(upgradeMode="savepoint")  # a move keeps the run's checkpoint whatever the upgrade mode
PROCESSING = DriverProgress(ready=True, last_batch_id=7, committed=(("q0", 7),))
AT_GATE = DriverProgress(standby=True, at_gate=True)
OLD = pod(node="worker-1")
DRAINED = replace(OLD, node_draining=True)


def _running(app_spec: StreamingAppSpec = SPEC) -> StreamingAppStatus:
    status = decide(view(app_spec), Observation(), T0).status
    return decide(view(app_spec, status), Observation(drivers=(OLD,), progress=PROCESSING), later(1)).status


def _new(**fields: Any) -> DriverPod:
    defaults: dict[str, Any] = {"standby": True, "spec_hash": spec_hash(SPEC), "created_at": later(3)}
    return pod(attempt=2, node="worker-2", **{**defaults, **fields})


def test_a_driver_on_a_drained_node_moves_through_a_pre_warmed_driver_of_the_same_run() -> None:
    status = _running()
    plan = decide(view(SPEC, status), Observation(drivers=(DRAINED,), progress=PROCESSING), later(2))
    pending = plan.status.pendingOperation
    assert pending is not None and (pending.kind, pending.step) == ("Upgrade", "Prewarm")
    assert isinstance(pending, PrewarmUpgrade) and pending.move == "node worker-1 is being drained"
    (ensure,) = [action for action in plan.actions if isinstance(action, EnsureDriver)]
    assert (ensure.run, ensure.attempt, ensure.standby, ensure.keep) == (1, 2, True, (1, 1))
    assert ensure.spec == SPEC and ensure.checkpoint_dir == status.run.checkpointDir  # type: ignore[union-attr]
    assert not [action for action in plan.actions if isinstance(action, DeletePod)]  # the old one keeps processing
    assert "DriverMoving" in {event.reason for event in plan.events}

    new = _new()
    warming = Observation(drivers=(DRAINED, new), progress=PROCESSING)
    assert not [a for a in decide(view(SPEC, plan.status), warming, later(4)).actions if isinstance(a, DeletePod)]
    at_gate = replace(warming, prewarmed=AT_GATE)
    handover = decide(view(SPEC, plan.status), at_gate, later(10))
    assert [action.name for action in handover.actions if isinstance(action, DeletePod)] == [OLD.name]
    assert handover.status.run is not None and handover.status.run.attempt == 2
    assert handover.status.run.number == 1  # no savepoint, no new run: the same checkpoint
    gone = decide(view(SPEC, handover.status), Observation(drivers=(new,), progress=None), later(12))
    assert [type(action) for action in gone.actions] == [PromoteDriver]


def test_a_move_whose_new_driver_fails_blames_no_spec_and_the_old_driver_runs_on() -> None:
    status = _running()
    moving = decide(view(SPEC, status), Observation(drivers=(DRAINED,), progress=PROCESSING), later(2)).status
    failed = _new(phase="Failed", reason="Error", exit_code=1)
    plan = decide(view(SPEC, moving), Observation(drivers=(DRAINED, failed), progress=PROCESSING), later(5))
    assert plan.status.pendingOperation is None and plan.status.failedSpecHash is None
    assert plan.status.run is not None and plan.status.run.attempt == 1
    assert [action.name for action in plan.actions if isinstance(action, DeletePod)] == [failed.name]


def test_a_standby_on_a_drained_node_is_removed_first() -> None:
    app_spec = spec(standby__enabled=True)
    status = _running(app_spec)
    standby = pod(attempt=2, standby=True, spec_hash=spec_hash(app_spec), node="worker-1", node_draining=True)
    observation = Observation(drivers=(DRAINED, standby), progress=PROCESSING)
    plan = decide(view(app_spec, status), observation, later(2))
    assert [action.name for action in plan.actions if isinstance(action, DeletePod)] == [standby.name]
    assert plan.status.pendingOperation is None


def test_a_bounded_job_restarts_on_another_node() -> None:
    app_spec = spec(mode="bounded")
    status = _running(app_spec)
    plan = decide(view(app_spec, status), Observation(drivers=(DRAINED,), progress=PROCESSING), later(2))
    assert plan.status.run is not None and plan.status.run.attempt == 2
    assert [action.name for action in plan.actions if isinstance(action, DeletePod)] == [OLD.name]


def test_a_driver_whose_executors_node_is_drained_moves_the_same_way() -> None:
    """Its executors' budget holds their eviction: the handover (a pre-warmed driver elsewhere) is what ends it."""
    status = _running()
    held = replace(OLD, executors_draining=True)
    plan = decide(view(SPEC, status), Observation(drivers=(held,), progress=PROCESSING), later(2))
    pending = plan.status.pendingOperation
    assert isinstance(pending, PrewarmUpgrade) and pending.move == "a node of its executors is being drained"
    assert not [action for action in plan.actions if isinstance(action, DeletePod)]  # the old one keeps processing


def test_the_writer_is_marked_with_its_attempt_whose_executors_the_budget_then_selects() -> None:
    status = decide(view(SPEC), Observation(), T0).status
    unmarked = replace(OLD, writer=False)
    plan = decide(view(SPEC, status), Observation(drivers=(unmarked,), progress=PROCESSING), later(1))
    assert [action for action in plan.actions if isinstance(action, MarkWriter)] == [
        MarkWriter(name=OLD.name, run=1, attempt=1, executors=1)
    ]


# (what, the writer's label: the count its executors' budget was made for, spec.executor.instances, budget made again)
BUDGETS = [
    ("made for the count it runs with: left alone", 1, 1, None),
    ("rescaled in place 1 -> 3: made again for 3", 1, 3, 3),
    ("rescaled in place 3 -> 1: made again for 1", 3, 1, 1),
    ("labelled by an older operator (minAvailable 1000): made for its count", None, 2, 2),
]


@pytest.mark.parametrize(("what", "labelled", "instances", "made"), BUDGETS, ids=[row[0] for row in BUDGETS])
def test_the_executors_budget_follows_the_writers_executor_count(
    what: str, labelled: int | None, instances: int, made: int | None
) -> None:
    """`kubectl get pdb` shows the count the budget keeps (minAvailable), not a ceiling of 1000: the operator puts
    the budget again, and the label recording its count, whenever the writer's executor count changes."""
    app_spec = spec(upgradeMode="savepoint", executor={"instances": instances})
    status = _running(app_spec)
    writer = replace(OLD, executor_budget=labelled)
    plan = decide(view(app_spec, status), Observation(drivers=(writer,), progress=PROCESSING), later(2))
    marks = [action.executors for action in plan.actions if isinstance(action, MarkWriter)]
    assert marks == ([made] if made is not None else []), what


def test_nothing_moves_off_a_node_that_is_not_drained_or_while_the_driver_starts() -> None:
    status = _running()
    plan = decide(view(SPEC, status), Observation(drivers=(OLD,), progress=PROCESSING), later(2))
    assert plan.status.pendingOperation is None and not plan.actions
    starting = decide(view(SPEC, status), Observation(drivers=(DRAINED,), progress=DriverProgress()), later(2))
    assert starting.status.pendingOperation is None and not starting.actions


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        ({"spec": {}}, False),
        ({"spec": {"unschedulable": True}}, True),  # kubectl cordon / drain
        ({"spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "effect": "NoSchedule"}]}}, True),
        ({"spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}}, True),
        ({"spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]}}, False),  # lost
        ({"spec": {"taints": [{"key": "DeletionCandidateOfClusterAutoscaler", "effect": "PreferNoSchedule"}]}}, False),
    ],
)
def test_which_nodes_are_being_drained(node: dict[str, object], expected: bool) -> None:
    assert node_draining(node) is expected


@pytest.mark.parametrize(
    ("node", "lost"),
    [
        ({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, False),
        ({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}, True),  # no kubelet heartbeats
        ({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, True),
        ({"status": {}}, True),
        (
            {
                "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            },
            True,
        ),
    ],
)
def test_which_nodes_are_lost(node: dict[str, object], lost: bool) -> None:
    assert node_lost(node) is lost


def test_a_node_is_read_at_most_every_few_seconds_and_a_missing_one_is_lost() -> None:
    reads: list[str] = []
    now = [0.0]
    body = {"spec": {"unschedulable": True}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}

    def read(name: str) -> dict[str, object] | None:
        reads.append(name)
        return body if name == "worker-1" else None

    nodes = NodeStates(read, clock=lambda: now[0])
    assert nodes.draining(["worker-1", "worker-2"]) == {"worker-1"}
    assert nodes.lost(["worker-1", "worker-2"]) == {"worker-2"}  # gone
    assert reads == ["worker-1", "worker-2"]  # once each, for both questions
    now[0] = REFRESH_SECONDS
    nodes.draining(["worker-1"])
    assert reads == ["worker-1", "worker-2", "worker-1"]


def test_whether_a_node_is_ready_is_read_afresh_and_an_unreadable_one_is_not() -> None:
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    unknown = {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}
    answers: dict[str, dict[str, object] | None] = {"worker-1": ready, "worker-2": None}

    def read(name: str) -> dict[str, object] | None:
        if name == "worker-3":
            raise PermissionError("nodes is forbidden")
        return answers[name]

    nodes = NodeStates(read, clock=lambda: 0.0)
    assert nodes.ready(["worker-1", "worker-2", "worker-3"]) == {"worker-1"}  # gone, unreadable: not Ready
    assert nodes.draining(["worker-1"]) == frozenset()  # remembered for drains...
    answers["worker-1"] = unknown
    assert nodes.ready(["worker-1"]) == frozenset()  # ...but Ready is read again: lost a moment ago

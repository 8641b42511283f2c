"""Executors lost with their node (issue 23, item 4): the operator force-deletes only executor pods Spark gave up
(deleted) that stay Terminating past their grace period on a node that is not Ready, so Spark's allocator, which
counts a Running pod until it is gone, replaces them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from headrace.core import executors
from headrace.core.observation import DriverProgress, ExecutorPod, Observation
from headrace.core.plan import DeletePod
from headrace.core.planner import decide
from tests.unit.builders import T0, later, pod, view

STUCK = ExecutorPod(name="clicks-r1a1-exec-2", node="worker-1", deleting=True, deletion_due=later(30), node_lost=True)
SHORT = DriverProgress(ready=True, registered_executors=1, requested_executors=2)

CASES = [
    ("deleted, past its grace and the margin, node lost", STUCK, 35, True),
    ("within the margin", STUCK, 34, False),
    ("its node is Ready: its kubelet will confirm it", replace(STUCK, node_lost=False), 1000, False),
    ("not deleted: Spark has not given it up", replace(STUCK, deleting=False), 1000, False),
    ("terminated: confirmed already", replace(STUCK, terminated=True), 1000, False),
]


@pytest.mark.parametrize(("what", "executor", "at", "forced"), CASES, ids=[case[0] for case in CASES])
def test_which_executor_pods_are_force_deleted(what: str, executor: ExecutorPod, at: float, forced: bool) -> None:
    status = decide(view(), Observation(), T0).status
    status = decide(view(status=status), Observation(drivers=(pod(),), progress=SHORT), later(1)).status
    plan = decide(view(status=status), Observation(drivers=(pod(),), progress=SHORT, executors=(executor,)), later(at))
    deleted = [action for action in plan.actions if isinstance(action, DeletePod) and action.name == executor.name]
    assert (deleted == [DeletePod(executor.name, "executor stuck on a lost node", 0)]) is forced, what
    assert (executors.FORCE_DELETED in {event.reason for event in plan.events}) is forced


def test_the_executors_are_listed_only_while_the_driver_is_short_of_them() -> None:
    assert executors.short(Observation(progress=SHORT))
    assert not executors.short(Observation(progress=replace(SHORT, registered_executors=2)))
    assert not executors.short(Observation(progress=DriverProgress(ready=True)))
    assert not executors.short(Observation())

"""Lifecycle transitions timed from the planner's own statuses: each scenario runs the real `decide`
step by step and feeds every (previous, new) status pair to `transitions.step`, as the operator does."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from headrace.api.models import StreamingAppSpec, StreamingAppStatus
from headrace.core.observation import DriverProgress, Observation, SavepointResource
from headrace.core.plan import TakeSavepoint
from headrace.core.planner import decide
from headrace.core.transitions import Ended, Underway, adopted, last_batch_age, step
from tests.unit.builders import READY, T0, later, pod, seen, spec, view


@dataclass
class Operator:
    """The planner plus the transition tracking the operator's metrics keep between reconciliations."""

    app_spec: StreamingAppSpec = field(default_factory=spec)
    status: StreamingAppStatus = field(default_factory=StreamingAppStatus)
    underway: Underway | None = None
    ended: list[Ended] = field(default_factory=list)
    generation: int = 1
    actions: tuple[object, ...] = ()

    def reconcile(self, observation: Observation, now: datetime) -> StreamingAppStatus:
        plan = decide(view(self.app_spec, self.status, self.generation), observation, now)
        moved = step(self.underway, self.status, plan.status, now, plan.started)
        self.status, self.underway, self.actions = plan.status, moved.underway, plan.actions
        if moved.ended is not None:
            self.ended.append(moved.ended)
        return plan.status

    def change(self, app_spec: StreamingAppSpec) -> None:
        self.app_spec = app_spec
        self.generation += 1

    def take(self) -> TakeSavepoint:
        return next(action for action in self.actions if isinstance(action, TakeSavepoint))


def deployed(seconds: float = 1.0) -> Operator:
    operator = Operator()
    operator.reconcile(seen(), T0)
    operator.reconcile(seen(pod()), later(seconds))
    return operator


def _ssp(name: str, phase: str, path: str | None = None, reason: str = "upgrade") -> SavepointResource:
    return SavepointResource(name=name, reason=reason, phase=phase, path=path, operator_made=True)  # type: ignore[arg-type]


def test_deploy_is_timed_from_the_first_driver_requested_to_running() -> None:
    operator = Operator()
    operator.reconcile(seen(), T0)
    assert operator.underway == Underway("deploy", T0)
    operator.reconcile(seen(pod(phase="Pending")), later(4))
    assert operator.ended == []
    operator.reconcile(seen(pod()), later(12))
    assert operator.ended == [Ended("deploy", 12.0)]
    assert operator.underway is None
    operator.reconcile(seen(pod()), later(40))  # steady running ends nothing more
    assert operator.ended == [Ended("deploy", 12.0)]


def test_recover_is_timed_from_the_failure_seen_to_the_replacement_running() -> None:
    operator = deployed()
    failed = pod(phase="Failed", exit_code=1)
    operator.reconcile(seen(failed), later(20))
    assert operator.status.phase == "Restarting" and operator.underway == Underway("recover", later(20))
    operator.reconcile(seen(failed), later(23))  # backoff over: a2 waits for a1 to be gone
    operator.reconcile(seen(), later(24))
    operator.reconcile(seen(pod(attempt=2)), later(30))
    assert operator.ended == [Ended("deploy", 1.0), Ended("recover", 10.0)]


def test_a_failed_deploy_becomes_a_recover() -> None:
    operator = Operator()
    operator.reconcile(seen(), T0)
    operator.reconcile(seen(pod(phase="Failed", exit_code=1)), later(5))
    operator.reconcile(seen(), later(8))
    operator.reconcile(seen(pod(attempt=2)), later(9))
    assert operator.ended == [Ended("recover", 4.0)]


def test_last_state_upgrade_is_timed_from_the_spec_change_acted_on() -> None:
    operator = deployed()
    operator.change(spec(image="localhost/headrace/spark:0.2.0"))
    operator.reconcile(seen(pod()), later(5))
    assert operator.status.phase == "Upgrading"
    operator.reconcile(seen(), later(6))
    operator.reconcile(seen(pod(attempt=2)), later(15))
    assert operator.ended[1:] == [Ended("upgrade", 10.0)]


def _through_savepoint(operator: Operator, app_spec: StreamingAppSpec) -> None:
    operator.change(app_spec)
    operator.reconcile(Observation(drivers=(pod(),), progress=READY), later(5))
    take = operator.take()
    stopped = pod(phase="Succeeded", exit_code=0, savepoint_path=take.path)
    operator.reconcile(
        Observation(drivers=(stopped,), savepoints=(_ssp(take.name, "Succeeded", take.path),)), later(20)
    )
    assert operator.status.run is not None and operator.status.run.number == 2
    operator.reconcile(seen(), later(21))
    operator.reconcile(seen(pod(run=2)), later(30))


def test_savepoint_upgrade_is_timed_from_the_stop_with_savepoint() -> None:
    operator = deployed()
    _through_savepoint(operator, spec(image="localhost/headrace/spark:0.2.0", upgradeMode="savepoint"))
    assert operator.ended[1:] == [Ended("upgrade", 25.0)]


def test_a_partition_change_through_a_savepoint_is_a_rescale() -> None:
    operator = deployed()
    _through_savepoint(operator, spec(state__partitions=16, upgradeMode="savepoint"))
    assert operator.ended[1:] == [Ended("rescale", 25.0)]


def test_in_place_rescale_ends_when_the_driver_reports_the_executors() -> None:
    operator = deployed()
    operator.change(spec(executor={"instances": 3}))
    operator.reconcile(seen(pod()), later(5))
    assert operator.underway == Underway("rescale", later(5), executors=3)
    two = DriverProgress(ready=True, registered_executors=2, requested_executors=3)
    operator.reconcile(Observation(drivers=(pod(),), progress=two), later(8))
    assert operator.ended == [Ended("deploy", 1.0)]
    three = DriverProgress(ready=True, registered_executors=3, requested_executors=3)
    operator.reconcile(Observation(drivers=(pod(),), progress=three), later(12))
    assert operator.ended[1:] == [Ended("rescale", 7.0)]


def test_suspend_and_resume() -> None:
    operator = deployed()
    operator.change(spec(job={"state": "suspended"}))
    operator.reconcile(Observation(drivers=(pod(),), progress=READY), later(5))
    assert operator.underway == Underway("suspend", later(5))
    take = operator.take()
    stopped = pod(phase="Succeeded", exit_code=0, savepoint_path=take.path)
    saved = Observation(drivers=(stopped,), savepoints=(_ssp(take.name, "Succeeded", take.path, "suspend"),))
    operator.reconcile(saved, later(9))
    assert operator.status.phase == "Suspended"
    operator.reconcile(seen(), later(60))
    operator.change(spec())
    operator.reconcile(seen(), later(90))
    assert operator.underway == Underway("resume", later(90))
    operator.reconcile(seen(pod(run=2)), later(100))
    assert operator.ended[1:] == [Ended("suspend", 4.0), Ended("resume", 10.0)]


def test_suspend_without_a_driver_takes_no_time() -> None:
    operator = deployed()
    failed = pod(phase="Failed", exit_code=3)  # restore incompatible: Failed, no driver runs
    operator.reconcile(seen(failed), later(5))
    assert operator.status.phase == "Failed"
    operator.change(spec(job={"state": "suspended"}))
    operator.reconcile(seen(failed), later(6))
    assert operator.status.phase == "Suspended"
    assert operator.ended[1:] == [Ended("suspend", 0.0)] and operator.underway is None


def test_created_suspended_then_started_is_a_deploy() -> None:
    operator = Operator(app_spec=spec(job={"state": "suspended"}))
    operator.reconcile(seen(), T0)
    assert operator.status.phase == "Suspended" and operator.underway is None
    operator.change(spec())
    operator.reconcile(seen(), later(10))
    operator.reconcile(seen(pod()), later(15))
    assert operator.ended == [Ended("deploy", 5.0)]


def test_an_upgrade_given_up_is_not_observed() -> None:
    operator = deployed()
    operator.change(spec(image="localhost/headrace/spark:0.2.0", upgradeMode="savepoint"))
    operator.reconcile(Observation(drivers=(pod(),), progress=READY), later(5))
    failures: list[SavepointResource] = []
    for attempt in range(1, 4):  # asked three times, then given up: the old driver keeps running
        failures.append(_ssp(operator.take().name, "Failed"))
        operator.reconcile(
            Observation(drivers=(pod(),), progress=READY, savepoints=tuple(failures)), later(5 + attempt)
        )
    assert operator.status.pendingOperation is None and operator.status.phase == "Running"
    assert operator.underway is None
    assert operator.ended == [Ended("deploy", 1.0)]


def test_a_terminal_failure_ends_nothing() -> None:
    operator = Operator(app_spec=spec(restartPolicy={"type": "Never"}))
    operator.reconcile(seen(), T0)
    operator.reconcile(seen(pod()), later(1))
    operator.reconcile(seen(pod(phase="Failed", exit_code=1)), later(5))
    assert operator.status.phase == "Failed" and operator.underway is None
    assert operator.ended == [Ended("deploy", 1.0)]


def test_an_operator_restarted_mid_upgrade_adopts_it_from_the_status() -> None:
    operator = deployed()
    operator.change(spec(image="localhost/headrace/spark:0.2.0", upgradeMode="savepoint"))
    operator.reconcile(Observation(drivers=(pod(),), progress=READY), later(5))
    assert adopted(operator.status) == Underway("upgrade", later(5))
    operator.underway = None  # a new operator process: nothing in memory
    take = operator.take()
    stopped = pod(phase="Succeeded", exit_code=0, savepoint_path=take.path)
    operator.reconcile(
        Observation(drivers=(stopped,), savepoints=(_ssp(take.name, "Succeeded", take.path),)), later(20)
    )
    operator.underway = None  # and again, while the new run starts
    operator.reconcile(seen(), later(21))
    operator.underway = None
    operator.reconcile(seen(pod(run=2)), later(30))
    assert operator.ended[1:] == [Ended("upgrade", 25.0)]


def test_adoption_of_a_deploy_and_a_recover() -> None:
    operator = Operator()
    operator.reconcile(seen(), later(3))
    assert adopted(operator.status) == Underway("deploy", later(3))
    operator.reconcile(seen(pod()), later(4))
    assert adopted(operator.status) is None  # running: nothing underway
    operator.reconcile(seen(pod(phase="Failed", exit_code=1)), later(7))
    assert adopted(operator.status) == Underway("recover", later(7))


def test_last_batch_age_while_the_driver_runs() -> None:
    operator = deployed()
    progress = DriverProgress(ready=True, last_batch_id=4, last_batch_time=later(10))
    status = operator.reconcile(Observation(drivers=(pod(),), progress=progress), later(25))
    assert last_batch_age(status, later(25)) == 15.0
    assert last_batch_age(status, later(5)) == 0.0  # a driver clock ahead of the operator's never goes negative
    no_batch = operator.reconcile(Observation(drivers=(pod(),), progress=READY), later(26))
    assert last_batch_age(no_batch, later(26)) is None
    failed = operator.reconcile(seen(pod(phase="Failed", exit_code=1)), later(30))
    failed = failed.model_copy(update={"progress": status.progress})
    assert last_batch_age(failed, later(30)) is None  # not running: the batch time is stale

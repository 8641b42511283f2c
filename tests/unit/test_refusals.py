"""Refused attempts and drivers that never start (issue 13, finding 3): reported, bounded, rolled back; an upgrade
is checked by a dry run before the running driver is removed."""

from __future__ import annotations

from dataclasses import replace

from headrace.api.models import Restart, StreamingAppStatus
from headrace.core.observation import Observation, Refusal
from headrace.core.plan import DeletePod, EnsureDriver, Plan
from headrace.core.planner import decide, spec_json

from .builders import T0, later, pod, seen, spec, view


def step(status: StreamingAppStatus | None, observation: Observation | None = None, now=T0, app_spec=None) -> Plan:
    return decide(view(app_spec, status), observation or seen(), now)


def running(app_spec=None) -> StreamingAppStatus:
    plan = step(None, app_spec=app_spec)
    return step(plan.status, seen(pod()), later(1), app_spec=app_spec).status


def test_upgrade_dry_runs_the_new_driver_before_deleting_the_running_one() -> None:
    status = running()
    plan = step(status, seen(pod()), later(5), app_spec=spec(image="localhost/headrace/spark:0.2.0"))
    assert [type(action).__name__ for action in plan.actions] == ["EnsureDriver", "DeletePod"]
    check = plan.actions[0]
    assert isinstance(check, EnsureDriver) and check.check_only and check.attempt == 2
    assert check.spec.image == "localhost/headrace/spark:0.2.0"
    # once the old driver is being deleted, no more checks: the fence just waits
    waiting = step(
        plan.status, seen(pod(deleting=True)), later(6), app_spec=spec(image="localhost/headrace/spark:0.2.0")
    )
    assert not any(isinstance(action, EnsureDriver) for action in waiting.actions)


def test_refused_upgrade_keeps_the_running_driver_and_says_why() -> None:
    new = spec(image="localhost/headrace/forbidden:1")
    upgrading = step(running(), seen(pod()), later(5), app_spec=new).status
    refusal = Refusal(1, 2, "Pod clicks-r1-a2-driver", 'admission webhook denied: image "forbidden"', dry_run=True)
    plan = step(upgrading, replace(seen(pod()), refused=refusal), later(5), app_spec=new)
    assert plan.actions == ()
    assert plan.status.run is not None and (plan.status.run.number, plan.status.run.attempt) == (1, 1)
    assert plan.status.pendingOperation is None
    assert plan.status.error is not None and 'image "forbidden"' in plan.status.error
    assert "clicks-r1-a1-driver keeps running" in plan.status.error
    assert "UpgradeRefused" in {event.reason for event in plan.events}
    assert plan.status.lastReconciledSpec != spec_json(new)
    # later reconciles: the driver keeps running, the spec is not retried, the reason stays visible
    after = step(plan.status, seen(pod()), later(10), app_spec=new)
    assert not any(isinstance(action, (DeletePod, EnsureDriver)) for action in after.actions)
    assert after.status.error is not None and "forbidden" in after.status.error


def test_refused_first_driver_is_a_counted_failure_with_backoff_then_failed() -> None:
    failing = spec(restartPolicy__whenExhausted="Fail")
    plan = step(None, app_spec=failing)
    status = plan.status
    now = T0
    reasons = []
    for attempt in range(1, 5):
        refusal = Refusal(1, attempt, f"Pod clicks-r1-a{attempt}-driver", "pods is forbidden: quota exceeded")
        refused = step(status, replace(seen(), refused=refusal), now, app_spec=failing)
        status = refused.status
        reasons.append(status.phase)
        assert status.error is not None and "quota exceeded" in status.error
        assert not any(isinstance(action, EnsureDriver) for action in refused.actions)
        if status.phase == "Failed":
            break
        assert status.pendingOperation is not None and status.pendingOperation.kind == "Restart"
        kept = step(status, seen(), now, app_spec=failing)  # during the backoff the error stays
        assert kept.status.error == status.error and kept.actions == ()
        now = later((attempt + 1) * 100)
        status = step(status, seen(), now, app_spec=failing).status  # next attempt recorded
        assert status.run is not None and status.run.attempt == attempt + 1
    assert reasons == ["Restarting", "Restarting", "Restarting", "Failed"]  # maxRestartsInWindow 3, whenExhausted Fail
    settled = step(status, seen(), later(1000), app_spec=failing)
    assert settled.status.error == status.error and settled.actions == ()  # a Failed app keeps saying why


def test_pending_driver_past_start_timeout_fails_and_rolls_back() -> None:
    stable = spec(rollback={"enabled": True, "stableAfter": "1s"}, restartPolicy__startTimeout="1m")
    status = step(running(stable), seen(pod()), later(10), app_spec=stable).status  # ran stably
    assert status.lastStableSpec == spec_json(stable)
    typo = stable.model_copy(update={"image": "localhost/headrace/sprak:0.1.0"})
    upgrading = step(status, seen(pod()), later(11), app_spec=typo).status
    created = step(upgrading, seen(), later(12), app_spec=typo).status  # old gone: the new attempt's pod is created
    pending = pod(attempt=2, phase="Pending", created_at=later(12), waiting="ImagePullBackOff: not found")
    early = step(created, seen(pending), later(40), app_spec=typo)
    assert early.actions == () and early.requeue_after is not None and early.requeue_after <= 32
    assert "ImagePullBackOff" in next(c.message for c in early.status.conditions if c.type == "Ready")
    late = step(early.status, seen(pending), later(73), app_spec=typo)
    assert [type(action).__name__ for action in late.actions] == ["DeletePod"]
    assert late.status.restarts.lastFailureReason == "DriverStartTimeout"
    assert "restartPolicy.startTimeout (1m)" in (late.status.restarts.lastFailureMessage or "")
    assert "RollingBack" in {event.reason for event in late.events}
    assert isinstance(late.status.pendingOperation, Restart) and late.status.pendingOperation.rollback

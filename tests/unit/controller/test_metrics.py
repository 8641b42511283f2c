"""The operator's series: every label combination from zero, bounded labels, and what one decision records."""

from __future__ import annotations

from datetime import datetime

from prometheus_client import CollectorRegistry

from headrace.api.models import AutoscalerStatus, StreamingAppStatus
from headrace.controller.metrics import ACTIONS, RESTART_REASONS, SAVEPOINT_RESULTS, SAVEPOINT_TRIGGERS, OperatorMetrics
from headrace.core.observation import DriverProgress, Observation
from headrace.core.planner import decide
from headrace.core.transitions import TRANSITIONS
from tests.unit.builders import T0, later, pod, seen, spec, view

KEY = ("analytics", "clicks")


def value(metrics: OperatorMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def decided(
    metrics: OperatorMetrics, status: StreamingAppStatus, observation: Observation, now: datetime
) -> StreamingAppStatus:
    plan = decide(view(status=status), observation, now)
    metrics.record_decision(KEY, status, plan.status, now, plan.started)
    return plan.status


def test_savepoint_and_transition_series_start_at_zero() -> None:
    metrics = OperatorMetrics(CollectorRegistry())
    assert SAVEPOINT_TRIGGERS == ("manual", "periodic", "upgrade", "suspend", "import", "deletion", "other")
    for trigger in SAVEPOINT_TRIGGERS:
        assert value(metrics, "headrace_savepoint_duration_seconds_count", trigger=trigger) == 0
        for result in SAVEPOINT_RESULTS:
            assert value(metrics, "headrace_savepoints_total", trigger=trigger, result=result) == 0
    assert set(TRANSITIONS) == {"deploy", "recover", "upgrade", "rescale", "suspend", "resume"}
    for transition in TRANSITIONS:
        assert value(metrics, "headrace_transition_duration_seconds_count", transition=transition) == 0
    names = {family.name for family in metrics.registry.collect()}
    assert "headrace_app_last_batch_age_seconds" in names
    assert not [
        sample
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name.startswith("headrace_app_")
    ]


def test_savepoints_by_trigger_and_result() -> None:
    metrics = OperatorMetrics(CollectorRegistry())
    metrics.record_savepoint("periodic", True, 3.0)
    metrics.record_savepoint("upgrade", False, 0.4)
    metrics.record_savepoint("something-new", True, 1.0)  # an unknown reason stays in the bounded set
    metrics.record_savepoint("import", True, None)  # counted, not timed
    assert value(metrics, "headrace_savepoints_total", trigger="periodic", result="succeeded") == 1
    assert value(metrics, "headrace_savepoints_total", trigger="upgrade", result="failed") == 1
    assert value(metrics, "headrace_savepoints_total", trigger="other", result="succeeded") == 1
    assert value(metrics, "headrace_savepoints_total", trigger="import", result="succeeded") == 1
    assert value(metrics, "headrace_savepoint_duration_seconds_sum", trigger="periodic") == 3.0
    assert value(metrics, "headrace_savepoint_duration_seconds_bucket", trigger="upgrade", le="0.5") == 1
    assert value(metrics, "headrace_savepoint_duration_seconds_count", trigger="import") == 0


def test_a_decision_records_phase_transition_and_last_batch_age() -> None:
    metrics = OperatorMetrics(CollectorRegistry())
    status = decided(metrics, StreamingAppStatus(), seen(), T0)
    assert value(metrics, "headrace_apps", phase="Deploying") == 1
    progress = DriverProgress(ready=True, last_batch_id=0, last_batch_time=later(5))
    status = decided(metrics, status, Observation(drivers=(pod(),), progress=progress), later(8))
    assert value(metrics, "headrace_apps", phase="Deploying") == 0
    assert value(metrics, "headrace_apps", phase="Running") == 1
    assert value(metrics, "headrace_transition_duration_seconds_count", transition="deploy") == 1
    assert value(metrics, "headrace_transition_duration_seconds_sum", transition="deploy") == 8.0
    age = {"namespace": "analytics", "app": "clicks"}
    assert value(metrics, "headrace_app_last_batch_age_seconds", **age) == 3.0
    status = decided(metrics, status, Observation(drivers=(pod(),), progress=progress), later(35))
    assert value(metrics, "headrace_app_last_batch_age_seconds", **age) == 30.0
    assert value(metrics, "headrace_transition_duration_seconds_count", transition="deploy") == 1
    decided(metrics, status, seen(pod(phase="Failed", exit_code=1)), later(40))
    assert value(metrics, "headrace_app_last_batch_age_seconds", **age) is None  # restarting: no series
    metrics.forget_app(KEY)
    assert value(metrics, "headrace_apps", phase="Restarting") == 0
    metrics.forget_app(KEY)  # gone twice (e.g. deletion seen again) is harmless


def test_a_deleted_running_app_drops_its_series() -> None:
    metrics = OperatorMetrics(CollectorRegistry())
    status = decided(metrics, StreamingAppStatus(), seen(), T0)
    progress = DriverProgress(ready=True, last_batch_id=0, last_batch_time=later(1))
    decided(metrics, status, Observation(drivers=(pod(),), progress=progress), later(2))
    assert value(metrics, "headrace_app_last_batch_age_seconds", namespace="analytics", app="clicks") == 1.0
    metrics.forget_app(KEY)
    assert value(metrics, "headrace_app_last_batch_age_seconds", namespace="analytics", app="clicks") is None
    assert value(metrics, "headrace_apps", phase="Running") == 0


def test_every_label_of_the_typed_vocabularies_starts_at_zero() -> None:
    metrics = OperatorMetrics(CollectorRegistry())
    assert "NoProgress" in RESTART_REASONS and RESTART_REASONS[-1] == "Other"
    for reason in RESTART_REASONS:
        assert value(metrics, "headrace_driver_restarts_total", reason=reason) == 0
    assert set(ACTIONS) == {
        "EnsureDriver",
        "DeletePod",
        "ReleaseDriverLease",
        "PromoteDriver",
        "MarkWriter",
        "RescaleInPlace",
        "CreateSavepointResource",
        "TakeSavepoint",
        "SetSavepointStatus",
        "DeleteSavepointResource",
        "SetFinalizer",
    }
    for action in ACTIONS:
        assert value(metrics, "headrace_actions_total", action=action) == 0
    for event_type in ("Normal", "Warning"):
        assert value(metrics, "headrace_events_total", type=event_type) == 0


def test_a_no_progress_restart_counts_as_no_progress() -> None:
    metrics = OperatorMetrics(CollectorRegistry())
    status = decided(metrics, StreamingAppStatus(), seen(), T0)
    backlog = DriverProgress(ready=True, last_batch_id=0, last_batch_time=T0, source_backlog=100.0)
    app = view(spec(restartPolicy__progressTimeout="1m"), status=status)
    plan = decide(app, Observation(drivers=(pod(),), progress=backlog), later(120))
    stuck = plan.status
    assert stuck.restarts.lastFailureReason == "NoProgress"
    metrics.record_decision(KEY, status, stuck, later(120), plan.started)
    assert value(metrics, "headrace_driver_restarts_total", reason="NoProgress") == 1
    assert value(metrics, "headrace_driver_restarts_total", reason="Other") == 0
    metrics.record_decision(KEY, stuck, stuck, later(121))  # the same restart, seen again
    assert value(metrics, "headrace_driver_restarts_total", reason="NoProgress") == 1


def test_per_app_restarts_and_failures_at_start_one_series_per_app_removed_with_it() -> None:
    metrics = OperatorMetrics(CollectorRegistry())
    app = {"namespace": "analytics", "app": "clicks"}
    status = decided(metrics, StreamingAppStatus(), seen(), T0)
    assert value(metrics, "headrace_app_restarts", **app) == 0
    failed = pod(phase="Failed", exit_code=1, reason="ScriptExited", message="the script exited with 2")
    status = decided(metrics, status, seen(failed), later(10))
    assert value(metrics, "headrace_app_restarts", **app) == 1
    assert value(metrics, "headrace_app_startup_failures", **app) == 1
    metrics.forget_app(KEY)
    assert value(metrics, "headrace_app_restarts", **app) is None
    assert value(metrics, "headrace_app_startup_failures", **app) is None
    metrics.forget_app(KEY)


def test_the_autoscalers_recommendation_is_a_series_only_while_there_is_one() -> None:
    metrics = OperatorMetrics(CollectorRegistry())
    app = {"namespace": "analytics", "app": "clicks"}
    name = "headrace_app_autoscaler_recommended_executors"
    status = decided(metrics, StreamingAppStatus(), seen(), T0)
    assert value(metrics, name, **app) is None
    recommended = status.model_copy(
        update={"autoscaler": AutoscalerStatus(action="scale", executors=5, reason="ScaleUp", decidedAt="x")}
    )
    metrics.record_decision(KEY, status, recommended, later(1))
    assert value(metrics, name, **app) == 5
    metrics.record_decision(KEY, recommended, status, later(2))  # passive mode turned off
    assert value(metrics, name, **app) is None
    metrics.record_decision(KEY, status, recommended, later(3))
    metrics.forget_app(KEY)
    assert value(metrics, name, **app) is None


def test_every_per_app_series_is_removed_with_the_app_and_the_optional_ones_while_unknown() -> None:
    metrics = OperatorMetrics(CollectorRegistry())
    app = {"namespace": "analytics", "app": "clicks"}
    status = decided(metrics, StreamingAppStatus(), seen(), T0)
    always = ("headrace_app_restarts", "headrace_app_startup_failures", "headrace_app_failed", "headrace_app_degraded")
    assert [value(metrics, name, **app) for name in always] == [0, 0, 0, 0]
    optional = ("headrace_app_source_backlog", "headrace_app_last_savepoint_age_seconds")
    assert [value(metrics, name, **app) for name in optional] == [None, None]
    progress = DriverProgress(ready=True, last_batch_id=0, last_batch_time=later(1), source_backlog=42.0)
    decided(metrics, status, Observation(drivers=(pod(),), progress=progress), later(2))
    assert value(metrics, "headrace_app_source_backlog", **app) == 42.0
    metrics.forget_app(KEY)
    for name in (*always, *optional, "headrace_app_last_batch_age_seconds"):
        assert value(metrics, name, **app) is None, name

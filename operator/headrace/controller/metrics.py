"""Operator metrics (Prometheus naming, bounded labels, every series starting at zero).

Owns the series and what is remembered between reconciliations only to fill them (each app's phase,
its lifecycle transition underway); which transition ended, and when it began, is decided in
`headrace.core.transitions`. The per-app series (`APP_SERIES`, their values from `headrace.core.app_signals`)
have the labels namespace and app alone: one series per app and metric, removed with the app.
"""

from __future__ import annotations

from datetime import datetime
from typing import get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from headrace.api.models import Phase, StreamingAppStatus, StreamingSavepointSpec
from headrace.api.vocabulary import RESTART_REASON_LABELS, RestartReasonLabel
from headrace.controller.workqueue import Lane
from headrace.core import transitions
from headrace.core.app_signals import AppSignals
from headrace.core.plan import Action, EventType, Started
from headrace.core.restarts import restart_begun

PHASES: tuple[Phase, ...] = get_args(Phase)
RESTART_REASONS = RESTART_REASON_LABELS
ACTIONS: tuple[str, ...] = tuple(kind.__name__ for kind in get_args(Action))
EVENT_TYPES: tuple[EventType, ...] = get_args(EventType)
RESULTS = ("success", "conflict", "error")
SAVEPOINT_TRIGGERS: tuple[str, ...] = (*get_args(StreamingSavepointSpec.model_fields["reason"].annotation), "other")
SAVEPOINT_RESULTS = ("succeeded", "failed")
SAVEPOINT_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
QUEUE_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
QUEUE_LANES: tuple[Lane, ...] = get_args(Lane)
TRANSITION_BUCKETS = (1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0, 1800.0, 3600.0)


# The per-app series: AppSignals field -> (metric, help). Labels namespace and app only: one series per app and metric,
# removed with the app (and the optional ones while the app has no such reading). docs/metrics.md lists them.
APP_SERIES: dict[str, tuple[str, str]] = {
    "restarts": (
        "headrace_app_restarts",
        "Driver restarts of the app so far (status.restarts.total), as of its last reconciliation.",
    ),
    "startup_failures": (
        "headrace_app_startup_failures",
        "Attempts of the app in a row that failed before their first committed batch "
        "(status.restarts.startupFailures); Degraded StartupFailing from restartPolicy.startupFailureThreshold on.",
    ),
    "failed": ("headrace_app_failed", "1 while the app is phase Failed (it gave up restarting), else 0."),
    "degraded": ("headrace_app_degraded", "1 while the app's Degraded condition is True, else 0."),
    "last_batch_age": (
        "headrace_app_last_batch_age_seconds",
        "Seconds since the running driver last committed a batch, as of the app's last reconciliation.",
    ),
    "source_backlog": (
        "headrace_app_source_backlog",
        "Input waiting in the app's sources (status.progress.sourceBacklog: Kafka offsets), while its driver runs "
        "and its sources report it.",
    ),
    "last_savepoint_age": (
        "headrace_app_last_savepoint_age_seconds",
        "Seconds since the app's latest savepoint (status.latestSavepoint.time), while its driver runs.",
    ),
    "recommended_executors": (
        "headrace_app_autoscaler_recommended_executors",
        "Executors the autoscaler would give the app (spec.autoscaler.mode passive: status.autoscaler.executors), "
        "as of its last reconciliation; absent without a recommendation.",
    ),
}


def restart_reason_label(reason: str | None) -> RestartReasonLabel:
    """Map a recorded failure reason (free-form when Kubernetes or the runtime named it) onto the label set."""
    return next((label for label in RESTART_REASONS if label == reason), "Other")


def savepoint_trigger_label(reason: str | None) -> str:
    """Map a savepoint's reason (StreamingSavepoint spec.reason) onto the bounded trigger label set."""
    return reason if reason in SAVEPOINT_TRIGGERS else "other"


class OperatorMetrics:
    """The operator's own series, registered in one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.reconciles = Counter(
            "headrace_reconciles_total", "Reconciliations by result.", ["result"], registry=self.registry
        )
        self.reconcile_seconds = Histogram(
            "headrace_reconcile_duration_seconds", "Duration of one reconciliation.", registry=self.registry
        )
        self.queue_wait_seconds = Histogram(
            "headrace_queue_wait_seconds",
            "Time an app waited in the work queue before a worker took it, by lane (urgent: an event or the next "
            "step; poll: a timer's re-ask).",
            ["lane"],
            buckets=QUEUE_WAIT_BUCKETS,
            registry=self.registry,
        )
        self.apps = Gauge("headrace_apps", "StreamingApps by phase.", ["phase"], registry=self.registry)
        self.restarts = Counter(
            "headrace_driver_restarts_total", "Driver restarts by reason.", ["reason"], registry=self.registry
        )
        self.actions = Counter(
            "headrace_actions_total", "Actions carried out, by kind.", ["action"], registry=self.registry
        )
        self.events = Counter("headrace_events_total", "Events posted, by type.", ["type"], registry=self.registry)
        self.leader = Gauge(
            "headrace_operator_leader",
            "1 while this replica acts (holds the leader Lease, or runs without leader election), else 0.",
            registry=self.registry,
        )
        self.savepoints = Counter(
            "headrace_savepoints_total",
            "Savepoint outcomes the operator recorded, by trigger and result.",
            ["trigger", "result"],
            registry=self.registry,
        )
        self.savepoint_seconds = Histogram(
            "headrace_savepoint_duration_seconds",
            "Duration of savepoints the operator took, by trigger.",
            ["trigger"],
            buckets=SAVEPOINT_BUCKETS,
            registry=self.registry,
        )
        self.transition_seconds = Histogram(
            "headrace_transition_duration_seconds",
            "Duration of lifecycle transitions, from the operator starting one to its end.",
            ["transition"],
            buckets=TRANSITION_BUCKETS,
            registry=self.registry,
        )
        per_app = ["namespace", "app"]
        self.app_series: dict[str, Gauge] = {
            name: Gauge(metric, text, per_app, registry=self.registry) for name, (metric, text) in APP_SERIES.items()
        }
        for trigger in SAVEPOINT_TRIGGERS:
            self.savepoint_seconds.labels(trigger)
            for savepoint_result in SAVEPOINT_RESULTS:
                self.savepoints.labels(trigger, savepoint_result)
        for transition in transitions.TRANSITIONS:
            self.transition_seconds.labels(transition)
        for result in RESULTS:
            self.reconciles.labels(result)
        for lane in QUEUE_LANES:
            self.queue_wait_seconds.labels(lane)
        for phase in PHASES:
            self.apps.labels(phase).set(0)
        for reason in RESTART_REASONS:
            self.restarts.labels(reason)
        for action in ACTIONS:
            self.actions.labels(action)
        for event_type in EVENT_TYPES:
            self.events.labels(event_type)
        self._phases: dict[tuple[str, str], str] = {}
        self._present: dict[str, set[tuple[str, str]]] = {name: set() for name in APP_SERIES}  # apps with the series
        self._underway: dict[tuple[str, str], transitions.Underway] = {}

    def record_queue_wait(self, lane: Lane, seconds: float) -> None:
        """An app waited `seconds` in the work queue's `lane` before a worker took it."""
        self.queue_wait_seconds.labels(lane).observe(seconds)

    def record_phase(self, key: tuple[str, str], phase: str | None) -> None:
        """Track the phase of one app (None when the app is gone) in the apps-by-phase gauge."""
        previous = self._phases.pop(key, None)
        if previous is not None:
            self.apps.labels(previous).dec()
        if phase is not None:
            self._phases[key] = phase
            self.apps.labels(phase).inc()

    def record_savepoint(self, reason: str | None, succeeded: bool, seconds: float | None) -> None:
        """One savepoint outcome; `seconds` is how long taking it took (None: not taken here, e.g. an import)."""
        trigger = savepoint_trigger_label(reason)
        self.savepoints.labels(trigger, "succeeded" if succeeded else "failed").inc()
        if seconds is not None:
            self.savepoint_seconds.labels(trigger).observe(max(seconds, 0.0))

    def record_decision(
        self,
        key: tuple[str, str],
        previous: StreamingAppStatus,
        new: StreamingAppStatus,
        now: datetime,
        started: Started | None = None,
    ) -> None:
        """An app's status went from `previous` to `new` (recorded) at `now` by a decision that started
        `started` (its plan's): its phase, a restart it scheduled, the lifecycle transition that ended (the
        transition underway is kept here between decisions), its last batch age."""
        self.record_phase(key, new.phase)
        if restart_begun(previous, new):
            self.restarts.labels(restart_reason_label(new.restarts.lastFailureReason)).inc()
        moved = transitions.step(self._underway.pop(key, None), previous, new, now, started)
        if moved.underway is not None:
            self._underway[key] = moved.underway
        if moved.ended is not None:
            self.transition_seconds.labels(moved.ended.transition).observe(moved.ended.seconds)
        self._record_app(key, AppSignals.of(new, now))

    def forget_app(self, key: tuple[str, str]) -> None:
        """The app is gone: drop its phase, its transition underway and its series."""
        self.record_phase(key, None)
        self._underway.pop(key, None)
        self._record_app(key, None)

    def _record_app(self, key: tuple[str, str], signals: AppSignals | None) -> None:
        """Set the app's series to `signals` (None: the app is gone); a None value removes its series."""
        for name, gauge in self.app_series.items():
            reading: float | None = getattr(signals, name) if signals is not None else None
            present = self._present[name]
            if reading is not None:
                gauge.labels(*key).set(reading)
                present.add(key)
            elif key in present:
                present.discard(key)
                gauge.remove(*key)

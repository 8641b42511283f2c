"""Operator metrics (Prometheus naming, bounded labels, every series starting at zero)."""

from __future__ import annotations

from typing import get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from headrace.api.models import Phase

PHASES: tuple[Phase, ...] = get_args(Phase)
RESTART_REASONS = ("DriverFailed", "DriverLost", "DriverDeleted", "DriverExited", "Evicted", "OOMKilled", "Other")
RESULTS = ("success", "conflict", "error")


def restart_reason_label(reason: str | None) -> str:
    """Map a free-form failure reason onto the bounded label set."""
    return reason if reason in RESTART_REASONS else "Other"


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
        for result in RESULTS:
            self.reconciles.labels(result)
        for phase in PHASES:
            self.apps.labels(phase).set(0)
        for reason in RESTART_REASONS:
            self.restarts.labels(reason)
        for action in ("EnsureDriver", "DeletePod", "RescaleInPlace"):
            self.actions.labels(action)
        for event_type in ("Normal", "Warning"):
            self.events.labels(event_type)
        self._phases: dict[tuple[str, str], str] = {}

    def record_phase(self, key: tuple[str, str], phase: str | None) -> None:
        """Track the phase of one app (None when the app is gone) in the apps-by-phase gauge."""
        previous = self._phases.pop(key, None)
        if previous is not None:
            self.apps.labels(previous).dec()
        if phase is not None:
            self._phases[key] = phase
            self.apps.labels(phase).inc()

"""The decision accumulator shared by the planner's modules, and helpers for specs kept in status.

Owns: `AppView` (what the planner sees of an app), `Builder` (the new status, actions, events and
requeue time of one decision), and the canonical JSON and hash of a spec.
Never: I/O or the clock.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import ValidationError

from headrace.api.models import Phase, StreamingAppSpec, StreamingAppStatus
from headrace.core.conditions import ConditionStatus, set_condition
from headrace.core.plan import OPERATION, Action, Event, Plan, Started
from headrace.core.validation import DEFAULT_POLICY, Problem, TenantPolicy


@dataclass(frozen=True)
class AppView:
    """The app as the planner sees it: identity, the parsed spec (or why it does not parse), status."""

    name: str
    namespace: str
    generation: int
    spec: StreamingAppSpec | None
    status: StreamingAppStatus
    parse_problems: tuple[Problem, ...] = ()
    policy: TenantPolicy = DEFAULT_POLICY  # what the cluster's admin lets the app's pods ask for
    status_problems: tuple[Problem, ...] = ()  # the status does not parse: `status` is a placeholder, never act
    deleting_since: datetime | None = None  # metadata.deletionTimestamp: the app is being deleted
    final_savepoint_finalizer: bool = False  # it carries headrace.dev/final-savepoint (spec.savepoints.onDeletion)


def spec_json(spec: StreamingAppSpec) -> str:
    """The canonical JSON stored in status.lastReconciledSpec and lastStableSpec."""
    return json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def spec_hash(spec: StreamingAppSpec) -> str:
    """A short stable hash of a spec (labels and status use it to tell specs apart)."""
    return hashlib.sha256(spec_json(spec).encode()).hexdigest()[:12]


def parse_spec_json(text: str | None) -> StreamingAppSpec | None:
    """A spec stored in status, or None if absent or unreadable (e.g. written by an older version)."""
    if not text:
        return None
    try:
        return StreamingAppSpec.model_validate_json(text)
    except ValidationError:
        return None


@dataclass
class Builder:
    """Accumulates the new status, actions and events of one decision."""

    app: AppView
    now: datetime
    status: StreamingAppStatus
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    error_reported: bool = False
    started: Started | None = None

    def report_error(self, reason: str, message: str) -> None:
        """Why the user's spec is not applied: status.error, the Degraded condition, an event once."""
        if self.app.status.error != message:
            self.event(reason, message, warning=True)
        self.status.error = message
        self.error_reported = True
        self.condition("Degraded", "True", reason, message)

    def condition(self, type_: str, status: ConditionStatus, reason: str, message: str = "") -> None:
        """Set one condition."""
        self.status.conditions = set_condition(
            self.status.conditions,
            type_=type_,
            status=status,
            reason=reason,
            message=message,
            generation=self.app.generation,
            now=self.now,
        )

    def phase(self, phase: Phase, message: str, *, warning: bool = False) -> None:
        """Set the phase; a change posts an event named after the new phase."""
        if self.status.phase != phase:
            self.events.append(Event("Warning" if warning else "Normal", phase, message))
        self.status.phase = phase

    def start(self, started: Started) -> None:
        """This decision starts a lifecycle transition; of several, the one with the first cause stands."""
        if self.started is None or started.cause < self.started.cause:
            self.started = started

    def event(self, reason: str, message: str, *, warning: bool = False) -> None:
        """Post an event."""
        self.events.append(Event("Warning" if warning else "Normal", reason, message))

    def requeue(self, seconds: float) -> None:
        """Reconcile again after at most `seconds`."""
        seconds = max(seconds, 0.0)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)

    def plan(self) -> Plan:
        """The finished decision."""
        if not self.error_reported and self.app.status.error is not None:
            self.status.error = None
            self.event("SpecAccepted", "the spec is applied")
        return Plan(
            status=self.status,
            actions=tuple(self.actions),
            events=tuple(self.events),
            requeue_after=self.requeue_after,
            started=self._started(),
        )

    def _started(self) -> Started | None:
        """The transition started; a stop-with-savepoint begun counts only while its entry is still pending (one
        given up in the same decision started nothing)."""
        started, pending = self.started, self.status.pendingOperation
        if started is not None and started.cause == OPERATION:
            kind = "Upgrade" if started.transition == "upgrade" else "Suspend"
            return started if pending is not None and pending.kind == kind else None
        return started

"""The status recorder: the one writer of `.status` of StreamingApps and StreamingSavepoints.

Owns: writing a decision's status (the write-ahead log: before any of its actions) unless it is the one
recorded or says nothing worth a write (`headrace.core.attempts.worth_recording`: the planner decides what
the status says, not whether to write it), its answer into the cache (write-through), the
`after-status:<Kind>/<Step>` failpoints, the decision metrics (phase, restarts, transitions), the Degraded
condition of an app whose status cannot be read (merged in, the rest left as it is), and savepoint outcomes
and the message of a deletion that waits.
A test (tests/unit/controller/test_status_recorder.py) fails when any other module calls the adapter's
status writes.
Never: deciding what the status says (`headrace.core`), carrying out other actions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from headrace.adapters.kube import KubeClient
from headrace.api.models import StreamingAppStatus
from headrace.controller import failpoints
from headrace.controller.cache import Cache
from headrace.controller.metrics import OperatorMetrics
from headrace.core.attempts import worth_recording
from headrace.core.observation import Observation
from headrace.core.plan import Plan


class StatusRecorder:
    """Writes statuses through `kube`, keeping `cache` up to date and `metrics` told of every decision."""

    def __init__(self, kube: KubeClient, cache: Cache, metrics: OperatorMetrics) -> None:
        self.kube = kube
        self.cache = cache
        self.metrics = metrics

    def decision(
        self, body: dict[str, Any], previous: StreamingAppStatus, plan: Plan, observation: Observation, now: datetime
    ) -> dict[str, Any] | None:
        """Record the status of `plan`, decided from `observation` (nothing is written when it says what `previous`,
        the recorded one, says), and the decision's metrics; the app as written, or None when nothing was."""
        metadata = body["metadata"]
        new = worth_recording(previous, plan, observation)
        written = None
        if new != previous:
            written = self.kube.replace_app_status(body, new.model_dump(mode="json", exclude_none=True))
            self.cache.wrote("app", written)
            if (pending := new.pendingOperation) is not None:
                failpoints.hit(f"after-status:{pending.kind}/{pending.step}")
        self.metrics.record_decision((metadata["namespace"], metadata["name"]), previous, new, now, plan.started)
        return written

    def unreadable_conditions(self, body: dict[str, Any], conditions: list[dict[str, Any]]) -> None:
        """Merge `conditions` into an app whose status cannot be read (a full write would drop what this version
        does not know)."""
        metadata = body["metadata"]
        patched = self.kube.patch_app_status(metadata["namespace"], metadata["name"], {"conditions": conditions})
        self.cache.wrote("app", patched)

    def savepoint(self, namespace: str, name: str, status: dict[str, Any], *, echo: bool = True) -> None:
        """Merge `status` into a StreamingSavepoint's. `echo`: the reconcile that wrote it goes on from the answer
        (its watch event is an echo); else (an outcome written off the reconcile worker) the watch event is what
        wakes the app to act on it."""
        written = self.kube.patch_savepoint_status(namespace, name, status)
        if echo:
            self.cache.wrote("savepoint", written)
        else:
            self.cache.observed("savepoint", written)

    def waiting_deletion(self, namespace: str, name: str, message: str) -> None:
        """Say why the deletion of a StreamingSavepoint waits (in its status.message)."""
        self.kube.patch_savepoint_status(namespace, name, {"message": message})

"""Carrying out the planner's actions, one kind each, and saying when to reconcile next.

Owns: the dispatch from an action to the adapter-side service that does it (`AttemptObjects`, `Drivers`,
`SavepointCalls`, the Kubernetes adapter), the `before:`/`after:<Action>` failpoints around each, the actions
metric, and each action's answer to "when again": an action that changes what the cache holds asks for the
next reconcile itself (`AGAIN`: its watch event is an echo, and the cache already has the answer). Never:
deciding, or writing an app's status.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any, assert_never

from headrace.adapters.kube import KubeClient, Refused
from headrace.api import names
from headrace.controller import driver_logs, failpoints
from headrace.controller.attempt_objects import AttemptObjects
from headrace.controller.cache import Cache, Kind
from headrace.controller.drivers import Drivers
from headrace.controller.metrics import OperatorMetrics
from headrace.controller.savepoint_calls import SavepointCalls
from headrace.core.plan import (
    Action,
    CreateSavepointResource,
    DeletePod,
    DeleteSavepointResource,
    EnsureDriver,
    MarkWriter,
    PromoteDriver,
    ReleaseDriverLease,
    RescaleInPlace,
    SetFinalizer,
    SetSavepointStatus,
    TakeSavepoint,
)
from headrace.render import manifests
from headrace.render.savepoints import savepoint_resource

logger = logging.getLogger(__name__)

AGAIN = 0.0  # reconcile again at once: what the echo of the operator's own write used to trigger
DRIVER_RETRY_SECONDS = 5.0  # a driver order that could not be given is tried again this much later
# After creating a driver pod, the next reconcile waits this long for the scheduler's answer (its watch event
# wakes the app sooner), so one status write records the pod and where it stands instead of two.
SCHEDULING_SECONDS = 1.0


class Actions:
    """The services an action may need, and the dispatch to them."""

    def __init__(
        self,
        kube: KubeClient,
        cache: Cache,
        metrics: OperatorMetrics,
        clock: Callable[[], datetime],
        *,
        attempts: AttemptObjects,
        drivers: Drivers,
        savepoints: SavepointCalls,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.metrics = metrics
        self.clock = clock
        self.attempts = attempts
        self.drivers = drivers
        self.savepoints = savepoints

    def act(self, body: dict[str, Any], action: Action) -> float | None:
        """Carry out one action (within its failpoints); when to reconcile again (None: on the next event)."""
        kind = type(action).__name__
        self.metrics.actions.labels(kind).inc()
        if isinstance(action, TakeSavepoint):  # its failpoints surround the call to the driver
            return self._carry_out(body, action)
        with failpoints.around(kind):
            return self._carry_out(body, action)

    def _carry_out(self, body: dict[str, Any], action: Action) -> float | None:  # noqa: PLR0911 - one per kind
        """Every kind of action has its case; a kind without one fails the type check (assert_never)."""
        namespace = body["metadata"]["namespace"]
        match action:
            case EnsureDriver():
                self.attempts.ensure(body, action)
                return None if action.check_only else SCHEDULING_SECONDS
            case DeletePod():
                self._delete_pod(body, action)
                return AGAIN
            case ReleaseDriverLease():
                self._release_lease(body, action)
                return None
            case MarkWriter():
                metadata = body["metadata"]
                budget = manifests.executor_disruption_budget(
                    metadata["name"], namespace, metadata["uid"], action.run, action.attempt, executors=action.executors
                )
                self._put_executor_budget(budget)  # before the label: a failed label is retried with it right
                labels = {names.WRITER: "true", names.EXECUTOR_BUDGET: str(action.executors)}
                self._cached("pod", self.kube.label_pod(namespace, action.name, labels))
                return None
            case RescaleInPlace():
                return None if self.drivers.rescale(body, action) else DRIVER_RETRY_SECONDS
            case PromoteDriver():
                return AGAIN if self.drivers.promote(body, action) else DRIVER_RETRY_SECONDS
            case CreateSavepointResource():
                app = body["metadata"]["name"]
                resource = savepoint_resource(
                    namespace, app, action.name, action.reason, operator_made=True, dispose=action.dispose
                )
                self._cached("savepoint", self.kube.create_savepoint(namespace, resource))
                return AGAIN
            case TakeSavepoint():
                self.savepoints.take(body, action)
                return AGAIN
            case SetSavepointStatus():
                self.savepoints.set_status(body, action)
                return AGAIN
            case DeleteSavepointResource():
                self.kube.delete_savepoint(namespace, action.name)
                self.cache.forget("savepoint", namespace, action.name)
                return AGAIN
            case SetFinalizer():
                self._cached(
                    "app", self.kube.set_app_finalizer(body, names.FINAL_SAVEPOINT_FINALIZER, present=action.present)
                )
                return None
            case _:
                assert_never(action)

    def _put_executor_budget(self, budget: dict[str, Any]) -> None:
        """The executors' budget over the writer's attempt; one the API server refuses (an admission policy against
        budgets that allow no eviction) is logged and the writer is labelled all the same: its executors are then
        evicted by a drain as before, which costs a longer pause, not the app."""
        try:
            self.kube.put(budget)
        except Refused as error:
            logger.warning("the executors' budget was refused; a drain evicts them at once: %s", error)

    def _delete_pod(self, body: dict[str, Any], action: DeletePod) -> None:
        """Delete a driver pod, its log kept first when it has ended (`keep_log`)."""
        namespace = body["metadata"]["namespace"]
        if action.keep_log:
            driver_logs.keep(self.kube, body, action.name, self.clock())
        logger.info("deleting driver pod %s/%s: %s", namespace, action.name, action.reason)
        self._cached("pod", self.kube.delete_pod(namespace, action.name, action.grace_seconds))

    def _release_lease(self, body: dict[str, Any], action: ReleaseDriverLease) -> None:
        namespace, app = body["metadata"]["namespace"], body["metadata"]["name"]
        if self.kube.release_lease(namespace, names.driver_lease(app), action.holder, self.clock()):
            logger.info("released the driver Lease of %s/%s: %s", namespace, app, action.reason)

    def _cached(self, kind: Kind, written: dict[str, Any] | None) -> None:
        """A write's answer goes into the cache (None: nothing was written, or the object is gone)."""
        if written is not None:
            self.cache.wrote(kind, written)

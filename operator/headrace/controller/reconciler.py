"""One reconciliation of one app, a fixed flow: observe, decide, record the intent, act, post events.

The status written before acting is the write-ahead log: a crash after it leaves
`pendingOperation` behind, and the next reconciliation (of this or a restarted operator) resumes it.
Each step (status written, before and after each action) is a failpoint the crash tests arm.
What it observes comes from the watches' cache (`headrace.controller.cache`, which says why that is
safe), not from the API server; every write's answer goes back into the cache, and a write or action
whose watch event used to wake the app (now ignored as an echo) asks for the next reconciliation itself.

Who does what: `StatusRecorder` writes statuses; `Actions` carries out the plan's actions through
`AttemptObjects` (creating an attempt), `Drivers` (driver calls and their credentials) and `SavepointCalls`;
`DriverLeases` and `NodeStates` read what the fence and drains need. This module owns only the flow, the
reconcile metrics, a refused attempt (decided again knowing the refusal) and posting the plan's events.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from headrace.adapters.driver import DriverControl
from headrace.adapters.kube import Conflict, Gone, KubeClient, Refused
from headrace.api import names
from headrace.controller import unreadable
from headrace.controller.actions import AGAIN, SCHEDULING_SECONDS, Actions
from headrace.controller.attempt_objects import AttemptObjects
from headrace.controller.cache import Cache
from headrace.controller.driver_leases import DriverLeases
from headrace.controller.drivers import Drivers
from headrace.controller.metrics import OperatorMetrics
from headrace.controller.nodes import NodeStates
from headrace.controller.observe import (
    app_view,
    attempt_executor_nodes,
    current_driver_pod,
    deleted_executors,
    ended_nodes,
    lease_wanted,
    live_nodes,
    observe,
    read_driver_pod,
    running_nodes,
    standby_beside,
)
from headrace.controller.savepoint_calls import SavepointCalls
from headrace.controller.status_recorder import StatusRecorder
from headrace.core import executors, fence
from headrace.core.observation import DriverLease, Observation, Refusal
from headrace.core.plan import Action, EnsureDriver, Plan, SetSavepointStatus
from headrace.core.planner import AppView, decide
from headrace.core.validation import DEFAULT_POLICY, TenantPolicy
from headrace.render.security import NO_PEERS, Peers

logger = logging.getLogger(__name__)

CONFLICT_RETRY_SECONDS = 0.2


class Reconciler:
    """Carries out the planner's decisions for one app at a time (callers serialize per app)."""

    def __init__(
        self,
        kube: KubeClient,
        cache: Cache,
        driver: DriverControl,
        metrics: OperatorMetrics,
        clock: Callable[[], datetime],
        *,
        policy: TenantPolicy = DEFAULT_POLICY,
        operator_namespace: str | None = None,
        peers: Peers = NO_PEERS,
        savepoint_runner: Callable[[Callable[[], None]], object] | None = None,
        nodes: NodeStates | None = None,
    ) -> None:
        self.kube = kube
        self.cache = cache  # what the watches saw, and every write's answer (write-through)
        self.metrics = metrics
        self.recorder = StatusRecorder(kube, cache, metrics)  # the one writer of statuses
        self.clock = clock
        self.policy = policy  # the cluster admin's tenant policy (settings: HEADRACE_TENANT_POLICY)
        self.drivers = Drivers(kube, driver)
        # `peers`: namespaces admitted to the metrics and UI ports (settings: HEADRACE_*_NAMESPACES)
        self.attempts = AttemptObjects(
            kube, cache, self.drivers.secrets, self._now, operator_namespace=operator_namespace, peers=peers
        )
        # Savepoint calls (minutes while the driver copies) run on `savepoint_runner`, not on a reconcile worker.
        self.savepoints = SavepointCalls(self.drivers, self.recorder, metrics, self._now, savepoint_runner)
        self.actions = Actions(
            kube,
            cache,
            metrics,
            self._now,
            attempts=self.attempts,
            drivers=self.drivers,
            savepoints=self.savepoints,
        )
        # driver Leases as read, for the fence (also read on a schedule of their own: `LeaseSweep`)
        self.leases = DriverLeases(kube.read_lease, clock)
        # whether the drivers' nodes are being drained or lost (fed by the Node watch too: `headrace.handlers`)
        self._nodes = nodes if nodes is not None else NodeStates(kube.read_node)

    def _now(self) -> datetime:
        """The clock, as the services see it (a test may replace `clock`)."""
        return self.clock()

    def reconcile(self, namespace: str, name: str) -> float | None:
        """Reconcile one app; returns when to reconcile it again (None: only on the next event)."""
        started = time.monotonic()
        try:
            delay = self._reconcile(namespace, name)
        except (Conflict, Gone):  # the status write found the cached app stale, or deleted meanwhile
            self.metrics.reconciles.labels("conflict").inc()
            self._refresh(namespace, name)
            return CONFLICT_RETRY_SECONDS
        except Exception:
            self.metrics.reconciles.labels("error").inc()
            raise
        finally:
            self.metrics.reconcile_seconds.observe(time.monotonic() - started)
        self.metrics.reconciles.labels("success").inc()
        return delay

    def ask_ahead(self, namespace: str, name: str) -> None:
        """Ask the app's current driver for its status now, before a poll's reconciliation is queued, on a thread
        that is not a reconcile worker (`WorkQueue`'s `prepare`): the reconciliation then uses this answer, so
        a driver that waits out its timeout holds no worker. Nothing to ask: nothing is kept."""
        body = self.cache.app(namespace, name)
        pod = current_driver_pod(body, self.cache.pods(namespace, name)) if body is not None else None
        if body is not None and pod is not None:
            self.drivers.ask_ahead(body, pod)

    def _refresh(self, namespace: str, name: str) -> None:
        """A write found the cached app stale (Conflict) or gone, or its CRD changed: read it from the API server."""
        body = self.kube.get_app(namespace, name)
        if body is None:
            self.cache.forget("app", namespace, name)
        else:
            self.cache.fresh("app", body)

    def _reconcile(self, namespace: str, name: str) -> float | None:
        if self.cache.unsettled("app"):  # the app's CRD changed: its watch may deliver it under the old schema
            self._refresh(namespace, name)
        body = self.cache.app(namespace, name)
        if body is None or _gone(body):
            self.metrics.forget_app((namespace, name))
            self.drivers.forget(namespace, name)
            self.attempts.forget(namespace, name)
            self.leases.forget(namespace, name)
            return None
        view = dataclasses.replace(app_view(body), policy=self.policy)
        if view.status_problems and view.deleting_since is not None and view.final_savepoint_finalizer:
            self.kube.set_app_finalizer(body, names.FINAL_SAVEPOINT_FINALIZER, present=False)  # never stuck
            return None
        if view.status_problems:  # never taken for an empty status (that would start run 1 again)
            unreadable.hold_app(self.kube, self.recorder, body, view, self.clock())
            return None
        observation = self._observe(body, view)
        now = self.clock()
        plan = decide(view, observation, now)
        delay = plan.requeue_after
        if (written := self.recorder.decision(body, view.status, plan, observation, now)) is not None:
            body, delay = written, _after_status_write(plan)
        # The events tell what the status now records: posted before the actions, so an action that raises (the
        # next reconcile decides from the written status and does not decide the same event again) loses none,
        # and a reader who sees the status change finds its event without waiting for slow actions.
        self._post_events(body, plan, now)
        for action in plan.actions:
            try:
                delay = _sooner(delay, self.actions.act(body, action))
            except Refused as error:  # the remaining actions are dropped: decided again, knowing the refusal
                return self._refused(
                    body, replace(view, status=plan.status), observation, action=action, error=error, now=now
                )
            if isinstance(action, SetSavepointStatus):
                self.savepoints.count_settled(action, observation, now)
        logger.debug(
            "reconciled %s/%s: status %s, actions %s, again in %s",
            namespace,
            name,
            "written" if written is not None else "unchanged",
            [type(action).__name__ for action in plan.actions],
            delay,
        )
        return delay

    def _observe(self, body: dict[str, Any], view: AppView) -> Observation:
        """What the planner decides on: the cache's pods and savepoints, the drivers' answers, the fence's Lease
        and the drivers' nodes, and the executors being deleted while the driver is short of some."""
        metadata = body["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        pods = self.cache.pods(namespace, name)
        lease = self.leases.observe(namespace, name) if self._lease_suspect(body, pods) else None
        if lease is not None and _expired_for_current(body, pods, lease, self.clock()):
            # it stopped writing and exited (LeaseLost) or is lost with its node: it would not answer, and asking
            # could only wait for the call's timeout
            driver_status, unanswered = None, True
        else:
            driver_status, unanswered = self.drivers.answer(body, pods)
        if lease is None and lease_wanted(pods, unanswered=unanswered):
            lease = self.leases.observe(namespace, name)
        observation = observe(
            pods,
            self.cache.savepoints(namespace, name),
            driver_status,
            unanswered=unanswered,
            savepoints_in_flight=self.savepoints.in_flight(namespace),
            prewarmed_status=self.drivers.prewarmed_status(body, view.status, pods),
            lease=lease,
            draining_nodes=self._nodes.draining(running_nodes(pods)),
            ready_nodes=self._nodes.ready(ended_nodes(pods)),
            lost_nodes=self._nodes.lost(live_nodes(pods)),
        )
        if (beside := standby_beside(body, pods)) is not None:
            spec = beside.get("spec") or {}
            free = self._nodes.other_free(
                spec["nodeName"], spec.get("tolerations") or [], spec.get("nodeSelector") or {}
            )
            observation = replace(observation, other_node_free=free)
        if self._nodes.any_draining():
            observation = self._with_draining_executors(namespace, name, observation)
        if executors.short(observation):  # one may be stuck on a lost node: Spark replaces it once its pod is gone
            observation = self._with_deleted_executors(namespace, name, observation)
        return observation

    def _lease_suspect(self, body: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
        """Whether the app's Lease, as last read (`LeaseSweep`, or an earlier reconcile), may have expired for its
        current driver: then it is read again before the driver is asked (which could only wait for a timeout)."""
        metadata = body["metadata"]
        last = self.leases.last(metadata["namespace"], metadata["name"])
        return last is not None and _expired_for_current(body, pods, last[0], self.clock())

    def _with_draining_executors(self, namespace: str, name: str, observation: Observation) -> Observation:
        """The writing driver, when one of its attempt's executors is on a node being drained (one list of the app's
        executor pods, only while some node drains): their budget holds the drain, so the driver moves (a handover)
        as when its own node drains (`headrace.core.drain`)."""
        writers = [pod for pod in observation.drivers if pod.writer and not pod.deleting and not pod.node_draining]
        if not writers:
            return observation
        pods = self.kube.list_executor_pods(namespace, name)
        moved = {
            pod.name for pod in writers if self._nodes.draining(attempt_executor_nodes(pods, pod.run, pod.attempt))
        }
        if not moved:
            return observation
        drivers = tuple(replace(pod, executors_draining=pod.name in moved) for pod in observation.drivers)
        return replace(observation, drivers=drivers)

    def _with_deleted_executors(self, namespace: str, name: str, observation: Observation) -> Observation:
        """The app's executor pods being deleted, and whether their nodes are lost."""
        pods = [
            pod for pod in self.kube.list_executor_pods(namespace, name) if pod["metadata"].get("deletionTimestamp")
        ]
        nodes = {node for pod in pods if (node := (pod.get("spec") or {}).get("nodeName"))}
        return replace(observation, executors=deleted_executors(pods, self._nodes.lost(nodes)))

    def _refused(
        self,
        body: dict[str, Any],
        view: AppView,
        observation: Observation,
        *,
        action: Action,
        error: Refused,
        now: datetime,
    ) -> float | None:
        """Record a refused attempt (status.error, Degraded, an event, backoff) instead of retrying it blindly."""
        if not isinstance(action, EnsureDriver):
            raise error
        metadata = body["metadata"]
        logger.warning("creating the driver of %s/%s was refused: %s", metadata["namespace"], metadata["name"], error)
        refusal = Refusal(action.run, action.attempt, error.what, error.message, dry_run=action.check_only)
        plan = decide(view, replace(observation, refused=refusal), now)
        written = self.recorder.decision(body, view.status, plan, observation, now)
        self._post_events(written or body, plan, now)
        return AGAIN if written is not None else plan.requeue_after

    def _post_events(self, body: dict[str, Any], plan: Plan, now: datetime) -> None:
        for event in plan.events:
            self.metrics.events.labels(event.type).inc()
            try:
                self.kube.post_event(body, type_=event.type, reason=event.reason, message=event.message, now=now)
            except Exception:  # an event lost is not worth a failed reconcile
                logger.exception("could not post event %s", event.reason)


def _after_status_write(plan: Plan) -> float:
    """When to decide again after writing the status: at once (as its echo used to wake the app), unless a
    driver pod is being created (then its scheduling is waited for, see SCHEDULING_SECONDS)."""
    creating = any(isinstance(action, EnsureDriver) and not action.check_only for action in plan.actions)
    return SCHEDULING_SECONDS if creating else AGAIN


def _expired_for_current(body: dict[str, Any], pods: list[dict[str, Any]], lease: DriverLease, now: datetime) -> bool:
    """Whether `lease` counts expired for the app's current running driver (`fence.lease_expired`)."""
    pod = current_driver_pod(body, pods)
    driver = read_driver_pod(pod) if pod is not None else None
    return driver is not None and fence.lease_expired(driver, lease, now)


def _gone(body: dict[str, Any]) -> bool:
    """Deleted, and not waiting for a final savepoint (headrace.core.deletion): nothing more to decide."""
    metadata = body["metadata"]
    waits = names.FINAL_SAVEPOINT_FINALIZER in (metadata.get("finalizers") or ())
    return bool(metadata.get("deletionTimestamp")) and not waits


def _sooner(first: float | None, second: float | None) -> float | None:
    if first is None:
        return second
    if second is None:
        return first
    return min(first, second)

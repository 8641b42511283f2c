"""One reconciliation of one app: observe, decide, record the intent, act, post events.

The status written before acting is the write-ahead log: a crash after it leaves
`pendingOperation` behind, and the next reconciliation (of this or a restarted operator) resumes it.
Each step (status written, before and after each action) is a failpoint the crash tests arm.
What it observes comes from the watches' cache (`headrace.controller.cache`, which says why that is
safe), not from the API server; every write's answer goes back into the cache, and a write or action
whose watch event used to wake the app (now ignored as an echo) asks for the next reconciliation itself.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import replace
from datetime import datetime
from typing import Any, assert_never

from cryptography.hazmat.primitives.asymmetric import ec

from headrace.adapters.driver import DriverControl, DriverEndpoint, DriverUnavailable
from headrace.adapters.kube import Conflict, Gone, KubeClient, Refused
from headrace.api import names
from headrace.api import runtime_contract as contract
from headrace.api.models import StreamingAppStatus
from headrace.controller import driver_logs, failpoints, unreadable
from headrace.controller.cache import Cache
from headrace.controller.control_secrets import ControlSecrets
from headrace.controller.driver_leases import DriverLeases
from headrace.controller.ensured import EnsuredObjects, digest
from headrace.controller.metrics import OperatorMetrics
from headrace.controller.nodes import NodeStates
from headrace.controller.observe import (
    app_view,
    current_driver_pod,
    deleted_executors,
    ended_nodes,
    lease_wanted,
    observe,
    prewarmed_driver_pod,
    running_nodes,
    serves_control_tls,
)
from headrace.controller.status_recorder import StatusRecorder
from headrace.core import executors
from headrace.core.observation import Observation, Refusal
from headrace.core.plan import (
    Action,
    CreateSavepointResource,
    DeletePod,
    DeleteSavepointResource,
    EnsureDriver,
    MarkWriter,
    Plan,
    PromoteDriver,
    ReleaseDriverLease,
    RescaleInPlace,
    SetFinalizer,
    SetSavepointStatus,
    TakeSavepoint,
)
from headrace.core.planner import AppView, decide
from headrace.core.timefmt import format_time
from headrace.core.validation import DEFAULT_POLICY, TenantPolicy
from headrace.render import control_tls, manifests
from headrace.render.savepoints import savepoint_resource
from headrace.render.security import NO_PEERS, Peers

logger = logging.getLogger(__name__)

CONFLICT_RETRY_SECONDS = 0.2
DRIVER_RETRY_SECONDS = 5.0
CREATE_THREADS = 16  # an attempt's independent objects are created at once, from every reconcile worker
AGAIN = 0.0  # reconcile again at once: what the echo of the operator's own write used to trigger
# After creating a driver pod, the next reconcile waits this long for the scheduler's answer (its watch event
# wakes the app sooner), so one status write records the pod and where it stands instead of two.
SCHEDULING_SECONDS = 1.0
# A driver's status asked ahead of a poll's reconciliation (`ask_ahead`, off the reconcile workers) stands in for
# asking again within this long, if the app's current driver is still the pod that was asked.
ANSWER_FRESH_SECONDS = 5.0


@dataclasses.dataclass(frozen=True)
class _Answer:
    """A driver's answer asked ahead: which pod, when (monotonic), the document, whether it did not answer."""

    pod: tuple[str, str]  # name, uid
    at: float
    document: contract.StatusDocument | None
    unanswered: bool


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
    ) -> None:
        self.kube = kube
        self.cache = cache  # what the watches saw, and every write's answer (write-through)
        self.driver = driver
        self.metrics = metrics
        self.recorder = StatusRecorder(kube, cache, metrics)  # the one writer of statuses
        self.clock = clock
        self.policy = policy  # the cluster admin's tenant policy (settings: HEADRACE_TENANT_POLICY)
        self.operator_namespace = operator_namespace  # the operator pod's namespace (settings: POD_NAMESPACE)
        self.peers = peers  # namespaces admitted to the metrics and UI ports (settings: HEADRACE_*_NAMESPACES)
        # Savepoint calls (minutes while the driver copies) run here, not on a reconcile worker; default: inline.
        self._run_savepoint = savepoint_runner or (lambda call: call())
        self._in_flight: set[tuple[str, str]] = set()  # (namespace, StreamingSavepoint) being asked for
        self._in_flight_lock = threading.Lock()
        self._creates = ThreadPoolExecutor(max_workers=CREATE_THREADS, thread_name_prefix="create")
        self._answers: dict[tuple[str, str], _Answer] = {}  # (namespace, app) -> its driver's answer asked ahead
        self._answers_lock = threading.Lock()
        self._secrets = ControlSecrets(
            lambda namespace, app: kube.read_secret_values(namespace, names.control_secret(app))
        )
        self._ensured = EnsuredObjects()  # apps whose shared objects this process made (or found) itself
        self._leases = DriverLeases(kube.read_lease, clock)  # driver Leases as read, for the fence
        self._nodes = NodeStates(kube.read_node)  # whether the drivers' nodes are being drained

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
            self._secrets.forget(namespace, name)
            self._ensured.forget(namespace, name)
            self._leases.forget(namespace, name)
            self._answer_asked_ahead(namespace, name, None)
            return None
        view = dataclasses.replace(app_view(body), policy=self.policy)
        if view.status_problems and view.deleting_since is not None and view.final_savepoint_finalizer:
            self.kube.set_app_finalizer(body, names.FINAL_SAVEPOINT_FINALIZER, present=False)  # never stuck
            return None
        if view.status_problems:  # never taken for an empty status (that would start run 1 again)
            unreadable.hold_app(self.kube, self.recorder, body, view, self.clock())
            return None
        pods = self.cache.pods(namespace, name)
        driver_status, unanswered = self._driver_answer(body, pods)
        with self._in_flight_lock:
            in_flight = frozenset(item for space, item in self._in_flight if space == namespace)
        observation = observe(
            pods,
            self.cache.savepoints(namespace, name),
            driver_status,
            unanswered=unanswered,
            savepoints_in_flight=in_flight,
            prewarmed_status=self._prewarmed_status(body, view.status, pods),
            lease=self._leases.observe(namespace, name) if lease_wanted(pods, unanswered=unanswered) else None,
            draining_nodes=self._nodes.draining(running_nodes(pods)),
            ready_nodes=self._nodes.ready(ended_nodes(pods)),
        )
        if executors.short(observation):  # one may be stuck on a lost node: Spark replaces it once its pod is gone
            observation = self._with_deleted_executors(namespace, name, observation)
        now = self.clock()
        plan = decide(view, observation, now)
        delay = plan.requeue_after
        if (written := self.recorder.decision(body, view.status, plan, observation, now)) is not None:
            body, delay = written, _after_status_write(plan)
        for action in plan.actions:
            try:
                delay = _sooner(delay, self._act(body, action))
            except Refused as error:  # the remaining actions are dropped: decided again, knowing the refusal
                self._post_events(body, plan, now)
                return self._refused(
                    body, replace(view, status=plan.status), observation, action=action, error=error, now=now
                )
            if isinstance(action, SetSavepointStatus):
                self._record_settled_savepoint(action, observation, now)
        self._post_events(body, plan, now)
        logger.debug(
            "reconciled %s/%s: status %s, actions %s, again in %s",
            namespace,
            name,
            "written" if written is not None else "unchanged",
            [type(action).__name__ for action in plan.actions],
            delay,
        )
        return delay

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

    def _record_settled_savepoint(self, action: SetSavepointStatus, observation: Observation, now: datetime) -> None:
        """A savepoint outcome recorded without asking a driver: an import (not timed), or a savepoint
        interrupted by an operator restart (timed from its StreamingSavepoint's creation)."""
        resource = observation.savepoint(action.name)
        reason = resource.reason if resource is not None else None
        imported = resource is not None and resource.import_path is not None
        created = resource.created_at if resource is not None and not imported else None
        seconds = (now - created).total_seconds() if created is not None else None
        self.metrics.record_savepoint(reason, action.phase == "Succeeded", seconds)

    def _post_events(self, body: dict[str, Any], plan: Plan, now: datetime) -> None:
        for event in plan.events:
            self.metrics.events.labels(event.type).inc()
            try:
                self.kube.post_event(body, type_=event.type, reason=event.reason, message=event.message, now=now)
            except Exception:  # an event lost is not worth a failed reconcile
                logger.exception("could not post event %s", event.reason)

    def _act(self, body: dict[str, Any], action: Action) -> float | None:
        kind = type(action).__name__
        self.metrics.actions.labels(kind).inc()
        if isinstance(action, TakeSavepoint):  # its failpoints surround the call to the driver
            return self._carry_out(body, action)
        with failpoints.around(kind):
            return self._carry_out(body, action)

    def _carry_out(self, body: dict[str, Any], action: Action) -> float | None:  # noqa: C901, PLR0911, PLR0912 - one per kind
        """Every kind of action has its case; a kind without one fails the type check (assert_never).
        An action that changes what the cache holds asks for the next reconcile (AGAIN): its watch event is
        an echo, and the cache already has the answer."""
        namespace = body["metadata"]["namespace"]
        match action:
            case EnsureDriver():
                self._ensure_driver(body, action)
                return None if action.check_only else SCHEDULING_SECONDS
            case DeletePod():
                if action.keep_log:
                    driver_logs.keep(self.kube, body, action.name, self.clock())
                logger.info("deleting driver pod %s/%s: %s", namespace, action.name, action.reason)
                deleting = self.kube.delete_pod(namespace, action.name, action.grace_seconds)
                if deleting is not None:
                    self.cache.wrote("pod", deleting)
                return AGAIN
            case ReleaseDriverLease():
                app = body["metadata"]["name"]
                if self.kube.release_lease(namespace, names.driver_lease(app), action.holder, self.clock()):
                    logger.info("released the driver Lease of %s/%s: %s", namespace, app, action.reason)
                return None
            case MarkWriter():
                labelled = self.kube.label_pod(namespace, action.name, {names.WRITER: "true"})
                if labelled is not None:
                    self.cache.wrote("pod", labelled)
                return None
            case RescaleInPlace():
                return self._rescale(body, action)
            case PromoteDriver():
                return self._promote(body, action)
            case CreateSavepointResource():
                app = body["metadata"]["name"]
                resource = savepoint_resource(
                    namespace, app, action.name, action.reason, operator_made=True, dispose=action.dispose
                )
                self._wrote_savepoint(self.kube.create_savepoint(namespace, resource))
                return AGAIN
            case TakeSavepoint():
                self._take_savepoint(body, action)
                return AGAIN
            case SetSavepointStatus():
                status = {"phase": action.phase, "path": action.path, "message": action.message or None}
                self.recorder.savepoint(namespace, action.name, {**status, "time": format_time(self.clock())})
                return AGAIN
            case DeleteSavepointResource():
                self.kube.delete_savepoint(namespace, action.name)
                self.cache.forget("savepoint", namespace, action.name)
                return AGAIN
            case SetFinalizer():
                kept = self.kube.set_app_finalizer(body, names.FINAL_SAVEPOINT_FINALIZER, present=action.present)
                if kept is not None:
                    self.cache.wrote("app", kept)
                return None
            case _:
                assert_never(action)

    def _wrote_savepoint(self, written: dict[str, Any] | None) -> None:
        if written is not None:
            self.cache.wrote("savepoint", written)

    def _driver_status(self, body: dict[str, Any], pods: list[dict[str, Any]]) -> contract.StatusDocument | None:
        """The current driver's status document, when its pod runs, is not being deleted and answers (else None).

        A terminating driver is not asked: it is exiting, and the call could only wait for a timeout."""
        pod = current_driver_pod(body, pods)
        if pod is None:
            return None
        endpoint = self._endpoint(body, pod["status"]["podIP"], tls=serves_control_tls(pod))
        if endpoint is None:
            return None
        return self.driver.status(endpoint)  # DriverUnavailable: a missed heartbeat (see _ask_driver)

    def _prewarmed_status(
        self, body: dict[str, Any], status: StreamingAppStatus, pods: list[dict[str, Any]]
    ) -> contract.StatusDocument | None:
        """The status of a pre-warmed upgrade's new driver (None: there is none, or it does not answer yet)."""
        pod = prewarmed_driver_pod(status, pods)
        if pod is None:
            return None
        endpoint = self._endpoint(body, pod["status"]["podIP"], tls=serves_control_tls(pod))
        if endpoint is None:
            return None
        try:
            return self.driver.status(endpoint)
        except DriverUnavailable as error:  # still starting: its control endpoint is not up yet
            logger.debug("pre-warmed driver %s does not answer yet: %s", pod["metadata"]["name"], error)
            return None

    def ask_ahead(self, namespace: str, name: str) -> None:
        """Ask the app's current driver for its status now, before a poll's reconciliation is queued, on a thread
        that is not a reconcile worker (`WorkQueue`'s `prepare`): the reconciliation then uses this answer, so
        a driver that waits out its timeout holds no worker. Nothing to ask: nothing is kept."""
        body = self.cache.app(namespace, name)
        pod = current_driver_pod(body, self.cache.pods(namespace, name)) if body is not None else None
        if body is None or pod is None:
            return
        document, unanswered = self._ask_driver(body, [pod])
        with self._answers_lock:
            self._answers[(namespace, name)] = _Answer(_pod_identity(pod), time.monotonic(), document, unanswered)

    def _answer_asked_ahead(self, namespace: str, name: str, pod: dict[str, Any] | None) -> _Answer | None:
        """The answer asked ahead for the app (taken: used once), if it is fresh and from `pod`."""
        with self._answers_lock:
            answer = self._answers.pop((namespace, name), None)
        if answer is None or pod is None or answer.pod != _pod_identity(pod):
            return None
        return answer if time.monotonic() - answer.at <= ANSWER_FRESH_SECONDS else None

    def _driver_answer(
        self, body: dict[str, Any], pods: list[dict[str, Any]]
    ) -> tuple[contract.StatusDocument | None, bool]:
        """`_ask_driver`'s answer, from `ask_ahead` when that asked the same driver moments ago."""
        metadata = body["metadata"]
        answer = self._answer_asked_ahead(metadata["namespace"], metadata["name"], current_driver_pod(body, pods))
        if answer is not None:
            return answer.document, answer.unanswered
        return self._ask_driver(body, pods)

    def _ask_driver(
        self, body: dict[str, Any], pods: list[dict[str, Any]]
    ) -> tuple[contract.StatusDocument | None, bool]:
        """The driver's status document, and whether it was asked and did not answer (the planner counts the time
        it has not answered against restartPolicy.heartbeatTimeout)."""
        try:
            return self._driver_status(body, pods), False
        except DriverUnavailable as error:
            metadata = body["metadata"]
            logger.info("driver of %s/%s did not answer: %s", metadata["namespace"], metadata["name"], error)
            if error.credentials_refused:
                self._secrets.forget(metadata["namespace"], metadata["name"])
            return None, True

    def _endpoint(self, body: dict[str, Any], address: str | None, *, tls: bool) -> DriverEndpoint | None:
        metadata = body["metadata"]
        values = self._secrets.values(metadata["namespace"], metadata["name"], str(metadata.get("uid") or ""))
        return endpoint_from(values, metadata["namespace"], metadata["name"], address, tls=tls)

    def _take_savepoint(self, body: dict[str, Any], action: TakeSavepoint) -> None:
        """Mark the StreamingSavepoint InProgress, then ask the driver through the savepoint runner (off the reconcile
        worker): the outcome is recorded on the StreamingSavepoint, whose change wakes the app again."""
        namespace = body["metadata"]["namespace"]
        self.recorder.savepoint(namespace, action.name, {"phase": "InProgress", "path": action.path})
        key = (namespace, action.name)
        with self._in_flight_lock:
            self._in_flight.add(key)

        def call() -> None:
            try:
                self._call_savepoint(body, action)
            except Exception:  # the StreamingSavepoint stays InProgress: the planner settles it as interrupted
                logger.exception("savepoint %s/%s: recording the outcome failed", *key)
            finally:
                with self._in_flight_lock:
                    self._in_flight.discard(key)

        self._run_savepoint(call)

    def _call_savepoint(self, body: dict[str, Any], action: TakeSavepoint) -> None:
        namespace = body["metadata"]["namespace"]
        endpoint = self._endpoint(body, action.address, tls=action.control_tls)
        started = time.monotonic()
        try:
            if endpoint is None:
                raise DriverUnavailable("the driver has no address, control token or control certificate yet")
            failpoints.hit("before:TakeSavepoint")
            record = self.driver.savepoint(endpoint, path=action.path, reason=action.reason, stop=action.stop)
            failpoints.hit("after:TakeSavepoint")
        except DriverUnavailable as error:
            logger.warning("savepoint %s/%s failed: %s", namespace, action.name, error)
            failed = {"phase": "Failed", "message": str(error), "time": format_time(self.clock())}
            self.recorder.savepoint(namespace, action.name, failed, echo=False)  # its watch event wakes the app
            self.metrics.record_savepoint(action.reason, False, time.monotonic() - started)
            return
        batches = [query.get("batchId") for query in record.get("queries", []) if query.get("batchId") is not None]
        succeeded = {
            "phase": "Succeeded",
            "path": record.get("path", action.path),
            "batchId": max(batches) if batches else None,
            "sizeBytes": record.get("sizeBytes"),
            "time": format_time(self.clock()),
            "message": None,
        }
        self.recorder.savepoint(namespace, action.name, succeeded, echo=False)  # its watch event wakes the app
        self.metrics.record_savepoint(action.reason, True, time.monotonic() - started)

    def _ensure_driver(self, body: dict[str, Any], action: EnsureDriver) -> None:
        metadata = body["metadata"]
        attempt = manifests.Attempt.of(
            action,
            app=metadata["name"],
            namespace=metadata["namespace"],
            app_uid=metadata["uid"],
            operator_namespace=self.operator_namespace,
            peers=self.peers,
        )
        if action.check_only:  # would the API server take the new attempt? (dryRun=All: nothing is stored)
            for obj in manifests.attempt_objects(attempt):
                self.kube.create(obj, dry_run=True)
            return
        shared = manifests.app_objects(attempt)
        made = digest(shared)
        if action.after_ran and self._ensured.known(attempt.namespace, attempt.app, attempt.app_uid, made):
            self._restart_attempt(attempt)
            return
        self._ensured.forget(attempt.namespace, attempt.app)  # until every one is made again
        # The token and the certificate's key are made here, at the edge; an existing Secret (AlreadyExists) keeps
        # its token and certificate.
        # Everything but the pod is independent: created at once, then the pod, which needs its ServiceAccount
        # (admission refuses a pod whose ServiceAccount does not exist) and mounts the Secret and ConfigMap.
        *independent, pod = manifests.attempt_objects(attempt)
        secret = manifests.control_secret(attempt, secrets.token_urlsafe(32), self._certificate(attempt))
        self._secrets.forget(attempt.namespace, attempt.app)  # made (or completed) here: read again at the next call
        created = self._create_all([secret, *independent])
        if created[0] is None:
            self._complete_control_secret(attempt)
            self._secrets.forget(attempt.namespace, attempt.app)  # and a read made meanwhile (`ask_ahead`) is not kept
        else:  # created with these values: the first driver call needs no GET of it
            self._secrets.made(attempt.namespace, attempt.app, attempt.app_uid, secret["stringData"])
        self._ensured.remember(attempt.namespace, attempt.app, attempt.app_uid, made)
        for obj in [secret, *independent]:
            failpoints.hit(f"inside:EnsureDriver/{obj['kind']}")
        if (attempt.run, attempt.attempt) != (1, 1):
            self.kube.prune_attempt_objects(
                attempt.namespace, attempt.app, attempt.run, attempt.attempt, also_keep=action.keep
            )
            failpoints.hit("inside:EnsureDriver/pruned")
        self._create_pod(pod)

    def _restart_attempt(self, attempt: manifests.Attempt) -> None:
        """The next attempt of a run whose last one ran with the app's shared objects, which this process made:
        only the attempt's own objects are created (its ConfigMap and Service, with the failed attempt's removed
        by name, at once), then its pod. 5 requests instead of 13 or more (docs/operations.md, "Restarts")."""
        config_map, service, pod = manifests.attempt_objects(attempt)[-3:]
        calls: list[Future[Any]] = [
            self._creates.submit(self.kube.create, config_map),
            self._creates.submit(self.kube.create, service),
            self._creates.submit(
                self.kube.delete_attempt_objects, attempt.namespace, attempt.app, attempt.run, attempt.attempt - 1
            ),
        ]
        wait(calls)
        for call in calls:
            call.result()
        for obj in (config_map, service):
            failpoints.hit(f"inside:EnsureDriver/{obj['kind']}")
        failpoints.hit("inside:EnsureDriver/pruned")
        self._create_pod(pod)

    def _create_pod(self, pod: dict[str, Any]) -> None:
        made = self.kube.create(pod)
        if made is not None:
            self.cache.wrote("pod", made)  # the next reconcile sees its driver before the watch reports it
        failpoints.hit("inside:EnsureDriver/Pod")  # the same as after:EnsureDriver

    def _create_all(self, objects: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
        """Create independent objects concurrently; each one's answer (None: it existed). The first refusal, in
        the objects' order, is raised once every create has finished."""
        futures = [self._creates.submit(self.kube.create, obj) for obj in objects]
        wait(futures)
        return [future.result() for future in futures]

    def _certificate(self, attempt: manifests.Attempt) -> control_tls.ControlCertificate:
        """A new control certificate for the app, with a new key (randomness and time come from the edge)."""
        key = ec.generate_private_key(ec.SECP256R1())
        return control_tls.control_certificate(attempt.app, attempt.namespace, key, self.clock())

    def _complete_control_secret(self, attempt: manifests.Attempt) -> None:
        """An existing control Secret made by an older operator gains the keys this version's pods mount: those
        derived from its token (Spark's authentication secret) and the control certificate with its key (both,
        new, unless it has both), so an upgraded operator's next driver starts instead of failing on a
        missing Secret key."""
        name = names.control_secret(attempt.app)
        values = self.kube.read_secret_values(attempt.namespace, name)
        token = (values or {}).get(manifests.TOKEN_KEY)
        if values is None or token is None:
            return
        missing = manifests.missing_control_secret_values(values, token, lambda: self._certificate(attempt))
        if missing:
            self.kube.add_secret_values(attempt.namespace, name, missing)

    def _promote(self, body: dict[str, Any], action: PromoteDriver) -> float | None:
        namespace = body["metadata"]["namespace"]
        endpoint = self._endpoint(body, action.address, tls=action.control_tls)
        if endpoint is None:
            return DRIVER_RETRY_SECONDS
        try:
            answer = self.driver.promote(
                endpoint, restore_from=action.restore_from, allow_repartition=action.allow_repartition
            )
        except DriverUnavailable as error:
            logger.warning("promoting standby driver %s/%s failed (%s); will retry", namespace, action.pod, error)
            return DRIVER_RETRY_SECONDS
        logger.info("promoted standby driver %s/%s: %s", namespace, action.pod, answer)
        return AGAIN

    def _rescale(self, body: dict[str, Any], action: RescaleInPlace) -> float | None:
        metadata = body["metadata"]
        endpoint = self._endpoint(body, action.address, tls=action.control_tls)
        if endpoint is None:
            return DRIVER_RETRY_SECONDS
        try:
            self.driver.rescale(endpoint, action.executors)
        except DriverUnavailable:
            logger.warning("rescale of %s/%s failed; will retry", metadata["namespace"], metadata["name"])
            return DRIVER_RETRY_SECONDS
        return None


def driver_endpoint(
    kube: KubeClient, namespace: str, app: str, address: str | None, *, tls: bool
) -> DriverEndpoint | None:
    """How to reach the app's driver at `address`: the app's token and, when the pod serves TLS, the app's certificate
    (the only one trusted). None without an address, a token, or the certificate a TLS pod needs: the token is
    never sent in plain HTTP to a pod that serves TLS."""
    return endpoint_from(
        kube.read_secret_values(namespace, names.control_secret(app)) or {}, namespace, app, address, tls=tls
    )


def endpoint_from(
    values: dict[str, str], namespace: str, app: str, address: str | None, *, tls: bool
) -> DriverEndpoint | None:
    """`driver_endpoint` from the control Secret's values."""
    token, certificate = values.get(manifests.TOKEN_KEY), values.get(control_tls.CERT_KEY)
    if address is None or token is None or (tls and certificate is None):
        return None
    if not tls:
        return DriverEndpoint(address, token, certificate=None)
    return DriverEndpoint(address, token, certificate, names.control_server_name(app, namespace))


def _pod_identity(pod: dict[str, Any]) -> tuple[str, str]:
    metadata = pod["metadata"]
    return str(metadata["name"]), str(metadata.get("uid") or "")


def _after_status_write(plan: Plan) -> float:
    """When to decide again after writing the status: at once (as its echo used to wake the app), unless a
    driver pod is being created (then its scheduling is waited for, see SCHEDULING_SECONDS)."""
    creating = any(isinstance(action, EnsureDriver) and not action.check_only for action in plan.actions)
    return SCHEDULING_SECONDS if creating else AGAIN


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

"""kopf glue: watch StreamingApps, their StreamingSavepoints and driver pods; feed the cache and the work queue.

Every handler is async and only files what it saw and enqueues; the reconciler decides. Per object kind:
- an index handler puts each listed or changed object into the cache (`headrace.controller.cache`).
  kopf runs index handlers for the initial listing of every kind before it runs any other handler, so
  the first reconcile of an app already sees every driver pod and savepoint that existed at start;
- an event handler removes deleted objects from the cache and queues the object's app, unless the event
  is only the echo of the operator's own write (the reconciler already asked for what follows it), and
  notices a watch that listed again after a break (the cache is then checked against a fresh list).
A Node watch (`watch_nodes`, where the operator may list and watch Nodes: `headrace.app` asks first) keeps only
what `headrace.controller.nodes.NodeStates` needs (no kopf index: a cluster may have thousands of Nodes): each
event replaces that node's state at once (no GET), and only when its being drained or lost changed are the apps
with a driver pod on it queued, so a cordon reaches its drivers' apps in about a second, not at their next poll;
when a node takes pods again (back Ready, uncordoned), the apps whose warm standby shares the writing driver's node
are queued, so the standby moves within seconds of the node's return.
A fourth watch, of our two CRDs, notices a CRD replaced under the running operator (`helm upgrade`): the
kind's watch may then deliver objects read under the old schema for a while, so apps are read afresh and
the cache is checked against fresh lists meanwhile (`Cache.schema_changed`, `Verifier.schema_changed`).
The pod watch asks the API server only for Headrace's driver pods (a server-side label selector,
`settings.watching.label_selectors`): other pods in the watched namespaces are never streamed. The
StreamingApp and StreamingSavepoint watches need none: every object of those kinds is Headrace's, and a
StreamingSavepoint made by hand may carry no labels at all.
kopf builds every event's object "essence" (a deep copy, for the diffs change handlers see) whether or not the kind
has change handlers; only StreamingSavepoints have one (the deletion handler below), so `SavepointsOnlyDiffBase`
skips that copy for every other kind (at 50 apps/s it was 15 % of the operator's CPU: docs/operations.md,
"The operator itself").
Event and index handlers (unlike kopf's change handlers and daemons) put no finalizers or annotations on
anyone's objects, so deleting an app never waits for the operator. The one exception: a StreamingSavepoint
with spec.disposeOnDelete carries the finalizer `FINALIZER` (kopf adds it to those only), and its deletion
handler hands the disposal of its files to `dispose` (`headrace.controller.disposal`), which bounds its
tries. `headrace.app` builds the queue, the cache and the disposer and registers these on its registry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any, Protocol

import kopf

from headrace.api import models, names
from headrace.controller.cache import SCHEMA_SETTLE_SECONDS, AppKey, Cache, Kind, Verifier, on_event
from headrace.controller.workqueue import WorkQueue

logger = logging.getLogger(__name__)

FINALIZER = names.DISPOSE_FINALIZER


class NodeChanged(Protocol):
    """What a Node event changed (`headrace.controller.nodes.NodeChange`)."""

    @property
    def moved(self) -> bool:
        """Its being drained or lost changed."""

    @property
    def freed(self) -> bool:
        """It may take pods now and could not before."""


# (Node name, its body or None once deleted) -> what changed (`NodeStates.observed`)
NodeObserved = Callable[[str, dict[str, Any] | None], NodeChanged]
# (StreamingSavepoint body, tries so far, seconds since the first) -> None: done; (seconds, why): try again then
Dispose = Callable[[dict[str, Any], int, float], tuple[float, str] | None]


class Periodic(Protocol):
    """Work the operator does on a schedule of its own while the workers run (`headrace.controller.lease_sweep`)."""

    def start(self) -> None:
        """Start, on the running loop."""

    async def stop(self) -> None:
        """Stop."""


def register(
    registry: kopf.OperatorRegistry,
    queue: WorkQueue,
    cache: Cache,
    workers: int,
    *,
    verifier: Verifier,
    dispose: Dispose | None = None,
    nodes: NodeObserved | None = None,
    lease_sweep: Periodic | None = None,
) -> None:
    """Register the handlers on `registry`; they start, feed and stop `queue` (run by `workers` workers), feed
    `cache`, run `verifier` (which checks the cache after a watch relisted, and periodically), with `dispose`,
    delete the files of StreamingSavepoints deleted with disposeOnDelete, with `nodes` (`NodeStates.observed`),
    watch Nodes into it and, with `lease_sweep`, run it (the drivers' Leases read on a schedule) while the workers
    run."""

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        """Credentials as the kubernetes client finds them (kopf's default, which a registry of our own lacks)."""
        return kopf.login_via_client(**kwargs)

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        """Configure kopf and start the workers."""
        configure(settings)
        queue.start()
        verifier.start()
        if lease_sweep is not None:
            lease_sweep.start()
        logger.info("headrace operator started with %d workers", workers)

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        """Stop the workers."""
        await verifier.stop()
        if lease_sweep is not None:
            await lease_sweep.stop()
        await queue.stop()

    for kind, resource in WATCHED.items():
        _watch(registry, kind, resource, cache=cache, queue=queue, verifier=verifier)
    _watch_crds(registry, cache=cache, verifier=verifier)
    if nodes is not None:
        watch_nodes(registry, nodes=nodes, cache=cache, queue=queue)
    if dispose is not None:
        _dispose_on_delete(registry, dispose)


def configure(settings: kopf.OperatorSettings) -> None:
    """kopf's settings for this operator (applied at startup)."""
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.label_selectors["pods"] = names.DRIVER_SELECTOR  # server-side: only driver pods
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=models.GROUP)
    settings.persistence.diffbase_storage = SavepointsOnlyDiffBase(prefix=models.GROUP)
    settings.persistence.finalizer = FINALIZER


class SavepointsOnlyDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotation-stored diff base, built only for StreamingSavepoints (the one kind with a change handler):
    every other kind's essence is empty, as nothing reads its diff. An object whose kind is not named (kopf names
    listed ones too) gets the full essence."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        """The essence kopf diffs, or an empty one for kinds without change handlers."""
        if body.get("kind") in WITHOUT_CHANGE_HANDLERS:
            return kopf.BodyEssence()
        return super().build(body=body, extra_fields=extra_fields)


WITHOUT_CHANGE_HANDLERS = frozenset({models.APP_KIND, "Pod", "Node", "CustomResourceDefinition"})


def _dispose_on_delete(registry: kopf.OperatorRegistry, dispose: Dispose) -> None:
    @kopf.on.delete(
        models.GROUP,
        models.VERSION,
        models.SAVEPOINT_PLURAL,
        registry=registry,
        field="spec.disposeOnDelete",
        value=True,
        errors=kopf.ErrorsMode.TEMPORARY,
    )
    def savepoint_deleted(body: kopf.Body, retry: int, runtime: timedelta, **_: Any) -> None:
        """A StreamingSavepoint with disposeOnDelete is being deleted: its files go first (bounded tries)."""
        waiting = dispose(dict(body), retry, runtime.total_seconds())
        if waiting is not None:
            seconds, why = waiting
            raise kopf.TemporaryError(why, delay=seconds)


WATCHED: dict[Kind, tuple[str, ...]] = {
    "app": (models.GROUP, models.VERSION, models.APP_PLURAL),
    "savepoint": (models.GROUP, models.VERSION, models.SAVEPOINT_PLURAL),
    "pod": ("pods",),  # only driver pods: the label selector set at startup
}


def _watch(
    registry: kopf.OperatorRegistry,
    kind: Kind,
    resource: tuple[str, ...],
    *,
    cache: Cache,
    queue: WorkQueue,
    verifier: Verifier,
) -> None:
    """One kind's two handlers: the index handler files each listed or changed object in the cache (before any
    other handler runs at start); the event handler files deletions and queues the object's app."""

    @kopf.index(*resource, id=f"{kind}-cache", registry=registry)
    async def filed(body: kopf.Body, **_: Any) -> None:
        cache.observed(kind, dict(body))

    @kopf.on.event(*resource, id=f"{kind}-changed", registry=registry)
    async def changed(event: kopf.RawEvent, **_: Any) -> None:
        key, relisted = on_event(cache, kind, dict(event))
        if relisted:
            verifier.relisted()
        if key is not None:
            queue.add(key)


NODES = ("", "v1", "nodes")  # core/v1, cluster-scoped (watched cluster-wide whatever namespaces are watched)


def watch_nodes(registry: kopf.OperatorRegistry, *, nodes: NodeObserved, cache: Cache, queue: WorkQueue) -> None:
    """Each Node event updates `nodes` from its body (no GET); a node whose being drained or lost changed (deleted:
    lost) has the apps with a driver pod on it queued."""

    @kopf.on.event(*NODES, id="node-changed", registry=registry)
    async def node_changed(event: kopf.RawEvent, **_: Any) -> None:
        for key in node_event(nodes, cache, dict(event)):
            queue.add(key)


def node_event(nodes: NodeObserved, cache: Cache, event: dict[str, Any]) -> set[AppKey]:
    """File one Node watch event in `nodes`; the apps to queue: those with a driver pod on it when its being drained
    or lost changed, those whose writer and standby share a node when it takes pods again; else none."""
    body: dict[str, Any] = event.get("object") or {}
    name = str((body.get("metadata") or {}).get("name") or "")
    if not name:
        return set()
    change = nodes(name, None if event.get("type") == "DELETED" else body)
    keys = cache.apps_on_node(name) if change.moved else set()
    if keys:
        logger.info("node %s is now being drained or lost, or no longer: reconciling %d app(s)", name, len(keys))
    sharing = cache.apps_sharing_node() if change.freed else set()
    if sharing:
        logger.info(
            "node %s takes pods again: reconciling %d app(s) whose standby shares its driver's node", name, len(sharing)
        )
    return keys | sharing


CRD_KINDS: dict[str, Kind] = {
    f"{models.APP_PLURAL}.{models.GROUP}": "app",
    f"{models.SAVEPOINT_PLURAL}.{models.GROUP}": "savepoint",
}


def _watch_crds(registry: kopf.OperatorRegistry, *, cache: Cache, verifier: Verifier) -> None:
    """Our CRDs changed (not their initial listing): the kind's watch may deliver objects under the old schema
    for a while (see `headrace.controller.cache`), so apps are read afresh and the cache is checked meanwhile."""

    @kopf.on.event(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        id="crd-changed",
        registry=registry,
        field="spec.group",
        value=models.GROUP,
    )
    async def crd_changed(event: kopf.RawEvent, **_: Any) -> None:
        name = str(((event.get("object") or {}).get("metadata") or {}).get("name") or "")
        kind = CRD_KINDS.get(name)
        if kind is None or event.get("type") not in ("ADDED", "MODIFIED"):
            return
        logger.info("CRD %s changed: reading its objects afresh for %.0f s", name, SCHEMA_SETTLE_SECONDS)
        cache.schema_changed(kind)
        verifier.schema_changed()

"""What the operator knows of the cluster, in memory: apps, driver pods and StreamingSavepoints by app.

Owns: the store a reconcile reads instead of the API server (no GET of the app, no list of pods or
savepoints per reconcile), trimmed to the fields the planner and reconciler use, so memory stays
bounded by what is live; which watch events are only the echo of the operator's own write; and the
verification that lists each kind once per namespace to drop what the watches missed.
Never: decisions (`headrace.core`), kopf (the handlers feed the store).

Who feeds it:
- the watches (`headrace.handlers`): every event's object through `observed` (kopf index handlers,
  which kopf runs for the initial listing before it starts any other handler, so no reconcile runs
  before the store holds every pod and savepoint listed at start), deletions through `deleted`;
- the reconciler, write-through: the object the API server answered a write with (`wrote`), so the
  next reconcile sees its own last write even when the watch has not delivered it yet;
- `verify`: a list per kind and namespace (after the watches relisted, and every resync period).

Why deciding from the store never starts a second driver (the staleness argument):
1. A cached object is what a GET would have returned a moment earlier. The reconciler was already
   safe against an object changing right after its GET: the status (the write-ahead log) is replaced
   guarded by the app's resourceVersion, so a decision made on an old app fails with Conflict and is
   made again on a fresh read (`refresh`); creates are idempotent by deterministic name; deletes
   tolerate NotFound.
2. The store is never older than the operator's own writes: `wrote` puts the API server's answer in
   at once, and an object is only ever replaced by a newer resourceVersion (the API server's
   resourceVersions are etcd revisions; ones that do not parse as integers are taken as newer). So a
   reconcile never resumes a `pendingOperation` the previous reconcile already moved past, never misses
   the driver pod it just created (it would take it as lost and start another attempt), and never
   misses a StreamingSavepoint it just marked InProgress or Succeeded.
3. A driver pod missing from the store exists nowhere the operator could not know: pods of the
   app are created only by this operator (write-through) or were there when the watch listed them at
   start (the leader starts its watches only once it leads, after the previous leader stopped).
4. A CRD replaced under the watches (`helm upgrade` with a changed CRD): the API server builds the kind's
   storage anew and tears the old one down a second or more later. Until then the watches opened on the old
   storage deliver objects read under the old schema, so a write made through the new storage can arrive
   with its new fields pruned, at the resourceVersion that holds them, and no later event corrects it. So a
   read of the API server itself (a GET or a list) replaces a held object of the same resourceVersion that
   differs (`fresh`, `replace`); and once the operator sees its CRD change (`schema_changed`), reconciles
   GET the app (`unsettled`) and `Verifier` checks the cache every few seconds, for `SCHEMA_SETTLE_SECONDS`.
5. What the store can lack is a deletion it has not seen (a watch that broke and relisted does not
   report what vanished meanwhile). A deleted pod still in the store only makes the fence wait for it
   (it never lets a new attempt start early); `verify` removes it after a relist, and at the latest
   after one resync period. A deleted app still in the store is written to and answers 404, which
   refreshes it. Tombstones keep an object deleted once from coming back through a late write-through.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Literal

from headrace.api import names
from headrace.api.runtime_contract import ENV_DRIVER_LEASE as LEASE_ENV

logger = logging.getLogger(__name__)

Kind = Literal["app", "pod", "savepoint"]
KINDS: tuple[Kind, ...] = ("app", "pod", "savepoint")
AppKey = tuple[str, str]  # (namespace, app name)
RELIST_SETTLE_SECONDS = 2.0  # after a relist is noticed, the cache is checked once its events have arrived
# After a CRD of ours changed: how long the old storage may still feed the watches (the API server waits for
# the requests on it for up to twice its request timeout, 60 s by default), and how often the cache is checked
# against fresh lists meanwhile.
SCHEMA_SETTLE_SECONDS = 120.0
SCHEMA_CHECK_SECONDS = 5.0
TOMBSTONES = 10_000  # uids of deleted objects remembered (a late write-through of one is ignored)

_POD_LABELS = (
    names.APP,
    names.RUN,
    names.ATTEMPT,
    names.ROLE,
    names.SPEC_HASH,
    names.STANDBY,
    names.WRITER,
    names.EXECUTOR_BUDGET,
)


def _rv(body: dict[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("resourceVersion") or "")


def newer(incoming: str, held: str) -> bool:
    """Whether resourceVersion `incoming` is newer than `held` (unparsable ones count as newer)."""
    try:
        return int(incoming) > int(held)
    except ValueError:
        return incoming != held


def _differs(kind: Kind, body: dict[str, Any], held: dict[str, Any]) -> bool:
    """Whether `body` is the held object's resourceVersion with other content (read under another schema)."""
    return _rv(body) == _rv(held) and TRIM[kind](body) != held


def _metadata(body: dict[str, Any], labels: Iterable[str]) -> dict[str, Any]:
    metadata = body.get("metadata") or {}
    kept = {
        key: metadata[key]
        for key in ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp")
        if key in metadata
    }
    if metadata.get("deletionTimestamp"):
        kept["deletionTimestamp"] = metadata["deletionTimestamp"]
    own = metadata.get("labels") or {}
    kept["labels"] = {key: own[key] for key in labels if key in own}
    return kept


def trim_pod(body: dict[str, Any]) -> dict[str, Any]:
    """A driver pod as `headrace.controller.observe` and the reconciler read it, and nothing more."""
    status = body.get("status") or {}
    kept_status = {key: status[key] for key in ("phase", "reason", "message", "podIP") if key in status}
    kept_status["containerStatuses"] = [
        {"state": item.get("state") or {}} for item in status.get("containerStatuses") or []
    ]
    kept_status["conditions"] = [item for item in status.get("conditions") or [] if item.get("type") == "PodScheduled"]
    # Of the spec, only whether the pod mounts the control certificate (observe.serves_control_tls): a pod from
    # before the control endpoint had TLS is asked in plain HTTP, every other one over HTTPS.
    # And whether its driver holds the driver Lease (observe.lease_guarded) and its node (the fence's messages).
    spec = body.get("spec") or {}
    volumes = spec.get("volumes") or []
    kept_spec: dict[str, Any] = {
        "volumes": [{"name": item["name"]} for item in volumes if item.get("name") == names.CONTROL_TLS_VOLUME],
        "containers": [
            {"env": [{"name": item["name"]} for item in container.get("env") or [] if item.get("name") == LEASE_ENV]}
            for container in spec.get("containers") or []
        ],
    }
    if spec.get("nodeName"):
        kept_spec["nodeName"] = spec["nodeName"]
    # And where it may be scheduled (whether another node could take a standby: `NodeStates.other_free`).
    for key in ("nodeSelector", "tolerations"):
        if spec.get(key):
            kept_spec[key] = spec[key]
    return {"metadata": _metadata(body, _POD_LABELS), "spec": kept_spec, "status": kept_status}


def trim_savepoint(body: dict[str, Any]) -> dict[str, Any]:
    """A StreamingSavepoint as the planner reads it (`observe.savepoint_resource`)."""
    spec, status = body.get("spec") or {}, body.get("status") or {}
    return {
        "metadata": _metadata(body, (names.CREATED_BY,)),
        "spec": {key: spec[key] for key in ("appName", "reason", "path") if key in spec},
        "status": {key: status[key] for key in ("phase", "path", "batchId", "time") if key in status},
    }


def trim_app(body: dict[str, Any]) -> dict[str, Any]:
    """A StreamingApp whole (spec and status are the planner's input), without the server's field bookkeeping."""
    metadata = {key: value for key, value in (body.get("metadata") or {}).items() if key != "managedFields"}
    return {**body, "metadata": metadata}


TRIM: dict[Kind, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "app": trim_app,
    "pod": trim_pod,
    "savepoint": trim_savepoint,
}


def app_key(kind: Kind, body: dict[str, Any]) -> AppKey | None:
    """The app an object belongs to: itself, a pod's app label, a savepoint's spec.appName."""
    metadata = body.get("metadata") or {}
    namespace = metadata.get("namespace")
    if kind == "app":
        name = metadata.get("name")
    elif kind == "pod":
        name = (metadata.get("labels") or {}).get(names.APP)
    else:
        name = (body.get("spec") or {}).get("appName")
    return (namespace, name) if namespace and name else None


def apps_on(pods: Iterable[dict[str, Any]], node: str) -> set[AppKey]:
    """The apps with a driver pod bound to `node` (spec.nodeName), whatever the pod's phase: a drained or lost node
    matters to a running driver, and to the fence of one being deleted."""
    return {
        key
        for pod in pods
        if (pod.get("spec") or {}).get("nodeName") == node and (key := app_key("pod", pod)) is not None
    }


def _live(pod: dict[str, Any]) -> bool:
    """Not being deleted and not ended."""
    ended = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
    return not ended and not (pod.get("metadata") or {}).get("deletionTimestamp")


def sharing(pods: Iterable[dict[str, Any]]) -> set[AppKey]:
    """The apps whose writing driver and a waiting warm standby (labelled standby, not the writer) are bound to one
    node, both live: a node that takes pods again may let the standby move (`headrace.core.standby`)."""
    writers: set[tuple[AppKey, str]] = set()
    standbys: set[tuple[AppKey, str]] = set()
    for pod in pods:
        node, key = (pod.get("spec") or {}).get("nodeName"), app_key("pod", pod)
        if not node or key is None or not _live(pod):
            continue
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get(names.WRITER) == "true":
            writers.add((key, node))
        elif labels.get(names.STANDBY) == "true":
            standbys.add((key, node))
    return {key for key, _ in writers & standbys}


class Cache:
    """Thread-safe store of apps, driver pods and StreamingSavepoints (fed by the watches, read by reconciles)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[Kind, dict[str, dict[str, Any]]] = {kind: {} for kind in KINDS}  # uid -> trimmed body
        self._by_app: dict[Kind, dict[AppKey, set[str]]] = {kind: {} for kind in KINDS}
        self._key_of: dict[str, AppKey] = {}  # uid -> the app key it is filed under
        self._own: dict[str, str] = {}  # uid -> resourceVersion of the operator's own last write
        self._evented: set[str] = set()  # uids whose events the handlers have seen (listed again: a relist)
        self._gone: OrderedDict[str, None] = OrderedDict()
        self._unsettled: dict[Kind, float] = {}  # kind -> until when (monotonic) its CRD's change may mislead watches

    # ---------------------------------------------------------------------------------- reads --
    def app(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The app as last seen or written, or None when it does not exist (as far as the operator knows)."""
        with self._lock:
            return self._first("app", (namespace, name))

    def pods(self, namespace: str, app: str) -> list[dict[str, Any]]:
        """Every driver pod of an app, trimmed."""
        with self._lock:
            return self._all("pod", (namespace, app))

    def savepoints(self, namespace: str, app: str) -> list[dict[str, Any]]:
        """Every StreamingSavepoint naming the app (spec.appName), trimmed."""
        with self._lock:
            return self._all("savepoint", (namespace, app))

    def apps_on_node(self, node: str) -> set[AppKey]:
        """The apps with a driver pod on `node` (a scan of the driver pods held: asked only when a node's being
        drained or lost changed)."""
        with self._lock:
            return apps_on(self._objects["pod"].values(), node)

    def apps_sharing_node(self) -> set[AppKey]:
        """The apps whose writing driver and warm standby share a node (a scan of the driver pods held: asked only
        when a node takes pods again)."""
        with self._lock:
            return sharing(self._objects["pod"].values())

    def apps_with_pods(self) -> list[AppKey]:
        """The apps with at least one driver pod held."""
        with self._lock:
            return [key for key, uids in self._by_app["pod"].items() if uids]

    def size(self) -> dict[Kind, int]:
        """How many objects of each kind are held."""
        with self._lock:
            return {kind: len(self._objects[kind]) for kind in KINDS}

    def _all(self, kind: Kind, key: AppKey) -> list[dict[str, Any]]:
        return [self._objects[kind][uid] for uid in sorted(self._by_app[kind].get(key, ()))]

    def _first(self, kind: Kind, key: AppKey) -> dict[str, Any] | None:
        found = self._all(kind, key)
        return found[0] if found else None

    # --------------------------------------------------------------------------------- writes --
    def observed(self, kind: Kind, body: dict[str, Any]) -> None:
        """An object as a watch (or a listing) delivered it."""
        with self._lock:
            self._put(kind, body)

    def fresh(self, kind: Kind, body: dict[str, Any]) -> None:
        """An object as a read of the API server returned it (a GET): it replaces a held one of the same
        resourceVersion too (that one may have been read under a CRD's older schema)."""
        with self._lock:
            self._put(kind, body, read=True)

    def schema_changed(self, kind: Kind) -> None:
        """The CRD of `kind` changed: for `SCHEMA_SETTLE_SECONDS` its watch may deliver objects under the old schema."""
        with self._lock:
            self._unsettled[kind] = time.monotonic() + SCHEMA_SETTLE_SECONDS

    def unsettled(self, kind: Kind) -> bool:
        """Whether the CRD of `kind` changed recently (its objects are then read from the API server itself)."""
        with self._lock:
            return self._unsettled.get(kind, 0.0) > time.monotonic()

    def wrote(self, kind: Kind, body: dict[str, Any]) -> None:
        """An object as the API server answered the operator's own write: held at once, and its watch event
        (the same resourceVersion) is an echo (`echo`)."""
        with self._lock:
            if self._put(kind, body):
                self._own[str(body["metadata"]["uid"])] = _rv(body)

    def deleted(self, kind: Kind, body: dict[str, Any]) -> None:
        """A watch reported the object deleted."""
        uid = (body.get("metadata") or {}).get("uid")
        if uid:
            with self._lock:
                self._drop(kind, str(uid))

    def forget(self, kind: Kind, namespace: str, name: str) -> None:
        """The operator deleted an object (by name): it is gone from what reconciles see."""
        with self._lock:
            for uid, body in list(self._objects[kind].items()):
                metadata = body["metadata"]
                if metadata.get("namespace") == namespace and metadata.get("name") == name:
                    self._drop(kind, uid)

    def echo(self, body: dict[str, Any]) -> bool:
        """Whether a watch event carries nothing the operator has not seen: the version of its own last write
        of the object, or an older one (a write is made on the object as it was, and the API server refuses a
        status replaced on anything but its latest version)."""
        metadata = body.get("metadata") or {}
        with self._lock:
            own = self._own.get(str(metadata.get("uid")))
        return own is not None and not newer(str(metadata.get("resourceVersion") or ""), own)

    def seen(self, uid: str | None) -> bool:
        """Note a watch event of `uid`; True when one was seen before (a listing event of such an object means
        the watch listed again after a break, and deletions in between were not reported)."""
        if not uid:
            return False
        with self._lock:
            seen = uid in self._evented
            self._evented.add(uid)
            return seen

    def _put(self, kind: Kind, body: dict[str, Any], *, read: bool = False) -> bool:
        """File `body` when it is newer than the held object (or, from a read of the API server, as new and
        different); True when the store changed."""
        metadata = body.get("metadata") or {}
        uid = str(metadata.get("uid") or "")
        key = app_key(kind, body)
        if not uid or key is None or uid in self._gone:
            return False
        held = self._objects[kind].get(uid)
        if held is not None and not newer(_rv(body), _rv(held)) and not (read and _differs(kind, body, held)):
            return False
        previous = self._key_of.get(uid)
        if previous is not None and previous != key:
            self._by_app[kind].get(previous, set()).discard(uid)
        self._objects[kind][uid] = TRIM[kind](body)
        self._by_app[kind].setdefault(key, set()).add(uid)
        self._key_of[uid] = key
        return True

    def _drop(self, kind: Kind, uid: str) -> AppKey | None:
        self._objects[kind].pop(uid, None)
        self._own.pop(uid, None)
        self._evented.discard(uid)
        key = self._key_of.pop(uid, None)
        if key is not None:
            members = self._by_app[kind].get(key)
            if members is not None:
                members.discard(uid)
                if not members:
                    del self._by_app[kind][key]
        self._gone[uid] = None
        while len(self._gone) > TOMBSTONES:
            self._gone.popitem(last=False)
        return key

    # ----------------------------------------------------------------------------- verifying --
    def replace(self, kind: Kind, namespace: str | None, items: list[dict[str, Any]], list_rv: str) -> set[AppKey]:
        """Make the store's `kind` in `namespace` (None: every namespace) what a list at `list_rv` returned:
        objects it lacks and older than the list are dropped. Returns the apps whose objects changed."""
        listed = {str(item["metadata"]["uid"]) for item in items}
        touched: set[AppKey] = set()
        with self._lock:
            for item in items:
                if self._put(kind, item, read=True) and (key := app_key(kind, item)) is not None:
                    touched.add(key)
            for uid, body in list(self._objects[kind].items()):
                metadata = body["metadata"]
                if uid in listed or (namespace is not None and metadata.get("namespace") != namespace):
                    continue
                if newer(_rv(body), list_rv):  # made after the list was taken
                    continue
                key = self._drop(kind, uid)
                logger.info("cache: %s %s/%s is gone (missed by the watch)", kind, metadata.get("namespace"), uid)
                if key is not None:
                    touched.add(key)
        return touched


def on_event(cache: Cache, kind: Kind, event: dict[str, Any]) -> tuple[AppKey | None, bool]:
    """File one watch event: (the app to queue, None for the echo of the operator's own write; whether the
    event shows the watch listed again after a break, so deletions in between went unreported)."""
    body: dict[str, Any] = event.get("object") or {}
    type_ = event.get("type")
    seen = cache.seen((body.get("metadata") or {}).get("uid"))
    if type_ == "DELETED":
        cache.deleted(kind, body)
    elif type_ is None and seen:
        return app_key(kind, body), True
    elif cache.echo(body):
        return None, False  # the reconcile that wrote it asked for the next one itself
    return app_key(kind, body), False


class Verifier:
    """Runs `verify` (through `check`) after a watch relisted, once its events settled, every `period` seconds,
    and every `SCHEMA_CHECK_SECONDS` for a while after a CRD of ours changed; queues the apps it corrected.
    Lives on the operator's event loop."""

    def __init__(self, check: Callable[[], set[AppKey]], enqueue: Callable[[AppKey], None], period: float) -> None:
        self._check, self._enqueue, self._period = check, enqueue, period
        self._relisted: asyncio.Event | None = None
        self._checking_until = 0.0  # monotonic: until then the cache is checked every SCHEMA_CHECK_SECONDS
        self._task: asyncio.Task[None] | None = None

    def relisted(self) -> None:
        """A watch listed again (call on the loop)."""
        if self._relisted is not None:
            self._relisted.set()

    def schema_changed(self) -> None:
        """A CRD of ours changed (call on the loop): check every `SCHEMA_CHECK_SECONDS` for `SCHEMA_SETTLE_SECONDS`."""
        self._checking_until = time.monotonic() + SCHEMA_SETTLE_SECONDS
        self.relisted()

    def start(self) -> None:
        """Start checking, on the running loop."""
        self._relisted = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="cache-verify")

    async def stop(self) -> None:
        """Stop checking."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        assert self._relisted is not None
        while True:
            try:
                soon = self._checking_until > time.monotonic()
                await asyncio.wait_for(self._relisted.wait(), SCHEMA_CHECK_SECONDS if soon else self._period)
                await asyncio.sleep(RELIST_SETTLE_SECONDS)
            except TimeoutError:
                pass
            self._relisted.clear()
            try:
                corrected = await asyncio.to_thread(self._check)
            except Exception:
                logger.exception("checking the cache against the API server failed; again next period")
                continue
            for key in corrected:
                self._enqueue(key)

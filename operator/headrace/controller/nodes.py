"""What the nodes the apps' pods run on say: being drained (for `headrace.core.drain`), lost (not Ready, for
`headrace.core.executors`), or Ready (for `headrace.core.fence.release_dead`).

Owns: what the Node watch delivers (`observed`, from `headrace.handlers`: held at once, no GET, and trusted for
WATCHED_SECONDS, so a drain or a lost node is noticed within about a second), else reading a Node (one GET) at most
every REFRESH_SECONDS per node, whatever number of apps ask about it (the fallback where the operator may not list and
watch Nodes; for Ready, read afresh each time it is asked, only for the nodes of ended drivers), and telling from it
whether it is being emptied (cordoned, or tainted for removal: `core.drain.draining`), whether it is lost (its Ready
condition is not True, or it carries the unreachable taint), whether it is Ready (read and not lost), and whether some
node other than a given one could take a driver pod now (`other_free`: Ready, not being drained, its labels matching the
pod's nodeSelector, every NoSchedule/NoExecute taint tolerated; only of the nodes known and trusted, so an operator that
may not watch Nodes rarely knows one). A node that cannot be read (the operator may not read Nodes) counts as neither
draining nor lost: the app keeps running where it is, and the eviction guard (the PodDisruptionBudget) still holds a
drain back; nor as Ready: a dead driver's Lease then expires as before. A node that is gone counts as lost. Only the
nodes of running drivers, of ended Lease-guarded drivers, and of executors being deleted, are asked about.
Never: decides what moves (the planner does) or writes a Node.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from headrace.core.drain import draining

logger = logging.getLogger(__name__)
REFRESH_SECONDS = 10.0
# A watched Node is trusted this long without a GET: its kubelet posts the Node's status at least every 5 minutes
# (nodeStatusReportFrequency), so a live watch refreshes it well before; a watch that died (its permission revoked
# while the operator runs) leaves entries that fall back to the GETs after this.
WATCHED_SECONDS = 600.0
UNREACHABLE = "node.kubernetes.io/unreachable"


BLOCKING = frozenset({"NoSchedule", "NoExecute"})  # the taint effects that keep a pod that does not tolerate them off


@dataclass(frozen=True)
class NodeState:
    draining: bool = False
    lost: bool = False
    ready: bool = False  # read, Ready and not unreachable (a node that could not be read is not)
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect) of its NoSchedule/NoExecute taints
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class NodeChange:
    """What a Node watch event changed: its being drained or lost (`moved`: its drivers react), or it may take
    pods now and could not before (`freed`: a standby sharing its driver's node may move there)."""

    moved: bool
    freed: bool = False


def node_draining(node: dict[str, Any]) -> bool:
    """Whether a Node object says it is being emptied."""
    spec = node.get("spec") or {}
    keys = frozenset(str(taint.get("key")) for taint in spec.get("taints") or [])
    return draining(bool(spec.get("unschedulable")), keys)


def node_lost(node: dict[str, Any]) -> bool:
    """Whether a Node object says its kubelet is gone: Ready not True (False, Unknown, missing), or unreachable."""
    taints = (node.get("spec") or {}).get("taints") or []
    if any(taint.get("key") == UNREACHABLE for taint in taints):
        return True
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((item for item in conditions if item.get("type") == "Ready"), None)
    return ready is None or ready.get("status") != "True"


def node_state(node: dict[str, Any] | None) -> NodeState:
    """What a Node object says (None: there is no such Node, so it is lost)."""
    lost = node is None or node_lost(node)
    if node is None:
        return NodeState(lost=True)
    taints = tuple(
        (str(taint.get("key") or ""), str(taint.get("value") or ""), str(taint.get("effect") or ""))
        for taint in (node.get("spec") or {}).get("taints") or []
        if taint.get("effect") in BLOCKING
    )
    labels = tuple(sorted(((node.get("metadata") or {}).get("labels") or {}).items()))
    return NodeState(draining=node_draining(node), lost=lost, ready=not lost, taints=taints, labels=labels)


def tolerated(taint: tuple[str, str, str], tolerations: list[dict[str, Any]]) -> bool:
    """Whether a pod's tolerations tolerate a taint (Kubernetes' rules: an empty key with Exists tolerates
    everything; an empty effect matches every effect; the operator is Equal unless Exists)."""
    key, value, effect = taint
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != effect:
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration["key"] == key:
                return True
        elif toleration.get("key") == key and str(toleration.get("value") or "") == value:
            return True
    return False


def takes(state: NodeState, tolerations: list[dict[str, Any]], selector: dict[str, str]) -> bool:
    """Whether a node could take a pod with these tolerations and nodeSelector now (its resources and the pod's
    required node affinity are not weighed: the scheduler decides, and a move that did not help waits before the
    next: `headrace.core.standby`)."""
    if not state.ready or state.draining:
        return False
    labels = dict(state.labels)
    if any(labels.get(key) != value for key, value in selector.items()):
        return False
    return all(tolerated(taint, tolerations) for taint in state.taints)


def freed(before: NodeState | None, after: NodeState) -> bool:
    """Whether a node may take pods now and could not before (back Ready, uncordoned, a blocking taint removed, or
    new). Pod-agnostic: the apps it may concern are then reconciled, and decide with their own pods. A node first
    seen is not (at the operator's start every node is, and the first reconciles look anyway)."""
    if before is None or not after.ready or after.draining:
        return False
    return not before.ready or before.draining or not set(before.taints) <= set(after.taints)


def moved(before: NodeState | None, after: NodeState) -> bool:
    """Whether a node's being drained or lost changed (what its drivers must react to; Ready alone is asked afresh
    anyway). A node not known before counts as having been neither."""
    previous = before or NodeState()
    return (previous.draining, previous.lost) != (after.draining, after.lost)


class NodeStates:
    """Node name -> what it says, as last read (thread-safe: reconcile workers share it)."""

    def __init__(
        self, read: Callable[[str], dict[str, Any] | None], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._read, self._clock = read, clock
        self._known: dict[str, tuple[float, NodeState]] = {}  # node -> (trusted until, state)
        self._lock = threading.Lock()
        self._warned = False

    def draining(self, nodes: Iterable[str]) -> frozenset[str]:
        """Which of `nodes` are being drained."""
        return frozenset(node for node in nodes if self.state(node).draining)

    def any_draining(self) -> bool:
        """Whether any node known (every node, with the Node watch) was last seen being drained: only then are an
        app's executors' nodes worth listing (`Reconciler._with_draining_executors`)."""
        with self._lock:
            return any(state.draining for _, state in self._known.values())

    def lost(self, nodes: Iterable[str]) -> frozenset[str]:
        """Which of `nodes` are lost (not Ready, or gone)."""
        return frozenset(node for node in nodes if self.state(node).lost)

    def ready(self, nodes: Iterable[str]) -> frozenset[str]:
        """Which of `nodes` are Ready (and not unreachable) now: read afresh, never from the memory (a node lost
        since the last read must not count as Ready: its Ready decides a Lease's release)."""
        return frozenset(node for node in nodes if self.state(node, fresh=True).ready)

    def other_free(self, node: str, tolerations: list[dict[str, Any]], selector: dict[str, str]) -> bool:
        """Whether a node other than `node`, known and trusted now (every node, with the Node watch; none read
        otherwise but the drivers' own), could take a pod with these tolerations and nodeSelector. A scan of the
        nodes held: asked only while an app's standby shares its driver's node."""
        now = self._clock()
        with self._lock:
            known = list(self._known.items())
        return any(
            name != node and now < until and takes(state, tolerations, selector) for name, (until, state) in known
        )

    def observed(self, node: str, body: dict[str, Any] | None) -> NodeChange:
        """A Node as its watch delivered it (None: deleted, so lost), held at once; what changed: its being drained
        or lost (the apps whose drivers run there are then reconciled now), or its taking pods again."""
        state = node_state(body)
        with self._lock:
            known = self._known.get(node)
            self._hold(node, self._clock() + WATCHED_SECONDS, state)
        before = known[1] if known is not None else None
        return NodeChange(moved=moved(before, state), freed=freed(before, state))

    def state(self, node: str, *, fresh: bool = False) -> NodeState:
        now = self._clock()
        with self._lock:
            known = self._known.get(node)
        if known is not None and now < known[0] and not fresh:
            return known[1]
        try:
            body = self._read(node)
        except Exception as error:  # not fatal: the app stays where it is
            if not self._warned:
                self._warned = True
                logger.warning(
                    "cannot read Node %s (drains and lost nodes are not followed until it can): %s", node, error
                )
            state = NodeState()
        else:
            state = node_state(body)
        with self._lock:
            current = self._known.get(node)
            if current is not None and current is not known:  # the watch delivered it while this read was made
                return current[1]
            self._hold(node, now + REFRESH_SECONDS, state)
        return state

    def _hold(self, node: str, until: float, state: NodeState) -> None:
        """Remember `state` until `until` (call with the lock held)."""
        self._known.pop(node, None)  # re-inserted last: the oldest entry goes first
        self._known[node] = (until, state)
        if len(self._known) > 10_000:  # nodes come and go
            self._known.pop(next(iter(self._known)))

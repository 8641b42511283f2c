"""What the nodes the apps' pods run on say: being drained (for `headrace.core.drain`), lost (not Ready, for
`headrace.core.executors`), or Ready (for `headrace.core.fence.release_dead`).

Owns: what the Node watch delivers (`observed`, from `headrace.handlers`: held at once, no GET, and trusted for
WATCHED_SECONDS, so a drain or a lost node is noticed within about a second), else reading a Node (one GET) at
most every REFRESH_SECONDS per node, whatever number of apps ask about it (the fallback where the operator may not
list and watch Nodes; for Ready, read afresh each time it is asked, only for the nodes of ended drivers), and
telling from it whether it is being emptied (cordoned, or tainted for removal: `core.drain.draining`), whether it
is lost (its Ready condition is not True, or it carries the unreachable taint), and whether it is Ready (read and
not lost). A node that cannot be read (the operator may not read Nodes) counts as neither draining nor lost: the app
keeps running where it is, and the eviction guard (the PodDisruptionBudget) still holds a drain back; nor as Ready:
a dead driver's Lease then expires as before. A node that is gone counts as lost. Only the nodes of running drivers,
of ended Lease-guarded drivers, and of executors being deleted, are asked about.
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


@dataclass(frozen=True)
class NodeState:
    draining: bool = False
    lost: bool = False
    ready: bool = False  # read, Ready and not unreachable (a node that could not be read is not)


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
    return NodeState(draining=node is not None and node_draining(node), lost=lost, ready=not lost)


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

    def observed(self, node: str, body: dict[str, Any] | None) -> bool:
        """A Node as its watch delivered it (None: deleted, so lost), held at once; True when its being drained or
        lost changed (the apps whose drivers run there are then reconciled now)."""
        state = node_state(body)
        with self._lock:
            known = self._known.get(node)
            self._hold(node, self._clock() + WATCHED_SECONDS, state)
        return moved(known[1] if known is not None else None, state)

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

"""What the nodes the apps' pods run on say: being drained (for `headrace.core.drain`), or lost (not Ready, for
`headrace.core.executors`).

Owns: reading a Node (one GET) at most every REFRESH_SECONDS per node, whatever number of apps ask about it, and
telling from it whether it is being emptied (cordoned, or tainted for removal: `core.drain.draining`) and whether it
is lost (its Ready condition is not True, or it carries the unreachable taint). A node that cannot be read (the
operator may not read Nodes) counts as neither: the app keeps running where it is, and the eviction guard (the
PodDisruptionBudget) still holds a drain back; a node that is gone counts as lost. Only the nodes of running drivers,
and of executors being deleted, are asked about.
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
UNREACHABLE = "node.kubernetes.io/unreachable"


@dataclass(frozen=True)
class NodeState:
    draining: bool = False
    lost: bool = False


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


class NodeStates:
    """Node name -> what it says, as last read (thread-safe: reconcile workers share it)."""

    def __init__(
        self, read: Callable[[str], dict[str, Any] | None], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._read, self._clock = read, clock
        self._known: dict[str, tuple[float, NodeState]] = {}  # node -> (read at, state)
        self._lock = threading.Lock()
        self._warned = False

    def draining(self, nodes: Iterable[str]) -> frozenset[str]:
        """Which of `nodes` are being drained."""
        return frozenset(node for node in nodes if self.state(node).draining)

    def lost(self, nodes: Iterable[str]) -> frozenset[str]:
        """Which of `nodes` are lost (not Ready, or gone)."""
        return frozenset(node for node in nodes if self.state(node).lost)

    def state(self, node: str) -> NodeState:
        now = self._clock()
        with self._lock:
            known = self._known.get(node)
        if known is not None and now - known[0] < REFRESH_SECONDS:
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
            state = NodeState(lost=True) if body is None else NodeState(node_draining(body), node_lost(body))
        with self._lock:
            self._known[node] = (now, state)
            if len(self._known) > 10_000:  # nodes come and go
                self._known.pop(next(iter(self._known)))
        return state

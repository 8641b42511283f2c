"""What the nodes the apps' pods run on say: being drained (for `headrace.core.drain`), lost (not Ready, for
`headrace.core.executors`), or Ready (for `headrace.core.fence.release_dead`).

Owns: reading a Node (one GET) at most every REFRESH_SECONDS per node, whatever number of apps ask about it (but
for Ready, read afresh each time it is asked, only for the nodes of ended drivers), and
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

    def ready(self, nodes: Iterable[str]) -> frozenset[str]:
        """Which of `nodes` are Ready (and not unreachable) now: read afresh, never from the memory (a node lost
        since the last read must not count as Ready: its Ready decides a Lease's release)."""
        return frozenset(node for node in nodes if self.state(node, fresh=True).ready)

    def state(self, node: str, *, fresh: bool = False) -> NodeState:
        now = self._clock()
        with self._lock:
            known = self._known.get(node)
        if known is not None and now - known[0] < REFRESH_SECONDS and not fresh:
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
            lost = body is None or node_lost(body)
            state = NodeState(draining=body is not None and node_draining(body), lost=lost, ready=not lost)
        with self._lock:
            self._known[node] = (now, state)
            if len(self._known) > 10_000:  # nodes come and go
                self._known.pop(next(iter(self._known)))
        return state

"""Whether the nodes the apps' drivers run on are being drained (for `headrace.core.drain`).

Owns: reading a Node (one GET) at most every REFRESH_SECONDS per node, whatever number of apps ask about it, and
telling from it whether it is being emptied: cordoned, or tainted for removal (`core.drain.draining`). A node that
cannot be read (gone, or the operator may not read Nodes) counts as not drained: the app keeps running where it is,
and the eviction guard (the PodDisruptionBudget) still holds a drain back. Only the nodes of running drivers are
asked about.
Never: decides what moves (the planner does) or writes a Node.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from headrace.core.drain import draining

logger = logging.getLogger(__name__)
REFRESH_SECONDS = 10.0


def node_draining(node: dict[str, Any]) -> bool:
    """Whether a Node object says it is being emptied."""
    spec = node.get("spec") or {}
    keys = frozenset(str(taint.get("key")) for taint in spec.get("taints") or [])
    return draining(bool(spec.get("unschedulable")), keys)


class NodeStates:
    """Node name -> whether it is being drained, as last read (thread-safe: reconcile workers share it)."""

    def __init__(
        self, read: Callable[[str], dict[str, Any] | None], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._read, self._clock = read, clock
        self._known: dict[str, tuple[float, bool]] = {}  # node -> (read at, draining)
        self._lock = threading.Lock()
        self._warned = False

    def draining(self, nodes: Iterable[str]) -> frozenset[str]:
        """Which of `nodes` are being drained."""
        return frozenset(node for node in nodes if self._draining(node))

    def _draining(self, node: str) -> bool:
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
                logger.warning("cannot read Node %s (drains are not followed until it can): %s", node, error)
            body = None
        state = body is not None and node_draining(body)
        with self._lock:
            self._known[node] = (now, state)
            if len(self._known) > 10_000:  # nodes come and go
                self._known.pop(next(iter(self._known)))
        return state

"""What this operator process made itself: each app's shared objects (`manifests.app_objects` and the control
Secret), remembered by the app's uid and a digest of their manifests once every one of them was created or found.

A restart the planner marks `EnsureDriver.after_ran` (its predecessor ran with these objects, and it is the first
failure since the run was healthy) need not send them again when they are remembered here with the same digest.
Memory only, on purpose: a new operator process (a restart, a failover, an upgrade that adds an object or a Secret
key) sends them once more, and so does any repeated failure.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any


def digest(objects: list[dict[str, Any]]) -> str:
    """A digest of manifests, equal for equal content (key order aside)."""
    return hashlib.sha256(json.dumps(objects, sort_keys=True).encode()).hexdigest()


class EnsuredObjects:
    """(namespace, app) -> (uid, digest) of the shared objects this process created or found. Thread-safe."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], tuple[str, str]] = {}
        self._lock = threading.Lock()

    def known(self, namespace: str, app: str, uid: str, made: str) -> bool:
        """Whether this process ensured the app's (this uid's) shared objects with digest `made`."""
        with self._lock:
            return self._known.get((namespace, app)) == (uid, made)

    def remember(self, namespace: str, app: str, uid: str, made: str) -> None:
        with self._lock:
            self._known[(namespace, app)] = (uid, made)

    def forget(self, namespace: str, app: str) -> None:
        with self._lock:
            self._known.pop((namespace, app), None)

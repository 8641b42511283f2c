"""The apps' control Secrets (token and certificate) as the operator last read them, one read per app.

Owns: remembering each app's control Secret values between driver calls, so asking a driver for its status
(every few seconds per running app, and every heartbeat re-ask of one that does not answer) costs no GET of
its Secret. Never: making or completing the Secret (`headrace.controller.attempt_objects`).

The Secret belongs to the app (one per app, named after it, owned by it, never rotated by the operator: an
existing one keeps its token). What is remembered is dropped when the operator writes the Secret (a new
attempt, or keys added to an older Secret), when the app is gone, when the app under that name is another
one (its uid), and when a driver refuses the token (HTTP 401 or 403) or the certificate is not what the driver
serves: the next call reads it again. A Secret the operator has just created is remembered as created
(`made`: its values are the ones written), so a new app's first driver call costs no GET either. A read that
a `forget` or `made` overtook (it began before and ended after it: a driver asked ahead of a poll while a
reconciliation writes the Secret) is used once, not kept.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

Values = dict[str, str]


class ControlSecrets:
    """Thread-safe: (namespace, app) -> (app uid, the Secret's values)."""

    def __init__(self, read: Callable[[str, str], Values | None]) -> None:
        self._read = read  # (namespace, app) -> the Secret's values, None when it does not exist
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], tuple[str, Values]] = {}
        self._forgets = 0  # how many `forget` calls so far: a read overtaken by one is not kept

    def values(self, namespace: str, app: str, uid: str) -> Values:
        """The Secret's values (empty when it does not exist yet: not remembered)."""
        with self._lock:
            held = self._held.get((namespace, app))
            forgets = self._forgets
        if held is not None and held[0] == uid:
            return held[1]
        values = self._read(namespace, app)
        if values is None:
            return {}
        with self._lock:
            if self._forgets == forgets:
                self._held[(namespace, app)] = (uid, values)
        return values

    def made(self, namespace: str, app: str, uid: str, values: Values) -> None:
        """The operator created the Secret with these values: remember them (reads under way are not kept)."""
        with self._lock:
            self._held[(namespace, app)] = (uid, dict(values))
            self._forgets += 1

    def forget(self, namespace: str, app: str) -> None:
        """Read the Secret again at the next call."""
        with self._lock:
            self._held.pop((namespace, app), None)
            self._forgets += 1

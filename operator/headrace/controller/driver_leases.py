"""The operator's reading of apps' driver Leases, for the fence (`headrace.core.fence`).

Owns: reading an app's driver Lease when the planner needs it (`observe.lease_wanted`: a driver stuck deleting, or
one that does not answer) and on the operator's schedule (`headrace.controller.lease_sweep`), and remembering per
app the version last read, since when (this process's clock) it has read that same version
(`DriverLease.unchanged_since`), and when it last read it. Every write of a Lease changes its resourceVersion, so an
unchanged version is a Lease nobody renewed meanwhile. The memory is this process's: a restarted operator counts
again from its first read (later, never sooner).
Never: writes a driver Lease (the operator creates it with an attempt and releases the Lease of a holder its kubelet
confirmed dead, `headrace.core.fence.release_dead`; drivers take, renew and release it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime

from headrace.api import names
from headrace.api import runtime_contract as contract
from headrace.core.election import StoredLease
from headrace.core.observation import DriverLease

logger = logging.getLogger(__name__)


class DriverLeases:
    """Driver Leases as read, with since when each was read unchanged (thread-safe: reconcile workers share it)."""

    def __init__(self, read: Callable[[str, str], StoredLease | None], clock: Callable[[], datetime]) -> None:
        self._read, self._clock = read, clock
        self._seen: dict[tuple[str, str], tuple[str | None, datetime]] = {}  # app -> (resourceVersion, first read)
        self._last: dict[tuple[str, str], tuple[DriverLease, datetime]] = {}  # app -> the Lease last read, when
        self._lock = threading.Lock()

    def observe(self, namespace: str, app: str) -> DriverLease | None:
        """The app's driver Lease now (None when it could not be read: the fence then waits)."""
        try:
            stored = self._read(namespace, names.driver_lease(app))
        except Exception as error:  # the fence acts only on what it read
            logger.warning("reading the driver Lease of %s/%s failed: %s", namespace, app, error)
            return None
        version = stored.resource_version if stored is not None else None
        now = self._clock()
        with self._lock:
            seen = self._seen.get((namespace, app))
            if seen is None or seen[0] != version:
                seen = self._seen[namespace, app] = (version, now)
            if stored is None:
                lease = DriverLease(None, contract.DRIVER_LEASE_SECONDS, unchanged_since=seen[1], exists=False)
            else:
                lease = DriverLease(stored.record.holder, stored.record.lease_seconds, unchanged_since=seen[1])
            self._last[namespace, app] = (lease, now)
        return lease

    def last(self, namespace: str, app: str) -> tuple[DriverLease, datetime] | None:
        """The app's Lease as last read, and when (no read: None). A hint only: the Lease may have been renewed
        since, so a decision on it reads it again (`observe`)."""
        with self._lock:
            return self._last.get((namespace, app))

    def forget(self, namespace: str, app: str) -> None:
        """The app is gone."""
        with self._lock:
            self._seen.pop((namespace, app), None)
            self._last.pop((namespace, app), None)

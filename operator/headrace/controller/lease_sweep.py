"""The operator's schedule of driver Lease reads: a lost driver noticed from its Lease, not from a missed poll.

Owns: every SWEEP_SECONDS, reading the driver Lease of each app with a driver made with the Lease that has not ended
(`headrace.core.fence.watched`, from the watches' cache) when it was last read LEASE_READ_SECONDS ago or more
(`fence.read_due`; the reconciles' reads count too), through the reconciler's `DriverLeases`, whose memory of the
first read of each version is the fence's clock; and queueing an app at once (urgent) when its driver's Lease counts
expired (`fence.expired_holder`), once per Lease version. So the expiry of a lost driver's Lease counts from at most
LEASE_READ_SECONDS after its last renewal, whether or not the driver answers, and the decision follows the expiry by
about a second, instead of a progress poll (30 s) plus a status call's timeout later.
Costs, per app with a running driver: one GET of one Lease every LEASE_READ_SECONDS (no reconcile, no driver call,
no status write while the Lease is renewed).
Never: decides anything (the planner fails the driver or force-deletes its pod, from a Lease it reads again),
writes a Lease.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from headrace.controller.cache import AppKey, Cache
from headrace.controller.driver_leases import DriverLeases
from headrace.controller.observe import read_driver_pod
from headrace.core import fence
from headrace.core.observation import DriverPod

logger = logging.getLogger(__name__)

SWEEP_SECONDS = 1.0  # how often the apps' Leases are looked at (each read only when due)
READ_THREADS = 8  # Lease reads at once (a GET each; 100/s at 1,000 apps)


class LeaseSweep:
    """Reads due driver Leases and queues the apps whose driver's Lease expired (`sweep`, one pass; `start` runs it
    every SWEEP_SECONDS on the operator's event loop, the reads on threads of its own)."""

    def __init__(
        self,
        cache: Cache,
        leases: DriverLeases,
        enqueue: Callable[[AppKey], None],
        clock: Callable[[], datetime],
        *,
        read_threads: int = READ_THREADS,
    ) -> None:
        self._cache, self._leases, self._enqueue, self._clock = cache, leases, enqueue, clock
        self._queued: dict[AppKey, datetime] = {}  # app -> the version (its first read) it was queued for
        self._pool = ThreadPoolExecutor(max_workers=read_threads, thread_name_prefix="lease-read")
        self._task: asyncio.Task[None] | None = None

    def sweep(self) -> list[AppKey]:
        """One pass: read the due Leases (at once, on the pool), queue the apps whose driver's Lease expired; those
        apps."""
        now = self._clock()
        held = self._cache.apps_with_pods()
        for key in set(self._queued) - set(held):
            del self._queued[key]
        watched: dict[AppKey, tuple[DriverPod, ...]] = {}
        for key in held:  # only the apps whose read is due have their pods parsed (a tenth of them each second)
            if not fence.read_due(_read_at(self._leases, key), now):
                continue
            pods = tuple(pod for item in self._cache.pods(*key) if (pod := read_driver_pod(item)) is not None)
            if fence.watched(pods):
                watched[key] = pods
            else:
                self._queued.pop(key, None)
        due = list(watched)
        list(self._pool.map(lambda key: self._leases.observe(*key), due))
        queued = []
        for key in due:
            last = self._leases.last(*key)
            if last is None:  # the read failed (logged): the fence waits
                continue
            lease, read_at = last
            if fence.expired_holder(watched[key], lease, read_at) is None:
                continue
            if self._queued.get(key) != lease.unchanged_since:
                self._queued[key] = lease.unchanged_since
                self._enqueue(key)
                queued.append(key)
        return queued

    def start(self) -> None:
        """Sweep every SWEEP_SECONDS, on the running loop."""
        self._task = asyncio.create_task(self._run(), name="lease-sweep")

    async def stop(self) -> None:
        """Stop sweeping."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _run(self) -> None:
        while True:
            try:
                queued = await asyncio.to_thread(self.sweep)
            except Exception:
                logger.exception("reading the apps' driver Leases failed; again in %.0f s", SWEEP_SECONDS)
            else:
                for namespace, name in queued:
                    logger.info("the driver Lease of %s/%s expired: deciding now", namespace, name)
            await asyncio.sleep(SWEEP_SECONDS)


def _read_at(leases: DriverLeases, key: AppKey) -> datetime | None:
    last = leases.last(*key)
    return last[1] if last is not None else None

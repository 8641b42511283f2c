"""Leader election: the operator acts only while it holds the Lease, like client-go's leaderelection.

Owns: blocking until this process holds the Lease (retrying every retry period, and answering
/healthz meanwhile so the kubelet keeps a standby alive); renewing it in a background thread; exiting
the process at once when it could not renew within the renew deadline or finds someone else holding
it (it must never act without the Lease; the kubelet restarts the container); and on a clean
shutdown, once no reconcile runs any more, releasing it so a standby takes over at once.
The decisions are `headrace.core.election`'s, the Lease I/O is `headrace.adapters.lease`'s.
Never: reconciles, imports kopf.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NoReturn

from prometheus_client import Gauge

from headrace.adapters.lease import LeaseClient
from headrace.core import election
from headrace.settings import OperatorSettings

logger = logging.getLogger(__name__)
WATCHDOG_SECONDS = 0.25
RECONCILES_DONE_SECONDS = 20.0


def _now() -> datetime:
    return datetime.now(UTC)


def _exit_now(code: int) -> NoReturn:
    logging.shutdown()
    os._exit(code)


@dataclass(frozen=True)
class ElectionConfig:
    """Who this candidate is and the client-go durations."""

    identity: str
    lease_seconds: int
    renew_deadline_seconds: float
    retry_seconds: float

    @classmethod
    def from_settings(cls, settings: OperatorSettings) -> ElectionConfig:
        """The settings' durations; the identity is the pod's name, else hostname_pid."""
        return cls(
            identity=settings.identity or f"{socket.gethostname()}_{os.getpid()}",
            lease_seconds=settings.lease_seconds,
            renew_deadline_seconds=settings.renew_deadline_seconds,
            retry_seconds=settings.retry_seconds,
        )


class LeaderElector:
    """One candidate for one Lease."""

    def __init__(
        self,
        leases: LeaseClient,
        config: ElectionConfig,
        gauge: Gauge,
        *,
        clock: Callable[[], datetime] = _now,
        exit_process: Callable[[int], NoReturn] = _exit_now,
    ) -> None:
        self.leases, self.config, self.gauge = leases, config, gauge
        self._clock, self._exit = clock, exit_process
        self._lock = threading.Lock()
        self._seen: election.LeaseRecord | None = None
        self._seen_at: datetime | None = None
        self._renewed = time.monotonic()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    @property
    def holder(self) -> str | None:
        """The holder of the Lease as last seen."""
        return self._seen.holder if self._seen else None

    def try_acquire_or_renew(self) -> bool:
        """Read the Lease, decide, write; True when this candidate holds it afterwards."""
        with self._lock:
            stored = self.leases.get_lease()
            now = self._clock()
            record = stored.record if stored else None
            if self._seen_at is None or record != self._seen:
                self._seen, self._seen_at = record, now
            decision = election.next_write(record, self._seen_at, self.config.identity, now, self.config.lease_seconds)
            if decision.record is None:
                return False
            if stored is None:
                written = self.leases.create_lease(decision.record)
            else:
                written = self.leases.replace_lease(decision.record, stored.resource_version)
            if written:
                self._seen, self._seen_at = decision.record, now
            return written

    def _try(self) -> bool:
        try:
            return self.try_acquire_or_renew()
        except Exception as error:  # the API being unreachable is a failed try, retried
            logger.warning("leader election: reading or writing the Lease failed: %s", error)
            return False

    def acquire(self, stop: threading.Event) -> bool:
        """Block until this candidate holds the Lease (True) or `stop` is set (False)."""
        reported: str | None = None
        while not stop.is_set():
            if self._try():
                self._renewed = time.monotonic()
                self.gauge.set(1)
                logger.info("leader election: %s holds the Lease %s, leading", self.config.identity, self.leases.name)
                return True
            if self.holder and self.holder != reported:
                reported = self.holder
                logger.info("leader election: the Lease %s is held by %s, standing by", self.leases.name, reported)
            stop.wait(self.config.retry_seconds)
        return False

    def keep_renewing(self) -> None:
        """Renew every retry period in the background; exit the process once leadership is lost."""
        self._renewer = threading.Thread(target=self._renew_loop, name="lease-renewer", daemon=True)
        self._renewer.start()
        threading.Thread(target=self._watchdog, name="lease-watchdog", daemon=True).start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.config.retry_seconds):
            if self._try():
                self._renewed = time.monotonic()
                continue
            why = election.loss(self.config.identity, self.holder, 0.0, self.config.renew_deadline_seconds)
            if why is not None and not self._stop.is_set():
                self._lose(why)

    def _watchdog(self) -> None:
        while not self._stop.wait(WATCHDOG_SECONDS):
            overdue = time.monotonic() - self._renewed
            why = election.loss(self.config.identity, None, overdue, self.config.renew_deadline_seconds)
            if why is not None:
                self._lose(why)

    def _lose(self, why: str) -> None:
        self.gauge.set(0)
        logger.critical("leader election: leadership lost (%s); exiting so nothing acts without the Lease", why)
        self._exit(1)

    def release(self) -> None:
        """Stop renewing and give the Lease up, so a standby takes over without waiting for it to expire."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        self.gauge.set(0)
        try:
            with self._lock:
                stored = self.leases.get_lease()
                record = election.release(stored.record if stored else None, self.config.identity, self._clock())
                if (
                    stored is not None
                    and record is not None
                    and self.leases.replace_lease(record, stored.resource_version)
                ):
                    logger.info("leader election: released the Lease %s", self.leases.name)
        except Exception as error:  # the Lease then simply expires
            logger.warning("leader election: releasing the Lease failed (it will expire): %s", error)


class _Healthz(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status = 200 if self.path.split("?")[0] == "/healthz" else 404
        body = b'{"standby": true}' if status == 200 else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        return


@contextlib.contextmanager
def standby_health(port: int) -> Iterator[None]:
    """Answer GET /healthz on `port` (as kopf's liveness endpoint will, once running); port 0: nothing."""
    if not port:
        yield
        return
    server = ThreadingHTTPServer(("0.0.0.0", port), _Healthz)  # noqa: S104 - the kubelet probes the pod IP
    thread = threading.Thread(target=server.serve_forever, name="standby-healthz", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set `stop` (the operator may be PID 1, which ignores SIGTERM by default)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, lambda *_: stop.set()) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def run_elected(elector: LeaderElector, health_port: int, work: Callable[[], bool]) -> bool:
    """Run `work` (the operator) only while holding the Lease; False if stopped while standing by.

    `work` returns on a clean shutdown, True once nothing it started still runs (every reconcile
    finished): the Lease is then released. Otherwise, or if `work` raises, the Lease is left to expire.
    """
    stop = threading.Event()
    with standby_health(health_port), _stop_on_signals(stop):
        if not elector.acquire(stop):
            logger.info("leader election: stopped while standing by")
            return False
    elector.keep_renewing()
    if work():
        elector.release()
    else:
        logger.warning("leader election: reconciles still running; leaving the Lease to expire")
    return True

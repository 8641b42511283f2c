"""The driver's Lease guard (HEADRACE_DRIVER_LEASE): a driver writes only while it holds its app's Lease.

Owns: reading and writing the app's driver Lease (coordination.k8s.io/v1) with the pod's ServiceAccount token over
plain HTTPS (the driver image has no Kubernetes client); a background loop that watches the Lease until the driver
may take it (so an unrenewed Lease's expiry counts from this driver's first sight of it, on its own clock), then,
once allowed (an active driver from the start, a standby once promoted), takes it only when it is released or
expired, and renews it (over the version it wrote last, without reading it first: one request per renewal);
calling `on_lost` at once when the Lease names another holder or could not be renewed within the renew deadline
(shorter than the Lease's duration, so the holder has stopped before anyone may take the Lease over); releasing
it when the driver exits, so the next driver need not wait for it to expire.
The decisions (take, renew, wait, lost, release) are `headrace.core.election`'s, the operator's leader election's.
Never: stops the JVM or exits the process itself (the launcher's `on_lost` does), creates the Lease (the operator
does; the driver's Role grants get and update of this one Lease only).
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from headrace.api import runtime_contract as contract
from headrace.core import election
from headrace.runtime.settings import RuntimeSettings

log = logging.getLogger(__name__)
HTTP_OK, HTTP_NOT_FOUND, HTTP_CONFLICT = 200, 404, 409
WATCHDOG_SECONDS = 0.25
ACQUIRE_POLL_SECONDS = 0.25  # allowed but not holding: read this often, so a release is seen at once
MIN_REQUEST_SECONDS = 1.0  # the shortest a Lease request is given


class LeaseApiError(Exception):
    """The API server answered a Lease request with something other than success, 404 or 409."""


@dataclass(frozen=True)
class LeaseTiming:
    """The Lease's duration, the holder's renew deadline and how often it renews (client-go's 15/10/2 ratios)."""

    lease_seconds: int
    renew_deadline_seconds: float
    retry_seconds: float

    @classmethod
    def scaled(cls, lease_seconds: int) -> LeaseTiming:
        """The contract's renew deadline and retry period, in proportion to `lease_seconds`."""
        ratio = lease_seconds / contract.DRIVER_LEASE_SECONDS
        return cls(
            lease_seconds=lease_seconds,
            renew_deadline_seconds=contract.DRIVER_LEASE_RENEW_DEADLINE_SECONDS * ratio,
            retry_seconds=contract.DRIVER_LEASE_RETRY_SECONDS * ratio,
        )


class LeaseApi:
    """GET and PUT of one Lease with the pod's ServiceAccount token (read at every call: bound tokens rotate)."""

    def __init__(self, host: str, port: str, *, namespace: str, name: str, account_dir: str, timeout: float) -> None:
        server = f"[{host}]" if ":" in host else host
        self.url = f"https://{server}:{port}/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self.namespace, self.name, self.timeout = namespace, name, timeout
        self._token = Path(account_dir) / "token"
        context = ssl.create_default_context(cafile=str(Path(account_dir) / "ca.crt"))
        # The API server is never reached through a proxy from the environment.
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )

    def _call(
        self, method: str, body: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {self._token.read_text().strip()}", "Accept": "application/json"}
        data = None if body is None else json.dumps(body).encode()
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.url, data=data, method=method, headers=headers)  # noqa: S310 - https
        try:
            with self._opener.open(request, timeout=timeout or self.timeout) as response:
                return int(response.status), json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            detail = error.read()[:300].decode(errors="replace")
            error.close()
            if error.code in (HTTP_NOT_FOUND, HTTP_CONFLICT):
                return error.code, {}
            raise LeaseApiError(f"{method} Lease {self.namespace}/{self.name}: HTTP {error.code} {detail}") from None

    def get_lease(self, *, timeout: float | None = None) -> election.StoredLease | None:
        """The Lease, or None when there is none (`timeout`: this call's, instead of the default)."""
        code, body = self._call("GET", timeout=timeout)
        if code == HTTP_NOT_FOUND:
            return None
        return election.StoredLease(election.lease_record(body.get("spec") or {}), body["metadata"]["resourceVersion"])

    def replace_lease(
        self, record: election.LeaseRecord, resource_version: str, *, timeout: float | None = None
    ) -> str | None:
        """Write `record` over the version read; the version written, None when the Lease changed since (or is
        gone)."""
        metadata = {"name": self.name, "namespace": self.namespace, "resourceVersion": resource_version}
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata}
        code, written = self._call("PUT", {**body, "spec": election.lease_spec(record)}, timeout=timeout)
        version = (written.get("metadata") or {}).get("resourceVersion") if code == HTTP_OK else None
        return str(version) if version else None


def _now() -> datetime:
    return datetime.now(UTC)


class LeaseGuard:
    """One driver's hold on its app's Lease."""

    def __init__(
        self,
        api: LeaseApi,
        identity: str,
        timing: LeaseTiming,
        on_lost: Callable[[str], None],
        *,
        allowed: bool,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.api, self.identity, self.timing = api, identity, timing
        self._on_lost, self._clock = on_lost, clock
        self._lock = threading.Lock()  # one read-decide-write at a time (the loop's, then release's)
        self._losing = threading.Lock()  # never held across a request: the watchdog must not wait on one
        self._seen: election.LeaseRecord | None = None
        self._seen_at: datetime | None = None
        self._written: tuple[election.LeaseRecord, str] | None = None  # this driver's last write and its version
        self._renewed = time.monotonic()
        self._allowed, self._held, self._stop, self._wake = (threading.Event() for _ in range(4))
        self._lost: str | None = None  # why the Lease was lost (set before `on_lost` is called)
        self._waiting_since: float | None = None
        self._reported: tuple[str, str | None] | None = None
        if allowed:
            self._allowed.set()
        self._threads = [
            threading.Thread(target=self._loop, name="driver-lease", daemon=True),
            threading.Thread(target=self._watchdog, name="driver-lease-watchdog", daemon=True),
        ]

    @property
    def held(self) -> bool:
        return self._held.is_set()

    @property
    def lost(self) -> str | None:
        """Why this driver lost the Lease (None while it holds it or never held it): set before `on_lost` ends the
        JVM, so whatever fails afterwards in the driver is known to be that stop."""
        return self._lost

    @property
    def holder(self) -> str | None:
        """The holder of the Lease as last read."""
        return self._seen.holder if self._seen else None

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def allow(self) -> None:
        """From now on, take the Lease as soon as it is released or expired (a standby, once promoted)."""
        if not self._allowed.is_set():
            self._waiting_since = time.monotonic()
            self._allowed.set()
            self._wake.set()

    def wait_held(self, timeout: float) -> bool:
        """Block until this driver holds the Lease (True) or `timeout` passed (False)."""
        return self._held.wait(timeout)

    def _observe(self, stored: election.StoredLease | None, now: datetime) -> election.LeaseRecord | None:
        record = stored.record if stored else None
        if self._seen_at is None or record != self._seen:
            self._seen, self._seen_at = record, now
        return record

    def _renew_unread(self, timeout: float | None) -> bool:
        """Renew over the version this driver wrote last, without reading the Lease first (client-go's shortcut:
        one request per renewal instead of two); False when that version is unknown or the Lease changed since
        (then it is read and decided again)."""
        if self._written is None or not self._held.is_set():
            return False
        record, version = self._written
        self._written = None
        now = self._clock()
        renewed = election.next_write(record, now, self.identity, now, self.timing.lease_seconds).record
        assert renewed is not None  # RENEW: the record names this driver
        written = self.api.replace_lease(renewed, version, timeout=timeout)
        if written is None:
            return False
        self._seen, self._seen_at, self._written = renewed, now, (renewed, written)
        return True

    def try_acquire_or_renew(self, timeout: float | None = None) -> bool:
        """Read the Lease; once allowed, take or renew it as `election.next_write` says. True while holding it.
        `timeout`: each request's (None: the API's default)."""
        with self._lock:
            if self._renew_unread(timeout):
                return True
            stored = self.api.get_lease(timeout=timeout)
            now = self._clock()
            record = self._observe(stored, now)
            if not self._allowed.is_set():
                return False
            assert self._seen_at is not None
            decision = election.next_write(record, self._seen_at, self.identity, now, self.timing.lease_seconds)
            if decision.record is None:
                return False
            if stored is None:  # the operator creates it with the attempt; the driver may not
                raise LeaseApiError(f"there is no Lease {self.api.namespace}/{self.api.name} to take")
            written = self.api.replace_lease(decision.record, stored.resource_version, timeout=timeout)
            if not written:
                return False
            self._seen, self._seen_at, self._written = decision.record, now, (decision.record, written)
            return True

    def _request_timeout(self, started: float) -> float | None:
        """How long a request of this step may take: while holding, until the renew deadline (as client-go's renew
        context: an API server answering slowly under load still renews; the watchdog stops this driver at the
        deadline whatever a request is doing); otherwise the API's default."""
        if not self._held.is_set():
            return None
        left = self.timing.renew_deadline_seconds - (started - self._renewed)
        return max(MIN_REQUEST_SECONDS, left)

    def _step(self) -> None:
        started = time.monotonic()
        try:
            holding = self.try_acquire_or_renew(self._request_timeout(started))
        except Exception as error:  # the API unreachable or refusing: a failed try; the watchdog counts the time
            self._report("failing", None, f"reading or writing the Lease {self.api.name} failed: {error}")
            return
        if self._lost is not None:
            return  # lost while this step's request was under way (the watchdog's deadline): never held again
        if holding:
            # The renewTime written was read from the clock after `started`: the deadline counts from before it.
            self._renewed, self._reported = started, None
            if not self._held.is_set():
                waited = time.monotonic() - (self._waiting_since or self._renewed)
                log.info("driver Lease %s: held by %s (waited %.2fs)", self.api.name, self.identity, waited)
                self._held.set()
            return
        if self._held.is_set():
            why = election.loss(self.identity, self.holder, 0.0, self.timing.renew_deadline_seconds)
            if why is not None:
                self._lose(why)
        elif self._allowed.is_set():
            message = f"waiting for the Lease {self.api.name}, held by {self.holder}"
            self._report("waiting", self.holder, f"{message}: taken only once released or expired")

    def _report(self, state: str, holder: str | None, message: str) -> None:
        """Log a waiting or failing state once, not at every retry."""
        if self._reported != (state, holder):
            self._reported = (state, holder)
            log.warning("driver Lease: %s", message)

    def _loop(self) -> None:
        if self._allowed.is_set():
            self._waiting_since = time.monotonic()
        while not self._stop.is_set() and self._lost is None:
            self._step()
            waiting = self._allowed.is_set() and not self._held.is_set()
            self._wake.wait(ACQUIRE_POLL_SECONDS if waiting else self.timing.retry_seconds)
            self._wake.clear()

    def _watchdog(self) -> None:
        while not self._stop.wait(WATCHDOG_SECONDS):
            if not self._held.is_set():
                continue
            overdue = time.monotonic() - self._renewed
            why = election.loss(self.identity, None, overdue, self.timing.renew_deadline_seconds)
            if why is not None:
                self._lose(why)

    def _lose(self, why: str) -> None:
        with self._losing:
            if self._lost is not None or self._stop.is_set():
                return
            self._lost = why
        self._held.clear()
        log.critical("driver Lease %s lost (%s): stopping every write now", self.api.name, why)
        self._on_lost(why)

    def release(self) -> None:
        """Stop renewing and give the Lease up when held (best effort: otherwise it expires)."""
        self._stop.set()
        self._wake.set()
        if not self._held.is_set() or self._lost is not None:
            return
        self._held.clear()
        try:
            with self._lock:
                stored = self.api.get_lease()
                record = election.release(stored.record if stored else None, self.identity, self._clock())
                if (
                    stored is not None
                    and record is not None
                    and self.api.replace_lease(record, stored.resource_version)
                ):
                    log.info("driver Lease %s: released", self.api.name)
        except Exception as error:
            log.warning("driver Lease %s: releasing failed (it will expire): %s", self.api.name, error)


def settings_problem(settings: RuntimeSettings) -> str | None:
    """What HEADRACE_DRIVER_LEASE lacks to work: the pod's identity, its namespace, the API server's address."""
    if not settings.driver_lease:
        return None
    needed = (
        (contract.ENV_POD_NAME, settings.pod_name),
        (contract.ENV_APP_NAMESPACE, settings.app_namespace),
        ("KUBERNETES_SERVICE_HOST", settings.kubernetes_host),
    )
    missing = [name for name, value in needed if not value]
    return f"{contract.ENV_DRIVER_LEASE} needs {', '.join(missing)}" if missing else None


def guard_from_settings(settings: RuntimeSettings, on_lost: Callable[[str], None]) -> LeaseGuard | None:
    """The guard HEADRACE_DRIVER_LEASE asks for (None without it; `settings_problem` must be None). Raises OSError
    or ssl.SSLError when the pod's CA certificate cannot be read."""
    if not settings.driver_lease or not settings.pod_name or not settings.kubernetes_host:
        return None
    timing = LeaseTiming.scaled(settings.driver_lease_seconds)
    api = LeaseApi(
        settings.kubernetes_host,
        settings.kubernetes_port or "443",
        namespace=settings.app_namespace,
        name=settings.driver_lease,
        account_dir=settings.service_account_dir,
        timeout=max(1.0, timing.retry_seconds),
    )
    return LeaseGuard(api, settings.pod_name, timing, on_lost, allowed=not settings.standby)

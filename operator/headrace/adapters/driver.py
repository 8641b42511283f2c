"""Client of the control endpoint the Headrace runtime serves inside each driver pod.

Owns: the call to one driver: HTTPS trusting only the app's own certificate (its one trust anchor, the name in
it checked, sent as SNI while the pod's IP is dialled), the bearer token, JSON in and out. Every call has a
timeout; a reply is read up to `MAX_REPLY_BYTES` (a tenant's driver cannot make the operator buffer an
unbounded body); a redirect is an error, never followed, so the token goes nowhere but the driver pod's
own address. Plain HTTP only for an endpoint without a certificate: a driver started before the control
endpoint had TLS (the reconciler decides from the pod, docs/security.md).
"""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from headrace.api import runtime_contract as contract

MAX_REPLY_BYTES = 1 << 20  # the status document of a driver with many queries is a few kB


class DriverUnavailable(Exception):
    """The driver did not answer, or refused the request (`status`: its HTTP error status, if it answered).

    `credentials_refused`: the credentials from the app's control Secret did not work (the token refused with
    401/403, the TLS handshake failed, or the certificate is unusable), so the Secret may have changed since it
    was read; a driver that did not answer at all leaves them in no doubt."""

    def __init__(self, message: str, status: int | None = None, *, credentials_refused: bool | None = None) -> None:
        super().__init__(message)
        self.status = status
        if credentials_refused is None:
            credentials_refused = status in (HTTPStatus.UNAUTHORIZED, HTTPStatus.FORBIDDEN)
        self.credentials_refused = credentials_refused


@dataclass(frozen=True)
class DriverEndpoint:
    """One driver's control endpoint: the pod's IP, the app's token, and the app's certificate."""

    address: str
    token: str
    certificate: str | None  # PEM: the only certificate trusted; None: plain HTTP (a driver from before TLS)
    server_name: str = ""  # the name in `certificate`, checked

    @property
    def scheme(self) -> str:
        return "http" if self.certificate is None else "https"


def client_context(certificate: str) -> ssl.SSLContext:
    """TLS settings trusting exactly `certificate` (no system CAs), the server's name checked, TLS 1.2 or newer."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and check_hostname
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_verify_locations(cadata=certificate)
    return context


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """Dials the pod's address; verifies the certificate for `server_name` (the address is in no certificate)."""

    def __init__(self, endpoint: DriverEndpoint, port: int, timeout: float) -> None:
        assert endpoint.certificate is not None
        self._pinned = client_context(endpoint.certificate)
        self._server_name = endpoint.server_name
        super().__init__(endpoint.address, port, timeout=timeout, context=self._pinned)

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._pinned.wrap_socket(self.sock, server_hostname=self._server_name)


class DriverControl:
    """Talks to one driver at `https://<pod ip>:<control port>` with its bearer token."""

    def __init__(
        self,
        timeout_seconds: float = 10.0,
        savepoint_timeout_seconds: float = 1800.0,
        port: int = contract.DEFAULT_CONTROL_PORT,
        dispose_timeout_seconds: float = 120.0,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.dispose_timeout_seconds = dispose_timeout_seconds
        self.port = port
        self.savepoint_timeout_seconds = savepoint_timeout_seconds

    def _connection(self, endpoint: DriverEndpoint, timeout: float) -> http.client.HTTPConnection:
        if endpoint.certificate is None:
            return http.client.HTTPConnection(endpoint.address, self.port, timeout=timeout)
        return _PinnedHTTPSConnection(endpoint, self.port, timeout)

    def _call(
        self,
        endpoint: DriverEndpoint,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Any:
        url = f"{endpoint.scheme}://{endpoint.address}:{self.port}{path}"
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {endpoint.token}", "Content-Type": "application/json"}
        try:
            connection = self._connection(endpoint, timeout or self.timeout_seconds)
        except (ssl.SSLError, ValueError) as error:  # the Secret's certificate is not a certificate
            message = f"{method} {url}: the app's control certificate is unusable: {error}"
            raise DriverUnavailable(message, credentials_refused=True) from error
        try:
            connection.request(method, path, body=data, headers=headers)  # TLS verified before anything is sent
            response = connection.getresponse()
            status = response.status
            reply = response.read(MAX_REPLY_BYTES + 1)
        except (OSError, http.client.HTTPException) as error:  # ssl errors (a wrong certificate) are OSErrors
            tls = isinstance(error, ssl.SSLError)
            raise DriverUnavailable(f"{method} {url}: {error}", credentials_refused=tls) from error
        finally:
            connection.close()
        if not 200 <= status < 300:  # a 3xx too: following it would send the token to another address
            detail = reply[:500].decode(errors="replace")
            raise DriverUnavailable(f"{method} {url}: HTTP {status}: {detail}", status)
        if len(reply) > MAX_REPLY_BYTES:
            raise DriverUnavailable(f"{method} {url}: the reply is larger than {MAX_REPLY_BYTES} bytes")
        try:
            return json.loads(reply or b"null")
        except json.JSONDecodeError as error:
            raise DriverUnavailable(f"{method} {url}: the reply is not JSON: {error}") from error

    def status(self, endpoint: DriverEndpoint) -> contract.StatusDocument:
        """The runtime's status document (queries, last committed batch, progress), as untrusted JSON."""
        result: contract.StatusDocument = self._call(endpoint, "GET", contract.PATH_STATUS)
        return result

    def savepoint(self, endpoint: DriverEndpoint, *, path: str, reason: str, stop: bool) -> dict[str, Any]:
        """Take a savepoint (and stop the job after it when `stop`); returns the savepoint record."""
        route = contract.PATH_STOP_WITH_SAVEPOINT if stop else contract.PATH_SAVEPOINT
        result: dict[str, Any] = self._call(
            endpoint, "POST", route, body={"path": path, "reason": reason}, timeout=self.savepoint_timeout_seconds
        )
        return result

    def promote(
        self, endpoint: DriverEndpoint, *, restore_from: str | None = None, allow_repartition: bool = False
    ) -> dict[str, Any]:
        """Let a standby driver start its queries (idempotent), restoring `restore_from` if it was created without."""
        body = {"restoreFrom": restore_from, "allowRepartition": allow_repartition} if restore_from else {}
        result: dict[str, Any] = self._call(endpoint, "POST", contract.PATH_PROMOTE, body=body)
        return result

    def rescale(self, endpoint: DriverEndpoint, executors: int) -> dict[str, Any]:
        """Ask the running SparkContext for a new executor total."""
        result: dict[str, Any] = self._call(endpoint, "POST", contract.PATH_RESCALE, body={"executors": executors})
        return result

    def dispose_savepoint(self, endpoint: DriverEndpoint, path: str) -> dict[str, Any]:
        """Delete one savepoint directory through the driver's file system (idempotent: gone is fine)."""
        result: dict[str, Any] = self._call(
            endpoint,
            "POST",
            contract.PATH_DISPOSE_SAVEPOINT,
            body={"path": path},
            timeout=self.dispose_timeout_seconds,
        )
        return result

"""Client of the control endpoint the Headrace runtime serves inside each driver pod.

Every call has a timeout; a reply is read up to `MAX_REPLY_BYTES` (a tenant's driver cannot make the
operator buffer an unbounded body); redirects are refused, so the bearer token never goes anywhere
but the driver pod's own address.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from headrace.api import runtime_contract as contract

MAX_REPLY_BYTES = 1 << 20  # the status document of a driver with many queries is a few kB


class DriverUnavailable(Exception):
    """The driver did not answer, or refused the request (`status`: its HTTP error status, if it answered)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx is an error: following it would send the token to another address."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_RefuseRedirects)


class DriverControl:
    """Talks to one driver at `http://<pod ip>:<control port>` with its bearer token."""

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

    def _call(
        self,
        address: str,
        token: str,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> Any:
        url = f"http://{address}:{self.port}{path}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", f"Bearer {token}")
        request.add_header("Content-Type", "application/json")
        try:
            with _OPENER.open(request, timeout=timeout or self.timeout_seconds) as response:
                reply = response.read(MAX_REPLY_BYTES + 1)
        except urllib.error.HTTPError as error:
            with error:
                detail = error.read(500).decode(errors="replace")
            raise DriverUnavailable(f"{method} {url}: HTTP {error.code}: {detail}", error.code) from error
        except (urllib.error.URLError, TimeoutError, OSError) as error:
            raise DriverUnavailable(f"{method} {url}: {error}") from error
        if len(reply) > MAX_REPLY_BYTES:
            raise DriverUnavailable(f"{method} {url}: the reply is larger than {MAX_REPLY_BYTES} bytes")
        try:
            return json.loads(reply or b"null")
        except json.JSONDecodeError as error:
            raise DriverUnavailable(f"{method} {url}: the reply is not JSON: {error}") from error

    def status(self, address: str, token: str) -> contract.StatusDocument:
        """The runtime's status document (queries, last committed batch, progress), as untrusted JSON."""
        result: contract.StatusDocument = self._call(address, token, "GET", contract.PATH_STATUS)
        return result

    def savepoint(self, address: str, token: str, *, path: str, reason: str, stop: bool) -> dict[str, Any]:
        """Take a savepoint (and stop the job after it when `stop`); returns the savepoint record."""
        endpoint = contract.PATH_STOP_WITH_SAVEPOINT if stop else contract.PATH_SAVEPOINT
        result: dict[str, Any] = self._call(
            address,
            token,
            "POST",
            endpoint,
            body={"path": path, "reason": reason},
            timeout=self.savepoint_timeout_seconds,
        )
        return result

    def rescale(self, address: str, token: str, executors: int) -> dict[str, Any]:
        """Ask the running SparkContext for a new executor total."""
        result: dict[str, Any] = self._call(
            address, token, "POST", contract.PATH_RESCALE, body={"executors": executors}
        )
        return result

    def dispose_savepoint(self, address: str, token: str, path: str) -> dict[str, Any]:
        """Delete one savepoint directory through the driver's file system (idempotent: gone is fine)."""
        result: dict[str, Any] = self._call(
            address,
            token,
            "POST",
            contract.PATH_DISPOSE_SAVEPOINT,
            body={"path": path},
            timeout=self.dispose_timeout_seconds,
        )
        return result

"""Client of the control endpoint the Headrace runtime serves inside each driver pod."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from headrace.api import runtime_contract as contract


class DriverUnavailable(Exception):
    """The driver did not answer, or refused the request."""


class DriverControl:
    """Talks to one driver at `http://<pod ip>:<control port>` with its bearer token."""

    def __init__(self, timeout_seconds: float = 10.0, savepoint_timeout_seconds: float = 1800.0) -> None:
        self.timeout_seconds = timeout_seconds
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
        url = f"http://{address}:{contract.DEFAULT_CONTROL_PORT}{path}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", f"Bearer {token}")
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout_seconds) as response:  # noqa: S310
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")[:500]
            raise DriverUnavailable(f"{method} {url}: HTTP {error.code}: {detail}") from error
        except (urllib.error.URLError, TimeoutError, OSError, json.JSONDecodeError) as error:
            raise DriverUnavailable(f"{method} {url}: {error}") from error

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

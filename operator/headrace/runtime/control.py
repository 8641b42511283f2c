"""The driver's authenticated control endpoint (paths from the runtime contract), over TLS when configured.

Owns: serving HTTPS with the app's certificate (the handshake runs in the connection's own thread, under the
socket timeout, so a client that never finishes it holds no other request), routing ``GET /v1/status``,
``POST /v1/savepoint``, ``POST /v1/stop-with-savepoint``, ``POST /v1/rescale``, ``POST /v1/dispose-savepoint``
and ``POST /v1/promote`` to :class:`ControlActions`, bearer-token checks (no token configured: every control
request is refused), JSON bodies and error statuses, and ``GET /healthz`` without a token.
Never: implements the actions; it only parses, authorizes, calls and answers.
"""

from __future__ import annotations

import hmac
import json
import logging
import ssl
import threading
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar, Protocol

from headrace.api import runtime_contract as contract

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 64 * 1024


class ActionError(Exception):
    """An action refused or failed; becomes an HTTP error with a JSON message."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class ControlActions(Protocol):
    def status(self) -> contract.StatusDocument: ...

    def savepoint(self, path: str | None, reason: str) -> dict[str, Any]: ...

    def stop_with_savepoint(self, path: str | None, reason: str) -> dict[str, Any]: ...

    def after_stop_response(self) -> None:
        """Called once the stop-with-savepoint response has been sent."""
        ...

    def rescale(self, executors: int) -> dict[str, Any]: ...

    def dispose_savepoint(self, path: str) -> dict[str, Any]:
        """Delete one savepoint directory under this app's savepoint root."""
        ...

    def promote(self, restore_from: str | None = None, allow_repartition: bool = False) -> dict[str, Any]:
        """Let a standby driver start its queries (restoring `restore_from` if it has no restore source)."""
        ...


def authorized(header: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header carries the configured bearer token."""
    if not token or not header:
        return False
    scheme, _, presented = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode())


def _string_field(body: dict[str, Any], name: str, default: str | None) -> str | None:
    value = body.get(name, default)
    if value is not None and not isinstance(value, str):
        raise ActionError(HTTPStatus.BAD_REQUEST, f"field {name!r} must be a string")
    return value


def _executors_field(body: dict[str, Any]) -> int:
    value = body.get("executors")
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ActionError(HTTPStatus.BAD_REQUEST, "field 'executors' must be a non-negative integer")
    return value


SOCKET_TIMEOUT_SECONDS = 30.0  # a connection that sends nothing this long is closed (the reply may take longer)


class _Handler(BaseHTTPRequestHandler):
    """Routes requests to ``actions``; a subclass per server sets ``actions`` and ``token``."""

    server_version = "headrace-runtime"
    actions: ClassVar[ControlActions]
    token: ClassVar[str | None]

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("control %s", format % args)

    def _reply(self, status: HTTPStatus, body: Mapping[str, Any]) -> None:
        payload = json.dumps(body, default=str).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise ActionError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "request body too large")
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            raise ActionError(HTTPStatus.BAD_REQUEST, "request body is not JSON") from None
        if not isinstance(body, dict):
            raise ActionError(HTTPStatus.BAD_REQUEST, "request body must be a JSON object")
        return body

    def _dispatch(self, routes: dict[str, Callable[[], None]]) -> None:
        path = self.path.split("?", 1)[0]
        if path == contract.PATH_HEALTH and self.command == "GET":
            self._reply(HTTPStatus.OK, {"status": "ok"})
        elif path not in routes:
            self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such path {path}"})
        elif not authorized(self.headers.get("Authorization"), self.token):
            self._reply(HTTPStatus.UNAUTHORIZED, {"error": "missing or wrong bearer token"})
        else:
            self._run(path, routes[path])

    def _run(self, path: str, route: Callable[[], None]) -> None:
        try:
            route()
        except ActionError as error:
            self._reply(error.status, {"error": str(error)})
        except Exception as error:
            log.exception("control request %s failed", path)
            self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(error).__name__}: {error}"})

    def do_GET(self) -> None:
        self._dispatch({contract.PATH_STATUS: self._status})

    def do_POST(self) -> None:
        self._dispatch(
            {
                contract.PATH_SAVEPOINT: self._savepoint,
                contract.PATH_STOP_WITH_SAVEPOINT: self._stop_with_savepoint,
                contract.PATH_RESCALE: self._rescale,
                contract.PATH_DISPOSE_SAVEPOINT: self._dispose_savepoint,
                contract.PATH_PROMOTE: self._promote,
            }
        )

    def _status(self) -> None:
        self._reply(HTTPStatus.OK, self.actions.status())

    def _promote(self) -> None:
        body = self._body()
        repartition = body.get("allowRepartition", False)
        if not isinstance(repartition, bool):
            raise ActionError(HTTPStatus.BAD_REQUEST, "field 'allowRepartition' must be a boolean")
        self._reply(HTTPStatus.OK, self.actions.promote(_string_field(body, "restoreFrom", None), repartition))

    def _rescale(self) -> None:
        self._reply(HTTPStatus.OK, self.actions.rescale(_executors_field(self._body())))

    def _dispose_savepoint(self) -> None:
        path = _string_field(self._body(), "path", None)
        if not path:
            raise ActionError(HTTPStatus.BAD_REQUEST, "field 'path' is required")
        self._reply(HTTPStatus.OK, self.actions.dispose_savepoint(path))

    def _savepoint(self) -> None:
        body = self._body()
        path, reason = _string_field(body, "path", None), _string_field(body, "reason", "manual") or ""
        self._reply(HTTPStatus.OK, self.actions.savepoint(path, reason))

    def _stop_with_savepoint(self) -> None:
        body = self._body()
        path, reason = _string_field(body, "path", None), _string_field(body, "reason", "stop") or ""
        record = self.actions.stop_with_savepoint(path, reason)
        self._reply(HTTPStatus.OK, record)
        self.actions.after_stop_response()


def server_context(directory: str) -> ssl.SSLContext:
    """TLS settings of the endpoint: the certificate and key files in `directory` (the app's Secret, mounted);
    TLS 1.2 or newer. A missing or unreadable file raises (the runtime then stops: it never falls back to HTTP)."""
    folder = Path(directory)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(folder / contract.CONTROL_TLS_CERT_FILE, folder / contract.CONTROL_TLS_KEY_FILE)
    return context


class _TLSServer(ThreadingHTTPServer):
    """`ThreadingHTTPServer` whose connections complete a TLS handshake, in their own thread, before HTTP."""

    def __init__(self, address: tuple[str, int], handler: type[_Handler], context: ssl.SSLContext) -> None:
        super().__init__(address, handler)
        self.context = context

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(self.RequestHandlerClass.timeout)  # type: ignore[attr-defined]
        secured = self.context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        try:
            secured.do_handshake()
        except (OSError, ValueError) as error:  # plain HTTP, an untrusting client, a stall: nothing was read
            log.debug("control: TLS handshake with %s failed: %s", client_address, error)
            secured.close()
            return
        try:
            super().finish_request(secured, client_address)
        finally:
            self.shutdown_request(secured)


class ControlServer:
    """The control endpoint served from a daemon thread (HTTPS when `tls` is given, else plain HTTP)."""

    def __init__(
        self,
        actions: ControlActions,
        token: str | None,
        address: str,
        port: int,
        *,
        socket_timeout: float = SOCKET_TIMEOUT_SECONDS,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        handler = type("Handler", (_Handler,), {"actions": actions, "token": token, "timeout": socket_timeout})
        self._server = (
            ThreadingHTTPServer((address, port), handler) if tls is None else _TLSServer((address, port), handler, tls)
        )
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="headrace-control", daemon=True)
        self.tls = tls is not None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

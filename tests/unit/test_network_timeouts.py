"""Network calls of the operator are bounded (issue 13, finding 5): API calls time out, the driver's reply is read
up to a limit, and a redirect never carries the control token elsewhere; over HTTPS with the app's pinned
certificate (issue 12) as over plain HTTP (a driver from before TLS). Real sockets on loopback."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from kubernetes import client

from headrace.adapters.driver import MAX_REPLY_BYTES, DriverControl, DriverEndpoint, DriverUnavailable
from headrace.adapters.kube import KubeClient
from headrace.api import names
from headrace.render import control_tls


@pytest.fixture
def silent_server() -> Iterator[int]:
    """Accepts connections and never answers (a hung API server or driver)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(5)
    for connection in accepted:
        connection.close()
    listener.close()


def test_api_calls_time_out_on_a_hung_api_server(silent_server: int) -> None:
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{silent_server}"
    kube = KubeClient(client.ApiClient(configuration), request_timeout=(1.0, 1.0))
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            kube.get_app("ns", "app")
        except BaseException as error:
            outcome.append(error)

    started = time.monotonic()
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(30)
    elapsed = time.monotonic() - started
    print(f"hung API server: the call gave up after {elapsed:.1f}s")
    assert not thread.is_alive(), "the API call is still waiting after 30s"
    assert outcome and "timed out" in str(outcome[0]).lower()


def test_a_call_may_still_pass_its_own_timeout(silent_server: int) -> None:
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{silent_server}"
    configuration.retries = False
    kube = KubeClient(client.ApiClient(configuration), request_timeout=(30.0, 30.0))
    started = time.monotonic()
    with pytest.raises(Exception, match=r"(?i)timed out"):
        kube.core.read_namespace("default", _request_timeout=0.5)
    assert time.monotonic() - started < 10


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    seen: list[dict[str, Any]]


@pytest.fixture(params=["https", "http"])
def scheme(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _pinned(scheme: str, folder: Path) -> tuple[ssl.SSLContext | None, DriverEndpoint]:
    """The server's TLS settings and the client's endpoint for `scheme` (https: the app's certificate, pinned)."""
    if scheme == "http":
        return None, DriverEndpoint("127.0.0.1", "secret-token", certificate=None)
    made = control_tls.control_certificate("clicks", "ns", ec.generate_private_key(ec.SECP256R1()), datetime.now(UTC))
    (folder / "tls.crt").write_text(made.certificate)
    (folder / "tls.key").write_text(made.key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "tls.crt", folder / "tls.key")
    server_name = names.control_server_name("clicks", "ns")
    return context, DriverEndpoint("127.0.0.1", "secret-token", made.certificate, server_name)


def _serve(respond: Any, tls: ssl.SSLContext | None = None) -> tuple[_Server, int]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.server.seen.append({"path": self.path, "auth": self.headers.get("Authorization")})  # type: ignore[attr-defined]
            respond(self)

        def log_message(self, *args: Any) -> None:
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    server.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def test_the_driver_reply_is_read_up_to_a_limit(scheme: str, tmp_path: Path) -> None:
    def huge(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.end_headers()
        chunk = b" " * 65536
        try:
            for _ in range((MAX_REPLY_BYTES * 8) // len(chunk)):
                handler.wfile.write(chunk)
        except OSError:
            pass  # the client stopped reading

    tls, endpoint = _pinned(scheme, tmp_path)
    server, port = _serve(huge, tls)
    try:
        with pytest.raises(DriverUnavailable, match="larger than"):
            DriverControl(timeout_seconds=5, port=port).status(endpoint)
    finally:
        server.shutdown()
        server.server_close()


def test_a_redirect_is_refused_and_the_token_stays_home(scheme: str, tmp_path: Path) -> None:
    elsewhere, elsewhere_port = _serve(lambda handler: (handler.send_response(200), handler.end_headers()))

    def redirect(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(307)
        handler.send_header("Location", f"http://127.0.0.1:{elsewhere_port}/steal")
        handler.end_headers()

    tls, endpoint = _pinned(scheme, tmp_path)
    driver, port = _serve(redirect, tls)
    try:
        with pytest.raises(DriverUnavailable, match="HTTP 307"):
            DriverControl(timeout_seconds=5, port=port).status(endpoint)
    finally:
        for server in (driver, elsewhere):
            server.shutdown()
            server.server_close()
    assert driver.seen and driver.seen[0]["auth"] == "Bearer secret-token"
    assert elsewhere.seen == []


def test_a_hung_driver_times_out(silent_server: int, scheme: str, tmp_path: Path) -> None:
    """A driver that accepts and never answers (nor completes the handshake) is given up on after the timeout."""
    _, endpoint = _pinned(scheme, tmp_path)
    started = time.monotonic()
    with pytest.raises(DriverUnavailable, match="timed out"):
        DriverControl(timeout_seconds=1, port=silent_server).status(endpoint)
    assert time.monotonic() - started < 5

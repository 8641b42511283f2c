"""The control endpoint over TLS (issue 12): the runtime's real `ControlServer` serving an app's certificate made by
`render.control_tls`, and the operator's real `DriverControl` trusting exactly that app's certificate. Real
handshakes on loopback: the app's own certificate is accepted; another app's, or the same app's name in another
namespace, is refused before the token is sent; plain HTTP gets nothing from a TLS endpoint, and a TLS client
sends no token to a plain one."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from headrace.adapters.driver import DriverControl, DriverEndpoint, DriverUnavailable
from headrace.api import names
from headrace.api import runtime_contract as contract
from headrace.render import control_tls
from headrace.runtime.control import ControlServer, server_context

NAMESPACE, APP, OTHER = "analytics", "clicks", "payments"
TOKEN = "the-apps-token"
NOW = datetime.now(UTC)


def certificate(app: str = APP, namespace: str = NAMESPACE) -> control_tls.ControlCertificate:
    return control_tls.control_certificate(app, namespace, ec.generate_private_key(ec.SECP256R1()), NOW)


class Actions:
    """The control actions behind the server; `calls` lists the requests that got through."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def status(self) -> dict[str, Any]:
        self.calls.append("status")
        return {"phase": "Running", "queries": []}

    def savepoint(self, path: str | None, reason: str) -> dict[str, Any]:
        self.calls.append("savepoint")
        return {"path": path, "reason": reason}

    def stop_with_savepoint(self, path: str | None, reason: str) -> dict[str, Any]:
        raise AssertionError("not called here")

    def after_stop_response(self) -> None:
        raise AssertionError("not called here")

    def rescale(self, executors: int) -> dict[str, Any]:
        self.calls.append("rescale")
        return {"requested": executors}


@contextmanager
def driver(tmp_path: Path, served: control_tls.ControlCertificate | None) -> Iterator[tuple[Actions, int]]:
    """The runtime's control server on loopback, over TLS with `served` (files as the Secret volume holds them),
    or plain HTTP when None."""
    tls = None
    if served is not None:
        for name, content in served.secret_values().items():
            (tmp_path / name).write_text(content)
        tls = server_context(str(tmp_path))
    actions = Actions()
    server = ControlServer(actions, TOKEN, "127.0.0.1", 0, socket_timeout=2.0, tls=tls)
    server.start()
    try:
        yield actions, server.port
    finally:
        server.stop()


def endpoint(trusted: control_tls.ControlCertificate | None, namespace: str = NAMESPACE) -> DriverEndpoint:
    if trusted is None:
        return DriverEndpoint("127.0.0.1", TOKEN, certificate=None)
    return DriverEndpoint("127.0.0.1", TOKEN, trusted.certificate, names.control_server_name(APP, namespace))


def test_the_certificate_names_the_app_and_is_a_p256_server_certificate() -> None:
    made = certificate()
    parsed = x509.load_pem_x509_certificate(made.certificate.encode())
    names_in = parsed.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names_in.get_values_for_type(x509.DNSName) == [f"{APP}-control.{NAMESPACE}.svc"]
    assert parsed.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert isinstance(parsed.public_key(), ec.EllipticCurvePublicKey)
    assert parsed.public_key().curve.name == "secp256r1"  # type: ignore[union-attr]
    assert parsed.not_valid_before_utc <= NOW < NOW + timedelta(days=3000) < parsed.not_valid_after_utc
    assert "PRIVATE KEY" in made.key and "PRIVATE KEY" not in made.certificate
    assert made.certificate != certificate().certificate  # a new key and serial for every app


def test_the_apps_own_certificate_is_accepted(tmp_path: Path) -> None:
    made = certificate()
    client = DriverControl(timeout_seconds=5)
    with driver(tmp_path, made) as (actions, port):
        client.port = port
        assert client.status(endpoint(made)) == {"phase": "Running", "queries": []}
        assert client.rescale(endpoint(made), 3) == {"requested": 3}
        assert client.savepoint(endpoint(made), path="s3a://b/sp", reason="manual", stop=False)["path"] == "s3a://b/sp"
    assert actions.calls == ["status", "rescale", "savepoint"]


def test_the_token_is_still_required_over_tls(tmp_path: Path) -> None:
    made = certificate()
    with driver(tmp_path, made) as (actions, port):
        wrong = DriverEndpoint(
            "127.0.0.1", "not-the-token", made.certificate, names.control_server_name(APP, NAMESPACE)
        )
        with pytest.raises(DriverUnavailable, match="HTTP 401") as refused:
            DriverControl(timeout_seconds=5, port=port).status(wrong)
    assert actions.calls == []
    assert refused.value.credentials_refused  # the operator reads the control Secret again


@pytest.mark.parametrize(
    ("served_by", "namespace"),
    [(OTHER, NAMESPACE), (APP, NAMESPACE), (APP, "elsewhere")],
    ids=["another-apps-certificate", "same-name-another-key", "same-key-another-name"],
)
def test_a_driver_with_another_certificate_is_refused(tmp_path: Path, served_by: str, namespace: str) -> None:
    """The operator trusts one certificate per app: a driver serving another app's certificate, or a certificate
    for the same name made with another key, fails the handshake; the app's own certificate checked against
    another name fails the name check. No request reaches the server."""
    trusted = certificate()
    served = trusted if namespace != NAMESPACE else certificate(served_by)
    with (
        driver(tmp_path, served) as (actions, port),
        pytest.raises(DriverUnavailable, match="CERTIFICATE_VERIFY_FAILED") as refused,
    ):
        DriverControl(timeout_seconds=5, port=port).status(endpoint(trusted, namespace))
    assert actions.calls == []
    assert refused.value.credentials_refused  # typed from the TLS error, not from the message's words


def test_plain_http_gets_nothing_from_a_tls_endpoint(tmp_path: Path) -> None:
    with driver(tmp_path, certificate()) as (actions, port):
        with pytest.raises(DriverUnavailable):
            DriverControl(timeout_seconds=5, port=port).status(endpoint(None))
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            raw.sendall(f"GET {contract.PATH_HEALTH} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            try:
                answer = raw.recv(1024)
            except ConnectionResetError:
                answer = b""
            assert b"HTTP/" not in answer  # the handshake failed: closed or reset (or a TLS alert), no HTTP answer
    assert actions.calls == []


def test_a_tls_client_sends_no_token_to_a_plain_endpoint(tmp_path: Path) -> None:
    """A driver that serves plain HTTP where TLS is expected (an impostor, or a pod from before TLS wrongly
    taken for a new one) gets a TLS hello, never an HTTP request with the token."""
    seen: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.settimeout(5)
            seen.append(connection.recv(65536))
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        with pytest.raises(DriverUnavailable):
            DriverControl(timeout_seconds=5, port=listener.getsockname()[1]).status(endpoint(certificate()))
        thread.join(5)
    finally:
        listener.close()
    assert seen and TOKEN.encode() not in seen[0] and b"Authorization" not in seen[0]


def test_a_stalled_handshake_holds_no_other_request(tmp_path: Path) -> None:
    """The handshake runs in the connection's thread under the socket timeout: a client that connects and
    says nothing neither blocks the accept loop nor stays connected."""
    made = certificate()
    with driver(tmp_path, made) as (_, port), socket.create_connection(("127.0.0.1", port)) as idle:
        started = time.monotonic()
        DriverControl(timeout_seconds=5, port=port).status(endpoint(made))
        assert time.monotonic() - started < 1.5
        idle.settimeout(10)
        assert idle.recv(1) == b""  # closed by the server after its 2 s socket timeout
        print(f"stalled handshake closed after {time.monotonic() - started:.1f}s")


def test_an_unreadable_certificate_is_an_error_not_plain_http(tmp_path: Path) -> None:
    with pytest.raises((OSError, ssl.SSLError)):
        server_context(str(tmp_path))  # no files
    (tmp_path / contract.CONTROL_TLS_CERT_FILE).write_text("not a certificate")
    (tmp_path / contract.CONTROL_TLS_KEY_FILE).write_text("not a key")
    with pytest.raises(ssl.SSLError):
        server_context(str(tmp_path))


def test_a_secret_whose_certificate_is_garbage_fails_the_call_cleanly() -> None:
    broken = DriverEndpoint("127.0.0.1", TOKEN, "not a certificate", names.control_server_name(APP, NAMESPACE))
    with pytest.raises(DriverUnavailable, match="certificate is unusable") as refused:
        DriverControl(timeout_seconds=1, port=1).status(broken)
    assert refused.value.credentials_refused


def test_a_driver_that_does_not_answer_leaves_the_credentials_in_no_doubt() -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: connection refused
    with pytest.raises(DriverUnavailable) as unanswered:
        DriverControl(timeout_seconds=1, port=port).status(endpoint(certificate()))
    assert not unanswered.value.credentials_refused

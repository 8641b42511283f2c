"""The driver's control and metrics servers close connections that stall (issue 13, finding 4): a client that
opens a connection and sends half a request never keeps a server thread. Real sockets on loopback."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from headrace.runtime.control import ControlServer
from headrace.runtime.metrics import RuntimeMetrics


class _NoActions:
    """The control server's actions; a stalled request never reaches them."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"{name} was called")


def _closed_after_stalling(port: int) -> float:
    """Send half a request line, then wait for the server to close the connection; seconds it took."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(b"GET /v1/sta")
        started = time.monotonic()
        try:
            data = connection.recv(1024)
        except TimeoutError:
            pytest.fail("the server still holds the stalled connection after 5s")
        assert data == b"", data
        return time.monotonic() - started


def test_control_server_closes_a_stalled_connection() -> None:
    server = ControlServer(_NoActions(), "token", "127.0.0.1", 0, socket_timeout=0.5)  # type: ignore[arg-type]
    server.start()
    try:
        waited = _closed_after_stalling(server.port)
    finally:
        server.stop()
    print(f"control: stalled connection closed after {waited:.2f}s")
    assert waited < 3


def test_metrics_server_closes_a_stalled_connection() -> None:
    server = RuntimeMetrics().serve("127.0.0.1", 0, socket_timeout=0.5)
    try:
        waited = _closed_after_stalling(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
    print(f"metrics: stalled connection closed after {waited:.2f}s")
    assert waited < 3

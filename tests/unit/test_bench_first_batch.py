"""bench/first_batch.py's pure parts: the phase split of a driver's listener events, the S3 requests read from the
server's access log, and the proxy's added latency the bench models S3 round trips with."""

from __future__ import annotations

import importlib.util
import socket
import sys
import threading
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from testbed.tcpproxy import TcpProxy

BENCH = Path(__file__).resolve().parents[2] / "bench" / "first_batch.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("first_batch", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("first_batch", module)
    spec.loader.exec_module(module)
    return module


def _progress(name: str, t: float, trigger: str, add_batch: int, commit_ms: int) -> dict[str, Any]:
    durations = {"latestOffset": 300, "queryPlanning": 200, "addBatch": add_batch, "walCommit": 50, "commitOffsets": 70}
    state = [{"commitTimeMs": commit_ms, "custom": {"rocksdbCommitFileSyncLatencyMs": commit_ms - 10}}]
    return {"kind": "progress", "name": name, "t": t, "timestamp": trigger, "durations": durations, "rows": 120,
            "state": state}  # fmt: skip


def test_the_phases_are_the_slower_querys_first_batch_and_its_second_as_the_steady_one() -> None:
    first_batch = _bench()
    base = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    events = [
        {"kind": "session", "t": base + 10},
        {"kind": "gate", "t": base + 12},
        {"kind": "started", "name": "a", "t": base + 13},
        {"kind": "started", "name": "b", "t": base + 14},
        _progress("a", base + 20, "2027-01-15T08:00:13.500Z", 4000, 900),
        _progress("b", base + 25, "2027-01-15T08:00:15.000Z", 9000, 1200),
        _progress("a", base + 27, "2027-01-15T08:00:21.000Z", 1000, 100),
        _progress("b", base + 28, "2027-01-15T08:00:26.000Z", 2000, 200),
    ]
    run = SimpleNamespace(spawned=base)
    phases = first_batch.phases(run, events)
    assert phases["jvm"] == 10
    assert phases["start"] == 2  # gate -> the later query started
    assert phases["trigger"] == pytest.approx(1.0)  # b started at 14, its trigger at 15
    assert (phases["batch"], phases["steady"]) == (9.0, 2.0)  # b's first and second addBatch
    assert phases["commit"] == pytest.approx(0.12)
    assert (phases["state_commit"], phases["upload"]) == (1.2, 1.19)
    assert (phases["standby"], phases["cold"]) == (13, 25)  # b's first commit from the gate, from the spawn
    assert first_batch._committed(events, 2)
    assert not first_batch._committed(events[:6], 2)


def test_s3_requests_are_read_by_operation_after_the_logs_first_line(tmp_path: Path) -> None:
    first_batch = _bench()
    log = tmp_path / "access.log"
    line = "HR4 headrace [27/November/2026:15:50:50 +0000] 127.0.0.1 HR4 ID {op} k /headrace/k 200 - 0 1 0 0 -"
    log.write_text(
        "log starts 2026-11-27\n" + "\n".join(line.format(op=op) for op in ("s3_PutObject", "s3_HeadObject"))
    )
    assert first_batch.s3_requests(log) == ["s3_PutObject", "s3_HeadObject"]
    assert first_batch.s3_requests(tmp_path / "absent.log") == []


def _echo_server() -> tuple[socket.socket, int]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = server.accept()
        with connection:
            while data := connection.recv(1024):
                connection.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


@pytest.mark.parametrize("delay", [0.0, 0.3])
def test_the_proxy_holds_each_request_for_its_delay(delay: float) -> None:
    server, port = _echo_server()
    with server, TcpProxy(("127.0.0.1", port), delay_seconds=delay) as proxy:
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
        with client:
            for request in (b"HEAD /a", b"GET /b"):
                began = time.monotonic()
                client.sendall(request)
                assert client.recv(1024) == request
                elapsed = time.monotonic() - began
                assert elapsed >= delay
                if not delay:
                    assert elapsed < 0.3

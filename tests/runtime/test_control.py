"""The control endpoint over real HTTP, with a fake of the actions behind it (no Spark needed)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any

import pytest

from headrace.api import runtime_contract as contract
from headrace.runtime.control import ActionError, ControlServer


class FakeActions:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.stopped_response_sent = threading.Event()

    def status(self) -> dict[str, Any]:
        self.calls.append(("status", None))
        return {"phase": "Running", "queries": []}

    def savepoint(self, path: str | None, reason: str) -> dict[str, Any]:
        self.calls.append(("savepoint", (path, reason)))
        if path == "busy":
            raise ActionError(HTTPStatus.CONFLICT, "another savepoint or stop is in progress")
        return {"path": path, "reason": reason}

    def stop_with_savepoint(self, path: str | None, reason: str) -> dict[str, Any]:
        self.calls.append(("stop", (path, reason)))
        return {"path": path, "stopped": True}

    def after_stop_response(self) -> None:
        self.calls.append(("after_stop", None))
        self.stopped_response_sent.set()

    def rescale(self, executors: int) -> dict[str, Any]:
        self.calls.append(("rescale", executors))
        return {"requested": executors}

    def dispose_savepoint(self, path: str) -> dict[str, Any]:
        self.calls.append(("dispose", path))
        if ".." in path:
            raise ActionError(HTTPStatus.BAD_REQUEST, "not under the savepoint root")
        return {"path": path, "deleted": True}

    def promote(self, restore_from: str | None = None, allow_repartition: bool = False) -> dict[str, Any]:
        self.calls.append(("promote", (restore_from, allow_repartition) if restore_from else None))
        return {"promoted": True, "phase": "Starting"}


def call(port: int, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, dict[str, Any]]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


@pytest.fixture
def served() -> Iterator[tuple[FakeActions, int]]:
    actions = FakeActions()
    server = ControlServer(actions, "s3cret", "127.0.0.1", 0)
    server.start()
    try:
        yield actions, server.port
    finally:
        server.stop()


def test_requests_without_the_token_are_refused(served: tuple[FakeActions, int]) -> None:
    actions, port = served
    assert call(port, "GET", contract.PATH_STATUS)[0] == 401
    assert call(port, "GET", contract.PATH_STATUS, token="wrong")[0] == 401
    assert call(port, "POST", contract.PATH_SAVEPOINT, {}, token="wrong")[0] == 401
    assert call(port, "POST", contract.PATH_STOP_WITH_SAVEPOINT, {})[0] == 401
    assert call(port, "POST", contract.PATH_RESCALE, {"executors": 1})[0] == 401
    assert call(port, "POST", contract.PATH_DISPOSE_SAVEPOINT, {"path": "/sp/a"})[0] == 401
    assert call(port, "POST", contract.PATH_PROMOTE, {}, token="wrong")[0] == 401
    assert actions.calls == []
    assert call(port, "GET", contract.PATH_HEALTH) == (200, {"status": "ok"})


def test_no_configured_token_refuses_everything() -> None:
    actions = FakeActions()
    server = ControlServer(actions, None, "127.0.0.1", 0)
    server.start()
    try:
        assert call(server.port, "GET", contract.PATH_STATUS, token="")[0] == 401
        assert call(server.port, "GET", contract.PATH_STATUS, token="anything")[0] == 401
    finally:
        server.stop()
    assert actions.calls == []


def test_actions_with_the_token(served: tuple[FakeActions, int]) -> None:
    actions, port = served
    assert call(port, "GET", contract.PATH_STATUS, token="s3cret") == (200, {"phase": "Running", "queries": []})
    assert call(port, "POST", contract.PATH_SAVEPOINT, {"path": "/sp", "reason": "manual"}, token="s3cret") == (
        200,
        {"path": "/sp", "reason": "manual"},
    )
    assert call(port, "POST", contract.PATH_SAVEPOINT, {"path": "busy"}, token="s3cret")[0] == 409
    assert call(port, "POST", contract.PATH_RESCALE, {"executors": 3}, token="s3cret") == (200, {"requested": 3})
    assert call(port, "POST", contract.PATH_RESCALE, {"executors": "3"}, token="s3cret")[0] == 400
    assert call(port, "POST", contract.PATH_STOP_WITH_SAVEPOINT, {}, token="s3cret")[0] == 200
    # The server runs the after-response hook once the reply is written, so the client may read first.
    assert actions.stopped_response_sent.wait(timeout=10)
    assert actions.calls[-2:] == [("stop", (None, "stop")), ("after_stop", None)]
    assert call(port, "GET", "/v1/unknown", token="s3cret")[0] == 404
    dispose = contract.PATH_DISPOSE_SAVEPOINT
    assert call(port, "POST", dispose, {"path": "/sp/a"}, token="s3cret") == (200, {"path": "/sp/a", "deleted": True})
    assert call(port, "POST", dispose, {"path": "/sp/.."}, token="s3cret")[0] == 400
    assert call(port, "POST", dispose, {}, token="s3cret")[0] == 400  # no path: nothing is called
    assert actions.calls[-2:] == [("dispose", "/sp/a"), ("dispose", "/sp/..")]
    assert call(port, "POST", contract.PATH_PROMOTE, token="s3cret") == (200, {"promoted": True, "phase": "Starting"})
    assert actions.calls[-1] == ("promote", None)
    body = {"restoreFrom": "s3a://b/sp/1", "allowRepartition": True}  # a pre-warmed savepoint upgrade's driver
    assert call(port, "POST", contract.PATH_PROMOTE, body, token="s3cret")[0] == 200
    assert actions.calls[-1] == ("promote", ("s3a://b/sp/1", True))
    assert call(port, "POST", contract.PATH_PROMOTE, {"allowRepartition": "yes"}, token="s3cret")[0] == 400

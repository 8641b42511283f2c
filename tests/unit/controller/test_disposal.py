"""The disposer (a StreamingSavepoint's finalizer work) against the fake cluster: every failure is a counted,
backed-off try, and the deletion is released after the bound with the files named in an Event."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from headrace.adapters.driver import DriverEndpoint, DriverUnavailable
from headrace.api import names
from headrace.controller.disposal import SavepointDisposer
from headrace.controller.metrics import OperatorMetrics
from headrace.controller.status_recorder import StatusRecorder
from headrace.core.disposal import DEADLINE_SECONDS, MAX_TRIES
from headrace.render import control_tls, manifests
from tests.unit.builders import T0

from .fakes import FakeCache, FakeDriver, FakeKube
from .test_reconciler import APP, CERTIFICATE, DRIVER, NAMESPACE, app_body

NAME = "clicks-periodic-1"
PATH = f"s3a://bucket/savepoints/{NAMESPACE}/{APP}/{NAME}"


class FlakyDriver(FakeDriver):
    """Answers a disposal with HTTP `status` the first `failures` times, then deletes."""

    def __init__(self, failures: int, status: int = 503) -> None:
        super().__init__()
        self.failures, self.status = failures, status

    def dispose_savepoint(self, endpoint: DriverEndpoint, path: str) -> dict[str, Any]:
        self.endpoints.append(endpoint)
        self.calls.append(("dispose", path))
        if len([call for call in self.calls if call[0] == "dispose"]) <= self.failures:
            raise DriverUnavailable(f"POST {endpoint.address}: HTTP {self.status}: busy", self.status)
        return {"path": path, "deleted": True}


def deleted_savepoint() -> dict[str, Any]:
    return {
        "apiVersion": "headrace.dev/v1alpha1",
        "kind": "StreamingSavepoint",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "deletionTimestamp": "2026-11-21T12:00:00Z"},
        "spec": {"appName": APP, "reason": "periodic", "disposeOnDelete": True},
        "status": {"phase": "Succeeded", "path": PATH},
    }


def cluster(driver: FakeDriver, *, running: bool = True) -> tuple[FakeKube, SavepointDisposer]:
    kube = FakeKube()
    kube.apps[(NAMESPACE, APP)] = app_body({"phase": "Running", "run": {"driverPod": DRIVER}})
    kube.apps[(NAMESPACE, APP)]["spec"]["state"]["savepointDir"] = "s3a://bucket/savepoints"
    kube.secrets[(NAMESPACE, names.control_secret(APP))] = {
        manifests.TOKEN_KEY: "token",
        **CERTIFICATE.secret_values(),
    }
    pod_status = {"phase": "Running", "podIP": "10.0.0.9"} if running else {"phase": "Pending"}
    kube.pods[(NAMESPACE, DRIVER)] = {
        "metadata": {"name": DRIVER, "namespace": NAMESPACE, "labels": {"headrace.dev/app": APP}},
        "spec": {"volumes": [control_tls.volume(APP)]},  # it serves the control endpoint over TLS
        "status": pod_status,
    }
    kube.savepoints[(NAMESPACE, NAME)] = deleted_savepoint()
    recorder = StatusRecorder(kube, FakeCache(kube), OperatorMetrics(CollectorRegistry()))
    return kube, SavepointDisposer(kube, recorder, driver, lambda: T0)


def run_finalizer(kube: FakeKube, disposer: SavepointDisposer) -> tuple[int, float, list[str]]:
    """Call the disposer as kopf does (retry count, time since the first try) until it lets go."""
    tries, waited, messages = 0, 0.0, []
    while (waiting := disposer.dispose(deleted_savepoint(), tries, waited)) is not None:
        seconds, why = waiting
        messages.append(kube.savepoints[(NAMESPACE, NAME)]["status"]["message"])
        assert why == messages[-1] and f"next try in {seconds:g}s" in why
        tries, waited = tries + 1, waited + seconds
        assert tries <= MAX_TRIES + 1 and waited <= DEADLINE_SECONDS, "the deletion must not wait forever"
    return tries, waited, messages


def test_a_flaky_driver_is_asked_again_until_the_files_are_gone() -> None:
    driver = FlakyDriver(failures=2)
    kube, disposer = cluster(driver)
    tries, waited, messages = run_finalizer(kube, disposer)
    assert driver.calls == [("dispose", PATH)] * 3
    assert {(endpoint.address, endpoint.certificate) for endpoint in driver.endpoints} == {
        ("10.0.0.9", CERTIFICATE.certificate)  # over TLS, trusting the app's certificate only (issue 12)
    }
    assert (tries, waited) == (2, 30.0)  # 10 s, then 20 s
    assert "HTTP 503" in messages[0]
    assert kube.events == ["SavepointDisposed", "SavepointDisposed"]  # on the StreamingSavepoint and its app


def test_a_driver_that_keeps_failing_releases_the_deletion_with_the_files_named() -> None:
    driver = FlakyDriver(failures=1000)
    kube, disposer = cluster(driver)
    tries, waited, _ = run_finalizer(kube, disposer)
    assert tries == MAX_TRIES - 1 and waited < DEADLINE_SECONDS
    assert kube.events == ["SavepointFilesLeft", "SavepointFilesLeft"]


@pytest.mark.parametrize("status", [400, 404])
def test_a_driver_that_refuses_the_path_releases_at_once(status: int) -> None:
    kube, disposer = cluster(FlakyDriver(failures=1, status=status))
    assert run_finalizer(kube, disposer)[0] == 0
    assert kube.events == ["SavepointFilesLeft", "SavepointFilesLeft"]


def test_an_api_error_is_a_counted_try() -> None:
    driver = FlakyDriver(failures=0)
    kube, disposer = cluster(driver)
    broken = {"count": 0}
    get_app = kube.get_app

    def flaky_get_app(namespace: str, name: str) -> dict[str, Any] | None:
        broken["count"] += 1
        if broken["count"] == 1:
            raise ConnectionError("the API server is restarting")
        return get_app(namespace, name)

    kube.get_app = flaky_get_app  # type: ignore[method-assign]
    tries, _, messages = run_finalizer(kube, disposer)
    assert tries == 1 and "ConnectionError" in messages[0]
    assert driver.calls == [("dispose", PATH)]


def test_a_starting_driver_is_waited_for_then_the_files_are_left() -> None:
    driver = FlakyDriver(failures=0)
    kube, disposer = cluster(driver, running=False)
    kube.apps[(NAMESPACE, APP)]["status"]["phase"] = "Restarting"
    tries, waited, messages = run_finalizer(kube, disposer)
    assert driver.calls == [] and tries == MAX_TRIES and waited < DEADLINE_SECONDS
    assert "no running driver" in messages[0]
    assert kube.events == ["SavepointFilesLeft", "SavepointFilesLeft"]


def test_a_tls_driver_is_not_asked_without_the_apps_certificate() -> None:
    """The token never goes in plain HTTP to a driver that serves TLS (issue 12): no certificate, no call."""
    driver = FlakyDriver(failures=0)
    kube, disposer = cluster(driver)
    del kube.secrets[(NAMESPACE, names.control_secret(APP))][control_tls.CERT_KEY]
    run_finalizer(kube, disposer)
    assert driver.calls == [] and driver.endpoints == []

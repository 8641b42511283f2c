"""Two operator replicas on a real cluster: killing the leader hands over to the standby without a second driver.

The release goes to two replicas while an app runs; the pod holding the Lease is force-deleted (no
grace: its process dies where it is); the other replica takes the Lease over within about the lease
duration, adopts the running driver and acts on the next change (a `kubectl scale`). A thread lists
the app's driver pods every 0.5 s throughout: never two at once, and never another than the first.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from headrace.api import names
from testbed import scenario
from testbed.environment import deployed_example
from testbed.operator_pods import lease_holder, operator_env, operator_pods
from testbed.scenario import OPERATOR_NAMESPACE

from .conftest import E2E

pytestmark = pytest.mark.e2e
FAILOVER_MARGIN_SECONDS = 10


class DriverSampler:
    """Lists the app's driver pods every `interval` seconds in a thread: how many were alive, and which."""

    def __init__(self, app: scenario.AppHandle, interval: float = 0.5) -> None:
        self.app, self.interval = app, interval
        self.counts: list[int] = []
        self.names: set[str] = set()
        self.errors = 0
        self.seconds = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="driver-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                pods = self.app.pods(names.ROLE_DRIVER)
            except ApiException:
                self.errors += 1
                continue
            # A terminating pod still runs its driver: only phase tells whether a process may be alive.
            alive = [pod.metadata.name for pod in pods if pod.status.phase in ("Pending", "Running")]
            self.counts.append(len(alive))
            self.names.update(alive)

    def __enter__(self) -> DriverSampler:
        self.seconds = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.seconds = time.monotonic() - self.seconds


@contextlib.contextmanager
def two_replicas(e2e: E2E) -> Iterator[ApiClient]:
    """The release at two replicas, put back as `install_operator()` leaves it afterwards."""
    try:
        e2e.install_operator("replicaCount=2")
        with e2e.api_client() as api:
            yield api
    finally:
        e2e.install_operator()


def _exactly(count: int, pods: list[Any]) -> list[Any] | None:
    return pods if len(pods) == count else None


def _holder(api: ApiClient, *, among: set[str] | None = None, besides: str | None = None) -> str | None:
    """The Lease's holder, if it is one of `among` / not `besides`."""
    holder = lease_holder(api)
    if holder is None or holder == besides or (among is not None and holder not in among):
        return None
    return holder


def test_killing_the_leader_hands_over_without_a_second_driver(e2e: E2E) -> None:
    started = time.monotonic()
    with deployed_example(e2e, 3) as app, two_replicas(e2e) as api:
        pods = app.wait(lambda: _exactly(2, operator_pods(api)), 120, "two operator pods")
        replicas = {pod.metadata.name for pod in pods}
        leader = app.wait(lambda: _holder(api, among=replicas), 60, "one of them to lead")
        app.wait(lambda: app.running(names.ROLE_DRIVER), 300, "the driver pod to run")
        app.wait(app.commits, 300, "the first committed batch")
        print(f"two replicas, app committing: {time.monotonic() - started:.1f}s; leader {leader} of {sorted(replicas)}")
        lease_seconds = float(operator_env(api, "HEADRACE_LEASE_DURATION_SECONDS"))
        with DriverSampler(app) as sampler:
            killed = time.monotonic()
            CoreV1Api(api).delete_namespaced_pod(leader, OPERATOR_NAMESPACE, grace_period_seconds=0)
            # The standby, or the Deployment's replacement pod if the dying leader released the Lease first.
            successor = app.wait(
                lambda: _holder(api, besides=leader), lease_seconds + 60, "another replica to take the Lease"
            )
            failover = time.monotonic() - killed
            print(f"leader force-deleted -> {successor} holds the Lease: {failover:.1f}s")
            e2e.kubectl("scale", "sapp", scenario.APP, "-n", app.namespace, "--replicas=2")
            app.wait(lambda: len(app.running(names.ROLE_EXECUTOR)) == 2, 180, "the new leader to add an executor")
            print(f"leader force-deleted -> rescaled by the new leader: {time.monotonic() - killed:.1f}s")
    print(f"driver samples: {len(sampler.counts)}, most alive at once: {max(sampler.counts)}, pods: {sampler.names}")
    assert failover <= lease_seconds + FAILOVER_MARGIN_SECONDS
    assert len(sampler.counts) >= sampler.seconds, f"the sampler fell behind ({sampler.errors} errors)"
    assert max(sampler.counts) == 1, "two driver pods were alive at once"
    assert len(sampler.names) == 1, f"the driver was replaced during the failover: {sampler.names}"

"""The driver Lease guard (issue 14, item 3: never two writers on one checkpoint) with real PySpark and a real
API server: the app's Lease, Role and RoleBinding as the operator renders them, the driver under its own
ServiceAccount token (so only the rights its Role grants apply).

- an active driver holds the Lease while it commits; when another holder takes the Lease over, the driver stops
  writing at once: it exits with EXIT_LEASE_LOST (reason LeaseLost) and no batch is committed after that;
- a standby promoted while the Lease is held and renewed by a live driver (a fence that failed) starts no query
  and writes nothing until that driver releases the Lease; then it takes it and commits.
Without the guard the first driver would go on committing, and the standby would commit right after promotion.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from headrace.api import runtime_contract as contract
from headrace.core.election import LeaseRecord, lease_record, lease_spec
from headrace.render import manifests
from headrace.runtime.settings import ENV_DRIVER_LEASE_SECONDS, ENV_SERVICE_ACCOUNT_DIR
from testbed.controlplane import ControlPlane
from tests.unit.builders import attempt

from .harness import RuntimeProcess, commits, write_events

pytestmark = pytest.mark.spark

APP, LEASE_SECONDS = "clicks", 3  # renew deadline 2 s, renewed every 0.4 s
ACTIVE, STANDBY = "clicks-r1-a1-driver", "clicks-r1-a2-driver"
LEASE = "clicks-driver-lease"


@dataclass
class Cluster:
    api: ApiClient
    namespace: str
    env: dict[str, str]

    def lease(self) -> LeaseRecord:
        body = client.CoordinationV1Api(self.api).read_namespaced_lease(LEASE, self.namespace)
        return lease_record(self.api.sanitize_for_serialization(body)["spec"])

    def write(self, record: LeaseRecord) -> None:
        """Write the Lease as admin, over whatever version is stored. A driver renews it every 0.4 s, so a renewal
        can land between the read and the replace (409 Conflict): read again and retry, as any taker would."""
        coordination = client.CoordinationV1Api(self.api)
        for _ in range(50):
            stored = coordination.read_namespaced_lease(LEASE, self.namespace)
            body = {"metadata": {"name": LEASE, "resourceVersion": stored.metadata.resource_version}}
            try:
                coordination.replace_namespaced_lease(LEASE, self.namespace, {**body, "spec": lease_spec(record)})
                return
            except client.ApiException as error:
                if error.status != 409:
                    raise
        raise AssertionError("the Lease changed under every one of 50 writes")


def _without_owner(obj: dict[str, Any]) -> dict[str, Any]:
    """No owner reference: there is no StreamingApp here, and the garbage collector would delete the object."""
    return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "ownerReferences"}}


@pytest.fixture
def cluster(control_plane: ControlPlane, kube_api: ApiClient, namespace: str, tmp_path: Path) -> Cluster:
    """The driver's ServiceAccount, its Lease Role and RoleBinding and the Lease, rendered for an app with a
    standby; the ServiceAccount's token and the cluster's CA where a pod has them; a local Spark master."""
    objects = manifests.attempt_objects(attempt(standby={"enabled": True}))
    wanted = [
        obj
        for obj in objects
        if obj["kind"] == "Lease"
        or obj["metadata"]["name"] == LEASE
        or (obj["kind"] == "ServiceAccount" and obj["metadata"]["name"] == "clicks-spark")
    ]
    assert sorted(obj["kind"] for obj in wanted) == ["Lease", "Role", "RoleBinding", "ServiceAccount"]
    creators = {
        "ServiceAccount": client.CoreV1Api(kube_api).create_namespaced_service_account,
        "Role": client.RbacAuthorizationV1Api(kube_api).create_namespaced_role,
        "RoleBinding": client.RbacAuthorizationV1Api(kube_api).create_namespaced_role_binding,
        "Lease": client.CoordinationV1Api(kube_api).create_namespaced_lease,
    }
    for obj in wanted:
        body = _without_owner(obj)
        body["metadata"]["namespace"] = namespace
        for subject in body.get("subjects", []):
            subject["namespace"] = namespace
        creators[obj["kind"]](namespace, body)
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))
    token = client.CoreV1Api(kube_api).create_namespaced_service_account_token("clicks-spark", namespace, request)
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(token.status.token)
    (account / "ca.crt").write_bytes(control_plane.ca_cert.read_bytes())
    conf = tmp_path / "spark-conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("spark.master local[2]\n")  # KUBERNETES_SERVICE_HOST is set
    server = urlparse(control_plane.url)
    env = {
        contract.ENV_DRIVER_LEASE: LEASE,
        contract.ENV_APP_NAMESPACE: namespace,
        ENV_DRIVER_LEASE_SECONDS: str(LEASE_SECONDS),
        ENV_SERVICE_ACCOUNT_DIR: str(account),
        "KUBERNETES_SERVICE_HOST": str(server.hostname),
        "KUBERNETES_SERVICE_PORT": str(server.port),
        "SPARK_CONF_DIR": str(conf),
    }
    return Cluster(kube_api, namespace, env)


def _driver(tmp_path: Path, cluster: Cluster, pod: str, attempt_number: int, **extra: str) -> RuntimeProcess:
    inputs, output, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoints"
    args = ["--input", str(inputs), "--output", str(output), "--files-per-batch", "1"]
    env = {
        **cluster.env,
        contract.ENV_CHECKPOINT_DIR: str(checkpoint),
        contract.ENV_STATE_PARTITIONS: "2",
        contract.ENV_POD_NAME: pod,
        contract.ENV_ATTEMPT: str(attempt_number),
        **extra,
    }
    return RuntimeProcess(tmp_path, args, env, name=pod)


def _wait(check: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds}s waiting for {what}")
        time.sleep(0.1)


def test_a_driver_whose_lease_is_taken_over_stops_writing_at_once(tmp_path: Path, cluster: Cluster) -> None:
    inputs, checkpoint = tmp_path / "in", tmp_path / "checkpoints" / "q0"
    write_events(inputs, 3, 10)
    driver = _driver(tmp_path, cluster, ACTIVE, 1).start()
    try:
        _wait(lambda: len(commits(checkpoint)) >= 2, 300, "two commits of the Lease holder")
        assert cluster.lease().holder == ACTIVE
        now = datetime.now(UTC)
        cluster.write(LeaseRecord(STANDBY, LEASE_SECONDS, acquire_time=now, renew_time=now, transitions=5))
        taken = time.monotonic()
        write_events(inputs, 6, 10, first=3)  # input a writing driver would commit
        code = driver.wait(30)
        stopped = time.monotonic() - taken
        at_exit = commits(checkpoint)
        assert code == contract.EXIT_LEASE_LOST, driver.log()[-3000:]
        termination = driver.termination()
        assert termination["reason"] == "LeaseLost"
        assert f"the Lease is now held by {STANDBY}" in termination["message"]
        time.sleep(2 * LEASE_SECONDS)
        assert commits(checkpoint) == at_exit, "a driver that lost its Lease committed afterwards"
        assert cluster.lease().holder == STANDBY, "a driver that lost its Lease wrote it again"
        print(f"Lease taken over -> the driver and its JVM gone: {stopped:.2f}s (renewed every 0.4 s)")
    finally:
        driver.kill()


def test_a_promoted_standby_writes_nothing_while_a_live_driver_holds_the_lease(
    tmp_path: Path, cluster: Cluster
) -> None:
    inputs, checkpoint = tmp_path / "in", tmp_path / "checkpoints" / "q0"
    write_events(inputs, 3, 10)
    stop_renewing = threading.Event()

    def live_active_driver() -> None:  # renews like a driver whose fence failed: it still runs
        while not stop_renewing.wait(0.3):
            now = datetime.now(UTC)
            cluster.write(LeaseRecord(ACTIVE, LEASE_SECONDS, acquire_time=now, renew_time=now, transitions=1))

    renewer = threading.Thread(target=live_active_driver, daemon=True)
    renewer.start()
    standby = _driver(tmp_path, cluster, STANDBY, 2, **{contract.ENV_STANDBY: "true"}).start()
    try:
        _wait(lambda: "waiting to be promoted" in standby.log(), 300, "the standby's gate")
        code, answer = standby.request("POST", contract.PATH_PROMOTE, timeout=10)
        assert (code, answer["promoted"]) == (200, True)
        _wait(lambda: "waits for the driver Lease" in standby.log(), 30, "the query start waiting for the Lease")
        time.sleep(3 * LEASE_SECONDS)  # longer than the Lease lasts: only renewals keep it
        assert commits(checkpoint) == [], "a standby wrote while another driver held the Lease"
        assert cluster.lease().holder == ACTIVE
        stop_renewing.set()
        renewer.join()
        now = datetime.now(UTC)
        cluster.write(LeaseRecord(None, 1, acquire_time=now, renew_time=now, transitions=1))  # released on exit
        released = time.monotonic()
        _wait(lambda: cluster.lease().holder == STANDBY, 30, "the standby holding the Lease")
        took = time.monotonic() - released
        _wait(lambda: len(commits(checkpoint)) >= 1, 120, "a commit of the promoted standby")
        print(f"Lease released -> taken by the promoted standby: {took:.2f}s")
    finally:
        stop_renewing.set()
        standby.kill()

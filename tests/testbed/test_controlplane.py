"""The testbed control plane against itself: real etcd, kube-apiserver, controller-manager and scheduler."""

from __future__ import annotations

import base64
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TypeVar

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from testbed import REPOSITORY, build, procs
from testbed.controlplane import (
    COMPONENTS,
    ControlPlane,
    ControlPlaneError,
    create_namespace,
    delete_namespace,
    ensure_control_plane_binaries,
    http_ok,
)

pytestmark = pytest.mark.apiserver

T = TypeVar("T")


def eventually(probe: Callable[[], T | None], timeout_seconds: float = 60.0, what: str = "condition") -> T:
    """Poll `probe` until it returns something truthy; fail the test after the timeout."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_seconds:.0f}s waiting for {what}")
        time.sleep(0.2)


def processes_mentioning(text: str) -> list[int]:
    """Ids of live processes whose command line contains `text` (e.g. a control plane's workdir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command_line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in command_line and procs.pid_exists(int(entry.name)):
            found.append(int(entry.name))
    return found


def host_address() -> str:
    """This host's address on its default route (not loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("198.51.100.1", 9))  # no packet is sent for a UDP connect
        return str(probe.getsockname()[0])


# --- the shared control plane ------------------------------------------------------------------


def test_apiserver_reports_the_pinned_version(kube_api: ApiClient) -> None:
    version = client.VersionApi(kube_api).get_code()
    assert version.git_version == f"v{build.KUBERNETES_VERSION}"


def test_new_namespace_gets_default_service_account(kube_api: ApiClient) -> None:
    name = create_namespace(kube_api, "sa", wait_for_service_account=False)
    try:
        core = client.CoreV1Api(kube_api)
        eventually(
            lambda: core.list_namespaced_service_account(name, field_selector="metadata.name=default").items,
            what="the controller-manager to create the default ServiceAccount",
        )
        # The root-CA publisher (another controller) gives each namespace the cluster CA for pods.
        root_ca = eventually(lambda: _config_map_or_none(core, name, "kube-root-ca.crt"), what="kube-root-ca.crt")
        assert "BEGIN CERTIFICATE" in root_ca.data["ca.crt"]
    finally:
        delete_namespace(kube_api, name)


def _config_map_or_none(core: client.CoreV1Api, namespace: str, name: str) -> client.V1ConfigMap | None:
    try:
        return core.read_namespaced_config_map(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def test_garbage_collector_deletes_dependents_of_a_deleted_owner(kube_api: ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube_api)
    owner = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"), data={"a": "1"})
    )
    reference = client.V1OwnerReference(api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid)
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="dependent", owner_references=[reference]))
    )
    unrelated = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="unrelated"))
    core.create_namespaced_config_map(namespace, unrelated)

    core.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")

    eventually(
        lambda: _config_map_or_none(core, namespace, "dependent") is None,
        what="the garbage collector to delete the dependent ConfigMap",
    )
    assert _config_map_or_none(core, namespace, "unrelated") is not None


def test_scheduler_is_healthy_and_reports_unschedulable_pods(
    control_plane: ControlPlane, kube_api: ApiClient, namespace: str
) -> None:
    context = ssl.create_default_context(cafile=str(control_plane.ca_cert))
    health = f"https://127.0.0.1:{control_plane.ports.scheduler}/healthz"
    assert http_ok(health, context)

    core = client.CoreV1Api(kube_api)
    container = client.V1Container(name="main", image="registry.invalid/never-pulled:1")
    core.create_namespaced_pod(
        namespace,
        client.V1Pod(metadata=client.V1ObjectMeta(name="waits"), spec=client.V1PodSpec(containers=[container])),
    )

    def failed_scheduling() -> list[client.CoreV1Event]:
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=waits").items
        return [event for event in events if event.reason == "FailedScheduling"]

    events = eventually(failed_scheduling, what="a FailedScheduling event from the scheduler")
    assert "nodes available" in events[0].message  # "no nodes available to schedule pods"
    assert events[0].reporting_component == "default-scheduler"

    def scheduled_condition() -> client.V1PodCondition | None:
        conditions = core.read_namespaced_pod_status("waits", namespace).status.conditions or []
        return next((condition for condition in conditions if condition.type == "PodScheduled"), None)

    scheduled = eventually(scheduled_condition, what="the scheduler to set the PodScheduled condition")
    assert (scheduled.status, scheduled.reason) == ("False", "Unschedulable")
    pod = core.read_namespaced_pod("waits", namespace)
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None


def test_service_account_kubeconfig_is_bound_by_rbac(
    control_plane: ControlPlane, kube_api: ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="reader"))
    )
    kubeconfig = control_plane.service_account_kubeconfig(namespace, "reader")
    assert kubeconfig.stat().st_mode & 0o077 == 0

    with control_plane.api_client(kubeconfig) as as_reader:
        reader_core = client.CoreV1Api(as_reader)
        with pytest.raises(ApiException) as denied:
            reader_core.list_namespaced_config_map(namespace)
        assert denied.value.status == 403
        assert f"system:serviceaccount:{namespace}:reader" in str(denied.value.body)

        rbac = client.RbacAuthorizationV1Api(kube_api)
        rule = client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["get", "list"])
        rbac.create_namespaced_role(
            namespace, client.V1Role(metadata=client.V1ObjectMeta(name="read-configmaps"), rules=[rule])
        )
        subject = client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=namespace)
        role_ref = client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="read-configmaps")
        binding = client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="reader"), subjects=[subject], role_ref=role_ref
        )
        rbac.create_namespaced_role_binding(namespace, binding)

        def allowed() -> bool:
            try:
                reader_core.list_namespaced_config_map(namespace)
            except ApiException as error:
                if error.status == 403:
                    return False
                raise
            return True

        eventually(allowed, timeout_seconds=30, what="the RoleBinding to take effect")
        # Only what the Role grants: secrets and other namespaces stay forbidden.
        with pytest.raises(ApiException) as still_denied:
            reader_core.list_namespaced_secret(namespace)
        assert still_denied.value.status == 403


def test_client_certificate_user_is_subject_to_rbac(control_plane: ControlPlane) -> None:
    cert, key = control_plane.pki.issue_client_cert("jane", ["developers"])
    with control_plane.api_client(control_plane.kubeconfig_for(cert, key)) as as_jane:
        review = client.AuthenticationV1Api(as_jane).create_self_subject_review(client.V1SelfSubjectReview())
        assert review.status.user_info.username == "jane"
        assert "developers" in review.status.user_info.groups
        with pytest.raises(ApiException) as denied:
            client.CoreV1Api(as_jane).list_namespace()
        assert denied.value.status == 403


def test_certificate_signing_requests_are_signed(control_plane: ControlPlane, kube_api: ApiClient) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, "system:node:csr-test"),
        ]
    )
    request = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    pem = request.public_bytes(serialization.Encoding.PEM)
    certificates = client.CertificatesV1Api(kube_api)
    name = f"csr-test-{os.getpid()}-{time.monotonic_ns()}"
    spec = client.V1CertificateSigningRequestSpec(
        request=base64.b64encode(pem).decode(),
        signer_name="kubernetes.io/kube-apiserver-client-kubelet",
        usages=["digital signature", "client auth"],
    )
    certificates.create_certificate_signing_request(
        client.V1CertificateSigningRequest(metadata=client.V1ObjectMeta(name=name), spec=spec)
    )
    try:
        approval = client.V1CertificateSigningRequestCondition(
            type="Approved", status="True", reason="TestApproval", message="approved by the testbed test"
        )

        def approve() -> bool:
            # The controller-manager may update the new CSR meanwhile: retry on a write conflict.
            csr = certificates.read_certificate_signing_request(name)
            csr.status.conditions = [approval]
            try:
                certificates.replace_certificate_signing_request_approval(name, csr)
            except ApiException as error:
                if error.status == 409:
                    return False
                raise
            return True

        eventually(approve, timeout_seconds=30, what="the approval to be recorded")

        def issued() -> str | None:
            status = certificates.read_certificate_signing_request(name).status
            return str(status.certificate) if status.certificate else None

        signed = x509.load_pem_x509_certificate(base64.b64decode(eventually(issued, what="the CSR to be signed")))
        assert signed.subject == subject
        signed.verify_directly_issued_by(x509.load_pem_x509_certificate(control_plane.ca_cert.read_bytes()))
    finally:
        certificates.delete_certificate_signing_request(name)


# --- control planes of their own ---------------------------------------------------------------


def test_stop_ends_every_process_and_removes_the_workdir(tmp_path: Path) -> None:
    ensure_control_plane_binaries()
    workdir = tmp_path / "own"
    plane = ControlPlane(workdir)
    try:
        plane.start()
        pids = {name: process.pid for name, process in plane.processes.items()}
        assert set(pids) == set(COMPONENTS)
        assert all(procs.pid_exists(pid) for pid in pids.values())
        assert set(plane.memory()) == set(COMPONENTS)
        assert plane.startup_seconds is not None
    finally:
        plane.stop()
    assert [name for name, pid in pids.items() if procs.pid_exists(pid)] == []
    assert processes_mentioning(str(workdir)) == []
    assert not workdir.exists()
    plane.stop()  # idempotent


def test_the_apiserver_stopped_refuses_and_started_again_serves_the_same_cluster(tmp_path: Path) -> None:
    ensure_control_plane_binaries()
    with ControlPlane(tmp_path / "own", controllers=False, scheduler=False) as plane:
        with plane.api_client() as api:
            client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="kept")))
        etcd, url = plane.processes["etcd"].pid, plane.url
        stopped = plane.processes["kube-apiserver"].pid
        plane.stop_apiserver()
        assert not procs.pid_exists(stopped) and procs.pid_exists(etcd)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", plane.ports.apiserver), timeout=5).close()
        plane.start_apiserver()
        assert plane.url == url
        with plane.api_client() as api:
            assert client.CoreV1Api(api).read_namespace("kept").metadata.name == "kept", "etcd kept the cluster"
        with pytest.raises(RuntimeError, match="already running"):
            plane.start_apiserver()


def test_start_failure_names_the_component_and_cleans_up(tmp_path: Path) -> None:
    ensure_control_plane_binaries()
    workdir = tmp_path / "broken"
    plane = ControlPlane(workdir, advertise_address="not-an-address", controllers=False, scheduler=False)
    with pytest.raises(ControlPlaneError) as failure:
        plane.start()
    message = str(failure.value)
    assert message.startswith("kube-apiserver exited")
    assert "advertise-address" in message  # the tail of the apiserver's own log
    assert processes_mentioning(str(workdir)) == []
    assert not workdir.exists()


def test_start_refuses_a_workdir_with_content(tmp_path: Path) -> None:
    (tmp_path / "precious").write_text("keep me")
    with pytest.raises(ControlPlaneError, match="must be missing or empty"):
        ControlPlane(tmp_path).start()
    ControlPlane(tmp_path).stop()
    assert (tmp_path / "precious").read_text() == "keep me"


def test_apiserver_serves_other_hosts_on_its_advertised_address(tmp_path: Path) -> None:
    ensure_control_plane_binaries()
    address = host_address()
    with ControlPlane(
        tmp_path / "wide",
        bind_address="0.0.0.0",  # noqa: S104 - the point of the test
        advertise_address=address,
        extra_sans=[address, "headrace-host.example"],
        controllers=False,
        scheduler=False,
    ) as plane:
        assert plane.advertised_url == f"https://{address}:{plane.ports.apiserver}"
        cert, key = plane.pki.issue_client_cert("system:node:remote", ["system:nodes"])
        remote = plane.kubeconfig_for(cert, key, server=plane.advertised_url)
        with plane.api_client(remote) as as_node:  # TLS verified against the CA, by IP
            assert client.VersionApi(as_node).get_code().git_version == f"v{build.KUBERNETES_VERSION}"
        with plane.api_client() as admin:
            discovery = client.DiscoveryV1Api(admin)

            def published() -> list[str]:
                slices = discovery.list_namespaced_endpoint_slice(
                    "default", label_selector="kubernetes.io/service-name=kubernetes"
                )
                return [a for s in slices.items for endpoint in s.endpoints or [] for a in endpoint.addresses]

            # The apiserver publishes its own endpoint from a loop that starts after /readyz answers.
            addresses = eventually(published, timeout_seconds=30, what="the kubernetes Service's EndpointSlice")
            assert addresses == [address]


def _read_until_export(output: IO[str]) -> list[str]:
    lines: list[str] = []
    for line in output:
        lines.append(line.rstrip("\n"))
        if line.startswith("export KUBECONFIG="):
            break
    return lines


def test_command_line_runs_until_sigterm(tmp_path: Path) -> None:
    ensure_control_plane_binaries()
    workdir = tmp_path / "cli"
    command = [sys.executable, "-m", "testbed.controlplane", "--workdir", str(workdir), "--no-scheduler"]
    runner = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPOSITORY)
    try:
        assert runner.stdout is not None
        lines = _read_until_export(runner.stdout)
        kubeconfig = workdir / "kubeconfigs" / "admin.kubeconfig"
        assert lines[-1] == f"export KUBECONFIG={kubeconfig}", lines
        kubectl = [str(build.binary("kubectl")), "--kubeconfig", str(kubeconfig), "get", "namespace", "default"]
        assert "Active" in subprocess.run(kubectl, capture_output=True, text=True, check=True, timeout=60).stdout
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=60) == 0
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        if runner.stdout:
            runner.stdout.close()
    assert processes_mentioning(str(workdir)) == []
    assert not workdir.exists()

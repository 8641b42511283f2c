"""Cluster DNS and Kafka as pods see them on the e2e cluster: Service names resolve, the broker answers.

A pod of the Spark image resolves the API server's Service by its full name and Kafka's by the short
name the example manifests use (``kafka.kafka.svc``, through the pod's search path), opens a TCP
connection to ``kafka.kafka.svc:9092``, and resolves a name outside the cluster through CoreDNS's
forwarding to the host's resolver; no pod of its namespace gets a ``MissingClusterDNS`` warning.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from testbed import cluster_kafka, dns, images
from testbed.controlplane import create_namespace, delete_namespace

from .conftest import E2E

pytestmark = pytest.mark.e2e

OUTSIDE = "pypi.org"  # a name the host resolves (it reaches the package registries)
PROBE = f"""
import json, socket
OUTSIDE = {OUTSIDE!r}
found = {{}}
for name in ("kubernetes.default.svc.cluster.local", "kafka.kafka.svc", "kube-dns.kube-system", OUTSIDE):
    try:
        found[name] = socket.gethostbyname(name)
    except OSError as error:
        found[name] = "error: " + str(error)
try:
    socket.create_connection(("kafka.kafka.svc", 9092), timeout=10).close()
    found["kafka-connect"] = "ok"
except OSError as error:
    found["kafka-connect"] = "error: " + str(error)
print(json.dumps(found))
print(open("/etc/resolv.conf").read().replace(chr(10), " | "))
"""


@pytest.fixture(scope="module")
def probe(e2e: E2E) -> Iterator[tuple[str, str, client.CoreV1Api]]:
    """Runs the probe pod once; yields its log's first line (JSON), its resolv.conf line, and the API."""
    with e2e.api_client() as api:
        core = client.CoreV1Api(api)
        namespace = create_namespace(api, "dns")
        try:
            pod = client.V1Pod(
                metadata=client.V1ObjectMeta(name="dns-probe"),
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[
                        client.V1Container(
                            name="probe",
                            image=images.image_ref("spark"),
                            image_pull_policy="IfNotPresent",
                            command=["/opt/venv/bin/python", "-c", PROBE],
                        )
                    ],
                ),
            )
            began = time.monotonic()
            core.create_namespaced_pod(namespace, pod)
            deadline = time.monotonic() + 180
            phase = ""
            while time.monotonic() < deadline:
                phase = core.read_namespaced_pod("dns-probe", namespace).status.phase
                if phase in ("Succeeded", "Failed"):
                    break
                time.sleep(1)
            log = core.read_namespaced_pod_log("dns-probe", namespace)
            print(f"probe pod: created -> {phase} in {time.monotonic() - began:.1f}s")
            assert phase == "Succeeded", log
            lines = log.splitlines()
            yield lines[0], lines[1], core
            events = core.list_namespaced_event(namespace).items
            assert [e.message for e in events if e.reason == "MissingClusterDNS"] == []
        finally:
            delete_namespace(api, namespace)


def test_pods_use_the_cluster_dns_service(probe: tuple[str, str, client.CoreV1Api]) -> None:
    _, resolv_conf, _ = probe
    assert f"nameserver {dns.CLUSTER_DNS_IP}" in resolv_conf
    assert f"svc.{dns.CLUSTER_DOMAIN}" in resolv_conf


def test_service_names_resolve_from_a_pod(probe: tuple[str, str, client.CoreV1Api]) -> None:
    found, _, core = probe
    resolved = json.loads(found)
    kubernetes = core.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    kafka = core.read_namespaced_service(cluster_kafka.SERVICE, cluster_kafka.NAMESPACE).spec.cluster_ip
    assert resolved["kubernetes.default.svc.cluster.local"] == kubernetes, resolved
    assert resolved["kafka.kafka.svc"] == kafka, resolved
    assert resolved["kube-dns.kube-system"] == dns.CLUSTER_DNS_IP, resolved


def test_kafka_service_accepts_connections_from_a_pod(probe: tuple[str, str, client.CoreV1Api]) -> None:
    found, _, _ = probe
    assert json.loads(found)["kafka-connect"] == "ok"


def test_other_names_are_forwarded_to_the_hosts_resolver(probe: tuple[str, str, client.CoreV1Api]) -> None:
    try:
        on_host = socket.gethostbyname(OUTSIDE)
    except OSError:
        pytest.skip(f"this machine does not resolve {OUTSIDE} itself")
    assert json.loads(probe[0])[OUTSIDE] == on_host

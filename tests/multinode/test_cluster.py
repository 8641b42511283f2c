"""The kind cluster is a real multi-node cluster: pods run on both workers, reach each other across
nodes, resolve cluster DNS, and NetworkPolicies (kube-router) are enforced."""

from __future__ import annotations

import json
import time

import pytest

from testbed.kind.cluster import PodmanKindCluster
from testbed.kind.nodeimage import TOOLBOX_IMAGE

from . import probes

pytestmark = pytest.mark.e2e

PORT = 8080
# Answers every connection with the name of the node its pod runs on.
_SERVER = f"exec socat TCP-LISTEN:{PORT},fork,reuseaddr SYSTEM:'echo $NODE_NAME'"


def _pod(name: str, node: str, labels: dict[str, str]) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": TOOLBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/bash", "-c", _SERVER],
                    "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                    "ports": [{"containerPort": PORT}],
                }
            ],
        },
    }


def _workers(cluster: PodmanKindCluster) -> list[str]:
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json"))["items"]
    return sorted(
        node["metadata"]["name"]
        for node in nodes
        if "node-role.kubernetes.io/control-plane" not in node["metadata"].get("labels", {})
    )


def _connect(cluster: PodmanKindCluster, namespace: str, client: str, address: str) -> str:
    """What the server at `address` answers the `client` pod ('' when it cannot connect within 3 s)."""
    return probes.connect(cluster, namespace, client, address, PORT)


def _pod_ips(cluster: PodmanKindCluster, namespace: str) -> dict[str, str]:
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]
    return {pod["metadata"]["name"]: pod["status"]["podIP"] for pod in pods}


def _until(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(1)


@pytest.fixture
def servers(kind_cluster: PodmanKindCluster, kind_namespace: str) -> dict[str, str]:
    """Socat server pods pinned to the workers: `a` and `c` (labelled `allowed`) on the first, `b` on the
    second; name -> node."""
    worker_a, worker_b = _workers(kind_cluster)
    probes.apply(
        kind_cluster,
        kind_namespace,
        _pod("a", worker_a, {"app": "probe", "side": "a"}),
        _pod("b", worker_b, {"app": "probe", "side": "b"}),
        _pod("c", worker_a, {"app": "probe", "side": "c", "allowed": "yes"}),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "b"},
            "spec": {"selector": {"side": "b"}, "ports": [{"port": PORT}]},
        },
    )
    kind_cluster.kubectl("wait", "-n", kind_namespace, "--for=condition=Ready", "pod", "--all", "--timeout=180s")
    return {"a": worker_a, "b": worker_b, "c": worker_a}


def test_three_nodes_are_ready_one_control_plane_two_workers(kind_cluster: PodmanKindCluster) -> None:
    nodes = json.loads(kind_cluster.kubectl("get", "nodes", "-o", "json"))["items"]
    ready = {
        node["metadata"]["name"]
        for node in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])
    }
    assert len(nodes) == 3
    assert ready == {node["metadata"]["name"] for node in nodes}
    assert len(_workers(kind_cluster)) == 2
    assert {node["status"]["nodeInfo"]["kubeletVersion"] for node in nodes} == {"v1.35.4"}


def test_pods_on_both_workers_reach_each_other_and_resolve_cluster_dns(
    kind_cluster: PodmanKindCluster, kind_namespace: str, servers: dict[str, str]
) -> None:
    ips = _pod_ips(kind_cluster, kind_namespace)
    assert servers["a"] != servers["b"]
    # Pod to pod across nodes, both ways: each answer names the other worker.
    assert _connect(kind_cluster, kind_namespace, "a", ips["b"]) == servers["b"]
    assert _connect(kind_cluster, kind_namespace, "b", ips["a"]) == servers["a"]
    # Cluster DNS (CoreDNS) resolves the Service; kube-proxy routes its ClusterIP to the pod on the other node.
    service = f"b.{kind_namespace}.svc.cluster.local"
    resolved = kind_cluster.kubectl("exec", "-n", kind_namespace, "a", "--", "getent", "hosts", service).split()[0]
    cluster_ip = kind_cluster.kubectl("get", "service", "-n", kind_namespace, "b", "-o", "jsonpath={.spec.clusterIP}")
    assert resolved == cluster_ip
    # Through the new Service: kube-proxy may program it a moment after it exists, and under load the answer may take
    # longer than one connect's 3 s.
    _until(
        lambda: _connect(kind_cluster, kind_namespace, "a", service) == servers["b"],
        60,
        f"pod a reaching pod b on {servers['b']} through Service {service}",
    )


def test_a_network_policy_blocks_what_it_does_not_allow(
    kind_cluster: PodmanKindCluster, kind_namespace: str, servers: dict[str, str]
) -> None:
    ips = _pod_ips(kind_cluster, kind_namespace)
    assert _connect(kind_cluster, kind_namespace, "a", ips["b"]) == servers["b"]
    assert _connect(kind_cluster, kind_namespace, "c", ips["b"]) == servers["b"]
    # Only pods labelled `allowed` may reach b: a is not, so kube-router must drop a's connection.
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "only-allowed-to-b"},
        "spec": {
            "podSelector": {"matchLabels": {"side": "b"}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"allowed": "yes"}}}]}],
        },
    }
    probes.apply(kind_cluster, kind_namespace, policy)
    _until(lambda: _connect(kind_cluster, kind_namespace, "a", ips["b"]) == "", 60, "the policy blocks a -> b")
    # The same server still answers the pod the policy allows, on the same node as a.
    assert servers["c"] == servers["a"]
    _until(lambda: _connect(kind_cluster, kind_namespace, "c", ips["b"]) == servers["b"], 30, "c still reaches b")
    assert _connect(kind_cluster, kind_namespace, "a", ips["b"]) == ""

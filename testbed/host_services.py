"""Kubernetes Services whose endpoints are processes on the host (cluster DNS, the Kafka broker).

Owns: rendering a selectorless Service plus the EndpointSlice that points it at an address on the node
(the bridge gateway, which pods reach and kube-proxy forwards to), and applying manifests with the
testbed's kubectl. Pods then use the Service's name or ClusterIP as on any cluster.
Never: starts the processes behind the Services (the node and cluster modules do).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANAGED_BY = "headrace-testbed"


@dataclass(frozen=True)
class HostPort:
    """One port of a host Service: the Service's port, the protocol, and where the host process listens."""

    name: str
    port: int
    target_port: int
    protocol: str = "TCP"


def host_service(
    namespace: str, name: str, address: str, ports: Sequence[HostPort], *, cluster_ip: str | None = None
) -> list[dict[str, Any]]:
    """A selectorless Service `name` (optionally at a fixed ClusterIP) and its EndpointSlice at `address`."""
    labels = {"app.kubernetes.io/managed-by": MANAGED_BY}
    spec: dict[str, Any] = {
        "type": "ClusterIP",
        "ports": [{"name": p.name, "port": p.port, "targetPort": p.target_port, "protocol": p.protocol} for p in ports],
    }
    if cluster_ip:
        spec["clusterIP"] = cluster_ip
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }
    endpoints = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{name}-host",
            "namespace": namespace,
            "labels": {
                **labels,
                "kubernetes.io/service-name": name,
                "endpointslice.kubernetes.io/managed-by": f"{MANAGED_BY}.headrace.dev",
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [{"name": p.name, "port": p.target_port, "protocol": p.protocol} for p in ports],
    }
    return [service, endpoints]


def namespace_manifest(name: str) -> dict[str, Any]:
    """A Namespace."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def apply(kubectl: Path, kubeconfig: Path, manifests: Sequence[Mapping[str, Any]], timeout: float = 60.0) -> None:
    """`kubectl apply` a list of manifests (server-side, so re-applying over an earlier run's objects works)."""
    document = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(manifests)})
    command = [str(kubectl), "--kubeconfig", str(kubeconfig), "apply", "--server-side", "--force-conflicts", "-f", "-"]
    result = subprocess.run(command, input=document, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"kubectl apply of host services failed: {result.stderr.strip() or result.stdout}")

"""Kafka as a Service of the local cluster: ``kafka.kafka.svc:9092`` for pods, a loopback address for the host.

Owns: running one `KafkaBroker` whose pod listener is bound on the node's bridge gateway and advertised
under the Service name, and the ``kafka`` namespace with the selectorless ``kafka`` Service and its
EndpointSlice pointing at that listener (kube-proxy forwards the Service's port to it; cluster DNS
resolves the name). Host-side producers and tests use `bootstrap_servers` (loopback).
Never: starts the cluster (the cluster module composes this after the node), or produces data.
"""

from __future__ import annotations

from pathlib import Path

from testbed import host_services, procs
from testbed.kafka import KafkaBroker, PodListener

NAMESPACE = "kafka"
SERVICE = "kafka"
PORT = 9092
SERVICE_ADDRESS = f"{SERVICE}.{NAMESPACE}.svc:{PORT}"


class ClusterKafka(procs.Started):
    """The cluster's broker: `start()` runs it and publishes the Service; `stop()` removes the broker's files.

    The Service objects go with the cluster (its etcd is thrown away); they are not deleted here.
    """

    def __init__(self, workdir: Path, gateway: str, kubectl: Path, kubeconfig: Path) -> None:
        self.workdir, self.gateway, self.kubectl, self.kubeconfig = workdir, gateway, kubectl, kubeconfig
        self.broker: KafkaBroker | None = None

    @property
    def bootstrap_servers(self) -> str:
        """``bootstrap.servers`` for clients on this machine (the loopback listener)."""
        if self.broker is None:
            raise RuntimeError("the cluster's Kafka broker is not running")
        return self.broker.bootstrap_servers

    @property
    def start_seconds(self) -> float:
        """How long the broker took to answer (0 before it started)."""
        return self.broker.start_seconds if self.broker else 0.0

    def start(self) -> ClusterKafka:
        """Start the broker (pod listener on a free port of the gateway), then apply the Service and its endpoints."""
        bind_port = procs.free_port(self.gateway)
        self.broker = KafkaBroker(workdir=self.workdir, pods=PodListener(self.gateway, bind_port, SERVICE_ADDRESS))
        self.broker.start()
        ports = [host_services.HostPort("kafka", PORT, bind_port)]
        manifests = [
            host_services.namespace_manifest(NAMESPACE),
            *host_services.host_service(NAMESPACE, SERVICE, self.gateway, ports),
        ]
        host_services.apply(self.kubectl, self.kubeconfig, manifests)
        return self

    def stop(self) -> None:
        """Stop the broker and remove its directory. Idempotent."""
        broker, self.broker = self.broker, None
        if broker is not None:
            broker.stop()

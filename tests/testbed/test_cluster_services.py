"""Cluster DNS and the cluster's Kafka: what the node and the cluster configure, and a real broker with a pod
listener (pods are told the Service name, host clients the loopback address).

The DNS lookups themselves are checked from a real pod in tests/e2e/test_cluster_services.py.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

from testbed import cluster_kafka, dns, host_services, procs
from testbed.controlplane import SERVICE_CLUSTER_IP_RANGE
from testbed.kafka import LOOPBACK, KafkaBroker, PodListener, broker_properties
from testbed.node import KubeletFiles, NodeLayout, NodeNetwork, kubelet_config, owned_processes


def test_kubelet_hands_pods_the_cluster_dns_service(tmp_path: Path) -> None:
    files = KubeletFiles(tmp_path / "ca", tmp_path / "crt", tmp_path / "key")
    config = json.loads(kubelet_config(NodeLayout(tmp_path), NodeNetwork(), "n", files))
    assert config["clusterDNS"] == [dns.CLUSTER_DNS_IP]
    assert config["clusterDomain"] == "cluster.local"
    assert ipaddress.ip_address(dns.CLUSTER_DNS_IP) in ipaddress.ip_network(SERVICE_CLUSTER_IP_RANGE)


def test_corefile_serves_the_cluster_domain_from_the_api_and_forwards_the_rest(tmp_path: Path) -> None:
    text = dns.corefile("10.244.0.1", tmp_path / "kubeconfig", 1001, 1002)
    assert text.startswith(".:53 {")
    assert "bind 10.244.0.1" in text
    assert f"kubernetes cluster.local in-addr.arpa ip6.arpa {{\n        kubeconfig {tmp_path / 'kubeconfig'}" in text
    assert "forward . /etc/resolv.conf" in text
    assert "ready 127.0.0.1:1002" in text
    assert "health 127.0.0.1:1001" in text


def test_kube_dns_service_points_at_the_gateway_with_matching_port_names() -> None:
    objects = {item["kind"]: item for item in dns.manifests("10.244.0.1")}
    service, slice_ = objects["Service"], objects["EndpointSlice"]
    assert service["metadata"] | {"labels": None} == {"name": "kube-dns", "namespace": "kube-system", "labels": None}
    assert service["spec"]["clusterIP"] == dns.CLUSTER_DNS_IP
    assert "selector" not in service["spec"]  # nothing may overwrite the hand-made EndpointSlice
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == "kube-dns"
    assert slice_["endpoints"] == [{"addresses": ["10.244.0.1"], "conditions": {"ready": True}}]
    # kube-proxy pairs a Service port with an endpoint port by name and protocol.
    service_ports = {(p["name"], p["protocol"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert service_ports == {(p["name"], p["protocol"], p["port"]) for p in slice_["ports"]}
    assert {p["protocol"] for p in slice_["ports"]} == {"UDP", "TCP"}
    binding = objects["ClusterRoleBinding"]
    assert binding["subjects"][0]["name"] == dns.USER


def test_host_service_maps_the_service_port_to_the_host_port() -> None:
    service, slice_ = host_services.host_service(
        "kafka", "kafka", "10.244.0.1", [host_services.HostPort("kafka", 9092, 41000)]
    )
    assert service["spec"]["ports"] == [{"name": "kafka", "port": 9092, "targetPort": 41000, "protocol": "TCP"}]
    assert slice_["ports"] == [{"name": "kafka", "port": 41000, "protocol": "TCP"}]
    assert "clusterIP" not in service["spec"]


def test_coredns_is_a_node_program_found_by_its_pid_file_under_the_short_root(tmp_path: Path) -> None:
    layout = NodeLayout(tmp_path / "node")
    argv = dns.command(Path("/cache/coredns"), layout.coredns_dir / "Corefile", layout.short_root / "coredns.pid")
    assert owned_processes({7: argv}, layout.markers) == [7]
    assert owned_processes({7: argv}, [str(layout.short_root.parent)]) == [7]  # what a later node reclaims


def test_broker_properties_with_a_pod_listener() -> None:
    properties = broker_properties(9001, 9002, Path("/d"), PodListener("10.244.0.1", 41000, "kafka.kafka.svc:9092"))
    assert properties["listeners"].split(",") == [
        f"PLAINTEXT://{LOOPBACK}:9001",
        f"CONTROLLER://{LOOPBACK}:9002",
        "PODS://10.244.0.1:41000",
    ]
    assert properties["advertised.listeners"] == f"PLAINTEXT://{LOOPBACK}:9001,PODS://kafka.kafka.svc:9092"
    assert "PODS:PLAINTEXT" in properties["listener.security.protocol.map"].split(",")
    assert properties["inter.broker.listener.name"] == "PLAINTEXT"
    assert cluster_kafka.SERVICE_ADDRESS == "kafka.kafka.svc:9092"


def test_a_real_broker_advertises_the_service_name_on_the_pod_listener(tmp_path: Path) -> None:
    """Pods' clients bootstrap through the Service and are then sent to `advertised`; host clients stay on
    loopback. (127.0.0.2 stands in for the bridge gateway: any local address works.)"""
    from confluent_kafka.admin import AdminClient

    pod_port = procs.free_port("127.0.0.2")
    with KafkaBroker(
        workdir=tmp_path / "kafka", pods=PodListener("127.0.0.2", pod_port, "kafka.kafka.svc:9092")
    ) as broker:
        broker.create_topic("clicks", 1)
        through_pods = AdminClient({"bootstrap.servers": f"127.0.0.2:{pod_port}"}).list_topics(timeout=20)
        through_host = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=20)
        print(f"broker with a pod listener started in {broker.start_seconds:.1f}s")
    assert [(b.host, b.port) for b in through_pods.brokers.values()] == [("kafka.kafka.svc", 9092)]
    assert [(b.host, b.port) for b in through_host.brokers.values()] == [(LOOPBACK, broker.broker_port)]
    assert "clicks" in through_pods.topics
    assert not (tmp_path / "kafka").exists()

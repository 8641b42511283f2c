"""The operator's API client against the real API server: calls whose answer is not needed still hand
their connection back, so a busy operator does not open (and TLS-handshake) one connection per call."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes.client import ApiClient

from headrace.adapters.kube import KubeClient

CALLS = 30


def _connections_opened(api: ApiClient) -> int:
    pools = api.rest_client.pool_manager.pools  # urllib3's RecentlyUsedContainer refuses plain iteration
    return sum(pools[key].num_connections for key in pools.keys())  # noqa: SIM118


def _config_map(namespace: str, index: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{index}", "namespace": namespace}}


def test_calls_without_a_read_answer_reuse_one_connection(kube_api: ApiClient, namespace: str) -> None:
    kube = KubeClient(kube_api)
    kube.list_driver_pods(namespace, "warm-up")  # one connection, opened and returned
    before = _connections_opened(kube_api)
    for index in range(CALLS):
        config_map = _config_map(namespace, index)
        kube.create(config_map)
        kube.create(config_map)  # AlreadyExists: the error answer is read, the connection returned too
        kube.post_event(config_map, type_="Normal", reason="Test", message="reuse", now=datetime.now(UTC))
        kube.delete_pod(namespace, f"absent-{index}")
    opened = _connections_opened(kube_api) - before
    assert opened <= 1, f"{opened} connections opened for {CALLS * 4} sequential calls"
    names = {item.metadata.name for item in kube.core.list_namespaced_config_map(namespace).items}
    assert {f"c{index}" for index in range(CALLS)} <= names

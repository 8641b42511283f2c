"""The operator's pods as the chart runs them: which replica holds the leader Lease (and when it renewed it),
and scraping /metrics. Used by the e2e tests and the chaos suite."""

from __future__ import annotations

import urllib.request
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from testbed.scenario import OPERATOR_NAMESPACE

RELEASE = "headrace"  # Environment.install_operator's release; its full name is the Deployment's and the Lease's
SELECTOR = f"app.kubernetes.io/name=headrace,app.kubernetes.io/instance={RELEASE}"

Samples = dict[str, list[tuple[dict[str, str], float]]]


def operator_pods(api: ApiClient) -> list[Any]:
    """The operator's pods that run and are not being deleted."""
    pods: Any = client.CoreV1Api(api).list_namespaced_pod(OPERATOR_NAMESPACE, label_selector=SELECTOR)
    return [pod for pod in pods.items if pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None]


def operator_env(api: ApiClient, name: str) -> str:
    """A literal environment variable of the operator container, as the chart rendered it."""
    deployment: Any = client.AppsV1Api(api).read_namespaced_deployment(RELEASE, OPERATOR_NAMESPACE)
    (value,) = [item.value for item in deployment.spec.template.spec.containers[0].env if item.name == name]
    return str(value)


def lease_holder(api: ApiClient) -> str | None:
    """The pod that holds the leader Lease (None when it is released or not there yet)."""
    return lease_renewed(api)[0]


def leader_pod(api: ApiClient) -> Any | None:
    """The running operator pod that holds the Lease."""
    holder = lease_holder(api)
    return next((pod for pod in operator_pods(api) if pod.metadata.name == holder), None)


def container_port(pod: Any, name: str) -> int:
    """A named container port of a pod."""
    ports = [port for container in pod.spec.containers for port in container.ports or [] if port.name == name]
    return int(ports[0].container_port)


def scrape(ip: str, port: int) -> Samples:
    """GET /metrics of a pod (the host reaches pod IPs over the bridge), parsed: sample name -> (labels, value)."""
    with urllib.request.urlopen(f"http://{ip}:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return samples


def lease_renewed(api: ApiClient) -> tuple[str | None, float | None]:
    """The Lease's holder and when it last renewed it (epoch seconds); (None, None) when there is no Lease."""
    try:
        lease: Any = client.CoordinationV1Api(api).read_namespaced_lease(
            operator_env(api, "HEADRACE_LEADER_ELECTION_LEASE"), OPERATOR_NAMESPACE
        )
    except ApiException as error:
        if error.status == 404:
            return None, None
        raise
    renewed = lease.spec.renew_time
    return lease.spec.holder_identity or None, renewed.timestamp() if renewed is not None else None

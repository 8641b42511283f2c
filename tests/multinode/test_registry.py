"""The kind cluster's nodes pull Headrace's images from the testbed's authenticated registry, as a real cluster's
nodes pull from a private registry: nothing is loaded into a node's containerd, and no node holds credentials for
the registry: the operator's pod (the chart's `imagePullSecrets`) and the apps' pods (`spec.imagePullSecrets`) pull
with an image pull Secret (testbed.kind.headrace)."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from testbed import images
from testbed.environment import Environment
from testbed.kind.cluster import PodmanKindCluster
from testbed.kind.headrace import PULL_SECRET, control_plane_node, worker_nodes
from testbed.scenario import OPERATOR_NAMESPACE

from . import probes

pytestmark = pytest.mark.e2e

PULL_TIMEOUT = 300
# The kubelet's event once a pull from the registry is done (an image already present says "already present").
_PULLED = re.compile(r'^Successfully pulled image "(?P<image>[^"]+)" in (?P<took>[0-9.]+m?s)')


def _pod_events(cluster: PodmanKindCluster, namespace: str, pod: str) -> list[dict[str, Any]]:
    listed = cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={pod}", "-o", "json"
    )
    return list(json.loads(listed)["items"])


def _pulls(events: list[dict[str, Any]], image: str) -> tuple[list[str], list[str]]:
    """The kubelet's "Pulling" and "Successfully pulled" messages for `image`, each with the node it ran on."""
    pulling, pulled = [], []
    for event in events:
        node = (event.get("source") or {}).get("host") or event.get("reportingInstance") or ""
        message = event.get("message") or ""
        if event["reason"] == "Pulling" and message == f'Pulling image "{image}"':
            pulling.append(node)
        elif event["reason"] == "Pulled" and (match := _PULLED.match(message)) and match["image"] == image:
            pulled.append(f"{node}: {match['took']}")
    return pulling, pulled


def _spark_pod(name: str, node: str, pull_secrets: list[dict[str, str]]) -> dict[str, object]:
    """A pod of the Spark image on `node` that only waits; `Always` makes its kubelet ask the registry even when an
    app's pod pulled the image there before."""
    container = {
        "name": "main",
        "image": images.image_ref("spark"),
        "imagePullPolicy": "Always",
        "command": ["sleep", "infinity"],
    }
    spec = {"nodeName": node, "terminationGracePeriodSeconds": 0, "containers": [container]}
    if pull_secrets:
        spec["imagePullSecrets"] = pull_secrets
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def test_the_operator_was_pulled_from_the_registry_onto_the_control_plane_with_its_pull_secret(
    kind_cluster: PodmanKindCluster, headrace: Environment
) -> None:
    pods = json.loads(kind_cluster.kubectl("get", "pods", "-n", OPERATOR_NAMESPACE, "-o", "json"))["items"]
    assert pods, "no operator pod"
    image = images.image_ref("operator")
    for pod in pods:
        assert pod["spec"]["imagePullSecrets"] == [{"name": PULL_SECRET}]
        assert pod["spec"]["containers"][0]["image"] == image
        pulling, pulled = _pulls(_pod_events(kind_cluster, OPERATOR_NAMESPACE, pod["metadata"]["name"]), image)
        print(f"operator pod {pod['metadata']['name']}: pulled {pulled}")
        assert pulling == [control_plane_node(kind_cluster)]
        assert [entry.split(":")[0] for entry in pulled] == [control_plane_node(kind_cluster)], pulled
    assert headrace.chart.startswith("oci://"), headrace.chart  # the chart came from the registry too


def test_a_worker_pulls_the_spark_image_with_a_pull_secret_and_is_refused_without_one(
    kind_cluster: PodmanKindCluster, headrace: Environment, kind_namespace: str
) -> None:
    worker = worker_nodes(kind_cluster)[0]
    pull_secrets = headrace.add_pull_secret(kind_namespace)
    assert pull_secrets == [{"name": PULL_SECRET}]
    probes.apply(
        kind_cluster,
        kind_namespace,
        _spark_pod("with-secret", worker, pull_secrets),
        _spark_pod("without-secret", worker, []),
    )
    kind_cluster.kubectl(
        "wait", "-n", kind_namespace, "--for=condition=Ready", "pod/with-secret", f"--timeout={PULL_TIMEOUT}s"
    )
    image = images.image_ref("spark")
    pulling, pulled = _pulls(_pod_events(kind_cluster, kind_namespace, "with-secret"), image)
    print(f"spark probe on {worker}: pulled {pulled}")
    assert pulling == [worker]
    assert [entry.split(":")[0] for entry in pulled] == [worker], pulled
    # The same image on the same node, without the Secret: the registry refuses the node (it has no credentials of
    # its own), whatever its containerd already holds.
    deadline = time.monotonic() + PULL_TIMEOUT
    while not (refusals := _refusals(kind_cluster, kind_namespace, "without-secret")):
        assert time.monotonic() < deadline, "no pull failure of the pod without the pull secret"
        time.sleep(2)
    # containerd words the registry's 401 as "unauthorized", "authorization failed" or "no basic auth credentials"
    assert any(word in text.lower() for text in refusals for word in ("401", "authoriz", "auth credentials")), refusals
    pod = json.loads(kind_cluster.kubectl("get", "pod", "-n", kind_namespace, "without-secret", "-o", "json"))
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] in ("ErrImagePull", "ImagePullBackOff")


def _refusals(cluster: PodmanKindCluster, namespace: str, pod: str) -> list[str]:
    """The kubelet's messages of the pod's failed pulls."""
    failed = [event for event in _pod_events(cluster, namespace, pod) if event["reason"] == "Failed"]
    return [event["message"] for event in failed if "pull" in (event.get("message") or "").lower()]

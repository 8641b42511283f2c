"""Simulated nodes (KWOK, `testbed.kwok`) beside the control plane: a placed driver runs on them, a deleted one
is replaced there, and a pod that does not tolerate them is never bound to them. The scale bench
(bench/scale_running.py) builds on exactly this."""

from __future__ import annotations

import time
from pathlib import Path

from kubernetes import client
from kubernetes.client import ApiClient

from testbed import kwok
from testbed.controlplane import ControlPlane
from testbed.operator_process import OperatorProcess

from .kube import app_manifest, create_app, driver_pods, wait_for


def _running_driver(api: ApiClient, namespace: str, app: str, not_named: str = "") -> client.V1Pod | None:
    pods = [pod for pod in driver_pods(api, namespace, app) if pod.metadata.name != not_named]
    return next((pod for pod in pods if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp), None)


def test_driver_runs_on_a_kwok_node_and_is_replaced_there(
    control_plane: ControlPlane, operator: OperatorProcess, api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    core = client.CoreV1Api(api)
    with kwok.Kwok(control_plane.kubeconfig, api, tmp_path / "kwok", nodes=1, prefix=f"kwok-{namespace}"):
        # No agent answers on a simulated node: a long heartbeatTimeout keeps the misses from replacing it.
        driver = {"podTemplate": {"spec": kwok.placement()}}
        create_app(api, namespace, app_manifest("sim", driver=driver, restartPolicy={"heartbeatTimeout": "1h"}))
        containers = [{"name": "main", "image": "localhost/none:0"}]
        stray = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stray"}, "spec": {"containers": containers}}
        core.create_namespaced_pod(namespace, stray)
        started = time.monotonic()
        pod = wait_for(lambda: _running_driver(api, namespace, "sim"), what="a Running driver on the KWOK node")
        print(f"create -> driver Running on {pod.spec.node_name}: {time.monotonic() - started:.2f}s")
        assert pod.spec.node_name == f"kwok-{namespace}-0"
        assert pod.status.pod_ip.startswith("127.250.")  # loopback: the operator's status calls stay on this host

        core.delete_namespaced_pod(pod.metadata.name, namespace)
        started = time.monotonic()
        # Up to the fence's worst case when no deletion is confirmed in time (KWOK under load): the Lease's 15 s,
        # its 5 s margin, then the next attempt.
        replacement = wait_for(lambda: _running_driver(api, namespace, "sim", not_named=pod.metadata.name), 90)
        print(f"driver deleted -> new driver Running: {time.monotonic() - started:.2f}s")
        assert replacement.spec.node_name == f"kwok-{namespace}-0"
        assert core.read_namespaced_pod("stray", namespace).spec.node_name is None  # the taint kept it off

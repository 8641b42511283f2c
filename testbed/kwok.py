"""Simulated nodes for scale tests: KWOK's controller (``sigs.k8s.io/kwok``) beside the real node.

Owns: the pinned KWOK version and its build (``go install`` through the Go module proxy, cached under
``~/.cache/headrace/bin``), its stages (node initialise and lease heartbeat; pod ready, complete and delete,
taken from the module's own ``kustomize/stage`` files), the fake Node manifests, the placement (node
selector and toleration) that puts a pod on them, and the controller as a child process against a
control plane. The fake nodes are labelled `NODE_LABEL` and tainted `TAINT_KEY`, so only pods that both
select and tolerate them land there: the real node's pods never do, and pods placed here never reach the
real node. KWOK does not schedule: the control plane's kube-scheduler binds pods to the fake nodes, and
KWOK then marks them Running (and deletes them at once when they are deleted: no kubelet holds them).
Never: touches the real node or pods bound to it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from testbed import build, procs
from testbed.controlplane import http_ok

KWOK_MODULE = "sigs.k8s.io/kwok"
KWOK_VERSION = "v0.8.0"
KWOK_SUM = "h1:OTIOTwgROqPMovcTwxICx2eYQ4AwLpSx5EpjbDKF4SQ="  # go.sum's checksum of the module (sum.golang.org)
NODE_LABEL = ("type", "kwok")
TAINT_KEY = "kwok.x-k8s.io/node"
NODE_ANNOTATION = "kwok.x-k8s.io/node"
# The module's own stages, as `kwokctl` enables them by default (node heartbeat through Leases).
STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)
# Addresses KWOK writes into pod and node status: on loopback, so that a client dialling a simulated pod (the
# operator asking a driver's agent) is refused at once and sends nothing off this machine.
POD_CIDR = "127.250.0.1/16"
NODE_IP = "127.251.0.1"
NODE_CAPACITY = {"cpu": "256", "memory": "2Ti", "pods": "256"}
START_TIMEOUT_SECONDS = 60.0
NODES_READY_TIMEOUT_SECONDS = 60.0


def binary_path() -> Path:
    """Where the pinned KWOK controller is cached (it may not exist yet; see `ensure_kwok`)."""
    return build.cache_root() / "bin" / f"kwok-{KWOK_VERSION.lstrip('v')}" / "kwok"


def stages_path() -> Path:
    """The stage configuration written beside the binary from the module's source."""
    return binary_path().parent / "stages.yaml"


def ensure_kwok() -> Path:
    """Build KWOK's controller and write its stages into the cache if missing; return the binary."""
    target = build.go_install(f"{KWOK_MODULE}/cmd/kwok", KWOK_VERSION, binary_path())
    if not stages_path().exists():
        stages = build.go_module_dir(KWOK_MODULE, KWOK_VERSION, KWOK_SUM) / "kustomize" / "stage"
        documents = [(stages / name).read_text().strip() for name in STAGE_FILES]
        partial = stages_path().with_suffix(".partial")
        partial.write_text("\n---\n".join(documents) + "\n")
        partial.rename(stages_path())
    return target


# --- pure: manifests and command line -----------------------------------------------------------


def node_manifest(name: str, capacity: dict[str, str] | None = None) -> dict[str, Any]:
    """A fake Node KWOK manages: labelled, annotated and tainted so that only placed pods land there."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {NODE_LABEL[0]: NODE_LABEL[1], "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
            "annotations": {NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": [{"key": TAINT_KEY, "value": "fake", "effect": "NoSchedule"}]},
        "status": {"capacity": dict(capacity or NODE_CAPACITY), "allocatable": dict(capacity or NODE_CAPACITY)},
    }


def placement() -> dict[str, Any]:
    """The pod spec fields (node selector and toleration) that put a pod on the fake nodes only."""
    return {
        "nodeSelector": {NODE_LABEL[0]: NODE_LABEL[1]},
        "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
    }


def command(binary: Path, stages: Path, kubeconfig: Path, server_port: int) -> list[str]:
    """The controller managing only the labelled fake nodes, with the given stages, serving health on loopback."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--config={stages}",
        f"--manage-nodes-with-label-selector={NODE_LABEL[0]}={NODE_LABEL[1]}",
        f"--cidr={POD_CIDR}",
        f"--node-ip={NODE_IP}",
        f"--server-address=127.0.0.1:{server_port}",
    ]


# --- I/O ---------------------------------------------------------------------------------------------


def _ready(node: Any) -> bool:
    conditions = (node.status.conditions or []) if node.status else []
    return any(condition.type == "Ready" and condition.status == "True" for condition in conditions)


class Kwok(procs.Started):
    """KWOK's controller plus `nodes` fake nodes named ``<prefix>-N``, as a context manager.

    `start()` returns once every fake node is Ready; `stop()` deletes the nodes, then stops the controller.
    """

    def __init__(self, kubeconfig: Path, api: ApiClient, workdir: Path, nodes: int, prefix: str = "kwok") -> None:
        self.kubeconfig = kubeconfig
        self.core = client.CoreV1Api(api)
        self.workdir = workdir
        self.node_names = [f"{prefix}-{index}" for index in range(nodes)]
        self.process: procs.Process | None = None

    def start(self) -> Kwok:
        """Start the controller, create the nodes, wait until they are Ready."""
        binary = ensure_kwok()
        port = procs.free_port()
        env = {**os.environ, "HOME": str(self.workdir)}  # no ~/.kwok configuration of the user's is read
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = procs.spawn(
            "kwok", command(binary, stages_path(), self.kubeconfig, port), self.workdir / "kwok.log", env
        )
        procs.wait_until_healthy(
            self.process, lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), timeout_seconds=START_TIMEOUT_SECONDS
        )
        for name in self.node_names:
            body: Any = node_manifest(name)  # a plain manifest: the client serialises dicts as they are
            self.core.create_node(body)
        deadline = time.monotonic() + NODES_READY_TIMEOUT_SECONDS
        while not all(_ready(self.core.read_node(name)) for name in self.node_names):
            if time.monotonic() > deadline or not self.process.alive():
                raise self.process.failure(f"left nodes not Ready after {NODES_READY_TIMEOUT_SECONDS:.0f}s")
            time.sleep(0.2)
        return self

    def stop(self) -> None:
        """Delete the fake nodes (pods bound to them go with them), then stop the controller. Idempotent."""
        for name in self.node_names:
            try:
                self.core.delete_node(name)
            except ApiException as error:
                if error.status != 404:  # already gone
                    raise
        if self.process is not None:
            procs.stop(self.process)
            self.process = None

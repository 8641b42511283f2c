"""Probe pods on the kind cluster: applying objects, and a TCP connection from inside a pod (socat in the toolbox
image) that reports what the server answered, or '' when it could not connect (refused, or dropped by a
NetworkPolicy)."""

from __future__ import annotations

import json
import subprocess

from testbed.kind.cluster import PodmanKindCluster
from testbed.kind.nodeimage import TOOLBOX_IMAGE

CONNECT_SECONDS = 3


def apply(cluster: PodmanKindCluster, namespace: str, *objects: dict[str, object]) -> None:
    """``kubectl apply`` of `objects` into `namespace`."""
    document = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(document))


def client_pod(name: str, labels: dict[str, str]) -> dict[str, object]:
    """A toolbox pod that only waits, to connect from."""
    container = {"name": "main", "image": TOOLBOX_IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "infinity"]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"terminationGracePeriodSeconds": 0, "containers": [container]},
    }


def connect(cluster: PodmanKindCluster, namespace: str, client: str, address: str, port: int) -> str:
    """What the server at `address`:`port` answers the `client` pod ('' when it cannot connect within 3 s); a server
    that accepts and says nothing answers 'connected'."""
    seconds = CONNECT_SECONDS
    script = (
        f"out=$(socat -t{seconds} -T{seconds} - TCP:{address}:{port},connect-timeout={seconds} </dev/null) "
        '&& echo "${out:-connected}"'
    )
    command = ["exec", "-n", namespace, client, "--", "bash", "-c", script]
    try:
        return str(cluster.kubectl(*command, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)).strip()
    except subprocess.CalledProcessError:
        return ""

"""End-to-end fixtures: a real single-node cluster (built here), the project's images, the Helm chart.

By default the session starts its own cluster (`headrace.testbed.cluster.Cluster`: etcd,
kube-apiserver, controller-manager, scheduler, containerd + runc, bridge CNI, kubelet, kube-proxy),
imports the images built from the Dockerfile, and installs the operator with Helm. To target another
cluster, set HEADRACE_E2E_KUBECONFIG (the images must already be there) and HEADRACE_E2E_DATA_DIR (a
directory this process and the node share, mounted into pods as a hostPath).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes.client import ApiClient

from headrace.testbed import build, images
from headrace.testbed.cluster import Cluster
from headrace.testbed.controlplane import create_namespace, delete_namespace

REPO = Path(__file__).resolve().parents[2]
OPERATOR_NAMESPACE = "headrace-system"


@dataclass
class E2E:
    """What the end-to-end tests get: a kubeconfig, tools, and a data directory shared with the node."""

    kubeconfig: Path
    data_root: Path

    def kubectl(self, *args: str, input_text: str | None = None) -> str:
        """Run the testbed's kubectl against the cluster; returns stdout, raises with stderr."""
        result = subprocess.run(
            [str(build.binary("kubectl")), "--kubeconfig", str(self.kubeconfig), *args],
            input=input_text,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result.stdout

    def helm(self, *args: str) -> str:
        """Run helm against the cluster."""
        result = subprocess.run(
            [str(build.ensure_helm()), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        if result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed: {result.stdout}\n{result.stderr}")
        return result.stdout

    def api_client(self) -> ApiClient:
        """A kubernetes client for the cluster."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))


@pytest.fixture(scope="session")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2E]:
    """A cluster with the images in it and the operator installed by the chart."""
    external = os.environ.get("HEADRACE_E2E_KUBECONFIG")
    if external:
        data_root = Path(os.environ.get("HEADRACE_E2E_DATA_DIR", tempfile.mkdtemp(prefix="headrace-e2e-")))
        environment = E2E(Path(external), data_root)
        _install_operator(environment)
        yield environment
        return
    archives = images.build_all()
    build.ensure_helm()
    with Cluster(tmp_path_factory.mktemp("cluster")) as cluster:
        for archive in archives.values():
            cluster.import_image(archive)
        data_root = Path(tempfile.mkdtemp(prefix="headrace-e2e-data-"))
        data_root.chmod(0o777)
        environment = E2E(cluster.kubeconfig, data_root)
        try:
            _install_operator(environment)
            yield environment
        finally:
            subprocess.run(["rm", "-rf", str(data_root)], check=False)


def _install_operator(environment: E2E) -> None:
    tag = images.image_ref("operator").rsplit(":", 1)[1]
    environment.helm(
        "upgrade",
        "--install",
        "headrace",
        str(REPO / "charts" / "headrace"),
        "--namespace",
        OPERATOR_NAMESPACE,
        "--create-namespace",
        "--set",
        f"image.tag={tag}",
        "--set",
        "logVerbose=true",
        "--wait",
        "--timeout",
        "5m",
    )


@pytest.fixture
def e2e_namespace(e2e: E2E) -> Iterator[str]:
    """A throw-away namespace on the e2e cluster."""
    with e2e.api_client() as api:
        name = create_namespace(api)
        try:
            yield name
        finally:
            delete_namespace(api, name)

"""A cluster ready for Headrace: the local cluster (or any kubeconfig), the images, the operator by Helm.

Owns: choosing the target (HEADRACE_E2E_KUBECONFIG or a fresh local `Cluster`), pushing the images built from
the Dockerfile to the local cluster's authenticated registry (its node pulls them, as any cluster's does; nothing is
imported into containerd), packaging the chart and pushing it there as an OCI artifact, `helm upgrade --install`
of the chart (from that registry, ``oci://...``, on the local cluster; from the repository on another), the image
pull Secret that the operator and every app get on a cluster whose nodes hold no registry credentials (the kind
cluster's), and kubectl/helm calls against it.
Used by the end-to-end tests and the lifecycle benchmark. Never: asserts anything.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import config
from kubernetes.client import ApiClient

from headrace.core.validation import RESTRICTED_VOLUME_TYPES
from testbed import REPOSITORY, build, images, procs, scenario
from testbed.cluster import REGISTRY_NAME, Cluster
from testbed.controlplane import ControlPlane, create_namespace, delete_namespace
from testbed.objectstore import ClusterObjectStore
from testbed.registry import USER, Registry
from testbed.scenario import OPERATOR_NAMESPACE

DEV_VOLUME_TYPES = (*RESTRICTED_VOLUME_TYPES, "hostPath")  # the tenant policy of the local cluster
CHART = REPOSITORY / "charts" / "headrace"
CHARTS_PATH = "charts"  # where the chart goes in the registry: oci://<registry>/charts/headrace


@dataclass
class Environment:
    """A kubeconfig, a data directory this process shares with the node, the cluster's Kafka as this
    machine reaches it (pods use ``kafka.kafka.svc:9092``), and the tools."""

    kubeconfig: Path
    data_root: Path
    kafka_bootstrap: str = ""
    object_store: ClusterObjectStore | None = None  # the local cluster's S3 server (None on another cluster)
    control_plane: ControlPlane | None = None  # the local cluster's control plane (None on another cluster)
    registry: Registry | None = None  # the local cluster's registry, serving `localhost/...` (None on another cluster)
    chart: str = str(CHART)  # what `install_operator` installs: the chart's directory or its oci:// reference
    # On a cluster whose nodes hold no credentials for the registry (the kind cluster): the image pull Secret every
    # app's namespace gets and every app names in `spec.imagePullSecrets` (None: the nodes pull without one).
    pull_secret: dict[str, Any] | None = None

    def _helm_registry(self) -> list[str]:
        """helm's registry options: its own credentials file and the registry's CA (never the user's helm config)."""
        if self.registry is None:
            return []
        config = self.registry.workdir / "helm-registry.json"
        return ["--registry-config", str(config), "--ca-file", str(self.registry.access.ca)]

    def _run(self, command: list[str], timeout: float, stdin: str | None = None) -> str:
        result = subprocess.run(command, input=stdin, capture_output=True, text=True, check=False, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command[:3])} ... failed: {result.stdout}\n{result.stderr}")
        return result.stdout

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        """The testbed's kubectl against the cluster; stdout, or an error with stderr."""
        return self._run([str(build.binary("kubectl")), "--kubeconfig", str(self.kubeconfig), *args], 300, stdin)

    def apply(self, namespace: str, path: Path, manifest: dict[str, object]) -> str:
        """Write `manifest` to `path` as YAML (what a user keeps in git) and `kubectl apply` it in `namespace`."""
        path.write_text(yaml.safe_dump(manifest))
        return self.kubectl("apply", "-n", namespace, "-f", str(path))

    def helm(self, *args: str, stdin: str | None = None) -> str:
        """helm against the cluster."""
        return self._run([str(build.ensure_helm()), "--kubeconfig", str(self.kubeconfig), *args], 600, stdin)

    def publish_chart(self, workdir: Path) -> str:
        """Package the repository's chart and push it to the local registry as an OCI artifact (helm logged in
        with the registry's credentials); later installs take it from there. Returns its ``oci://`` reference."""
        if self.registry is None:
            raise RuntimeError("only the local cluster has a registry to publish the chart to")
        access, registry_options = self.registry.access, self._helm_registry()
        self.helm("registry", "login", access.address, "--username", USER, "--password-stdin",
                  *registry_options, stdin=access.password)  # fmt: skip
        workdir.mkdir(parents=True, exist_ok=True)
        self.helm("package", str(CHART), "--destination", str(workdir))
        (package,) = workdir.glob("headrace-*.tgz")
        self.helm("push", str(package), f"oci://{access.address}/{CHARTS_PATH}", *registry_options)
        self.chart = f"oci://{access.address}/{CHARTS_PATH}/headrace"
        return self.chart

    def add_pull_secret(self, namespace: str) -> list[dict[str, str]]:
        """Create `pull_secret` in `namespace`; the `imagePullSecrets` that name it ([] without one)."""
        if self.pull_secret is None:
            return []
        self.kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(self.pull_secret))
        return [{"name": self.pull_secret["metadata"]["name"]}]

    def api_client(self) -> ApiClient:
        """A kubernetes client for the cluster (close it, or use it in a with block)."""
        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def install_operator(self, *values: str) -> None:
        """Install (or upgrade) the operator from the repository's chart and wait until it runs; `values`
        are extra `--set`s (e.g. `replicaCount=2`); without them the release goes back to the defaults."""
        tag = images.image_ref("operator").rsplit(":", 1)[1]
        # The tag is the version whatever the content; the archive's name (the digest of the build inputs)
        # as a pod annotation rolls the operator whenever the image built from this tree changes.
        built = images.archive_path("operator").name
        extra = [arg for value in values for arg in ("--set", value)]
        if self.pull_secret is not None:
            # The operator's pod pulls its image with the Secret too (the chart's `imagePullSecrets`).
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}}
            self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(namespace))
            (secret,) = self.add_pull_secret(OPERATOR_NAMESPACE)
            extra += ["--set", f"imagePullSecrets[0].name={secret['name']}"]
        if self.chart.startswith("oci://"):
            chart_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
            extra += ["--version", chart_version, *self._helm_registry()]
        self.helm(
            "upgrade", "--install", "headrace", self.chart,
            "--namespace", OPERATOR_NAMESPACE, "--create-namespace",
            "--set", f"image.tag={tag}", "--set", "logVerbose=true",
            "--set-string", f"podAnnotations.headrace\\.dev/image-archive={built}",
            # The local cluster's example apps keep their data on a hostPath the tests share (scenario.py):
            # this cluster's admin allows it on top of the restricted volume types (docs/security.md).
            "--set", f"tenantPolicy.allowedVolumeTypes={{{','.join(DEV_VOLUME_TYPES)}}}",
            # Tests and the quick start put apps in namespaces of their own, made as they go: this cluster
            # watches them all (the chart's default is the release namespace only).
            "--set", "clusterWide=true",
            *extra, "--wait", "--timeout", "5m",
        )  # fmt: skip


@contextlib.contextmanager
def environment(workdir: Path) -> Iterator[Environment]:
    """The target cluster with the operator installed; a local cluster is torn down afterwards."""
    external = os.environ.get("HEADRACE_E2E_KUBECONFIG")
    if external:
        data_root = Path(os.environ.get("HEADRACE_E2E_DATA_DIR") or tempfile.mkdtemp(prefix="headrace-e2e-"))
        target = Environment(Path(external), data_root, os.environ.get("HEADRACE_E2E_KAFKA_BOOTSTRAP", ""))
        target.install_operator()
        yield target
        return
    images.build_all()
    build.ensure_helm()
    with procs.terminated_as_interrupt(), Cluster(workdir / "cluster", registry=True) as cluster:
        assert cluster.registry is not None
        push_images(cluster.registry)
        data_root = Path(tempfile.mkdtemp(prefix="e2e-", dir=scenario.pod_data_root("e2e")))
        data_root.chmod(0o777)
        target = Environment(
            cluster.kubeconfig,
            data_root,
            cluster.kafka_bootstrap,
            object_store=cluster.object_store,
            control_plane=cluster.control_plane,
            registry=cluster.registry,
        )
        try:
            target.publish_chart(workdir / "chart")
            target.install_operator()
            yield target
        finally:
            shutil.rmtree(data_root, ignore_errors=True)


def push_images(
    registry: Registry, path: str = "headrace", targets: tuple[str, ...] = images.TARGETS
) -> dict[str, str]:
    """Push images to `registry` under `path` (``<path>/<target>:<version>``); the node pulls ``localhost/<path>/...``
    from there. Returns each target's reference as pods name it."""
    pulled = {}
    for target in targets:
        tag = images.image_ref(target).rsplit(":", 1)[1]
        destination = registry.access.reference(f"{path}/{target}:{tag}")
        images.push_image(target, destination, creds=registry.access.credentials, cert_dir=registry.cert_dir)
        pulled[target] = f"{REGISTRY_NAME}/{path}/{target}:{tag}"
    return pulled


@contextlib.contextmanager
def deployed_example(target: Environment, files: int, **spec_overrides: object) -> Iterator[scenario.AppHandle]:
    """The windowed-counts example in a fresh namespace, `files` click files written, applied with kubectl;
    the namespace is deleted afterwards."""
    with target.api_client() as api:
        namespace = create_namespace(api)
        data = scenario.prepare_data_dir(target.data_root, namespace)
        handle = scenario.AppHandle(api, namespace, data)
        try:
            if pull_secrets := target.add_pull_secret(namespace):
                spec_overrides = {"imagePullSecrets": pull_secrets, **spec_overrides}
            for _ in range(files):
                handle.input.next_file()
            manifest_path = data / "streamingapp.yaml"
            manifest_path.write_text(yaml.safe_dump(scenario.windowed_counts_manifest(data, **spec_overrides)))
            target.kubectl("apply", "-n", namespace, "-f", str(manifest_path))
            yield handle
        finally:
            delete_namespace(api, namespace)

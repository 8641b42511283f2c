"""Run the real helm (built from source by `testbed.build.ensure_helm`) on the chart."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from headrace.api.models import StreamingAppSpec
from headrace.render.manifests import Attempt
from testbed.build import cache_root, ensure_helm

CHART = Path(__file__).resolve().parents[2] / "charts" / "headrace"
PROMETHEUS_OPERATOR_API = "monitoring.coreos.com/v1"
# The Prometheus Operator's Go module carries its generated CRDs; fetched through the Go module proxy
# into the testbed's module cache (~/.cache/headrace/go/mod), never into the repository.
PROMETHEUS_OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator@v0.85.0"


def helm(*args: str, values: dict[str, Any] | None = None, workdir: Path) -> subprocess.CompletedProcess[str]:
    """Run helm with optional values (written to a file in `workdir`); never raises on failure."""
    command = [str(ensure_helm()), *args]
    if values is not None:
        values_file = workdir / "values.yaml"
        values_file.write_text(yaml.safe_dump(values))
        command += ["--values", str(values_file)]
    homes = workdir / "helm-home"
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(homes / "cache"),
        "HELM_CONFIG_HOME": str(homes / "config"),
        "HELM_DATA_HOME": str(homes / "data"),
        "KUBECACHEDIR": str(homes / "kube-cache"),
    }
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, env=env)


def render(
    workdir: Path,
    values: dict[str, Any] | None = None,
    *,
    release: str = "headrace",
    namespace: str = "headrace-system",
    api_versions: tuple[str, ...] = (),
    kubeconfig: Path | None = None,
) -> list[dict[str, Any]]:
    """`helm template` the chart (templates only, no CRDs) and return the manifests. With a kubeconfig,
    helm reads the capabilities (API versions) of that cluster and validates against it."""
    extra = [arg for version in api_versions for arg in ("--api-versions", version)]
    if kubeconfig is not None:
        extra += ["--validate", "--kubeconfig", str(kubeconfig)]
    completed = helm("template", release, str(CHART), "--namespace", namespace, *extra, values=values, workdir=workdir)
    assert completed.returncode == 0, completed.stderr
    return [doc for doc in yaml.safe_load_all(completed.stdout) if doc]


def by_kind(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The manifests of one kind."""
    return [manifest for manifest in manifests if manifest["kind"] == kind]


def operator_environ(deployment: dict[str, Any], pod_name: str, pod_namespace: str) -> dict[str, str]:
    """The operator container's environment, with the downward API fields a pod of that name would get."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    fields = {"metadata.name": pod_name, "metadata.namespace": pod_namespace}
    return {
        item["name"]: item["value"] if "value" in item else fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
        for item in container["env"]
    }


def sample_attempt(namespace: str = "analytics") -> Attempt:
    """An attempt of a typical app, to render what the operator creates for it."""
    spec = StreamingAppSpec.model_validate(
        {
            "image": "localhost/headrace/spark:0.1.0",
            "application": {"file": "local:///opt/headrace/apps/clicks/app.py"},
            "state": {"checkpointDir": "s3a://bucket/checkpoints"},
        }
    )
    return Attempt(
        app="clicks",
        namespace=namespace,
        app_uid="0a0a0a0a-0000-0000-0000-000000000000",
        run=1,
        attempt=1,
        spec=spec,
        spec_hash="0123456789ab",
        checkpoint_dir="s3a://bucket/checkpoints/analytics/clicks/r1",
        operator_namespace="headrace-system",
    )


def prometheus_operator_crds(names: tuple[str, ...] = ("servicemonitors", "podmonitors")) -> list[dict[str, Any]]:
    """The Prometheus Operator's own CRDs, from its Go module (downloaded once into the cache)."""
    env = {**os.environ, "GOMODCACHE": str(cache_root() / "go" / "mod"), "GOFLAGS": "-modcacherw"}
    completed = subprocess.run(
        ["go", "mod", "download", "-json", PROMETHEUS_OPERATOR_MODULE],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
        env=env,
        cwd=cache_root(),
    )
    directory = Path(json.loads(completed.stdout)["Dir"]) / "example" / "prometheus-operator-crd"
    return [yaml.safe_load((directory / f"monitoring.coreos.com_{name}.yaml").read_text()) for name in names]

"""The `headrace` command for people, against the real API server (what kubectl would do, by name)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.client import ApiClient

from headrace.api import models
from testbed.controlplane import ControlPlane
from testbed.operator_process import OperatorProcess

from .kube import app_manifest, create_app, driver_pods, get_app, set_pod_running, wait_for


def headrace(plane: ControlPlane, *args: str, kubeconfig: Path | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "headrace.cli", *args, "--kubeconfig", str(kubeconfig or plane.kubeconfig)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return result.stdout


def test_status_rescale_suspend_resume_savepoint(
    control_plane: ControlPlane, operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    create_app(api, namespace, app_manifest("cli"))
    pod = wait_for(lambda: driver_pods(api, namespace, "cli"), what="driver")[0]
    set_pod_running(api, namespace, pod.metadata.name)
    wait_for(lambda: get_app(api, namespace, "cli").get("status", {}).get("phase") == "Running")
    table = headrace(control_plane, "status", "-n", namespace)
    assert "cli" in table and "Running" in table and "r1/a1" in table

    out = headrace(control_plane, "rescale", "cli", "3", "-n", namespace, "--wait", "--timeout", "30")
    assert get_app(api, namespace, "cli")["spec"]["executor"]["instances"] == 3
    assert "streamingapp/cli: Running" in out, out  # the operator took the new count (no driver reports any)

    headrace(control_plane, "suspend", "cli", "-n", namespace)
    assert get_app(api, namespace, "cli")["spec"]["job"]["state"] == "suspended"
    headrace(control_plane, "resume", "cli", "-n", namespace)
    assert get_app(api, namespace, "cli")["spec"]["job"]["state"] == "running"

    out = headrace(control_plane, "savepoint", "cli", "--name", "cli-before-migration", "--no-wait", "-n", namespace)
    assert "cli-before-migration" in out
    saved = client.CustomObjectsApi(api).get_namespaced_custom_object(
        models.GROUP, models.VERSION, namespace, models.SAVEPOINT_PLURAL, "cli-before-migration"
    )
    assert saved["spec"] == {"appName": "cli", "reason": "manual", "disposeOnDelete": False}  # the schema default


def test_the_namespace_comes_from_the_kubeconfig_context(
    control_plane: ControlPlane, operator: OperatorProcess, api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    """Without -n, the context's namespace, as kubectl takes it."""
    create_app(api, namespace, app_manifest("here"))
    document = yaml.safe_load(Path(control_plane.kubeconfig).read_text())
    for context in document["contexts"]:
        context["context"]["namespace"] = namespace
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(document))
    table = headrace(control_plane, "status", kubeconfig=kubeconfig)
    assert f"{namespace}  here" in table, table
    assert "here" not in headrace(control_plane, "status")  # the plain kubeconfig's context: namespace default

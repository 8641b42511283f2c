"""The `headrace` command for people, against the real API server (what kubectl would do, by name)."""

from __future__ import annotations

import json
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


def _run(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "headrace.cli", *args, "--kubeconfig", str(plane.kubeconfig)]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)


def _driver_running(api: ApiClient, namespace: str, app: str, pod: str) -> None:
    wait_for(lambda: pod in [item.metadata.name for item in driver_pods(api, namespace, app)], what=pod)
    set_pod_running(api, namespace, pod)
    wait_for(lambda: (get_app(api, namespace, app).get("status") or {}).get("run", {}).get("driverPod") == pod)


def test_redeploy_restart_events_savepoints(
    control_plane: ControlPlane, operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    """redeploy from a chosen savepoint (refused, naming the field, for one that does not exist), restart, the
    app's events, savepoints list and dispose, -o json|yaml, against the real API server and operator."""
    create_app(api, namespace, app_manifest("steer"))
    _driver_running(api, namespace, "steer", "steer-r1-a1-driver")
    chosen = "s3a://bucket/savepoints/imported/chosen"
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        models.GROUP, models.VERSION, namespace, models.SAVEPOINT_PLURAL,
        {"apiVersion": models.API_VERSION, "kind": models.SAVEPOINT_KIND, "metadata": {"name": "chosen"},
         "spec": {"appName": "steer", "reason": "import", "path": chosen}},
    )  # fmt: skip

    refused = _run(
        control_plane, "redeploy", "steer", "--savepoint", "nope", "-n", namespace, "--wait", "--timeout", "30"
    )
    assert refused.returncode == 1
    assert "spec.restoreFrom.savepoint: no StreamingSavepoint named 'nope'" in refused.stderr, refused.stderr
    assert [pod.metadata.name for pod in driver_pods(api, namespace, "steer")] == ["steer-r1-a1-driver"]  # kept

    out = headrace(control_plane, "redeploy", "steer", "--savepoint", "chosen", "-n", namespace)
    assert "redeployNonce=2" in out, out  # the refused one was 1: a new value, and the same never again
    _driver_running(api, namespace, "steer", "steer-r2-a1-driver")
    status = json.loads(headrace(control_plane, "status", "steer", "-n", namespace, "-o", "json"))["status"]
    assert (status["run"]["number"], status["run"]["restoredFrom"]) == (2, chosen)
    assert "error" not in status

    headrace(control_plane, "restart", "steer", "-n", namespace)
    _driver_running(api, namespace, "steer", "steer-r2-a2-driver")  # the same run: its checkpoint, not the savepoint

    events = headrace(control_plane, "events", "steer", "-n", namespace)
    for reason in ("RedeployRefused", "Redeploying", "RestartRequested"):
        assert reason in events, events
    listed = yaml.safe_load(headrace(control_plane, "savepoints", "list", "steer", "-n", namespace, "-o", "yaml"))
    assert [(item["metadata"]["name"], item["status"]["phase"]) for item in listed["items"]] == [
        ("chosen", "Succeeded")
    ]
    assert "chosen" in headrace(control_plane, "savepoints", "list", "-n", namespace)
    out = headrace(control_plane, "savepoints", "dispose", "chosen", "--keep-files", "--wait", "-n", namespace)
    assert "streamingsavepoint/chosen deleted" in out
    assert yaml.safe_load(headrace(control_plane, "savepoints", "list", "-n", namespace, "-o", "yaml"))["items"] == []

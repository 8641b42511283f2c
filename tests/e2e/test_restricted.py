"""Safe on a shared cluster (issue 12), on a real cluster: the windowed-counts example runs in a namespace
that enforces the `restricted` Pod Security Standard (its data on a PersistentVolumeClaim, the volume
type that standard allows); a spec asking for host access is refused naming the field and no driver
starts; the permission matrix of the operator's, the driver's and an executor's ServiceAccount is
printed and checked with `kubectl auth can-i`; a foreign pod finds the control endpoint served only over
TLS with the app's certificate and is refused without the token, and cannot join as an executor. And (issue 24)
the example runs as OpenShift's restricted-v2 runs pods: an arbitrary uid with no passwd entry, group 0, an
fsGroup, on the read-only root filesystem; it checkpoints and commits batches as that uid."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from kubernetes import client

from headrace.api import names
from headrace.api import runtime_contract as contract
from headrace.render import control_tls
from testbed import build, images, scenario
from testbed.controlplane import create_namespace, delete_namespace
from testbed.scenario import OPERATOR_NAMESPACE

from .conftest import E2E

pytestmark = pytest.mark.e2e

RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
OPERATOR_ACCOUNT = "headrace"  # the chart's ServiceAccount for release "headrace"
SELF_REVIEWS = {
    "selfsubjectreviews.authentication.k8s.io",
    "selfsubjectaccessreviews.authorization.k8s.io",
    "selfsubjectrulesreviews.authorization.k8s.io",
}


def _volume_for(core: client.CoreV1Api, namespace: str, data: Path) -> None:
    """What an admin provides: a PersistentVolume (here on the node's disk) bound to the app's claim."""
    pv_name = f"{namespace}-data"
    volume: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(data), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": "data"},
        },
    }
    claim: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": pv_name,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    core.create_persistent_volume(volume)  # type: ignore[arg-type]  # the client takes plain dicts too
    core.create_namespaced_persistent_volume_claim(namespace, claim)  # type: ignore[arg-type]


@contextmanager
def _app_in_restricted_namespace(
    e2e: E2E, prefix: str, pod_template: dict[str, Any] | None = None
) -> Iterator[scenario.AppHandle]:
    """The example in a new namespace enforcing `restricted`, its data on a PersistentVolumeClaim, both pods
    merged with `pod_template`; the namespace and the volume are deleted afterwards."""
    with e2e.api_client() as api:
        namespace = create_namespace(api, prefix)
        core = client.CoreV1Api(api)
        core.patch_namespace(namespace, {"metadata": {"labels": RESTRICTED}})
        data = scenario.prepare_data_dir(e2e.data_root, namespace)
        handle = scenario.AppHandle(api, namespace, data)
        try:
            _volume_for(core, namespace, data)
            for _ in range(5):
                handle.input.next_file()
            manifest = scenario.windowed_counts_manifest(data)
            manifest["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
            if pod_template is not None:
                for role in ("driver", "executor"):
                    manifest["spec"][role]["podTemplate"] = pod_template
            e2e.apply(namespace, data / "streamingapp.yaml", manifest)
            yield handle
        finally:
            delete_namespace(api, namespace)
            core.delete_persistent_volume(f"{namespace}-data")


@pytest.fixture(scope="module")
def restricted_app(e2e: E2E) -> Iterator[scenario.AppHandle]:
    with _app_in_restricted_namespace(e2e, "restricted") as handle:
        yield handle


def _print_pod_logs(app: scenario.AppHandle) -> None:
    """The tail of every pod's log and the namespace's events, for a failure's diagnosis."""
    for pod in app.core.list_namespaced_pod(app.namespace).items:
        try:
            log = app.core.read_namespaced_pod_log(pod.metadata.name, app.namespace, tail_lines=60)
        except client.ApiException as error:
            log = f"(no log: {error.reason})"
        print(f"--- log of {pod.metadata.name} ({pod.status.phase})\n{log}")
    for event in app.core.list_namespaced_event(app.namespace).items:
        print(f"event {event.type} {event.reason} {event.involved_object.name}: {event.message}")


def test_the_example_runs_where_restricted_is_enforced(restricted_app: scenario.AppHandle) -> None:
    started = time.monotonic()
    app = restricted_app
    try:
        app.wait(lambda: app.running(names.ROLE_DRIVER), 300, "the driver pod to run")
        executors = app.wait(lambda: app.running(names.ROLE_EXECUTOR), 300, "an executor pod to run")
        app.wait(app.commits, 300, "the first committed batch")
    except Exception:
        print(app.diagnostics())
        _print_pod_logs(app)
        raise
    print(f"restricted namespace: apply -> first committed batch {time.monotonic() - started:.1f}s")
    executor = executors[0]
    assert executor.spec.service_account_name == names.executor_service_account(scenario.APP)
    assert executor.spec.automount_service_account_token is False
    assert not [
        mount
        for container in executor.spec.containers
        for mount in container.volume_mounts or []
        if mount.mount_path.startswith("/var/run/secrets/kubernetes.io")
    ]


def test_a_spec_asking_for_the_host_is_refused_naming_the_field(e2e: E2E, restricted_app: scenario.AppHandle) -> None:
    namespace = restricted_app.namespace
    manifest = scenario.windowed_counts_manifest(restricted_app.data)
    manifest["metadata"]["name"] = "escalate"
    manifest["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    manifest["spec"]["driver"]["podTemplate"] = {"spec": {"hostNetwork": True}}
    manifest["spec"]["sparkConf"] = {"spark.master ": "local[*]"}
    e2e.apply(namespace, restricted_app.data / "escalate.yaml", manifest)
    handle = scenario.AppHandle(restricted_app.custom.api_client, namespace, restricted_app.data, name="escalate")
    status = handle.wait(lambda: handle.status() if handle.status().get("error") else None, 120, "the refusal")
    print(f"refused: {status['error']}")
    assert "spec.driver.podTemplate.spec.hostNetwork" in status["error"]
    assert "tenantPolicy.allowHostNamespaces" in status["error"]
    assert 'spec.sparkConf["spark.master "]' in status["error"]
    degraded = [condition for condition in status.get("conditions", []) if condition["type"] == "Degraded"]
    assert degraded and degraded[0]["status"] == "True" and degraded[0]["reason"] == "InvalidSpec"
    time.sleep(5)
    assert handle.pods(names.ROLE_DRIVER) == []


def _kubectl(e2e: E2E) -> list[str]:
    return [str(build.binary("kubectl")), "--kubeconfig", str(e2e.kubeconfig)]


def _matrix(e2e: E2E, namespace: str, account_namespace: str, account: str) -> list[dict[str, Any]]:
    """`kubectl auth can-i --list` for a ServiceAccount in `namespace`, printed and parsed into rows."""
    text = e2e.kubectl(
        "auth", "can-i", "--list", "-n", namespace, f"--as=system:serviceaccount:{account_namespace}:{account}"
    )
    print(f"\n--- {account_namespace}/{account} in namespace {namespace}\n{text}")
    rows = []
    for line in text.splitlines()[1:]:
        resource = line.split()[0] if line and not line.startswith(" ") else ""
        verbs = line[line.rfind("[") + 1 : line.rfind("]")].split()
        if resource and not resource.startswith("/"):
            rows.append({"resource": resource, "verbs": verbs})
    return rows


def test_permission_matrix(e2e: E2E, restricted_app: scenario.AppHandle) -> None:
    namespace = restricted_app.namespace
    executor = _matrix(e2e, namespace, namespace, names.executor_service_account(scenario.APP))
    assert {row["resource"] for row in executor} <= SELF_REVIEWS  # nothing but asking about itself
    driver = _matrix(e2e, namespace, namespace, names.service_account(scenario.APP))
    assert {row["resource"] for row in driver} - SELF_REVIEWS == {"pods", "configmaps", "leases.coordination.k8s.io"}
    (lease,) = [row for row in driver if row["resource"] == "leases.coordination.k8s.io"]
    assert sorted(lease["verbs"]) == ["get", "update"]  # its one driver Lease (by name: the fence), nothing more
    operator = _matrix(e2e, namespace, OPERATOR_NAMESPACE, OPERATOR_ACCOUNT)
    assert {"pods", "streamingapps.headrace.dev"} <= {row["resource"] for row in operator}
    as_driver = f"--as=system:serviceaccount:{namespace}:{names.service_account(scenario.APP)}"
    for verb, resource in (("get", "secrets"), ("delete", "persistentvolumeclaims"), ("create", "services")):
        answer = subprocess.run(
            [*_kubectl(e2e), "auth", "can-i", verb, resource, "-n", namespace, as_driver],
            capture_output=True,
            text=True,
            check=False,
        )
        assert answer.stdout.strip() == "no", (verb, resource, answer.stdout, answer.stderr)


# A pod of the namespace that is not part of the app: it tries the control endpoint in plain HTTP, over TLS
# verified against the system's CAs, and over TLS without verification (without the token, then with a
# guess), records the certificate the driver serves, and registers as an executor with Spark's own
# executor backend, without the app's Spark secret.
FOREIGN_PROBE = r"""
import hashlib, http.client, json, os, socket, ssl, subprocess, urllib.error, urllib.request

driver, port = os.environ["DRIVER"], int(os.environ["CONTROL_PORT"])
unverified = ssl.create_default_context()
unverified.check_hostname = False
unverified.verify_mode = ssl.CERT_NONE


def get(path, headers, scheme="https", context=unverified):
    request = urllib.request.Request(f"{scheme}://{driver}:{port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context if scheme == "https" else None) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
        return f"error: {type(error).__name__}: {error}"


result = {
    "plain_http": get(os.environ["HEALTH_PATH"], {}, scheme="http"),
    "verified_by_system_cas": get(os.environ["HEALTH_PATH"], {}, context=ssl.create_default_context()),
    "health": get(os.environ["HEALTH_PATH"], {}),
    "status_without_token": get(os.environ["STATUS_PATH"], {}),
    "status_with_a_guess": get(os.environ["STATUS_PATH"], {"Authorization": "Bearer guess"}),
}
with socket.create_connection((driver, port), timeout=10) as raw, unverified.wrap_socket(raw) as tls:
    result["served_certificate_sha256"] = hashlib.sha256(tls.getpeercert(binary_form=True)).hexdigest()
with socket.create_connection((driver, int(os.environ["RPC_PORT"])), timeout=10):
    result["rpc_reachable"] = True
backend = [
    os.path.join(os.environ["SPARK_HOME"], "bin", "spark-class"),
    "org.apache.spark.executor.CoarseGrainedExecutorBackend",
    "--driver-url", f"spark://CoarseGrainedScheduler@{driver}:{os.environ['RPC_PORT']}",
    "--executor-id", "rogue", "--hostname", os.environ["POD_IP"], "--cores", "1",
    "--app-id", "rogue", "--resourceProfileId", "0",
]
try:
    executor = subprocess.run(backend, capture_output=True, text=True, timeout=240)
    result["executor_exit"] = executor.returncode
    result["executor_output"] = (executor.stdout + executor.stderr)[-4000:]
except subprocess.TimeoutExpired as timeout:
    result["executor_exit"] = "timeout"
    result["executor_output"] = str(timeout.output)[-4000:]
print(json.dumps(result))
"""


def test_a_foreign_pod_cannot_call_the_control_endpoint_or_join_as_an_executor(
    restricted_app: scenario.AppHandle,
) -> None:
    app = restricted_app
    (driver,) = app.wait(lambda: app.running(names.ROLE_DRIVER), 300, "the driver pod to run")
    app.wait(app.commits, 300, "the first committed batch")
    # The operator reads the driver's progress over HTTPS, trusting only the app's certificate.
    app.wait(lambda: (app.status().get("progress") or {}).get("committedBatches"), 120, "progress read by the operator")
    secret = app.core.read_namespaced_secret(names.control_secret(scenario.APP), app.namespace)
    pem = base64.b64decode(secret.data[control_tls.CERT_KEY])
    app_certificate = x509.load_pem_x509_certificate(pem).fingerprint(hashes.SHA256()).hex()
    container = {
        "name": "probe",
        "image": images.image_ref("spark"),
        "imagePullPolicy": "Never",
        "command": ["/opt/venv/bin/python", "-c", FOREIGN_PROBE],
        "env": [
            {"name": "DRIVER", "value": driver.status.pod_ip},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "CONTROL_PORT", "value": str(contract.DEFAULT_CONTROL_PORT)},
            {"name": "RPC_PORT", "value": str(contract.DRIVER_PORT)},
            {"name": "HEALTH_PATH", "value": contract.PATH_HEALTH},
            {"name": "STATUS_PATH", "value": contract.PATH_STATUS},
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "runAsUser": 185,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "resources": {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "foreign-probe"},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False, "containers": [container]},
    }
    app.core.create_namespaced_pod(app.namespace, pod)  # type: ignore[arg-type]  # plain dicts work
    try:
        app.wait(
            lambda: (
                app.core.read_namespaced_pod("foreign-probe", app.namespace).status.phase in ("Succeeded", "Failed")
            ),
            360,
            "the foreign probe to finish",
        )
        log = app.core.read_namespaced_pod_log("foreign-probe", app.namespace)
    finally:
        app.core.delete_namespaced_pod("foreign-probe", app.namespace, grace_period_seconds=0)
    result = json.loads(log.strip().splitlines()[-1])
    print(json.dumps({key: value for key, value in result.items() if key != "executor_output"}))
    print(result["executor_output"][-1500:])
    assert str(result["plain_http"]).startswith("error"), result  # TLS only: plain HTTP gets no HTTP answer
    assert "CERTIFICATE_VERIFY_FAILED" in str(result["verified_by_system_cas"])  # self-signed, the app's own
    assert result["served_certificate_sha256"] == app_certificate  # exactly the certificate of the app's Secret
    assert result["health"] == 200  # the endpoint is reachable over TLS: the refusals below are the token's doing
    assert result["status_without_token"] in (401, 403)
    assert result["status_with_a_guess"] in (401, 403)
    assert result["rpc_reachable"] is True  # the driver's RPC port answers: the failure below is authentication
    assert result["executor_exit"] not in (0, "timeout"), result["executor_output"][-1500:]
    assert "Connection refused" not in result["executor_output"]
    assert app.status().get("progress", {}).get("registeredExecutors", 1) <= 1


# What OpenShift's restricted-v2 SCC gives a pod: a uid from the namespace's range (no passwd entry in any image),
# group 0, and the range's first uid as fsGroup.
ARBITRARY_UID = 1000870000
ARBITRARY_UID_TEMPLATE = {"spec": {"securityContext": {"runAsUser": ARBITRARY_UID, "fsGroup": ARBITRARY_UID}}}


def test_the_example_runs_under_an_arbitrary_uid_with_no_passwd_entry(e2e: E2E) -> None:
    started = time.monotonic()
    with _app_in_restricted_namespace(e2e, "arbitrary-uid", ARBITRARY_UID_TEMPLATE) as app:
        try:
            (driver,) = app.wait(lambda: app.running(names.ROLE_DRIVER), 300, "the driver pod to run")
            (executor, *_) = app.wait(lambda: app.running(names.ROLE_EXECUTOR), 300, "an executor pod to run")
            app.wait(lambda: len(app.commits()) >= 3, 300, "three committed batches")
        except Exception:
            print(app.diagnostics())
            _print_pod_logs(app)
            raise
        print(f"uid {ARBITRARY_UID}: apply -> third committed batch {time.monotonic() - started:.1f}s")
        for pod in (driver, executor):
            assert pod.spec.security_context.run_as_user == ARBITRARY_UID, pod.metadata.name
            assert pod.spec.security_context.fs_group == ARBITRARY_UID, pod.metadata.name
            (container,) = pod.spec.containers
            assert container.security_context.read_only_root_filesystem is True
        # The checkpoint's files and the output were written by that uid (the data directory is the node's).
        owners = {path.stat().st_uid for path in app.commits()}
        owners |= {path.stat().st_uid for path in (app.data / "output").rglob("*") if path.is_file()}
        assert owners == {ARBITRARY_UID}, owners
        log = app.core.read_namespaced_pod_log(driver.metadata.name, app.namespace)
        assert "Invalid UID" not in log and "invalid null input" not in log
        assert app.status().get("restarts", {}).get("total", 0) == 0, app.status()

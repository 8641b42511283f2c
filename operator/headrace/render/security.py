"""What makes an app's pods safe on a shared cluster (docs/security.md).

Owns: the `restricted` Pod Security Standard settings of driver and executor pods (non-root, no
privilege escalation, all capabilities dropped, seccomp RuntimeDefault, read-only root filesystem)
with the writable emptyDir volumes Spark needs; Spark authentication and RPC encryption with the
per-app secret (a key of the app's control Secret, mounted as a file in driver and executors); the
executors' ServiceAccount, which has no rights and no token.
Never: decisions or I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from typing import Any, Final

from headrace.api import names

SPARK_AUTH_KEY = "spark-auth-secret"  # key of the app's control Secret: the file driver and executors mount
SPARK_AUTH_ENV_KEY = "spark-auth-secret-env"  # the same secret as Spark reads it (base64 of the file), for executors
SPARK_AUTH_ENV = "_SPARK_AUTH_SECRET"  # Spark's variable for the executors' secret
SPARK_AUTH_VOLUME = "headrace-spark-auth"
SPARK_AUTH_DIR = "/var/run/headrace/spark-auth"
SPARK_AUTH_FILE = f"{SPARK_AUTH_DIR}/secret"
SCRATCH_VOLUME = "headrace-tmp"
SCRATCH_DIR = "/tmp"  # an emptyDir of the pod's own: temp files, spark.local.dir, HOME (ivy, caches)


def pod_security_context() -> dict[str, Any]:
    """Pod-level settings of the restricted Pod Security Standard (the image chooses the non-root user)."""
    return {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def container_security_context() -> dict[str, Any]:
    """Container-level settings of the restricted Pod Security Standard, plus a read-only root filesystem."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def volumes(app: str) -> list[dict[str, Any]]:
    """The writable scratch directory and the Spark authentication secret (only its one key)."""
    return [
        {"name": SCRATCH_VOLUME, "emptyDir": {}},
        {
            "name": SPARK_AUTH_VOLUME,
            "secret": {
                "secretName": names.control_secret(app),
                "items": [{"key": SPARK_AUTH_KEY, "path": "secret"}],
                "defaultMode": 0o444,  # files are root-owned without an fsGroup: the image's user must read it
            },
        },
    ]


def volume_mounts() -> list[dict[str, Any]]:
    """Mounts of `volumes` in the driver and executor containers."""
    return [
        {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_DIR},
        {"name": SPARK_AUTH_VOLUME, "mountPath": SPARK_AUTH_DIR, "readOnly": True},
    ]


def env() -> list[dict[str, Any]]:
    """HOME on the scratch volume: the image's home is on the read-only root filesystem."""
    return [{"name": "HOME", "value": SCRATCH_DIR}]


def executor_env(app: str) -> list[dict[str, Any]]:
    """`env()`, and the Spark secret from the app's Secret. An executor resolves a secret *file* only when
    its own configuration names a k8s:// master, which Spark does not pass to executors (measured: the
    executor fell back to SASL and every executor failed to register); Spark's variable always works."""
    reference = {"secretKeyRef": {"name": names.control_secret(app), "key": SPARK_AUTH_ENV_KEY}}
    return [*env(), {"name": SPARK_AUTH_ENV, "valueFrom": reference}]


def spark_conf(app: str) -> dict[str, str]:
    """Authentication and encryption between driver and executors, no kills from the UI, no
    PersistentVolumeClaims owned or reused by the driver (its Role grants none). (The executors'
    ServiceAccount: `headrace.render.identity`.)"""
    return {
        "spark.authenticate": "true",
        "spark.authenticate.secret.file": SPARK_AUTH_FILE,
        "spark.authenticate.secret.driver.file": SPARK_AUTH_FILE,
        "spark.authenticate.secret.executor.file": SPARK_AUTH_FILE,
        "spark.network.crypto.enabled": "true",
        "spark.ui.killEnabled": "false",
        "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
        "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
        # The default is ./spark-warehouse, on the read-only root filesystem (a user's sparkConf may move it).
        "spark.sql.warehouse.dir": f"file://{SCRATCH_DIR}/spark-warehouse",
    }


def spark_auth_secret(control_token: str) -> str:
    """The app's Spark secret, derived from its control token: executors get this, never the token."""
    return hmac.new(control_token.encode(), b"headrace spark.authenticate", hashlib.sha256).hexdigest()


def spark_auth_secret_env(control_token: str) -> str:
    """The same secret as the driver derives it from the file (Spark base64-encodes the file's bytes)."""
    return base64.b64encode(spark_auth_secret(control_token).encode()).decode()


def executor_service_account(app: str, attempt_metadata: dict[str, Any]) -> dict[str, Any]:
    """The executors' ServiceAccount (with the driver's metadata but its own name): bound to nothing, its token
    never mounted."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {**attempt_metadata, "name": names.executor_service_account(app)},
        "automountServiceAccountToken": False,
    }


NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace
OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "headrace", "app.kubernetes.io/component": "operator"}  # the chart's


@dataclass(frozen=True)
class Peers:
    """Namespaces the cluster admin lets reach every app's pods (operator settings HEADRACE_METRICS_NAMESPACES and
    HEADRACE_UI_NAMESPACES; docs/security.md): Prometheus's to the metrics port, an ingress controller's to the
    Spark UI's. Any pod in them is admitted, to those ports only."""

    metrics_namespaces: tuple[str, ...] = ()
    ui_namespaces: tuple[str, ...] = ()


NO_PEERS: Final = Peers()


def _from_namespaces(namespaces: tuple[str, ...], ports: list[dict[str, Any]], port_names: set[str]) -> dict[str, Any]:
    selector = {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": sorted(set(namespaces))}
    return {
        "from": [{"namespaceSelector": {"matchExpressions": [selector]}}],
        "ports": [{"protocol": "TCP", "port": port["containerPort"]} for port in ports if port["name"] in port_names],
    }


def network_policy(
    app: str,
    metadata: dict[str, Any],
    ports: list[dict[str, Any]],
    operator_namespace: str | None,
    peers: Peers = NO_PEERS,
) -> dict[str, Any]:
    """Ingress to the app's pods: from the app's own pods (driver and executors, every port), from the
    operator's pods (the chart's labels, in the operator's own namespace only) to the control and metrics
    ports, and from the admin's `peers` namespaces (any pod there) to the metrics or the Spark UI port.
    Spark's ports are closed to everything else; the control endpoint also needs the app's token.
    With no operator namespace (an operator run outside the cluster, which no enforced policy lets in
    anyway) only the app's own pods are admitted: pods elsewhere wearing the operator's labels are not."""
    own = {names.MANAGED_BY: names.MANAGED_BY_VALUE, names.APP: app}
    operator_ports = [
        {"protocol": "TCP", "port": port["containerPort"]} for port in ports if port["name"] in {"control", "metrics"}
    ]
    ingress: list[dict[str, Any]] = [{"from": [{"podSelector": {"matchLabels": own}}]}]
    if operator_namespace:
        operator = {
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: operator_namespace}},
            "podSelector": {"matchLabels": OPERATOR_POD_LABELS},
        }
        ingress.append({"from": [operator], "ports": operator_ports})
    if peers.metrics_namespaces:
        ingress.append(_from_namespaces(peers.metrics_namespaces, ports, {"metrics"}))
    if peers.ui_namespaces:
        ingress.append(_from_namespaces(peers.ui_namespaces, ports, {"spark-ui"}))
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": {"podSelector": {"matchLabels": own}, "policyTypes": ["Ingress"], "ingress": ingress},
    }

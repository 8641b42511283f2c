"""The pods the operator renders are restricted by default, whatever the user's templates add, and
executors carry no API credentials. (tests/integration/test_pod_security.py has the API server's
PodSecurity admission judge the same pods.)"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import pytest

from headrace.api import names
from headrace.api import runtime_contract as contract
from headrace.render import control_tls, manifests, security
from tests.unit.builders import attempt as make_attempt
from tests.unit.builders import certificate


def _pods(attempt: manifests.Attempt) -> dict[str, dict[str, Any]]:
    return {"driver": manifests.driver_pod_manifest(attempt), "executor": manifests.executor_pod_template(attempt)}


USER_TEMPLATES = [
    {},
    # A user's template may add fields but never loosen the operator's (the operator's fields win).
    {
        "spec": {
            "securityContext": {"runAsNonRoot": False, "seccompProfile": {"type": "Unconfined"}, "fsGroup": 185},
            "containers": [
                {
                    "name": "driver",
                    "securityContext": {"readOnlyRootFilesystem": False, "allowPrivilegeEscalation": True},
                },
                {
                    "name": "executor",
                    "securityContext": {"readOnlyRootFilesystem": False, "capabilities": {"drop": []}},
                },
            ],
        }
    },
]


@pytest.mark.parametrize("template", USER_TEMPLATES, ids=["plain", "template tries to loosen"])
def test_driver_and_executor_meet_the_restricted_standard(template: dict[str, Any]) -> None:
    attempt = make_attempt(driver__podTemplate=template, executor__podTemplate=template)
    for role, pod in _pods(attempt).items():
        pod_context = pod["spec"]["securityContext"]
        assert pod_context["runAsNonRoot"] is True, role
        assert pod_context["seccompProfile"] == {"type": "RuntimeDefault"}, role
        container = next(item for item in pod["spec"]["containers"] if item["name"] == role)
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False, role
        assert context["readOnlyRootFilesystem"] is True, role
        assert context["capabilities"]["drop"] == ["ALL"], role
        mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
        volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
        assert "emptyDir" in volumes[mounts["/tmp"]], role  # temp files, spark.local.dir, HOME
        assert {"name": "HOME", "value": "/tmp"} in container["env"], role
        assert mounts[security.SPARK_AUTH_DIR] == security.SPARK_AUTH_VOLUME, role


def test_executors_have_their_own_account_without_a_token() -> None:
    attempt = make_attempt()
    template = manifests.executor_pod_template(attempt)
    assert template["spec"]["automountServiceAccountToken"] is False
    conf = manifests.spark_conf(attempt)
    account = conf["spark.kubernetes.authenticate.executor.serviceAccountName"]
    assert account == names.executor_service_account("clicks") != names.service_account("clicks")
    objects = manifests.rbac("clicks", "analytics", "uid-1", attempt)
    (executor_account,) = [obj for obj in objects if obj["metadata"]["name"] == account]
    assert executor_account["kind"] == "ServiceAccount"
    assert executor_account["automountServiceAccountToken"] is False
    bindings = [obj for obj in objects if obj["kind"] == "RoleBinding"]
    assert all(subject["name"] != account for binding in bindings for subject in binding["subjects"])


def test_the_driver_role_grants_only_executor_pods_and_their_config_map() -> None:
    roles = [obj for obj in manifests.rbac("clicks", "analytics", "uid-1", make_attempt()) if obj["kind"] == "Role"]
    (role,) = [role for role in roles if role["metadata"]["name"] == names.service_account("clicks")]
    resources = sorted(resource for rule in role["rules"] for resource in rule["resources"])
    assert resources == ["configmaps", "pods"]
    (lease,) = [role for role in roles if role["metadata"]["name"] == names.driver_lease("clicks")]
    assert [rule["resourceNames"] for rule in lease["rules"]] == [[names.driver_lease("clicks")]]  # its Lease only


def test_spark_is_authenticated_and_encrypted_with_the_apps_secret() -> None:
    attempt = make_attempt()
    conf = manifests.spark_conf(attempt)
    assert conf["spark.authenticate"] == "true"
    assert conf["spark.network.crypto.enabled"] == "true"
    assert conf["spark.ui.killEnabled"] == "false"
    assert conf["spark.authenticate.secret.executor.file"] == security.SPARK_AUTH_FILE
    secret = manifests.control_secret(attempt, "token-1", certificate())
    derived = secret["stringData"][security.SPARK_AUTH_KEY]
    assert derived == security.spark_auth_secret("token-1") != security.spark_auth_secret("token-2")
    assert "token-1" not in derived
    # Executors mount only the Spark secret, never the control token, and no pod carries it as a value.
    (volume,) = [
        item
        for item in manifests.executor_pod_template(attempt)["spec"]["volumes"]
        if item["name"] == security.SPARK_AUTH_VOLUME
    ]
    assert [item["key"] for item in volume["secret"]["items"]] == [security.SPARK_AUTH_KEY]
    # Executors read the secret from Spark's variable (a file needs a k8s:// master in their own configuration,
    # which Spark does not pass them): the same secret as the driver's file, as Spark encodes it.
    executor_env = manifests.executor_pod_template(attempt)["spec"]["containers"][0]["env"]
    (auth,) = [item for item in executor_env if item["name"] == "_SPARK_AUTH_SECRET"]
    assert auth["valueFrom"]["secretKeyRef"] == {"name": "clicks-control", "key": security.SPARK_AUTH_ENV_KEY}
    assert base64.b64decode(secret["stringData"][security.SPARK_AUTH_ENV_KEY]).decode() == derived
    assert derived not in str(manifests.attempt_objects(attempt))


def test_network_policy_admits_the_app_and_the_operator_only() -> None:
    attempt = dataclasses.replace(make_attempt(), operator_namespace="headrace-system")
    (policy,) = [obj for obj in manifests.attempt_objects(attempt) if obj["kind"] == "NetworkPolicy"]
    own = {names.MANAGED_BY: names.MANAGED_BY_VALUE, names.APP: "clicks"}
    assert policy["spec"]["podSelector"] == {"matchLabels": own}
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    same_app, operator = policy["spec"]["ingress"]
    assert same_app == {"from": [{"podSelector": {"matchLabels": own}}]}  # this namespace, this app, every port
    # The operator's pods in the operator's namespace only (the API server labels every namespace with its name):
    # a tenant's pod wearing the operator's labels in another namespace is not admitted.
    assert operator["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "headrace-system"}},
            "podSelector": {"matchLabels": security.OPERATOR_POD_LABELS},
        }
    ]
    assert sorted(port["port"] for port in operator["ports"]) == [4048, 9464]  # control and metrics, not Spark's
    # Both the driver's and the executors' labels match the policy's selector.
    for pod in _pods(attempt).values():
        assert own.items() <= pod["metadata"]["labels"].items()
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_network_policy_without_the_operator_namespace_admits_only_the_app() -> None:
    """An operator that does not know its namespace (run outside the cluster) renders no operator peer: an
    empty namespaceSelector would admit pods with the operator's labels from every namespace."""
    (policy,) = [obj for obj in manifests.attempt_objects(make_attempt()) if obj["kind"] == "NetworkPolicy"]
    own = {names.MANAGED_BY: names.MANAGED_BY_VALUE, names.APP: "clicks"}
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": own}}]}]


def test_only_the_driver_mounts_the_control_certificate_and_serves_tls() -> None:
    """The control certificate and its key reach the driver container as files from the app's Secret (never as
    an env value), and no executor; the runtime is told the directory, so it serves only HTTPS there."""
    attempt = make_attempt()
    secret = manifests.control_secret(attempt, "token-1", made := certificate())
    assert secret["stringData"][control_tls.CERT_KEY] == made.certificate
    assert secret["stringData"][control_tls.KEY_KEY] == made.key
    driver = manifests.driver_pod_manifest(attempt)
    (volume,) = [item for item in driver["spec"]["volumes"] if item["name"] == control_tls.VOLUME]
    assert volume["secret"]["secretName"] == "clicks-control"
    assert [item["key"] for item in volume["secret"]["items"]] == [control_tls.CERT_KEY, control_tls.KEY_KEY]
    (container,) = driver["spec"]["containers"]
    (mount,) = [item for item in container["volumeMounts"] if item["name"] == control_tls.VOLUME]
    assert mount == {"name": control_tls.VOLUME, "mountPath": control_tls.MOUNT_DIR, "readOnly": True}
    env = {item["name"]: item for item in container["env"]}
    assert env[contract.ENV_CONTROL_TLS_DIR] == {"name": contract.ENV_CONTROL_TLS_DIR, "value": control_tls.MOUNT_DIR}
    assert not [item for item in container["env"] if control_tls.KEY_KEY in str(item.get("valueFrom"))]
    executor = manifests.executor_pod_template(attempt)["spec"]
    assert control_tls.VOLUME not in str(executor) and "tls.key" not in str(executor)
    assert made.key not in str(manifests.attempt_objects(attempt))


def test_network_policy_admits_the_admins_namespaces_to_the_metrics_and_ui_ports_only() -> None:
    """Prometheus's namespaces reach the metrics port, an ingress controller's the Spark UI's (any pod there);
    neither reaches Spark's RPC, the block manager or the control endpoint."""
    peers = security.Peers(metrics_namespaces=("monitoring", "monitoring"), ui_namespaces=("ingress-nginx",))
    attempt = dataclasses.replace(make_attempt(), operator_namespace="headrace-system", peers=peers)
    (policy,) = [obj for obj in manifests.attempt_objects(attempt) if obj["kind"] == "NetworkPolicy"]
    _, _, metrics, ui = policy["spec"]["ingress"]
    monitoring = {"key": NAMESPACE_LABEL, "operator": "In", "values": ["monitoring"]}
    assert metrics == {
        "from": [{"namespaceSelector": {"matchExpressions": [monitoring]}}],
        "ports": [{"protocol": "TCP", "port": contract.DEFAULT_METRICS_PORT}],
    }
    assert ui["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["ingress-nginx"]
    assert ui["ports"] == [{"protocol": "TCP", "port": contract.SPARK_UI_PORT}]


NAMESPACE_LABEL = "kubernetes.io/metadata.name"

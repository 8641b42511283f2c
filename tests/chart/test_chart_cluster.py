"""The chart against the real API server: every rendered manifest passes a server-side dry run, the
rendered RBAC grants what the operator's code needs (asked of the real RBAC authorizer), and the real
operator runs under exactly that RBAC with a ServiceAccount token."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from headrace.api import models, names
from testbed.controlplane import (
    ControlPlane,
    create_namespace,
    delete_namespace,
    kubeconfig_document,
    write_kubeconfig,
)
from testbed.operator_process import OperatorProcess, install_crds

from .helm import CHART, by_kind, operator_environ, prometheus_operator_crds, render
from .operator_needs import (
    CLUSTER_NEEDS_ALWAYS,
    CLUSTER_NEEDS_WATCHING_NAMESPACES,
    Need,
    kopf_needs,
    lease_needs,
    namespaced_needs,
)

OPTIONAL_OBJECTS = {
    "metrics": {"dashboard": {"enabled": True}},
    "argocd": {"healthChecks": {"enabled": True}},
    "podDisruptionBudget": {"enabled": True},
}
FIELD_MANAGER = "headrace-chart-test"


@pytest.fixture
def watched(kube_api: ApiClient) -> Iterator[list[str]]:
    """Two extra namespaces for the chart to watch."""
    created = [create_namespace(kube_api, "watched"), create_namespace(kube_api, "watched")]
    try:
        yield created
    finally:
        for name in created:
            delete_namespace(kube_api, name)


def _apply(api: ApiClient, manifests: list[dict[str, Any]], *, dry_run: bool) -> None:
    dynamic = DynamicClient(api)
    for manifest in manifests:
        resource = dynamic.resources.get(api_version=manifest["apiVersion"], kind=manifest["kind"])
        namespace = manifest["metadata"].get("namespace") if resource.namespaced else None
        resource.server_side_apply(
            body=manifest,
            namespace=namespace,
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
            dry_run="All" if dry_run else None,
        )


def _crd_manifests() -> list[dict[str, Any]]:
    import yaml

    return [yaml.safe_load(path.read_text()) for path in sorted((CHART / "crds").glob("*.yaml"))]


@pytest.mark.parametrize("mode", ["release namespace", "cluster-wide", "watched namespaces", "optional objects"])
def test_every_rendered_manifest_passes_a_server_side_dry_run(
    mode: str, kube_api: ApiClient, namespace: str, watched: list[str], tmp_path: Path
) -> None:
    values: dict[str, Any] = {
        "release namespace": {},
        "cluster-wide": {"clusterWide": True},
        "watched namespaces": {"watchNamespaces": watched, "leaderElection": {"enabled": False}},
        "optional objects": OPTIONAL_OBJECTS,
    }[mode]
    manifests = render(tmp_path, values, namespace=namespace)
    assert by_kind(manifests, "Deployment")
    _apply(kube_api, _crd_manifests() + manifests, dry_run=True)


def test_a_manifest_the_api_server_refuses_fails_the_dry_run(kube_api: ApiClient, namespace: str) -> None:
    """The dry run really validates: a Deployment without a container image is refused."""
    broken = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "broken", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c"}]}},
        },
    }
    with pytest.raises(ApiException) as refused:
        _apply(kube_api, [broken], dry_run=True)
    assert refused.value.status == 422


@pytest.fixture
def prometheus_operator_api(kube_api: ApiClient) -> Iterator[None]:
    """The Prometheus Operator's ServiceMonitor and PodMonitor CRDs, served for one test."""
    extensions = client.ApiextensionsV1Api(kube_api)
    crds = prometheus_operator_crds()
    for manifest in crds:
        extensions.create_custom_resource_definition(manifest)
    try:
        for manifest in crds:
            _wait_for(lambda name=manifest["metadata"]["name"]: _established(extensions, name), 30, "the CRD")
        yield
    finally:
        for manifest in crds:
            extensions.delete_custom_resource_definition(manifest["metadata"]["name"])


def _established(extensions: Any, name: str) -> bool:
    conditions = extensions.read_custom_resource_definition(name).status.conditions or []
    return any(condition.type == "Established" and condition.status == "True" for condition in conditions)


def test_monitors_follow_the_clusters_capabilities_and_pass_a_dry_run(
    control_plane: ControlPlane, kube_api: ApiClient, namespace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    values = {"metrics": {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}}}
    without = render(tmp_path, values, namespace=namespace, kubeconfig=control_plane.kubeconfig)
    assert not by_kind(without, "ServiceMonitor") and not by_kind(without, "PodMonitor")
    request.getfixturevalue("prometheus_operator_api")
    manifests = render(tmp_path, values, namespace=namespace, kubeconfig=control_plane.kubeconfig)
    assert len(by_kind(manifests, "ServiceMonitor")) == 1
    assert len(by_kind(manifests, "PodMonitor")) == 1
    _apply(kube_api, manifests, dry_run=True)


# --------------------------------------------------------------------------------------- RBAC --


class InstalledRbac:
    """The chart's ServiceAccount and RBAC objects, created for real; cluster-scoped ones removed after."""

    def __init__(self, api: ApiClient, manifests: list[dict[str, Any]]) -> None:
        self.api = api
        self.objects = [
            manifest
            for manifest in manifests
            if manifest["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
        ]
        (account,) = by_kind(self.objects, "ServiceAccount")
        self.account = account["metadata"]["name"]
        self.account_namespace = account["metadata"]["namespace"]

    def __enter__(self) -> InstalledRbac:
        _apply(self.api, self.objects, dry_run=False)
        return self

    def __exit__(self, *_: object) -> None:
        rbac = client.RbacAuthorizationV1Api(self.api)
        for manifest in self.objects:
            name = manifest["metadata"]["name"]
            try:
                if manifest["kind"] == "ClusterRole":
                    rbac.delete_cluster_role(name)
                elif manifest["kind"] == "ClusterRoleBinding":
                    rbac.delete_cluster_role_binding(name)
            except ApiException as error:
                if error.status != 404:
                    raise

    def allowed(self, need: Need, namespace: str | None, name: str | None = None) -> bool:
        """Ask the API server's authorizer (RBAC) whether the operator's ServiceAccount may do it (to the
        object `name`, if given)."""
        resource, _, subresource = need.resource.partition("/")
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=f"system:serviceaccount:{self.account_namespace}:{self.account}",
                groups=["system:serviceaccounts", f"system:serviceaccounts:{self.account_namespace}"],
                resource_attributes=client.V1ResourceAttributes(
                    namespace=namespace,
                    group=need.group,
                    resource=resource,
                    subresource=subresource or None,
                    verb=need.verb,
                    name=name,
                ),
            )
        )
        result: Any = client.AuthorizationV1Api(self.api).create_subject_access_review(review)
        return bool(result.status.allowed)

    def missing(self, needs: set[Need], namespace: str | None, name: str | None = None) -> list[Need]:
        return sorted(need for need in needs if not self.allowed(need, namespace, name))


def _release() -> str:
    return f"hr{uuid.uuid4().hex[:8]}"


# Things the operator never does; the chart must not allow them (least privilege).
NEVER = {
    Need("headrace.dev", "streamingapps", "delete"),
    Need("headrace.dev", "streamingapps", "update"),
    Need("", "secrets", "list"),
    Need("", "nodes", "patch"),  # it reads a driver's Node (drained or lost), never changes one
    Need("rbac.authorization.k8s.io", "clusterroles", "create"),
    Need("rbac.authorization.k8s.io", "clusterrolebindings", "create"),
    Need("apps", "deployments", "create"),
}


def test_cluster_wide_rbac_covers_the_operator(kube_api: ApiClient, namespace: str, tmp_path: Path) -> None:
    manifests = render(tmp_path, {"clusterWide": True}, release=_release(), namespace=namespace)
    with InstalledRbac(kube_api, manifests) as rbac:
        needs = namespaced_needs()
        assert Need("", "pods", "create") in needs
        assert rbac.missing(needs, "any-namespace") == []
        cluster = {Need(need.group, need.resource, verb) for need in kopf_needs() for verb in ("list", "watch")}
        assert rbac.missing(cluster - {Need("", "events", "list"), Need("", "events", "watch")}, None) == []
        assert rbac.missing(CLUSTER_NEEDS_ALWAYS, None) == []
        assert [need for need in NEVER if rbac.allowed(need, "any-namespace")] == []
        _check_lease_rbac(rbac, namespace, manifests, apps_everywhere=True)


def _check_lease_rbac(
    rbac: InstalledRbac, namespace: str, manifests: list[dict[str, Any]], *, apps_everywhere: bool = False
) -> None:
    """The leader-election Lease: every call the operator makes, on its Lease in the release namespace only.

    Where the operator manages apps it also creates, reads and updates their driver Leases (apps with a warm
    standby), so cluster-wide it holds exactly those Lease rights in every namespace: nothing beyond them."""
    (deployment,) = by_kind(manifests, "Deployment")
    name = operator_environ(deployment, "pod", namespace)["HEADRACE_LEADER_ELECTION_LEASE"]
    needs = lease_needs()
    assert {need.verb for need in needs} == {"get", "create", "update"}
    assert rbac.missing(needs, namespace, name) == []
    driver_leases = {need for need in namespaced_needs() if need.resource == "leases"} if apps_everywhere else set()
    assert sorted(need for need in needs if rbac.allowed(need, "elsewhere", name) and need not in driver_leases) == []
    beyond = [need for need in needs if need.verb != "create" and need not in driver_leases]
    assert sorted(need for need in beyond if rbac.allowed(need, namespace, "other")) == []
    for verb in ("delete", "patch", "list", "watch"):  # never more than the driver Leases need
        assert not rbac.allowed(Need("coordination.k8s.io", "leases", verb), "elsewhere", name), verb


def test_watched_namespace_rbac_covers_the_operator_there_only(
    kube_api: ApiClient, namespace: str, watched: list[str], tmp_path: Path
) -> None:
    manifests = render(tmp_path, {"watchNamespaces": watched}, release=_release(), namespace=namespace)
    assert len(by_kind(manifests, "Role")) == 3  # one per watched namespace, and the Lease's
    with InstalledRbac(kube_api, manifests) as rbac:
        needs = namespaced_needs()
        for name in watched:
            assert rbac.missing(needs, name) == [], name
        assert rbac.missing(CLUSTER_NEEDS_ALWAYS | CLUSTER_NEEDS_WATCHING_NAMESPACES, None) == []
        unwatched = create_namespace(kube_api, "unwatched")
        try:
            assert sorted(need for need in needs if rbac.allowed(need, unwatched)) == []
        finally:
            delete_namespace(kube_api, unwatched)
        assert not rbac.allowed(Need("", "pods", "list"), None)
        assert [need for need in NEVER if rbac.allowed(need, watched[0])] == []
        _check_lease_rbac(rbac, namespace, manifests)


# ----------------------------------------------------------------- the real operator, real RBAC --


def _token_kubeconfig(api: ApiClient, plane: ControlPlane, rbac: InstalledRbac, path: Path) -> Path:
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))
    token: Any = client.CoreV1Api(api).create_namespaced_service_account_token(
        rbac.account, rbac.account_namespace, request
    )
    document = kubeconfig_document(plane.url, plane.ca_cert, rbac.account, {"token": token.status.token})
    return write_kubeconfig(path, document)


def _app(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": models.API_VERSION,
        "kind": models.APP_KIND,
        "metadata": {"name": "clicks", "namespace": namespace},
        "spec": {
            "image": "localhost/headrace/spark:0.1.0",
            "application": {"file": "local:///opt/headrace/apps/clicks/app.py"},
            "state": {"checkpointDir": "s3a://bucket/checkpoints"},
        },
    }


def _driver_pods(api: ApiClient, namespace: str) -> list[Any]:
    pods: Any = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{names.APP}=clicks,{names.ROLE}={names.ROLE_DRIVER}"
    )
    return list(pods.items)


def _wait_for(check: Any, timeout_seconds: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _assert_never_forbidden(log: str) -> None:
    """No API call of the operator was refused: no HTTP 403 answer, no Forbidden status (not merely "403"
    anywhere, which a log timestamp's milliseconds can contain)."""
    refused = [line for line in log.splitlines() if re.search(r'HTTP/1\.1" 403 |forbidden', line, re.IGNORECASE)]
    assert not refused, "\n".join(refused[:20])


def _deploys_under(
    control_plane: ControlPlane, kube_api: ApiClient, manifests: list[dict[str, Any]], watched: str, tmp_path: Path
) -> str:
    """Run the real operator under the RBAC of `manifests` (watching `watched`) until it deployed an app; its log."""
    install_crds(kube_api)
    (deployment,) = by_kind(manifests, "Deployment")
    environ = operator_environ(deployment, "operator", deployment["metadata"]["namespace"])
    with InstalledRbac(kube_api, manifests) as rbac:
        kubeconfig = _token_kubeconfig(kube_api, control_plane, rbac, tmp_path / "operator.kubeconfig")
        env = {"HEADRACE_NAMESPACES": environ["HEADRACE_NAMESPACES"], "HEADRACE_WORKERS": "2"}
        operator = OperatorProcess(kubeconfig, tmp_path / "operator", env)
        custom, apps = client.CustomObjectsApi(kube_api), (models.GROUP, models.VERSION, watched, models.APP_PLURAL)
        with operator:
            custom.create_namespaced_custom_object(*apps, _app(watched))
            _wait_for(lambda: _driver_pods(kube_api, watched), 60, "the operator to create the driver pod")
            rbac_api = client.RbacAuthorizationV1Api(kube_api)
            assert rbac_api.read_namespaced_role(names.service_account("clicks"), watched).rules
            assert custom.get_namespaced_custom_object(*apps, "clicks")["status"]["phase"] == "Deploying"
    return operator.log_path.read_text()


def test_the_real_operator_deploys_an_app_under_the_chart_rbac(
    control_plane: ControlPlane, kube_api: ApiClient, namespace: str, watched: list[str], tmp_path: Path
) -> None:
    manifests = render(tmp_path, {"watchNamespaces": watched[:1]}, release=_release(), namespace=namespace)
    log = _deploys_under(control_plane, kube_api, manifests, watched[0], tmp_path)
    _assert_never_forbidden(log)
    assert NO_NODE_WATCH not in log  # it watches Nodes


NO_NODE_WATCH = "the operator may not list and watch Nodes"


def test_without_list_and_watch_on_nodes_the_operator_polls_them_and_says_so_once(
    control_plane: ControlPlane, kube_api: ApiClient, namespace: str, watched: list[str], tmp_path: Path
) -> None:
    """An admin removed the Node watch's grant: the operator runs as before (a driver's Node read when the app is
    reconciled), says so once, and never asks kopf to watch what it may not (kopf retries a forbidden list for a
    minute, logging each try, then gives the watch up with a traceback)."""
    manifests = render(tmp_path, {"watchNamespaces": watched[:1]}, release=_release(), namespace=namespace)
    (discovery,) = by_kind(manifests, "ClusterRole")
    (rule,) = [rule for rule in discovery["rules"] if rule["resources"] == ["nodes"]]
    rule["verbs"] = ["get"]
    log = _deploys_under(control_plane, kube_api, manifests, watched[0], tmp_path)
    assert log.count(NO_NODE_WATCH) == 1, log
    probe = "/api/v1/nodes?limit=1"  # the operator's one question at start (logged by urllib3 when verbose)
    lines = [line for line in log.splitlines() if probe not in line]
    kopf_tried = [line for line in lines if "/api/v1/nodes" in line or "watcher for nodes" in line]
    assert kopf_tried == [], "\n".join(kopf_tried[:5])  # kopf never listed them: not once, not every few seconds


ELECTION_ENV = (
    "HEADRACE_NAMESPACES",
    "HEADRACE_LEADER_ELECTION",
    "HEADRACE_LEADER_ELECTION_LEASE",
    "HEADRACE_LEASE_DURATION_SECONDS",
    "HEADRACE_RENEW_DEADLINE_SECONDS",
    "HEADRACE_RETRY_PERIOD_SECONDS",
    "POD_NAME",
    "POD_NAMESPACE",
)


def _lease_holder(api: ApiClient, namespace: str, name: str) -> str | None:
    try:
        lease: Any = client.CoordinationV1Api(api).read_namespaced_lease(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    return lease.spec.holder_identity or None


def _leader_gauge(operator: OperatorProcess) -> float:
    (line,) = [line for line in operator.metrics().splitlines() if line.startswith("headrace_operator_leader ")]
    return float(line.split()[1])


def test_two_operators_under_the_chart_rbac_elect_one_leader_and_hand_over_on_a_clean_stop(
    control_plane: ControlPlane, kube_api: ApiClient, namespace: str, watched: list[str], tmp_path: Path
) -> None:
    """Two replicas with the chart's settings and RBAC: one leads, the other stands by without acting;
    stopping the leader cleanly releases the Lease, so the standby takes over well before it expires."""
    install_crds(kube_api)
    manifests = render(tmp_path, {"watchNamespaces": watched[:1]}, release=_release(), namespace=namespace)
    (deployment,) = by_kind(manifests, "Deployment")
    with InstalledRbac(kube_api, manifests) as rbac:
        kubeconfig = _token_kubeconfig(kube_api, control_plane, rbac, tmp_path / "operator.kubeconfig")
        operators = {}
        for pod in ("operator-a", "operator-b"):
            environ = operator_environ(deployment, pod, namespace)
            env = {name: environ[name] for name in ELECTION_ENV} | {"HEADRACE_WORKERS": "2"}
            operators[pod] = OperatorProcess(kubeconfig, tmp_path / pod, env)
        first, second = operators["operator-a"], operators["operator-b"]
        lease = operator_environ(deployment, "", namespace)["HEADRACE_LEADER_ELECTION_LEASE"]
        retry_seconds = float(operator_environ(deployment, "", namespace)["HEADRACE_RETRY_PERIOD_SECONDS"])
        lease_seconds = float(operator_environ(deployment, "", namespace)["HEADRACE_LEASE_DURATION_SECONDS"])
        with first:
            _wait_for(lambda: _lease_holder(kube_api, namespace, lease) == "operator-a", 30, "operator-a to lead")
            _wait_for(lambda: "headrace operator started" in first.log_path.read_text(), 30, "operator-a to run")
            with second:
                time.sleep(2 * retry_seconds)  # a few tries of the standby
                assert _lease_holder(kube_api, namespace, lease) == "operator-a"
                assert (_leader_gauge(first), _leader_gauge(second)) == (1, 0)
                assert "headrace operator started" not in second.log_path.read_text()
                stopped = time.monotonic()
                first.stop()
                _wait_for(lambda: _lease_holder(kube_api, namespace, lease) == "operator-b", 30, "operator-b to lead")
                handover = time.monotonic() - stopped
                print(f"clean stop of the leader -> the standby leads: {handover:.1f}s")
                assert handover < lease_seconds, "the stopped leader did not release the Lease"
                app_namespace = watched[0]
                client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
                    models.GROUP, models.VERSION, app_namespace, models.APP_PLURAL, _app(app_namespace)
                )
                _wait_for(lambda: _driver_pods(kube_api, app_namespace), 60, "the new leader to create the driver")
                assert _leader_gauge(second) == 1
            assert _lease_holder(kube_api, namespace, lease) is None
        for operator in (first, second):
            _assert_never_forbidden(operator.log_path.read_text())


# ------------------------------------------------------------- Pod Security Standard: restricted --


def _operator_pod(manifests: list[dict[str, Any]], namespace: str) -> dict[str, Any]:
    (deployment,) = by_kind(manifests, "Deployment")
    template = deployment["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "operator-pss-check", "namespace": namespace, "labels": template["metadata"]["labels"]},
        "spec": template["spec"],
    }


def test_the_operator_pod_meets_the_restricted_pod_security_standard(
    kube_api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    core = client.CoreV1Api(kube_api)
    core.patch_namespace(namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    manifests = render(tmp_path, namespace=namespace)
    _apply(kube_api, by_kind(manifests, "ServiceAccount"), dry_run=False)
    pod = _operator_pod(manifests, namespace)
    core.create_namespaced_pod(namespace, pod, dry_run="All")
    loose = {**pod, "spec": {**pod["spec"], "securityContext": {}}}
    loose["spec"]["containers"] = [{**container, "securityContext": {}} for container in pod["spec"]["containers"]]
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, loose, dry_run="All")
    assert refused.value.status == 403
    assert "restricted" in str(refused.value.body)

"""The chart rendered by the real helm: lint, strict values schema, optional objects, settings, docs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from headrace.render import manifests
from headrace.settings import OperatorSettings

from .helm import CHART, PROMETHEUS_OPERATOR_API, by_kind, helm, operator_environ, render, sample_attempt
from .operator_needs import CLUSTER_NEEDS_ALWAYS, CLUSTER_NEEDS_WATCHING_NAMESPACES, Need, namespaced_needs

WATCHED = {"watchNamespaces": ["analytics", "fraud"]}
EVERYTHING = {
    "metrics": {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}, "dashboard": {"enabled": True}},
    "argocd": {"healthChecks": {"enabled": True}},
    "podDisruptionBudget": {"enabled": True},
}


@pytest.mark.parametrize(
    "values", [None, WATCHED, {**WATCHED, "replicaCount": 2}, {"leaderElection": {"enabled": False}}]
)
def test_helm_lint_strict(values: dict[str, Any] | None, tmp_path: Path) -> None:
    completed = helm("lint", "--strict", str(CHART), values=values, workdir=tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in completed.stdout


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"replicas": 2}, "'replicas' not allowed"),
        ({"metrics": {"prot": 9090}}, "'prot' not allowed"),
        ({"workers": "many"}, "/workers"),
        ({"workers": 0}, "/workers"),
        ({"metrics": {"port": 0}}, "/metrics/port"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"watchNamespaces": ["Not_A_Namespace"]}, "/watchNamespaces/0"),
        ({"watchNamespaces": "analytics"}, "/watchNamespaces"),
        ({"clusterWide": "yes"}, "/clusterWide"),
        ({"metrics": {"podMonitor": {"interval": "often"}}}, "/metrics/podMonitor/interval"),
        ({"serviceAccount": {"create": "yes"}}, "/serviceAccount/create"),
        ({"peering": {"enabled": True}}, "'peering' not allowed"),
        ({"leaderElection": {"leaseDurationSeconds": "15s"}}, "/leaderElection/leaseDurationSeconds"),
        ({"leaderElection": {"leaseName": "Not A Name"}}, "/leaderElection/leaseName"),
        ({"metrics": {"scrapeNamespaces": "monitoring"}}, "/metrics/scrapeNamespaces"),
        ({"sparkUI": {"ingress": {"apps": [{"namespace": "analytics", "name": "clicks"}]}}}, "host"),
        ({"sparkUI": {"ingressControllerNamespaces": ["Ingress NGINX"]}}, "/sparkUI/ingressControllerNamespaces/0"),
    ],
)
def test_schema_rejects_bad_values_naming_them(values: dict[str, Any], named: str, tmp_path: Path) -> None:
    completed = helm("template", "headrace", str(CHART), values=values, workdir=tmp_path)
    assert completed.returncode != 0
    assert named in completed.stderr, completed.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"replicaCount": 2, "leaderElection": {"enabled": False}},
            "replicaCount > 1 needs leaderElection.enabled=true",
        ),
        (
            {**WATCHED, "clusterWide": True},
            "clusterWide=true watches every namespace: leave watchNamespaces empty",
        ),
        (
            {"leaderElection": {"renewDeadlineSeconds": 15}},
            "leaseDurationSeconds must exceed renewDeadlineSeconds, which must exceed retryPeriodSeconds",
        ),
        (
            {"leaderElection": {"retryPeriodSeconds": 10}},
            "leaseDurationSeconds must exceed renewDeadlineSeconds, which must exceed retryPeriodSeconds",
        ),
    ],
)
def test_inconsistent_values_fail_with_a_message(values: dict[str, Any], message: str, tmp_path: Path) -> None:
    completed = helm("template", "headrace", str(CHART), values=values, workdir=tmp_path)
    assert completed.returncode != 0
    assert message in completed.stderr, completed.stderr


POD_NAME = "headrace-5f7d9-abcde"


def _environ(deployment: dict[str, Any]) -> dict[str, str]:
    return operator_environ(deployment, POD_NAME, "headrace-system")


def test_default_values_agree_with_the_operator_settings(tmp_path: Path) -> None:
    """Equal but for leader election, which the operator leaves off unless told (a local run) and the
    chart turns on, with the pod's name and namespace from the downward API, and the watched namespaces:
    the operator alone watches every namespace, the chart only the release namespace unless told."""
    (deployment,) = by_kind(render(tmp_path), "Deployment")
    elected = OperatorSettings(
        leader_election=True,
        lease_namespace="headrace-system",
        identity=POD_NAME,
        namespaces=["headrace-system"],
        operator_namespace="headrace-system",
    )
    assert OperatorSettings.from_environ(_environ(deployment)) == elected
    watched = by_kind(render(tmp_path, WATCHED), "Deployment")[0]
    assert OperatorSettings.from_environ(_environ(watched)).namespaces == ["analytics", "fraud"]
    off = by_kind(render(tmp_path, {"leaderElection": {"enabled": False}}), "Deployment")[0]
    assert not OperatorSettings.from_environ(_environ(off)).leader_election


def test_the_admitted_namespaces_reach_the_operator_settings(tmp_path: Path) -> None:
    """metrics.scrapeNamespaces and sparkUI.ingressControllerNamespaces become the peers every app's NetworkPolicy
    admits (HEADRACE_METRICS_NAMESPACES, HEADRACE_UI_NAMESPACES)."""
    values = {
        "metrics": {"scrapeNamespaces": ["monitoring", "obs"]},
        "sparkUI": {"ingressControllerNamespaces": ["web"]},
    }
    (deployment,) = by_kind(render(tmp_path, values), "Deployment")
    peers = OperatorSettings.from_environ(_environ(deployment)).peers()
    assert (peers.metrics_namespaces, peers.ui_namespaces) == (("monitoring", "obs"), ("web",))


def test_an_ingress_per_listed_app_reaches_its_ui_service(tmp_path: Path) -> None:
    apps = [
        {"namespace": "analytics", "name": "clicks", "host": "clicks.spark.example"},
        {"namespace": "fraud", "name": "scores", "host": "scores.spark.example", "tlsSecretName": "spark-tls"},
    ]
    ingress = {"enabled": True, "className": "nginx", "annotations": {"a": "b"}, "apps": apps}
    rendered = by_kind(render(tmp_path, {"sparkUI": {"ingress": ingress}}), "Ingress")
    assert [(item["metadata"]["namespace"], item["metadata"]["name"]) for item in rendered] == [
        ("analytics", "clicks-ui"),
        ("fraud", "scores-ui"),
    ]
    service = next(obj for obj in manifests.app_objects(sample_attempt()) if obj["kind"] == "Service")
    first, second = rendered
    assert first["spec"]["ingressClassName"] == "nginx" and first["metadata"]["annotations"] == {"a": "b"}
    backend = first["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == service["metadata"]["name"]
    assert backend["port"]["name"] in {port["name"] for port in service["spec"]["ports"]}
    assert "tls" not in first["spec"]
    assert second["spec"]["tls"] == [{"hosts": ["scores.spark.example"], "secretName": "spark-tls"}]


def _granted(role: dict[str, Any]) -> set[Need]:
    return {
        Need(group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_by_default_the_operator_watches_and_may_act_in_the_release_namespace_only(tmp_path: Path) -> None:
    manifests = render(tmp_path)
    assert _environ(by_kind(manifests, "Deployment")[0])["HEADRACE_NAMESPACES"] == "headrace-system"
    (discovery,) = by_kind(manifests, "ClusterRole")  # the one ClusterRole: CRDs, namespaces and Nodes, nothing else
    assert _granted(discovery) == CLUSTER_NEEDS_ALWAYS | CLUSTER_NEEDS_WATCHING_NAMESPACES
    assert {need.resource for need in _granted(discovery)} == {"customresourcedefinitions", "namespaces", "nodes"}
    (role,) = [role for role in by_kind(manifests, "Role") if role["metadata"]["name"] == "headrace"]
    assert role["metadata"]["namespace"] == "headrace-system"
    (binding,) = [item for item in by_kind(manifests, "RoleBinding") if item["metadata"]["name"] == "headrace"]
    assert binding["roleRef"]["name"] == "headrace" and binding["metadata"]["namespace"] == "headrace-system"
    watched = render(tmp_path, WATCHED)
    roles = [role for role in by_kind(watched, "Role") if role["metadata"]["name"] == "headrace"]
    assert sorted(role["metadata"]["namespace"] for role in roles) == ["analytics", "fraud"]


@pytest.mark.parametrize(
    ("values", "watching"),
    [
        (None, "its release namespace headrace-system"),
        (WATCHED, "analytics, fraud"),
        ({"clusterWide": True}, "all namespaces"),
    ],
)
def test_the_install_notes_name_the_namespaces_watched(
    values: dict[str, Any] | None, watching: str, tmp_path: Path
) -> None:
    # `helm template` leaves NOTES.txt out and `helm install --dry-run` needs a cluster: render a copy of the
    # chart whose NOTES.txt is also an ordinary template.
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "notes.txt")
    (chart / "templates" / "notes.yaml").write_text('notes: {{ tpl (.Files.Get "notes.txt") . | toJson }}\n')
    completed = helm(
        "template", "headrace", str(chart), "--namespace", "headrace-system", "--show-only", "templates/notes.yaml",
        values=values, workdir=tmp_path,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    notes = yaml.safe_load(completed.stdout)["notes"]
    assert f"watching {watching}.\n" in notes, notes


@pytest.mark.parametrize("values", [None, WATCHED, {"clusterWide": True}])
def test_the_operators_rules_are_exactly_what_its_code_needs(values: dict[str, Any] | None, tmp_path: Path) -> None:
    """No wildcard, no escalate/bind/impersonate, and no verb the operator's code does not use (a call added
    to the adapters fails this test until the chart grants it, and a verb the code stopped using too)."""
    manifests = render(tmp_path, values)
    kind = "ClusterRole" if values and values.get("clusterWide") else "Role"
    rules = [role for role in by_kind(manifests, kind) if role["metadata"]["name"] == "headrace"]
    assert rules
    for role in rules:
        granted = _granted(role)
        assert granted == namespaced_needs()
        assert not {"*", "escalate", "bind", "impersonate"} & {need.verb for need in granted}
        assert "*" not in {need.resource for need in granted} | {need.group for need in granted}
    if kind == "ClusterRole":
        (binding,) = [
            item for item in by_kind(manifests, "ClusterRoleBinding") if item["metadata"]["name"] == "headrace"
        ]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "headrace",
        }
        assert _environ(by_kind(manifests, "Deployment")[0])["HEADRACE_NAMESPACES"] == ""
    else:
        assert not [role for role in by_kind(manifests, "ClusterRole") if role["metadata"]["name"] == "headrace"]


def test_leader_election_shapes_the_rollout_and_the_lease_role(tmp_path: Path) -> None:
    manifests = render(tmp_path, {"fullnameOverride": "ops", "leaderElection": {"leaseName": "ops-leader"}})
    (deployment,) = by_kind(manifests, "Deployment")
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert _environ(deployment)["HEADRACE_LEADER_ELECTION_LEASE"] == "ops-leader"
    (role,) = [role for role in by_kind(manifests, "Role") if role["metadata"]["name"] == "ops-leader-election"]
    assert role["metadata"]["namespace"] == "headrace-system"
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]} in role["rules"]
    named = [rule for rule in role["rules"] if rule.get("resourceNames")]
    assert named == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["ops-leader"],
            "verbs": ["get", "update"],
        }
    ]
    off = render(tmp_path, {"leaderElection": {"enabled": False}})
    assert by_kind(off, "Deployment")[0]["spec"]["strategy"] == {"type": "Recreate"}
    assert [role["metadata"]["name"] for role in by_kind(off, "Role")] == ["headrace"]  # the watched namespace's


def test_deployment_is_restricted_and_probed(tmp_path: Path) -> None:
    (deployment,) = by_kind(render(tmp_path), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert ports == {"metrics": 8080, "health": 8081}


def test_prometheus_monitors_only_where_the_api_is_served(tmp_path: Path) -> None:
    without = render(tmp_path, EVERYTHING)
    assert not by_kind(without, "ServiceMonitor")
    assert not by_kind(without, "PodMonitor")
    manifests = render(tmp_path, {**EVERYTHING, **WATCHED}, api_versions=(PROMETHEUS_OPERATOR_API,))
    (service_monitor,) = by_kind(manifests, "ServiceMonitor")
    (service,) = by_kind(manifests, "Service")
    assert service_monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert service_monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    # headrace_app_last_batch_age_seconds{namespace=<the app's>} must keep its label, not become exported_namespace
    assert service_monitor["spec"]["endpoints"][0]["honorLabels"] is True
    (pod_monitor,) = by_kind(manifests, "PodMonitor")
    assert pod_monitor["spec"]["selector"]["matchLabels"]["headrace.dev/role"] == "driver"
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    assert pod_monitor["spec"]["namespaceSelector"] == {"matchNames": ["analytics", "fraud"]}


def test_pod_monitor_matches_a_rendered_driver_pod(tmp_path: Path) -> None:
    pod = manifests.driver_pod_manifest(sample_attempt())
    port_names = {port["name"] for container in pod["spec"]["containers"] for port in container.get("ports", [])}
    (pod_monitor,) = by_kind(render(tmp_path, EVERYTHING, api_versions=(PROMETHEUS_OPERATOR_API,)), "PodMonitor")
    assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] in port_names


def test_dashboard_and_argocd_configmaps_carry_the_files(tmp_path: Path) -> None:
    config_maps = {item["metadata"]["name"]: item for item in by_kind(render(tmp_path, EVERYTHING), "ConfigMap")}
    dashboard = config_maps["headrace-dashboard"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["headrace.json"]) == json.loads(
        (CHART / "dashboards/headrace.json").read_text()
    )
    health = config_maps["headrace-argocd-health"]["data"]
    for kind, script in (("StreamingApp", "streamingapp.lua"), ("StreamingSavepoint", "streamingsavepoint.lua")):
        rendered = health[f"resource.customizations.health.headrace.dev_{kind}"]
        assert rendered.strip() == (CHART / "argocd" / script).read_text().strip()


def test_the_argocd_grace_period_is_set_in_the_rendered_script(tmp_path: Path) -> None:
    values = {**EVERYTHING, "argocd": {"healthChecks": {"enabled": True, "degradedGraceSeconds": 1800}}}
    (health,) = [
        item for item in by_kind(render(tmp_path, values), "ConfigMap") if "argocd" in item["metadata"]["name"]
    ]
    script = health["data"]["resource.customizations.health.headrace.dev_StreamingApp"]
    assert "local DEGRADED_GRACE_SECONDS = 1800\n" in script
    assert script.replace("= 1800", "= 600").strip() == (CHART / "argocd" / "streamingapp.lua").read_text().strip()


def test_optional_objects_are_off_by_default(tmp_path: Path) -> None:
    kinds = sorted({manifest["kind"] for manifest in render(tmp_path)})
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]


def _documented_values(schema: dict[str, Any], values: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Value paths down to free-form maps and lists (what the README documents), with their defaults."""
    found = []
    for key, sub in schema["properties"].items():
        path = prefix + key
        if sub.get("type") == "object" and sub.get("additionalProperties") is False:
            found.extend(_documented_values(sub, values.get(key, {}), path + "."))
        else:
            found.append((path, values.get(key)))
    return found


def test_every_value_is_in_the_schema_and_documented_with_its_default() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    documented = _documented_values(schema, values)
    for path, default in documented:
        row = f"| `{path}` | `{json.dumps(default, separators=(', ', ': '))}` |"
        assert row in readme, f"charts/headrace/README.md lacks the row for {path}: {row}"
    leaves = {path for path, _ in documented}
    assert set(values) <= {path.split(".")[0] for path in leaves}

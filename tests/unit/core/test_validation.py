"""Validation of StreamingApp specs: owned Spark keys, reserved env names and the tenant policy.

Each row is a spec a tenant could submit and the field the refusal must name (None: accepted)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from headrace.core.planner import decide
from headrace.core.validation import (
    DEFAULT_POLICY,
    USER_OVERRIDABLE_SPARK_CONF,
    TenantPolicy,
    azure_account_owner,
    azure_accounts,
    spark_conf_owner,
    validate_spec,
)
from headrace.render import manifests
from headrace.runtime import sparkconf
from headrace.runtime.settings import RuntimeSettings
from headrace.settings import OperatorSettings
from tests.unit.builders import T0, seen, spec, view


def _fields(problems: list[Any]) -> list[str]:
    return [problem.field for problem in problems]


def _driver_template(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return {"driver__podTemplate": {"spec": pod_spec}}


def _container(**fields: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "sidecar", "image": "busybox", **fields}]}}


SPARK_CONF_CASES: list[tuple[str, dict[str, str], str | None]] = [
    ("a plain user setting", {"spark.sql.session.timeZone": "UTC"}, None),
    ("app name is a default the user may replace", {"spark.app.name": "mine"}, None),
    ("exact owned key", {"spark.master": "local[*]"}, 'spec.sparkConf["spark.master"]'),
    ("trailing space", {"spark.master ": "local[*]"}, 'spec.sparkConf["spark.master "]'),
    ("leading space", {" spark.master": "local[*]"}, 'spec.sparkConf[" spark.master"]'),
    ("other case", {"Spark.Master": "local[*]"}, 'spec.sparkConf["Spark.Master"]'),
    ("separator inside the key", {"spark.master=local": "x"}, 'spec.sparkConf["spark.master=local"]'),
    ("colon inside the key", {"spark.master:local": "x"}, 'spec.sparkConf["spark.master:local"]'),
    ("newline in a value", {"spark.foo": "x\nspark.master local[*]"}, 'spec.sparkConf["spark.foo"]'),
    ("carriage return in a value", {"spark.foo": "x\rspark.master local"}, 'spec.sparkConf["spark.foo"]'),
    ("surrounding whitespace in a value", {"spark.foo": " x "}, 'spec.sparkConf["spark.foo"]'),
    ("unicode line separator", {"spark.foo": "x\u2028y"}, 'spec.sparkConf["spark.foo"]'),
    (
        "the state bucket's own S3A provider (would bypass credentialsMode)",
        {"spark.hadoop.fs.s3a.bucket.bucket.aws.credentials.provider": "x"},
        'spec.sparkConf["spark.hadoop.fs.s3a.bucket.bucket.aws.credentials.provider"]',
    ),
    (
        "the state bucket's own endpoint, in other case",
        {"Spark.Hadoop.fs.s3a.bucket.BUCKET.endpoint": "http://elsewhere:9000"},
        'spec.sparkConf["Spark.Hadoop.fs.s3a.bucket.BUCKET.endpoint"]',
    ),
    (
        "another bucket's S3A provider (an input's)",
        {"spark.hadoop.fs.s3a.bucket.inputs.aws.credentials.provider": "x"},
        None,
    ),
    ("the state bucket's own unowned S3A option", {"spark.hadoop.fs.s3a.bucket.bucket.fast.upload": "true"}, None),
    (
        "executor service account",
        {"spark.kubernetes.authenticate.executor.serviceAccountName": "admin"},
        'spec.sparkConf["spark.kubernetes.authenticate.executor.serviceAccountName"]',
    ),
    (
        "executor labels",
        {"spark.kubernetes.executor.label.headrace.dev/app": "other"},
        'spec.sparkConf["spark.kubernetes.executor.label.headrace.dev/app"]',
    ),
    (
        "delete on termination",
        {"spark.kubernetes.executor.deleteOnTermination": "false"},
        'spec.sparkConf["spark.kubernetes.executor.deleteOnTermination"]',
    ),
    (
        "pod template file",
        {"spark.kubernetes.executor.podTemplateFile": "/etc/evil.yaml"},
        'spec.sparkConf["spark.kubernetes.executor.podTemplateFile"]',
    ),
    (
        "a hostPath volume through Spark's own volume settings",
        {"spark.kubernetes.executor.volumes.hostPath.root.mount.path": "/host"},
        'spec.sparkConf["spark.kubernetes.executor.volumes.hostPath.root.mount.path"]',
    ),
    ("authentication off", {"spark.authenticate": "false"}, 'spec.sparkConf["spark.authenticate"]'),
    ("UI kill", {"spark.ui.killEnabled": "true"}, 'spec.sparkConf["spark.ui.killEnabled"]'),
    (
        "reserved executor env",
        {"spark.executorEnv.HEADRACE_CONTROL_TOKEN": "x"},
        'spec.sparkConf["spark.executorEnv.HEADRACE_CONTROL_TOKEN"]',
    ),
]


@pytest.mark.parametrize(("case", "conf", "field"), SPARK_CONF_CASES, ids=[case[0] for case in SPARK_CONF_CASES])
def test_spark_conf(case: str, conf: dict[str, str], field: str | None) -> None:
    problems = validate_spec(spec(sparkConf=conf))
    assert _fields(problems) == ([field] if field else []), case


def test_a_state_bucket_setting_names_the_field_that_owns_it() -> None:
    key = "spark.hadoop.fs.s3a.bucket.bucket.aws.credentials.provider"
    (problem,) = validate_spec(spec(sparkConf={key: "x"}))
    assert "spec.state.s3.credentialsMode" in problem.message and "state's bucket" in problem.message
    (secret,) = validate_spec(spec(sparkConfFromSecrets={key: {"name": "s", "key": "k"}}))
    assert secret.field == f'spec.sparkConfFromSecrets["{key}"]' and "credentialsMode" in secret.message


ENV_CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("a user variable", {"driver__env": [{"name": "LOG_LEVEL", "value": "debug"}]}, None),
    (
        "the control token",
        {"driver__env": [{"name": "HEADRACE_CONTROL_TOKEN", "value": "x"}]},
        "spec.driver.env[0].name",
    ),
    (
        "the checkpoint dir, lower case",
        {"driver__env": [{"name": "x", "value": "1"}, {"name": "headrace_checkpoint_dir", "value": "/"}]},
        "spec.driver.env[1].name",
    ),
    ("Spark's auth secret", {"driver__env": [{"name": "_SPARK_AUTH_SECRET", "value": "x"}]}, "spec.driver.env[0].name"),
    (
        "the runtime's JVM start switch, the one HEADRACE_* variable a user sets",
        {"driver__env": [{"name": "HEADRACE_JVM_START", "value": "spark-submit"}]},
        None,
    ),
    (
        "a name close to the switch",
        {"driver__env": [{"name": "HEADRACE_JVM_STARTX", "value": "spark-submit"}]},
        "spec.driver.env[0].name",
    ),
    (
        "reserved name in a pod template container",
        {"executor__podTemplate": _container(env=[{"name": "HEADRACE_MODE", "value": "bounded"}])},
        "spec.executor.podTemplate.spec.containers[0].env[0].name",
    ),
]


@pytest.mark.parametrize(("case", "overrides", "field"), ENV_CASES, ids=[case[0] for case in ENV_CASES])
def test_env(case: str, overrides: dict[str, Any], field: str | None) -> None:
    assert _fields(validate_spec(spec(**overrides))) == ([field] if field else []), case


HOST_PATH = [{"name": "root", "hostPath": {"path": "/"}}]
POD_CASES: list[tuple[str, dict[str, Any], str | None, str | None]] = [
    # (case, spec overrides, field refused by default, the policy setting that allows it)
    ("tolerations and labels", {"driver__podTemplate": {"spec": {"tolerations": [{"key": "x"}]}}}, None, None),
    ("a PVC volume", {"volumes": [{"name": "state", "persistentVolumeClaim": {"claimName": "s"}}]}, None, None),
    (
        "hostNetwork",
        _driver_template({"hostNetwork": True}),
        "spec.driver.podTemplate.spec.hostNetwork",
        "allow_host_namespaces",
    ),
    ("hostPID", _driver_template({"hostPID": True}), "spec.driver.podTemplate.spec.hostPID", "allow_host_namespaces"),
    (
        "hostIPC",
        {"executor__podTemplate": {"spec": {"hostIPC": True}}},
        "spec.executor.podTemplate.spec.hostIPC",
        "allow_host_namespaces",
    ),
    ("hostPath in spec.volumes", {"volumes": HOST_PATH}, "spec.volumes[0].hostPath", "allowed_volume_types"),
    (
        "hostPath in a pod template",
        {"executor__podTemplate": {"spec": {"volumes": HOST_PATH}}},
        "spec.executor.podTemplate.spec.volumes[0].hostPath",
        "allowed_volume_types",
    ),
    (
        "privileged sidecar",
        {"driver__podTemplate": _container(securityContext={"privileged": True})},
        "spec.driver.podTemplate.spec.containers[0].securityContext.privileged",
        "allow_privileged",
    ),
    (
        "privilege escalation",
        {"executor__podTemplate": _container(securityContext={"allowPrivilegeEscalation": True})},
        "spec.executor.podTemplate.spec.containers[0].securityContext.allowPrivilegeEscalation",
        "allow_privilege_escalation",
    ),
    (
        "added capability",
        {"driver__podTemplate": _container(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}})},
        "spec.driver.podTemplate.spec.containers[0].securityContext.capabilities.add[0]",
        "allowed_capabilities",
    ),
    (
        "root user at pod level",
        _driver_template({"securityContext": {"runAsUser": 0}}),
        "spec.driver.podTemplate.spec.securityContext.runAsUser",
        "allow_run_as_root",
    ),
    (
        "root user in an init container",
        {"driver__podTemplate": {"spec": {"initContainers": [{"name": "i", "securityContext": {"runAsUser": 0}}]}}},
        "spec.driver.podTemplate.spec.initContainers[0].securityContext.runAsUser",
        "allow_run_as_root",
    ),
    (
        "unconfined seccomp",
        _driver_template({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}),
        "spec.driver.podTemplate.spec.securityContext.seccompProfile.type",
        "allow_privileged",
    ),
    (
        "host port",
        {"executor__podTemplate": _container(ports=[{"containerPort": 80, "hostPort": 80}])},
        "spec.executor.podTemplate.spec.containers[0].ports[0].hostPort",
        "allow_host_ports",
    ),
    (
        "a ServiceAccount the admin did not allow",
        {"serviceAccountName": "default"},
        "spec.serviceAccountName",
        "service_accounts",
    ),
    (
        "a ServiceAccount through the pod template",
        _driver_template({"serviceAccountName": "admin"}),
        "spec.driver.podTemplate.spec.serviceAccountName",
        None,
    ),
    (
        "a token mounted into executors",
        {"executor__podTemplate": {"spec": {"automountServiceAccountToken": True}}},
        "spec.executor.podTemplate.spec.automountServiceAccountToken",
        None,
    ),
    ("skipping the scheduler", _driver_template({"nodeName": "node-1"}), "spec.driver.podTemplate.spec.nodeName", None),
]
WIDE_POLICY = TenantPolicy(
    allow_host_namespaces=True,
    allow_host_ports=True,
    allow_privileged=True,
    allow_privilege_escalation=True,
    allow_run_as_root=True,
    allowed_capabilities=frozenset({"SYS_ADMIN"}),
    allowed_volume_types=frozenset({"hostPath", "persistentVolumeClaim"}),
    service_accounts=frozenset({"default"}),
)


@pytest.mark.parametrize(("case", "overrides", "field", "setting"), POD_CASES, ids=[case[0] for case in POD_CASES])
def test_pod_policy(case: str, overrides: dict[str, Any], field: str | None, setting: str | None) -> None:
    app_spec = spec(**overrides)
    problems = validate_spec(app_spec, DEFAULT_POLICY)
    assert _fields(problems) == ([field] if field else []), case
    if setting is None:  # not a policy matter: the same under any policy
        assert _fields(validate_spec(app_spec, WIDE_POLICY)) == ([field] if field else [])
        return
    chart_value = "tenantPolicy." + "".join(
        part if index == 0 else part.capitalize() for index, part in enumerate(setting.split("_"))
    )
    assert chart_value in problems[0].message, problems[0].message  # names the setting that allows it
    assert validate_spec(app_spec, WIDE_POLICY) == []


AZ_ID = "0f8fad5b-d9cb-469f-a165-70867728950e"
AZ_TENANT = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
AZ_IDENTITY = {"clientId": AZ_ID, "tenantId": AZ_TENANT}
AZ_HOST = "clicks.dfs.core.windows.net"
AZ_CHECKPOINTS = f"abfss://state@{AZ_HOST}/checkpoints"
AZ_SAVEPOINTS = f"abfss://state@{AZ_HOST}/savepoints"
AZURITE = {"endpoint": "https://azurite.azurite.svc:10000", "namespace": "flat"}
GCS_EVERYTHING = {
    "endpoint": "http://gcs:4443/",
    "projectId": "clicks-prod",
    "credentialsMode": "unauthenticatedEmulator",
}


@pytest.mark.parametrize(
    "state",
    [
        {"state__s3": {"endpoint": "http://s3.s3.svc:9000", "credentialsSecret": {"name": "s3"}}},
        {"state__savepointDir": "gs://b/s", "state__gcs": GCS_EVERYTHING},
        {"state__checkpointDir": "gs://b/c", "state__gcs": {"serviceAccountKeySecret": {"name": "k"}}},
        {"state__checkpointDir": AZ_CHECKPOINTS, "state__azure": {**AZURITE, "accountKeySecret": {"name": "k"}}},
        {"state__savepointDir": AZ_SAVEPOINTS, "state__azure": {"workloadIdentity": AZ_IDENTITY}},
        {"state__checkpointDir": AZ_CHECKPOINTS, "state__azure": {"managedIdentity": {"clientId": AZ_ID}}},
    ],
    ids=["s3", "gcs emulator", "gcs key", "azure emulator key", "azure workload identity", "azure managed identity"],
)
def test_every_key_the_operator_renders_or_the_runtime_adds_is_owned(state: dict[str, Any]) -> None:
    """One owner: every Spark key the operator writes is refused in a user's sparkConf, unless it is a
    default the user may replace."""
    rendered = manifests.spark_conf(
        manifests.Attempt(
            app="clicks",
            namespace="analytics",
            app_uid="uid",
            run=1,
            attempt=1,
            spec=spec(
                executor__coreRequest="500m",
                application={"file": "local:///app.py", "packages": ["a:b:1"], "pyFiles": ["x.py"]},
                **state,
            ),
            spec_hash="h",
            checkpoint_dir="s3a://b/c",
        )
    )
    settings = RuntimeSettings(pod_ip="10.0.0.1", pod_name="p", state_partitions=4, kubernetes_host="k")
    runtime = sparkconf.merged_conf(settings, {})
    accounts = azure_accounts(spec(**state))  # an Azure state account's per-account ABFS keys are owned
    unowned = sorted(
        key
        for key in {*rendered, *runtime}
        if spark_conf_owner(key) is None
        and azure_account_owner(key, accounts) is None
        and key not in USER_OVERRIDABLE_SPARK_CONF
    )
    assert unowned == []


def test_render_drops_owned_keys_even_when_validation_is_bypassed() -> None:
    attempt = manifests.Attempt(
        app="clicks",
        namespace="analytics",
        app_uid="uid",
        run=1,
        attempt=1,
        spec=spec(sparkConf={"spark.master ": "local[*]", "spark.sql.session.timeZone": "UTC", "spark.foo": "a\nb"}),
        spec_hash="h",
        checkpoint_dir="s3a://b/c",
    )
    text = manifests.render_spark_defaults(manifests.spark_conf(attempt))
    assert "spark.master" not in text
    assert "spark.sql.session.timeZone UTC\n" in text
    assert "\nb\n" not in text


def test_the_operator_reads_the_policy_the_chart_sets() -> None:
    environ = {
        "HEADRACE_TENANT_POLICY": '{"allowedVolumeTypes": ["hostPath"], "serviceAccounts": ["spark"], '
        '"allowRunAsRoot": true}'
    }
    policy = OperatorSettings.from_environ(environ).tenant_policy
    assert policy == TenantPolicy(
        allowed_volume_types=frozenset({"hostPath"}), service_accounts=frozenset({"spark"}), allow_run_as_root=True
    )
    assert OperatorSettings.from_environ({}).tenant_policy == DEFAULT_POLICY
    assert OperatorSettings.from_environ({}).operator_namespace is None
    assert OperatorSettings.from_environ({"POD_NAMESPACE": "headrace-system"}).operator_namespace == "headrace-system"
    with pytest.raises(ValueError, match="HEADRACE_TENANT_POLICY is not JSON"):
        OperatorSettings.from_environ({"HEADRACE_TENANT_POLICY": "{allowRunAsRoot"})
    with pytest.raises(ValueError, match="allowPrivilged"):  # a misspelt setting is named, not ignored
        OperatorSettings.from_environ({"HEADRACE_TENANT_POLICY": '{"allowPrivilged": true}'})


def test_the_planner_applies_the_apps_policy() -> None:
    """A refused spec becomes InvalidSpec naming the field; the admin's policy lets it through."""
    hostpath = spec(volumes=HOST_PATH)
    refused = decide(view(hostpath), seen(), T0)
    assert refused.status.error is not None and "spec.volumes[0].hostPath" in refused.status.error
    assert "tenantPolicy.allowedVolumeTypes" in refused.status.error
    assert not any(type(action).__name__ == "EnsureDriver" for action in refused.actions)
    allowed = replace(view(hostpath), policy=TenantPolicy(allowed_volume_types=frozenset({"hostPath"})))
    assert decide(allowed, seen(), T0).status.error is None


AUTOSCALER_CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("off: the quota is not checked", {"autoscaler__quota": {"maxCores": 1}}, []),
    (
        "room for minExecutors: driver 1 + 2 x 2 cores",
        {"autoscaler": {"mode": "active", "minExecutors": 2, "quota": {"maxCores": 5}}, "executor__cores": 2},
        [],
    ),
    (
        "no room for minExecutors' cores",
        {"autoscaler": {"mode": "passive", "minExecutors": 2, "quota": {"maxCores": 4}}, "executor__cores": 2},
        ["spec.autoscaler.quota.maxCores"],
    ),
    (
        "room for minExecutors' memory: 1g heaps are 1433 MiB pods",
        {"autoscaler": {"mode": "active", "minExecutors": 1, "quota": {"maxMemory": "2866m"}}},
        [],
    ),
    (
        "no room for minExecutors' memory",
        {"autoscaler": {"mode": "active", "minExecutors": 1, "quota": {"maxMemory": "2g"}}},
        ["spec.autoscaler.quota.maxMemory"],
    ),
]


@pytest.mark.parametrize(("case", "overrides", "fields"), AUTOSCALER_CASES, ids=[case[0] for case in AUTOSCALER_CASES])
def test_autoscaler_quota_leaves_room_for_min_executors(
    case: str, overrides: dict[str, Any], fields: list[str]
) -> None:
    problems = validate_spec(spec(**overrides))
    assert _fields(problems) == fields, case
    for problem in problems:
        assert "minExecutors" in problem.message and "raise" in problem.message


ROLE = {"roleArn": "arn:aws:iam::123456789012:role/clicks"}
KEYS = {"name": "keys"}
GCS_KEY = {"serviceAccountKeySecret": {"name": "gcs-key"}}
EMULATOR = {"endpoint": "http://gcs.gcs.svc:4443/"}
AZ_KEY = {"accountKeySecret": {"name": "azure-key"}}
AZ_STATE = {"state__checkpointDir": AZ_CHECKPOINTS}
AZ_PLAIN = "abfs://state@devstoreaccount1.dfs.core.windows.net/checkpoints"
IDENTITY_CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("secret by its block", {"state__s3": {"credentialsSecret": KEYS}}, []),
    ("web identity by its block", {"state__s3": {"webIdentity": ROLE}}, []),
    ("default", {"state__s3": {"credentialsMode": "default"}}, []),
    ("secret without one", {"state__s3": {"credentialsMode": "secret"}}, ["spec.state.s3.credentialsSecret"]),
    ("web identity without a role", {"state__s3": {"credentialsMode": "webIdentity"}}, ["spec.state.s3.webIdentity"]),
    (
        "both blocks, no mode",
        {"state__s3": {"credentialsSecret": KEYS, "webIdentity": ROLE}},
        ["spec.state.s3.credentialsMode"],
    ),
    (
        "default with a secret",
        {"state__s3": {"credentialsMode": "default", "credentialsSecret": KEYS}},
        ["spec.state.s3.credentialsSecret"],
    ),
    (
        "web identity with a secret",
        {"state__s3": {"credentialsMode": "webIdentity", "webIdentity": ROLE, "credentialsSecret": KEYS}},
        ["spec.state.s3.credentialsSecret"],
    ),
    (
        "secret with a role",
        {"state__s3": {"credentialsMode": "secret", "credentialsSecret": KEYS, "webIdentity": ROLE}},
        ["spec.state.s3.webIdentity"],
    ),
    (
        "a driver env entry replacing the web identity's",
        {"state__s3": {"webIdentity": ROLE}, "driver__env": [{"name": "AWS_ROLE_ARN", "value": "x"}]},
        ["spec.driver.env[0].name"],
    ),
    (
        "AWS_ROLE_ARN with a secret is the user's business",
        {"state__s3": {"credentialsSecret": KEYS}, "driver__env": [{"name": "AWS_ROLE_ARN", "value": "x"}]},
        [],
    ),
    ("gs:// state with its block", {"state__checkpointDir": "gs://b/c", "state__gcs": GCS_KEY}, []),
    ("gs:// state with no block (default credentials)", {"state__checkpointDir": "gs://b/c"}, []),
    ("gs:// savepoints next to s3a:// checkpoints", {"state__savepointDir": "gs://b/s", "state__gcs": {}}, []),
    ("a GCS block with no gs:// state", {"state__gcs": {"credentialsMode": "default"}}, ["spec.state.gcs"]),
    (
        "an S3 block next to a GCS one, with no s3a:// state",
        {
            "state__checkpointDir": "gs://b/c",
            "state__savepointDir": "gs://b/s",
            "state__gcs": {},
            "state__s3": {"credentialsMode": "default"},
        },
        ["spec.state.s3"],
    ),
    (
        "a key mode without its Secret",
        {"state__checkpointDir": "gs://b/c", "state__gcs": {"credentialsMode": "serviceAccountKeySecret"}},
        ["spec.state.gcs.serviceAccountKeySecret"],
    ),
    (
        "default with a key Secret",
        {"state__checkpointDir": "gs://b/c", "state__gcs": {**GCS_KEY, "credentialsMode": "default"}},
        ["spec.state.gcs.serviceAccountKeySecret"],
    ),
    (
        "the emulator mode without an endpoint",
        {"state__checkpointDir": "gs://b/c", "state__gcs": {"credentialsMode": "unauthenticatedEmulator"}},
        ["spec.state.gcs.credentialsMode"],
    ),
    (
        "the emulator mode with its endpoint",
        {"state__checkpointDir": "gs://b/c", "state__gcs": {**EMULATOR, "credentialsMode": "unauthenticatedEmulator"}},
        [],
    ),
    (
        "the connector's auth type in sparkConf",
        {"sparkConf": {"spark.hadoop.fs.gs.auth.type": "UNAUTHENTICATED"}},
        ['spec.sparkConf["spark.hadoop.fs.gs.auth.type"]'],
    ),
    (
        "a service account private key in sparkConf",
        {"sparkConf": {"spark.hadoop.fs.gs.auth.service.account.private.key": "x"}},
        ['spec.sparkConf["spark.hadoop.fs.gs.auth.service.account.private.key"]'],
    ),
    ("abfss:// state with a key Secret", {"state__checkpointDir": AZ_CHECKPOINTS, "state__azure": AZ_KEY}, []),
    ("abfss:// state with no block (managed identity)", {"state__checkpointDir": AZ_CHECKPOINTS}, []),
    ("workload identity by its block", {**AZ_STATE, "state__azure": {"workloadIdentity": AZ_IDENTITY}}, []),
    ("a user-assigned managed identity", {**AZ_STATE, "state__azure": {"managedIdentity": {"clientId": AZ_ID}}}, []),
    (
        "the emulator over plain HTTP with abfs:// and a key",
        {"state__checkpointDir": AZ_PLAIN, "state__azure": {**AZ_KEY, "endpoint": "http://azurite:10000"}},
        [],
    ),
    ("an Azure block with no abfss:// state", {"state__azure": AZ_KEY}, ["spec.state.azure"]),
    (
        "an abfss:// URI without its account",
        {"state__checkpointDir": "abfss://state/checkpoints", "state__azure": AZ_KEY},
        ["spec.state.checkpointDir"],
    ),
    (
        "abfss:// to a plain HTTP endpoint",
        {**AZ_STATE, "state__azure": {**AZ_KEY, "endpoint": "http://azurite:10000"}},
        ["spec.state.checkpointDir"],
    ),
    (
        "an OAuth mode to a plain HTTP endpoint",
        {"state__checkpointDir": AZ_PLAIN, "state__azure": {"endpoint": "http://azurite:10000"}},
        ["spec.state.azure.endpoint"],
    ),
    (
        "the key mode without its Secret",
        {**AZ_STATE, "state__azure": {"credentialsMode": "accountKeySecret"}},
        ["spec.state.azure.accountKeySecret"],
    ),
    (
        "workload identity without its identity",
        {**AZ_STATE, "state__azure": {"credentialsMode": "workloadIdentity"}},
        ["spec.state.azure.workloadIdentity"],
    ),
    (
        "both Azure blocks, no mode",
        {**AZ_STATE, "state__azure": {**AZ_KEY, "workloadIdentity": AZ_IDENTITY}},
        ["spec.state.azure.credentialsMode"],
    ),
    (
        "managed identity with a key Secret",
        {**AZ_STATE, "state__azure": {**AZ_KEY, "credentialsMode": "managedIdentity"}},
        ["spec.state.azure.accountKeySecret"],
    ),
    (
        "a key Secret with a managed identity block",
        {**AZ_STATE, "state__azure": {**AZ_KEY, "managedIdentity": {"clientId": AZ_ID}}},
        ["spec.state.azure.managedIdentity"],
    ),
    (
        "the state account's auth type in sparkConf",
        {**AZ_STATE, "sparkConf": {f"spark.hadoop.fs.azure.account.auth.type.{AZ_HOST}": "SharedKey"}},
        [f'spec.sparkConf["spark.hadoop.fs.azure.account.auth.type.{AZ_HOST}"]'],
    ),
    (
        "another account's auth type in sparkConf is the user's",
        {**AZ_STATE, "sparkConf": {"spark.hadoop.fs.azure.account.auth.type.input.dfs.core.windows.net": "OAuth"}},
        [],
    ),
    (
        "the state account's key from a Secret",
        {
            **AZ_STATE,
            "sparkConfFromSecrets": {f"spark.hadoop.fs.azure.account.key.{AZ_HOST}": {"name": "s", "key": "k"}},
        },
        [f'spec.sparkConfFromSecrets["spark.hadoop.fs.azure.account.key.{AZ_HOST}"]'],
    ),
    (
        "an account key in sparkConf",
        {"sparkConf": {"spark.hadoop.fs.azure.account.key.input.dfs.core.windows.net": "x"}},
        ['spec.sparkConf["spark.hadoop.fs.azure.account.key.input.dfs.core.windows.net"]'],
    ),
    ("annotations on the accounts Headrace makes", {"serviceAccount": {"annotations": {"iam.gke.io/x": "y"}}}, []),
    (
        "annotations with the user's own account",
        {"serviceAccountName": "spark", "serviceAccount": {"annotations": {"iam.gke.io/x": "y"}}},
        ["spec.serviceAccount.annotations"],
    ),
    (
        "two different names",
        {"serviceAccountName": "a", "serviceAccount": {"name": "b"}},
        ["spec.serviceAccount.name", "spec.serviceAccount.name"],
    ),
    ("the operator's label", {"serviceAccount": {"labels": {"headrace.dev/app": "x"}}}, ["spec.serviceAccount.labels"]),
    ("a bad label value", {"serviceAccount": {"labels": {"team": "a b"}}}, ["spec.serviceAccount.labels"]),
    ("a bad annotation key", {"serviceAccount": {"annotations": {"a b": "x"}}}, ["spec.serviceAccount.annotations"]),
    ("a GPU", {"executor__extendedResources": {"nvidia.com/gpu": "1"}}, []),
    ("hugepages", {"driver__extendedResources": {"hugepages-2Mi": "1Gi"}}, []),
    ("cpu as extended", {"executor__extendedResources": {"cpu": "2"}}, ["spec.executor.extendedResources"]),
    ("an unprefixed resource", {"driver__extendedResources": {"gpu": "1"}}, ["spec.driver.extendedResources"]),
    (
        "Exists with a value",
        {"driver__tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]},
        ["spec.driver.tolerations[0].value"],
    ),
    (
        "tolerationSeconds without NoExecute",
        {"executor__tolerations": [{"key": "k", "tolerationSeconds": 30}]},
        ["spec.executor.tolerations[0].tolerationSeconds"],
    ),
    ("a bad node selector", {"executor__nodeSelector": {"pool": "a/b"}}, ["spec.executor.nodeSelector"]),
    (
        "memory overhead in sparkConf",
        {"sparkConf": {"spark.executor.memoryOverhead": "1g"}},
        ['spec.sparkConf["spark.executor.memoryOverhead"]'],
    ),
    (
        "pull secrets in sparkConf",
        {"sparkConf": {"spark.kubernetes.container.image.pullSecrets": "r"}},
        ['spec.sparkConf["spark.kubernetes.container.image.pullSecrets"]'],
    ),
]


@pytest.mark.parametrize(("case", "overrides", "fields"), IDENTITY_CASES, ids=[row[0] for row in IDENTITY_CASES])
def test_identity_credentials_and_scheduling(case: str, overrides: dict[str, Any], fields: list[str]) -> None:
    problems = validate_spec(spec(**overrides), TenantPolicy(service_accounts=frozenset({"a", "spark"})))
    assert len(problems) == len(fields), problems
    for problem, field in zip(problems, fields, strict=True):
        assert problem.field.startswith(field), problems  # (a key of a map follows in brackets)
        assert "; " in problem.message or "use" in problem.message, problem  # says what to do


def test_a_policy_refusal_names_the_field_the_account_was_set_in() -> None:
    problems = validate_spec(spec(serviceAccount={"name": "admin"}))
    assert _fields(problems) == ["spec.serviceAccount.name"]
    assert "tenantPolicy.serviceAccounts" in problems[0].message

"""Object storage: spec.state.s3 rendered as S3A settings plus Secret references, credentials kept out of
every ConfigMap and Spark setting, and node-local checkpoint locations refused unless allowed."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from headrace.core.validation import validate_spec
from headrace.render import identity, manifests

from .builders import attempt as make_attempt
from .builders import spec

S3 = {
    "endpoint": "http://s3.s3.svc:9000",
    "pathStyleAccess": True,
    "credentialsSecret": {"name": "bucket-keys", "accessKeyIdKey": "id", "secretAccessKeyKey": "key"},
}
SECRET_REFS = {
    "AWS_ACCESS_KEY_ID": {"secretKeyRef": {"name": "bucket-keys", "key": "id"}},
    "AWS_SECRET_ACCESS_KEY": {"secretKeyRef": {"name": "bucket-keys", "key": "key"}},
}


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("valueFrom", item.get("value")) for item in container.get("env", [])}


def test_s3_settings_become_s3a_conf_and_credentials_secret_refs_in_driver_and_executors() -> None:
    attempt = make_attempt(state__s3=S3)
    conf = manifests.spark_conf(attempt)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://s3.s3.svc:9000"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "us-east-1"
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"] == identity.PROVIDERS["secret"]
    driver = manifests.driver_pod_manifest(attempt)["spec"]["containers"][0]
    executor = manifests.executor_pod_template(attempt)["spec"]["containers"][0]
    for container in (driver, executor):
        env = _env(container)
        assert {name: env[name] for name in SECRET_REFS} == SECRET_REFS


def test_https_endpoint_keeps_tls_and_no_secret_leaves_the_default_chain() -> None:
    conf = manifests.spark_conf(
        make_attempt(state__s3={"endpoint": "https://minio.example:443", "region": "eu-west-1"})
    )
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "false"
    assert "spark.hadoop.fs.s3a.aws.credentials.provider" not in conf
    driver = manifests.driver_pod_manifest(make_attempt(state__s3={"region": "eu-west-1"}))["spec"]["containers"][0]
    assert "AWS_ACCESS_KEY_ID" not in _env(driver)


FS_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
FC_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"


def test_state_on_s3_gets_the_checkpoint_defaults_for_s3() -> None:
    conf = manifests.spark_conf(make_attempt(state__s3=S3))
    assert conf["spark.sql.streaming.checkpointFileManagerClass"] == FS_MANAGER
    assert conf["spark.hadoop.fs.s3a.performance.flags"] == "mkdir"


def test_spark_conf_replaces_the_checkpoint_defaults_for_s3() -> None:
    mine = {"spark.sql.streaming.checkpointFileManagerClass": FC_MANAGER, "spark.hadoop.fs.s3a.performance.flags": ""}
    assert validate_spec(spec(state__s3=S3, sparkConf=mine)) == []
    conf = manifests.spark_conf(make_attempt(state__s3=S3, sparkConf=mine))
    assert {key: conf[key] for key in mine} == mine


def test_without_s3_nothing_of_it_is_rendered() -> None:
    attempt = make_attempt()
    assert not [key for key in manifests.spark_conf(attempt) if "s3a" in key]
    assert "spark.sql.streaming.checkpointFileManagerClass" not in manifests.spark_conf(attempt)
    executor_env = manifests.executor_pod_template(attempt)["spec"]["containers"][0].get("env", [])
    assert not [item for item in executor_env if item["name"].startswith("AWS_")]


def test_no_secret_value_in_any_rendered_text() -> None:
    """Only the Secret's name and keys appear; the ConfigMap holds no credential key at all."""
    attempt = make_attempt(state__s3=S3)
    config_map = yaml.safe_dump(manifests.config_map(attempt))
    assert "AWS_SECRET_ACCESS_KEY" in config_map  # executors' template references the Secret...
    assert "secretKeyRef" in config_map  # ...by reference only
    assert "access.key" not in config_map and "secret.key" not in config_map


CREDENTIAL_KEYS = [
    "spark.hadoop.fs.s3a.access.key",
    "spark.hadoop.fs.s3a.secret.key",
    "spark.hadoop.fs.s3a.session.token",
    "spark.hadoop.fs.s3a.bucket.data.secret.key",
    "Spark.Hadoop.FS.S3A.Secret.Key",
]


@pytest.mark.parametrize("key", CREDENTIAL_KEYS)
def test_credentials_in_spark_conf_are_refused_naming_the_secret_field(key: str) -> None:
    problems = validate_spec(spec(sparkConf={key: "AKIA-not-here"}))
    assert [problem.field for problem in problems] == [f'spec.sparkConf["{key}"]']
    assert "spec.state.s3.credentialsSecret" in problems[0].message
    assert "AKIA-not-here" not in problems[0].message  # the value is never echoed


def test_s3a_settings_spec_state_s3_owns_are_refused_in_spark_conf() -> None:
    problems = validate_spec(spec(sparkConf={"spark.hadoop.fs.s3a.endpoint": "http://x"}))
    assert [str(problem) for problem in problems] == [
        'spec.sparkConf["spark.hadoop.fs.s3a.endpoint"]: spark.hadoop.fs.s3a.endpoint is owned by '
        "spec.state.s3.endpoint; set spec.state.s3.endpoint instead"
    ]


def test_driver_env_may_not_shadow_the_credentials_secret() -> None:
    problems = validate_spec(spec(state__s3=S3, driver__env=[{"name": "AWS_ACCESS_KEY_ID", "value": "x"}]))
    assert [problem.field for problem in problems] == ["spec.driver.env[0].name"]
    assert validate_spec(spec(driver__env=[{"name": "AWS_ACCESS_KEY_ID", "value": "x"}])) == []


def _on(volume: dict[str, Any], **state: Any) -> dict[str, Any]:
    return {
        "volumes": [{"name": "data", **volume}],
        "volumeMounts": [{"name": "data", "mountPath": "/mnt/data"}],
        "state": {"checkpointDir": "file:///mnt/data/state", **state},
    }


HOST_PATH = {"hostPath": {"path": "/var/lib/headrace"}}
NODE_LOCAL_CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("hostPath", _on(HOST_PATH), ["spec.state.checkpointDir"]),
    ("emptyDir", _on({"emptyDir": {}}), ["spec.state.checkpointDir"]),
    (
        "savepoints on hostPath",
        _on(HOST_PATH, savepointDir="file:///mnt/data/sp"),
        ["spec.state.checkpointDir", "spec.state.savepointDir"],
    ),
    ("hostPath allowed on a single node", _on(HOST_PATH, allowNodeLocal=True), []),
    ("a PVC", _on({"persistentVolumeClaim": {"claimName": "state"}}), []),
    ("no volume at all", {"state": {"checkpointDir": "file:///tmp/state"}}, ["spec.state.checkpointDir"]),
    (
        "no volume, even with allowNodeLocal",
        {"state": {"checkpointDir": "file:///tmp/state", "allowNodeLocal": True}},
        ["spec.state.checkpointDir"],
    ),
    ("s3a", {"state": {"checkpointDir": "s3a://bucket/c", "savepointDir": "s3a://bucket/s"}}, []),
]


@pytest.mark.parametrize(("case", "overrides", "fields"), NODE_LOCAL_CASES, ids=[c[0] for c in NODE_LOCAL_CASES])
def test_node_local_state_is_refused_unless_allowed(case: str, overrides: dict[str, Any], fields: list[str]) -> None:
    problems = validate_spec(spec(**overrides))
    assert [problem.field for problem in problems if problem.field.startswith("spec.state")] == fields, case
    for problem in problems:
        if problem.field.startswith("spec.state"):
            assert "s3a://" in problem.message  # the fix: object storage...
            if "on a volume" not in problem.message:
                assert "spec.state.allowNodeLocal: true" in problem.message  # ...or the explicit single-node opt-in

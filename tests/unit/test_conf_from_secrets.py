"""Secrets are referenced, never copied (issue 12, point 6): plain sparkConf settings that carry secrets are
refused naming spec.sparkConfFromSecrets; settings from Secrets reach the driver as secretKeyRef variables
that the runtime applies to the SparkConf, and never a ConfigMap, the pod spec or the status."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

from headrace.api import runtime_contract as contract
from headrace.core.planner import decide
from headrace.core.validation import carries_secret, validate_spec
from headrace.render import manifests
from headrace.runtime import sparkconf
from headrace.runtime.settings import SettingsError, settings_from_env

from .builders import T0, attempt, seen, spec, view

SECRET_KEYS = [
    "spark.ssl.keyStorePassword",
    "spark.ssl.ui.keyPassword",
    "spark.hadoop.javax.jdo.option.ConnectionPassword",  # Hive metastore database
    "spark.kafka.clusters.main.ssl.truststore.password",
    "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net",
    "spark.hadoop.fs.azure.account.oauth2.client.secret",
    "spark.hadoop.fs.gs.auth.service.account.private.key",
    "spark.sql.catalog.lake.token",  # Iceberg REST catalog
    "spark.sql.catalog.lake.credential",
    "spark.kafka.sasl.jaas.config",
    "spark.hadoop.fs.s3a.bucket.logs.secret.key",
    "SPARK.SSL.TRUSTSTOREPASSWORD",
]
PLAIN_KEYS = [
    "spark.ssl.keyStore",  # a path
    "spark.sql.catalog.lake.uri",
    "spark.sql.catalog.lake.token.refresh-enabled",  # Iceberg: a flag about tokens, not one
    "spark.hadoop.fs.gs.auth.service.account.private.key.id",
    "spark.redaction.regex",
    "spark.sql.session.timeZone",
]
REF = {"name": "catalog", "key": "password"}


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_a_plain_setting_carrying_a_secret_is_refused_naming_the_fix(key: str) -> None:
    assert carries_secret(key)
    (problem,) = validate_spec(spec(sparkConf={key: "hunter2"}))
    assert problem.field == f'spec.sparkConf["{key}"]'
    assert "spec.sparkConfFromSecrets" in problem.message
    assert "hunter2" not in str(problem)  # the value is never repeated (the message goes to status and Events)


@pytest.mark.parametrize("key", PLAIN_KEYS)
def test_settings_that_only_mention_secrets_are_allowed(key: str) -> None:
    assert not carries_secret(key)
    assert validate_spec(spec(sparkConf={key: "x"})) == []


def test_s3a_credentials_point_to_both_fixes() -> None:
    (problem,) = validate_spec(spec(sparkConf={"spark.hadoop.fs.s3a.secret.key": "k"}))
    assert "spec.state.s3.credentialsSecret" in problem.message and "spec.sparkConfFromSecrets" in problem.message


@pytest.mark.parametrize(
    ("from_secrets", "plain", "why"),
    [
        ({"spark.master": REF}, {}, "owned by"),
        ({"spark.authenticate.secret": REF}, {}, "owned by"),
        ({"spark.kubernetes.executor.podTemplateFile": REF}, {}, "owned by"),
        ({"spark.master ": REF}, {}, "not a Spark key"),
        ({"spark.x=y": REF}, {}, "not a Spark key"),
        ({"spark.ssl.keyPassword": REF}, {"spark.ssl.keyPassword": "x"}, "also set in spec.sparkConf"),
    ],
)
def test_the_sparkconf_key_rules_apply_to_settings_from_secrets(
    from_secrets: dict[str, dict[str, str]], plain: dict[str, str], why: str
) -> None:
    (key,) = from_secrets
    problems = [
        p for p in validate_spec(spec(sparkConfFromSecrets=from_secrets, sparkConf=plain)) if "FromSecrets" in p.field
    ]
    assert [problem.field for problem in problems] == [f'spec.sparkConfFromSecrets["{key}"]']
    assert why in problems[0].message


def test_the_secret_reference_is_checked_by_the_schema() -> None:
    with pytest.raises(ValueError, match="name"):
        spec(sparkConfFromSecrets={"spark.ssl.keyPassword": {"name": "Not A Name", "key": "k"}})
    with pytest.raises(ValueError, match="key"):
        spec(sparkConfFromSecrets={"spark.ssl.keyPassword": {"name": "tls"}})


def test_a_refused_spec_starts_no_driver_and_its_error_holds_no_value() -> None:
    refused = decide(view(spec(sparkConf={"spark.ssl.keyPassword": "hunter2"})), seen(), T0)
    assert refused.status.error is not None and 'spec.sparkConf["spark.ssl.keyPassword"]' in refused.status.error
    assert "hunter2" not in refused.status.model_dump_json()
    assert not any(type(action).__name__ == "EnsureDriver" for action in refused.actions)


def test_settings_from_secrets_render_as_secret_references_on_the_driver_only() -> None:
    refs = {"spark.ssl.keyPassword": {"name": "tls", "key": "pw"}, "spark.sql.catalog.lake.token": REF}
    rendered = attempt(sparkConfFromSecrets=refs)
    env = {item["name"]: item for item in manifests.driver_pod_manifest(rendered)["spec"]["containers"][0]["env"]}
    variables = json.loads(env[contract.ENV_SPARK_CONF_SECRETS]["value"])
    assert variables == {
        "spark.sql.catalog.lake.token": "HEADRACE_SPARK_CONF_SECRET_0",
        "spark.ssl.keyPassword": "HEADRACE_SPARK_CONF_SECRET_1",
    }
    assert env["HEADRACE_SPARK_CONF_SECRET_1"] == {
        "name": "HEADRACE_SPARK_CONF_SECRET_1",
        "valueFrom": {"secretKeyRef": {"name": "tls", "key": "pw"}},
    }
    config_map = manifests.config_map(rendered)
    assert "keyPassword" not in config_map["data"][manifests.SPARK_DEFAULTS]
    executor = yaml.safe_load(config_map["data"][manifests.EXECUTOR_TEMPLATE])
    assert contract.ENV_SPARK_CONF_SECRETS not in str(executor)  # executors get settings from the driver's RPC


def test_a_stored_spec_that_bypassed_validation_copies_no_secret_and_no_owned_key() -> None:
    rendered = attempt(
        sparkConf={"spark.ssl.keyPassword": "hunter2"}, sparkConfFromSecrets={"spark.master": REF, "spark.ok": REF}
    )
    assert "hunter2" not in json.dumps(manifests.attempt_objects(rendered))
    env = {item["name"]: item for item in manifests.driver_pod_manifest(rendered)["spec"]["containers"][0]["env"]}
    assert json.loads(env[contract.ENV_SPARK_CONF_SECRETS]["value"]) == {"spark.ok": "HEADRACE_SPARK_CONF_SECRET_0"}


def _runtime_env(**extra: str) -> dict[str, str]:
    mapping = {"spark.ssl.keyPassword": "HEADRACE_SPARK_CONF_SECRET_0"}
    return {contract.ENV_SPARK_CONF_SECRETS: json.dumps(mapping), **extra}


def test_the_runtime_applies_settings_from_secrets_and_never_prints_them(tmp_path: Path) -> None:
    settings = settings_from_env(_runtime_env(HEADRACE_SPARK_CONF_SECRET_0="hunter2\n"))
    assert "hunter2" not in repr(settings)
    source = tmp_path / "operator"
    source.mkdir()
    (source / "spark-defaults.conf").write_text("spark.ssl.keyPassword from-configmap\n")
    conf = sparkconf.prepare_conf_dir(settings, str(source), tmp_path / "runtime")
    assert conf["spark.ssl.keyPassword"] == "hunter2\n"  # exactly the Secret's value (tests/runtime: Spark keeps it)
    assert stat.S_IMODE((tmp_path / "runtime").stat().st_mode) == 0o700


@pytest.mark.parametrize(
    ("env", "named"),
    [
        (_runtime_env(), "HEADRACE_SPARK_CONF_SECRET_0"),  # the variable is missing
        ({contract.ENV_SPARK_CONF_SECRETS: "{"}, contract.ENV_SPARK_CONF_SECRETS),
        ({contract.ENV_SPARK_CONF_SECRETS: '{"spark.x": "PATH"}'}, contract.ENV_SPARK_CONF_SECRETS),
    ],
)
def test_a_malformed_secret_map_is_a_usage_error_naming_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        settings_from_env(env)

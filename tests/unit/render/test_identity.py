"""Identity of driver and executors: their ServiceAccounts (the user's own for both, or the two Headrace creates
with the user's metadata), each S3 credentials mode as rendered into both pods and the S3A provider chain, and
each GCS credentials mode as the Cloud Storage connector's settings and the key file mounted in both pods."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from headrace.render import identity, manifests
from tests.unit.builders import attempt

PROVIDER = "spark.hadoop.fs.s3a.aws.credentials.provider"
ROLE = "arn:aws:iam::123456789012:role/clicks"
WEB = {"credentialsMode": "webIdentity", "webIdentity": {"roleArn": ROLE, "stsEndpoint": "http://sts.sts.svc:9000"}}


def _driver(pod: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = pod["spec"]["containers"][0]
    return container


def _executor_template(**overrides: Any) -> dict[str, Any]:
    text = manifests.config_map(attempt(**overrides))["data"][manifests.EXECUTOR_TEMPLATE]
    template: dict[str, Any] = yaml.safe_load(text)
    return template


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


def _accounts(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == "ServiceAccount"}


def test_by_default_the_driver_and_the_executors_run_as_the_two_accounts_headrace_creates() -> None:
    app = attempt()
    conf = manifests.spark_conf(app)
    accounts = _accounts(manifests.app_objects(app))
    assert set(accounts) == {"clicks-spark", "clicks-executor"}
    assert accounts["clicks-executor"]["automountServiceAccountToken"] is False
    assert "annotations" not in accounts["clicks-spark"]["metadata"]
    assert manifests.driver_pod_manifest(app)["spec"]["serviceAccountName"] == "clicks-spark"
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == "clicks-spark"
    assert conf["spark.kubernetes.authenticate.executor.serviceAccountName"] == "clicks-executor"


def test_annotations_and_labels_go_on_both_accounts_headrace_creates_its_own_labels_winning() -> None:
    metadata = {
        "annotations": {"eks.amazonaws.com/role-arn": ROLE},
        "labels": {"team": "data", "headrace.dev/app": "other"},
    }
    accounts = _accounts(manifests.app_objects(attempt(serviceAccount=metadata)))
    for account in accounts.values():
        assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": ROLE}
        assert account["metadata"]["labels"]["team"] == "data"
        assert account["metadata"]["labels"]["headrace.dev/app"] == "clicks"
    assert accounts["clicks-executor"]["automountServiceAccountToken"] is False


def test_the_users_own_account_runs_driver_and_executors_and_no_account_is_made() -> None:
    for overrides in ({"serviceAccountName": "spark-irsa"}, {"serviceAccount": {"name": "spark-irsa"}}):
        app = attempt(**overrides)
        objects = manifests.app_objects(app)
        assert _accounts(objects) == {}
        binding = next(obj for obj in objects if obj["kind"] == "RoleBinding")
        assert binding["subjects"][0]["name"] == "spark-irsa"
        conf = manifests.spark_conf(app)
        assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == "spark-irsa"
        assert conf["spark.kubernetes.authenticate.executor.serviceAccountName"] == "spark-irsa"
        assert manifests.driver_pod_manifest(app)["spec"]["serviceAccountName"] == "spark-irsa"
        # Executors mount no API token: the account's RBAC rights (the driver's Role) never reach them.
        assert _executor_template(**overrides)["spec"]["automountServiceAccountToken"] is False


def test_web_identity_projects_a_token_for_the_audience_into_driver_and_executors() -> None:
    app = attempt(state__s3=WEB)
    assert manifests.spark_conf(app)[PROVIDER] == identity.PROVIDERS["webIdentity"]
    assert identity.PROVIDERS["webIdentity"].endswith("WebIdentityTokenFileCredentialsProvider")
    driver = manifests.driver_pod_manifest(app)
    template = _executor_template(state__s3=WEB)
    for pod in (driver, template):
        (volume,) = [item for item in pod["spec"]["volumes"] if item["name"] == identity.TOKEN_VOLUME]
        token = volume["projected"]["sources"][0]["serviceAccountToken"]
        assert token == {"audience": "sts.amazonaws.com", "expirationSeconds": 3600, "path": "token"}
        container = pod["spec"]["containers"][0]
        mounts = {mount["name"]: mount for mount in container["volumeMounts"]}
        assert mounts[identity.TOKEN_VOLUME] == {
            "name": identity.TOKEN_VOLUME,
            "mountPath": identity.TOKEN_DIR,
            "readOnly": True,
        }
        env = _env(container)
        assert env["AWS_ROLE_ARN"] == ROLE
        assert env["AWS_WEB_IDENTITY_TOKEN_FILE"] == f"{identity.TOKEN_DIR}/token"
        assert env["AWS_ENDPOINT_URL_STS"] == "http://sts.sts.svc:9000"
        assert env["AWS_REGION"] == "us-east-1"
        assert "AWS_ACCESS_KEY_ID" not in env


def test_web_identity_without_an_sts_endpoint_leaves_the_sdk_its_regional_sts() -> None:
    web = {"webIdentity": {"roleArn": ROLE, "audience": "minio", "expirationSeconds": 900}, "region": "eu-west-1"}
    app = attempt(state__s3=web)  # the mode follows from the block
    env = _env(_driver(manifests.driver_pod_manifest(app)))
    assert "AWS_ENDPOINT_URL_STS" not in env
    assert env["AWS_REGION"] == "eu-west-1"
    assert manifests.spark_conf(app)[PROVIDER] == identity.PROVIDERS["webIdentity"]
    volume = identity.volumes(app.spec)[0]
    assert volume["projected"]["sources"][0]["serviceAccountToken"]["audience"] == "minio"


def test_the_default_mode_sets_the_sdks_chain_and_nothing_else() -> None:
    app = attempt(state__s3={"credentialsMode": "default"})
    assert manifests.spark_conf(app)[PROVIDER].endswith("DefaultCredentialsProvider")
    driver = manifests.driver_pod_manifest(app)
    assert not {"AWS_ROLE_ARN", "AWS_ACCESS_KEY_ID"} & set(_env(_driver(driver)))
    assert identity.TOKEN_VOLUME not in {volume["name"] for volume in driver["spec"]["volumes"]}


def test_no_mode_leaves_the_connector_its_own_chain() -> None:
    app = attempt(state__s3={"endpoint": "http://s3:9000"})
    assert PROVIDER not in manifests.spark_conf(app)
    assert identity.credentials_env(app.spec) == []
    assert identity.volumes(app.spec) == []


def test_a_secrets_key_pair_reaches_the_executors_too() -> None:
    secret = {"credentialsSecret": {"name": "keys"}}
    env = _env(_executor_template(state__s3=secret)["spec"]["containers"][0])
    assert env["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "keys", "key": "accessKeyId"}}
    assert manifests.spark_conf(attempt(state__s3=secret))[PROVIDER] == identity.PROVIDERS["secret"]


def test_image_pull_secrets_reach_the_driver_pod_and_through_spark_every_executor() -> None:
    app = attempt(imagePullSecrets=[{"name": "registry"}, {"name": "mirror"}], imagePullPolicy="Always")
    driver = manifests.driver_pod_manifest(app)
    assert driver["spec"]["imagePullSecrets"] == [{"name": "registry"}, {"name": "mirror"}]
    assert _driver(driver)["imagePullPolicy"] == "Always"
    conf = manifests.spark_conf(app)
    assert conf["spark.kubernetes.container.image.pullSecrets"] == "registry,mirror"
    assert conf["spark.kubernetes.container.image.pullPolicy"] == "Always"
    # Not in the executor template as well: Spark would add them a second time.
    assert "imagePullSecrets" not in _executor_template(imagePullSecrets=[{"name": "registry"}])["spec"]
    plain = attempt()
    assert "imagePullSecrets" not in manifests.driver_pod_manifest(plain)["spec"]
    assert "spark.kubernetes.container.image.pullSecrets" not in manifests.spark_conf(plain)


GCS_STATE = {"state__checkpointDir": "gs://clicks-state/checkpoints", "state__savepointDir": "gs://clicks-state/sp"}


def _gcs_conf(conf: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in conf.items() if key.startswith("spark.hadoop.fs.gs.")}


def test_a_gcs_key_secret_is_mounted_as_the_connectors_key_file_in_driver_and_executors() -> None:
    gcs = {"serviceAccountKeySecret": {"name": "gcs-key", "key": "sa.json"}, "projectId": "clicks-prod"}
    app = attempt(**GCS_STATE, state__gcs=gcs)
    conf = manifests.spark_conf(app)
    assert conf[identity.GCS_AUTH_TYPE] == "SERVICE_ACCOUNT_JSON_KEYFILE"
    assert conf[identity.GCS_KEY_FILE_SETTING] == identity.GCS_KEY_FILE == "/var/run/secrets/headrace.dev/gcs/key.json"
    assert conf["spark.hadoop.fs.gs.project.id"] == "clicks-prod"
    assert "spark.hadoop.fs.gs.storage.root.url" not in conf  # Google's own endpoint
    for pod in (manifests.driver_pod_manifest(app), _executor_template(**GCS_STATE, state__gcs=gcs)):
        (volume,) = [item for item in pod["spec"]["volumes"] if item["name"] == identity.GCS_KEY_VOLUME]
        assert volume["secret"] == {
            "secretName": "gcs-key",
            "items": [{"key": "sa.json", "path": "key.json"}],
            "defaultMode": 0o444,
        }
        container = pod["spec"]["containers"][0]
        mounts = {mount["name"]: mount for mount in container["volumeMounts"]}
        assert mounts[identity.GCS_KEY_VOLUME] == {
            "name": identity.GCS_KEY_VOLUME,
            "mountPath": identity.GCS_KEY_DIR,
            "readOnly": True,
        }
        assert not [item for item in container["env"] if "valueFrom" in item and "gcs-key" in str(item)]
        assert identity.TOKEN_VOLUME not in mounts


def test_default_gcs_credentials_are_application_default_with_nothing_mounted() -> None:
    for overrides in ({"state__gcs": {"credentialsMode": "default"}}, {}):  # with the block, or gs:// without it
        app = attempt(**GCS_STATE, **overrides)
        conf = manifests.spark_conf(app)
        assert conf[identity.GCS_AUTH_TYPE] == "APPLICATION_DEFAULT"
        assert identity.GCS_KEY_FILE_SETTING not in conf
        assert conf["spark.hadoop.fs.gs.impl"] == "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem"
        assert conf["spark.hadoop.fs.AbstractFileSystem.gs.impl"] == "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS"
        assert conf["spark.hadoop.fs.gs.block.size"] == "67108864"  # Hadoop's "64m" breaks Google's connector
        assert manifests.GCS_MOVE_SETTING not in conf  # Cloud Storage's move API stays on
        assert identity.volumes(app.spec) == []


def test_the_emulator_mode_sends_no_credentials_to_its_endpoint_and_renames_by_rewrite() -> None:
    gcs = {"endpoint": "http://gcs.gcs.svc:4443/", "credentialsMode": "unauthenticatedEmulator"}
    conf = manifests.spark_conf(attempt(**GCS_STATE, state__gcs=gcs))
    assert conf[identity.GCS_AUTH_TYPE] == "UNAUTHENTICATED"
    assert conf["spark.hadoop.fs.gs.storage.root.url"] == "http://gcs.gcs.svc:4443/"
    assert conf[manifests.GCS_MOVE_SETTING] == "false"
    assert conf["spark.sql.streaming.checkpointFileManagerClass"].endswith("FileSystemBasedCheckpointFileManager")


def test_state_on_s3_alone_renders_nothing_of_the_gcs_connector() -> None:
    assert _gcs_conf(manifests.spark_conf(attempt(state__s3={"credentialsMode": "default"}))) == {}


def test_the_users_sparkconf_replaces_a_gcs_default() -> None:
    conf = manifests.spark_conf(attempt(**GCS_STATE, sparkConf={"spark.hadoop.fs.gs.block.size": "134217728"}))
    assert conf["spark.hadoop.fs.gs.block.size"] == "134217728"


AZURE_HOST = "clicks.dfs.core.windows.net"
AZURE_STATE = {
    "state__checkpointDir": f"abfss://state@{AZURE_HOST}/checkpoints",
    "state__savepointDir": f"abfss://state@{AZURE_HOST}/savepoints",
}
AZURE_ID = "0f8fad5b-d9cb-469f-a165-70867728950e"
AZURE_TENANT = "7c9e6679-7425-40de-944b-e07fc1f90ae7"


def _azure_conf(conf: dict[str, str]) -> dict[str, str]:
    """The ABFS settings of the state account, without its suffix; and the global ones, as `*<option>`."""
    prefix, suffix = "spark.hadoop.fs.azure.", f".{AZURE_HOST}"
    return {
        (key.removeprefix(prefix).removesuffix(suffix) if key.endswith(suffix) else "*" + key.removeprefix(prefix)): v
        for key, v in conf.items()
        if key.startswith(prefix)
    }


AZURE_MODE_CASES: list[tuple[str, dict[str, Any], dict[str, str]]] = [
    (
        "an account key Secret",
        {"accountKeySecret": {"name": "azure-key"}},
        {
            "account.hns.enabled": "true",
            "account.auth.type": "SharedKey",
            "account.keyprovider": "org.apache.hadoop.fs.azurebfs.services.ShellDecryptionKeyProvider",
            "shellkeyprovider.script": "cat",
            "account.key": "/var/run/secrets/headrace/azure///accountKey",
        },
    ),
    (
        "workload identity",
        {"workloadIdentity": {"clientId": AZURE_ID, "tenantId": AZURE_TENANT}},
        {
            "account.hns.enabled": "true",
            "account.auth.type": "OAuth",
            "account.oauth.provider.type": "org.apache.hadoop.fs.azurebfs.oauth2.WorkloadIdentityTokenProvider",
            "account.oauth2.client.id": AZURE_ID,
            "account.oauth2.msi.tenant": AZURE_TENANT,
            "account.oauth2.msi.authority": "https://login.microsoftonline.com/",
            "account.oauth2.token.file": "/var/run/secrets/headrace.dev/azure-identity/token",
        },
    ),
    (
        "the node's managed identity (no block at all)",
        {},
        {
            "account.hns.enabled": "true",
            "account.auth.type": "OAuth",
            "account.oauth.provider.type": "org.apache.hadoop.fs.azurebfs.oauth2.MsiTokenProvider",
        },
    ),
    (
        "a user-assigned managed identity on a flat account",
        {"namespace": "flat", "managedIdentity": {"clientId": AZURE_ID}},
        {
            "account.hns.enabled": "false",
            "fns.account.service.type": "BLOB",
            "account.auth.type": "OAuth",
            "account.oauth.provider.type": "org.apache.hadoop.fs.azurebfs.oauth2.MsiTokenProvider",
            "account.oauth2.client.id": AZURE_ID,
        },
    ),
    (
        "an emulator over TLS",
        {"endpoint": "https://azurite.azurite.svc:10000/", "namespace": "flat", "accountKeySecret": {"name": "k"}},
        {
            "account.hns.enabled": "false",
            "fns.account.service.type": "BLOB",
            "abfs.endpoint": "azurite.azurite.svc:10000",
            "account.auth.type": "SharedKey",
            "account.keyprovider": "org.apache.hadoop.fs.azurebfs.services.ShellDecryptionKeyProvider",
            "shellkeyprovider.script": "cat",
            "account.key": "/var/run/secrets/headrace/azure///accountKey",
        },
    ),
]


@pytest.mark.parametrize(("case", "azure", "expected"), AZURE_MODE_CASES, ids=[row[0] for row in AZURE_MODE_CASES])
def test_each_azure_mode_is_the_connectors_per_account_settings(
    case: str, azure: dict[str, Any], expected: dict[str, str]
) -> None:
    app = attempt(**AZURE_STATE, **({"state__azure": azure} if azure else {}))
    conf = manifests.spark_conf(app)
    assert _azure_conf(conf) == expected, case
    assert conf["spark.sql.streaming.checkpointFileManagerClass"].endswith("FileSystemBasedCheckpointFileManager")


def test_a_plain_http_emulator_turns_tls_off_for_abfs_uris_and_uses_the_jdk_client() -> None:
    azure = {"endpoint": "http://127.0.0.1:10000", "namespace": "flat", "accountKeySecret": {"name": "k"}}
    state = {"state__checkpointDir": "abfs://state@devstoreaccount1.dfs.core.windows.net/c", "state__azure": azure}
    conf = manifests.spark_conf(attempt(**state))
    account = ".devstoreaccount1.dfs.core.windows.net"
    assert conf["spark.hadoop.fs.azure.always.use.https"] == "false"  # global: the connector has no per-account key
    assert conf[f"spark.hadoop.fs.azure.abfs.endpoint{account}"] == "127.0.0.1:10000"
    assert conf[f"spark.hadoop.fs.azure.networking.library{account}"] == "JDK_HTTP_URL_CONNECTION"


def test_the_key_settings_value_passes_the_key_providers_base64_check() -> None:
    value = identity.AZURE_KEY_SETTING_VALUE
    assert len(value) % 4 == 0
    assert set(value) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
    assert re.sub("/+", "/", value) == identity.AZURE_KEY_FILE  # one file to the kernel


def test_an_azure_key_secret_is_mounted_as_one_file_in_driver_and_executors() -> None:
    azure = {"accountKeySecret": {"name": "azure-key", "key": "key1"}}
    app = attempt(**AZURE_STATE, state__azure=azure)
    for pod in (manifests.driver_pod_manifest(app), _executor_template(**AZURE_STATE, state__azure=azure)):
        (volume,) = [item for item in pod["spec"]["volumes"] if item["name"] == identity.AZURE_KEY_VOLUME]
        assert volume["secret"] == {
            "secretName": "azure-key",
            "items": [{"key": "key1", "path": "accountKey"}],
            "defaultMode": 0o444,
        }
        container = pod["spec"]["containers"][0]
        mounts = {mount["name"]: mount for mount in container["volumeMounts"]}
        assert mounts[identity.AZURE_KEY_VOLUME] == {
            "name": identity.AZURE_KEY_VOLUME,
            "mountPath": "/var/run/secrets/headrace/azure",
            "readOnly": True,
        }
        assert "azure-key" not in str(container["env"])  # the key is no environment variable
    assert "azure-key" not in str(manifests.config_map(app)["data"][manifests.SPARK_DEFAULTS])


def test_workload_identity_projects_a_token_for_entra_id_in_driver_and_executors() -> None:
    azure = {"workloadIdentity": {"clientId": AZURE_ID, "tenantId": AZURE_TENANT, "expirationSeconds": 7200}}
    app = attempt(**AZURE_STATE, state__azure=azure)
    for pod in (manifests.driver_pod_manifest(app), _executor_template(**AZURE_STATE, state__azure=azure)):
        (volume,) = [item for item in pod["spec"]["volumes"] if item["name"] == identity.AZURE_TOKEN_VOLUME]
        token = {"audience": "api://AzureADTokenExchange", "expirationSeconds": 7200, "path": "token"}
        assert volume["projected"] == {"sources": [{"serviceAccountToken": token}]}
        mounts = {mount["name"]: mount for mount in pod["spec"]["containers"][0]["volumeMounts"]}
        assert mounts[identity.AZURE_TOKEN_VOLUME]["mountPath"] == identity.AZURE_TOKEN_DIR


def test_managed_identity_mounts_nothing_and_state_elsewhere_renders_no_abfs_setting() -> None:
    assert identity.volumes(attempt(**AZURE_STATE).spec) == []
    assert _azure_conf(manifests.spark_conf(attempt(state__s3={"credentialsMode": "default"}))) == {}


def test_two_state_accounts_each_get_the_settings_and_other_accounts_stay_the_users() -> None:
    state = {
        "state__checkpointDir": f"abfss://state@{AZURE_HOST}/checkpoints",
        "state__savepointDir": "abfss://sp@archive.dfs.core.windows.net/savepoints",
    }
    other = "spark.hadoop.fs.azure.account.auth.type.input.dfs.core.windows.net"
    owned = f"spark.hadoop.fs.azure.account.auth.type.{AZURE_HOST}"
    conf = manifests.spark_conf(attempt(**state, sparkConf={other: "SharedKey", owned: "SharedKey"}))
    assert conf[owned] == "OAuth"  # a spec that bypassed validation does not replace the mode
    assert conf["spark.hadoop.fs.azure.account.auth.type.archive.dfs.core.windows.net"] == "OAuth"
    assert conf[other] == "SharedKey"

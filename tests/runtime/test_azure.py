"""Azure storage against a real Blob API server: the image's pinned ABFS connector (docker/azure), configured with
exactly the settings the operator renders for ``spec.state.azure`` (flat namespace, an emulator endpoint, the account
key read from its mounted file through the shell key provider), checkpoints a stateful query to abfs://, a second run
replays the first's uncommitted batch and continues from that state, and the runtime's HadoopFileSystem copies the
checkpoint server-side (Copy Blob through the connector's Blob client: the savepoint path) and deletes the copy
(disposal). The server is Azurite's Blob service, which checks the Shared Key signature of every request, and over
HTTPS a bearer token's lifetime, issuer and audience: the OAuth modes (workloadIdentity, managedIdentity) fetch their
tokens from stand-ins of Entra ID and the instance metadata service. Not proven here: the DFS endpoint of a
hierarchical-namespace account (Azurite has none), Entra ID and the metadata service themselves."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from headrace.render import identity
from testbed import azure
from testbed.pki import ClusterPKI

from .store_cases import check_replayed_and_copied, rendered_store_conf, run_auth_job, run_state_job

pytestmark = pytest.mark.spark


def _store_conf(checkpoint: str, state: dict[str, object]) -> dict[str, str]:
    """The settings the operator renders for abfs:// state with spec.state.azure `state`, and no others."""
    return rendered_store_conf(checkpoint, "azure", state, "fs.azure.")


def base64_shaped(path: Path) -> str:
    """`path` with as many slashes before its name as the key provider's base64 check wants, as the operator renders
    the mounted file (the test's directory has no dot and no character outside base64's either)."""
    text = str(path)
    assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"), text
    return f"{path.parent}{'/' * (1 + (-len(text)) % 4)}{path.name}"


def test_checkpoint_on_azure_survives_a_restart_and_copies(tmp_path: Path) -> None:
    key_dir = Path("/tmp") / f"headraceAzureKey{uuid.uuid4().hex}"  # the test's tmp_path has - and _
    key_dir.mkdir()
    with contextlib.ExitStack() as cleanup, azure.Azurite() as server:
        cleanup.callback(shutil.rmtree, key_dir, True)
        checkpoint, copy = server.uri("checkpoints/q"), server.uri("savepoints/sp-1")
        state = {"endpoint": server.endpoint, "namespace": "flat", "accountKeySecret": {"name": "azure-key"}}
        store_conf = _store_conf(checkpoint, state)
        key_setting = f"spark.hadoop.fs.azure.account.key.{azure.ACCOUNT_HOST}"
        assert store_conf[key_setting] == identity.AZURE_KEY_SETTING_VALUE  # in the pods: the Secret's file
        assert azure.ACCOUNT_KEY not in json.dumps(store_conf)
        key_file = key_dir / "accountKey"
        key_file.write_text(azure.ACCOUNT_KEY + "\n")  # as a Secret made from a file often is
        store_conf[key_setting] = base64_shaped(key_file)
        env = {**os.environ, "STATE_CONF": json.dumps(store_conf), "DISPOSE_COPY": "1"}
        outcome = run_state_job(tmp_path, server.endpoint, checkpoint, copy, jars=azure.connector_jars(), env=env)
        names = server.names("checkpoints/q/")
        assert server.names("savepoints/sp-1/") == []  # disposed of through Hadoop's FileSystem
    check_replayed_and_copied(outcome, names, disposed=True)  # copied by Copy Blob


CLIENT_ID = "0f8fad5b-d9cb-469f-a165-70867728950e"
TENANT_ID = "7c9e6679-7425-40de-944b-e07fc1f90ae7"


MANAGED_ACCOUNT = "headracemanaged"  # a second account of the emulator, for the second mode


def test_both_oauth_modes_fetch_their_tokens_the_way_the_connector_does(tmp_path: Path) -> None:
    """One session with the settings the operator renders for two accounts (they are per account, so they do not
    mix): workloadIdentity on one, where the connector reads the ServiceAccount token at the path the operator
    renders (here a local file) and exchanges it at the Entra ID authority (a stand-in) for an access token; and
    managedIdentity with a user-assigned identity on the other, where it asks the instance metadata service (a
    stand-in, at a managed identity endpoint the operator does not render: here the test sets it). Either way it
    sends the token to Azurite over HTTPS (the connector's default Apache HTTP client; the JVM trusts the test's CA),
    which checks its lifetime, issuer and audience."""
    pki = ClusterPKI.create(tmp_path / "pki")
    cert, key = pki.issue_serving_cert("azurite", ip_addresses=["127.0.0.1"])
    truststore = tmp_path / "trust.p12"
    keytool = ["keytool", "-importcert", "-noprompt", "-alias", "ca", "-file", str(pki.ca_cert)]
    keytool += ["-keystore", str(truststore), "-storetype", "PKCS12", "-storepass", "changeit"]
    subprocess.run(keytool, check=True, capture_output=True)
    service_account_token = "eyJhbGciOiJSUzI1NiJ9.headrace-test-service-account-token.c2lnbmF0dXJl"
    token_file = tmp_path / "token"
    token_file.write_text(service_account_token)
    accounts = (azure.ACCOUNT, MANAGED_ACCOUNT)
    with (
        azure.EntraTokens(service_account_token, CLIENT_ID, TENANT_ID) as entra,
        azure.Azurite(tls=(pki.ca_cert, cert, key), accounts=accounts) as server,
    ):
        workload, managed = server.uri("auth/workload"), server.uri("auth/managed", MANAGED_ACCOUNT)
        identity_block = {"clientId": CLIENT_ID, "tenantId": TENANT_ID, "authority": entra.authority}
        common = {"endpoint": server.endpoint, "namespace": "flat"}
        store_conf = {
            **_store_conf(workload, {**common, "workloadIdentity": identity_block}),
            **_store_conf(managed, {**common, "managedIdentity": {"clientId": CLIENT_ID}}),
        }
        token_setting = f"spark.hadoop.fs.azure.account.oauth2.token.file.{azure.ACCOUNT_HOST}"
        assert store_conf[token_setting] == identity.AZURE_TOKEN_FILE  # in the pods: the projected token
        store_conf[token_setting] = str(token_file)
        managed_host = f"{MANAGED_ACCOUNT}.dfs.core.windows.net"
        store_conf[f"spark.hadoop.fs.azure.account.oauth2.msi.endpoint.{managed_host}"] = entra.msi_endpoint
        env = {**os.environ, "STATE_CONF": json.dumps(store_conf)}
        env["JAVA_TOOL_OPTIONS"] = (
            f"-Djavax.net.ssl.trustStore={truststore} -Djavax.net.ssl.trustStorePassword=changeit"
        )
        stdout = run_auth_job(tmp_path, f"{workload},{managed}", jars=azure.connector_jars(), env=env)
        assert stdout.count("ROWS 2") == 2, stdout
        assert server.names("auth/workload/")
        assert server.names("auth/managed/", MANAGED_ACCOUNT)
        assert not server.names("auth/managed/")  # each target in its own account
    assert set(entra.grants) == {f"{CLIENT_ID} {TENANT_ID}", f"managed {CLIENT_ID}"}, entra.grants
    assert entra.refused == []

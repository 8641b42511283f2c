"""Google Cloud Storage against a real GCS API server: the image's pinned Cloud Storage connector (docker/gcs),
configured with exactly the settings the operator renders for ``spec.state.gcs``, checkpoints a stateful query to
gs://, a second run replays the first's uncommitted batch and continues from that state, and the runtime's
HadoopFileSystem copies the checkpoint on GCS server-side (the savepoint path) and deletes the copy (disposal). The
server is the testbed's fake-gcs-server, which checks no credentials: the credentials modes that fetch a token (a
service account key, the metadata server of Application Default Credentials) are proven against stand-ins of
Google's token sources."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from headrace.render import identity, manifests
from testbed import gcs

from .store_cases import check_replayed_and_copied, rendered_store_conf, run_auth_job, run_state_job

pytestmark = pytest.mark.spark


def _store_conf(checkpoint: str, state: dict[str, object]) -> dict[str, str]:
    """The settings the operator renders for gs:// state with spec.state.gcs `state`, and no others."""
    return rendered_store_conf(checkpoint, "gcs", state, "fs.gs.", "fs.AbstractFileSystem.gs.")


def test_checkpoint_on_gcs_survives_a_restart_and_copies(tmp_path: Path) -> None:
    with gcs.FakeGcs() as server:
        checkpoint, copy = f"gs://{server.bucket}/checkpoints/q", f"gs://{server.bucket}/savepoints/sp-1"
        state = {"endpoint": server.endpoint, "credentialsMode": "unauthenticatedEmulator"}
        env = {**os.environ, "STATE_CONF": json.dumps(_store_conf(checkpoint, state)), "DISPOSE_COPY": "1"}
        outcome = run_state_job(tmp_path, server.endpoint, checkpoint, copy, jars=gcs.connector_jars(), env=env)
        names = server.names("checkpoints/q/")
        assert server.names("savepoints/sp-1/") == []  # disposed of through Hadoop's FileSystem
    check_replayed_and_copied(outcome, names, disposed=True)


@pytest.mark.parametrize("mode", ["serviceAccountKeySecret", "default"])
def test_a_credentials_mode_fetches_its_token_the_way_the_connector_does(mode: str, tmp_path: Path) -> None:
    """serviceAccountKeySecret: the connector reads the key file at the path the operator renders (here a local
    copy) and signs a JWT bearer grant with it; default: Application Default Credentials find the metadata server
    (GCE_METADATA_HOST, as GKE's is found at its fixed address) and take its token."""
    with gcs.FakeGcs() as server, gcs.GoogleTokens() as tokens:
        target = f"gs://{server.bucket}/auth/{mode}"
        key = {"serviceAccountKeySecret": {"name": "gcs-key"}} if mode == "serviceAccountKeySecret" else {}
        store_conf = _store_conf(target, {"endpoint": server.endpoint, "credentialsMode": mode, **key})
        env = {name: value for name, value in os.environ.items() if name != "GOOGLE_APPLICATION_CREDENTIALS"}
        env["CLOUDSDK_CONFIG"] = str(tmp_path / "gcloud")  # no gcloud credentials of this machine's user
        if key:
            assert store_conf[identity.GCS_KEY_FILE_SETTING] == identity.GCS_KEY_FILE  # in the pods: the Secret
            key_file = tmp_path / "key.json"
            key_file.write_text(json.dumps(tokens.service_account_key()))
            store_conf[identity.GCS_KEY_FILE_SETTING] = str(key_file)
            expected = f"jwt-bearer {gcs.SERVICE_ACCOUNT}"
        else:
            env["GCE_METADATA_HOST"] = tokens.metadata_host
            expected = "metadata"
        store_conf[manifests.GCS_MOVE_SETTING] = "false"  # the emulator lacks objects.moveTo (Cloud Storage has it)
        env["STATE_CONF"] = json.dumps(store_conf)
        stdout = run_auth_job(tmp_path, target, jars=gcs.connector_jars(), env=env)
        assert "ROWS 2" in stdout
        assert server.names(f"auth/{mode}/")
    assert expected in tokens.grants, tokens.grants
    assert set(tokens.grants) == {expected}
    assert tokens.refused == []

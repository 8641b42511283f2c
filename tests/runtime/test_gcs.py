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
import subprocess
import sys
from pathlib import Path

import pytest

from headrace.render import identity, manifests
from testbed import gcs
from tests.unit.builders import attempt

pytestmark = pytest.mark.spark
JOB = Path(__file__).parent / "jobs" / "object_store_state.py"
AUTH_JOB = Path(__file__).parent / "jobs" / "object_store_auth.py"


def _store_conf(checkpoint: str, state: dict[str, object]) -> dict[str, str]:
    """The settings the operator renders for gs:// state with spec.state.gcs `state`, and no others."""
    rendered = manifests.spark_conf(attempt(state__checkpointDir=checkpoint, state__gcs=state))
    return {
        key: value
        for key, value in rendered.items()
        if key.startswith(("spark.hadoop.fs.gs.", "spark.hadoop.fs.AbstractFileSystem.gs."))
        or key == "spark.sql.streaming.checkpointFileManagerClass"
    }


def test_checkpoint_on_gcs_survives_a_restart_and_copies(tmp_path: Path) -> None:
    jars = gcs.connector_jars()
    inputs = tmp_path / "input"
    inputs.mkdir()
    (inputs / "a.txt").write_text("a\nb\n")
    (inputs / "b.txt").write_text("a\n")
    result = tmp_path / "result.json"
    with gcs.FakeGcs() as server:
        checkpoint, copy = f"gs://{server.bucket}/checkpoints/q", f"gs://{server.bucket}/savepoints/sp-1"
        state = {"endpoint": server.endpoint, "credentialsMode": "unauthenticatedEmulator"}
        store_conf = _store_conf(checkpoint, state)
        env = {**os.environ, "STATE_CONF": json.dumps(store_conf), "DISPOSE_COPY": "1"}
        command = [sys.executable, str(JOB), server.endpoint, checkpoint, copy, str(inputs), str(result)]
        completed = subprocess.run(
            [*command, ",".join(map(str, jars))], env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert completed.returncode == 0, completed.stderr[-4000:]
        outcome = json.loads(result.read_text())
        names = server.names("checkpoints/q/")
        assert server.names("savepoints/sp-1/") == []  # disposed of through Hadoop's FileSystem
        assert "checkpoints/q/commits/1" in names
    assert outcome["runs"][0] == {"a": 2, "b": 1}
    assert outcome["runs"][1] == {"a": 3, "b": 3}  # counted on from the state the first run left on GCS
    # the uncommitted batch replayed over its existing state files, with the same counts, then the new file once
    assert outcome["batches"] == [{"a": 2, "b": 1}, {"a": 2, "b": 1}, {"a": 3, "b": 3}]
    assert outcome["missing"] == ["offsets/999"]  # asked for, never there
    assert outcome["copied"] == outcome["files"]
    assert outcome["copy_left"] is False
    assert outcome["server_side"] == len(outcome["files"])  # every file copied by the store (the connector's copy)
    assert any(name.startswith("state/") for name in outcome["files"])
    assert {f"checkpoints/q/{name}" for name in outcome["files"]} <= set(names)


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
        jars = ",".join(map(str, gcs.connector_jars()))
        completed = subprocess.run(
            [sys.executable, str(AUTH_JOB), target, jars],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert completed.returncode == 0, completed.stderr[-4000:]
        assert "ROWS 2" in completed.stdout
        assert server.names(f"auth/{mode}/")
    assert expected in tokens.grants, tokens.grants
    assert set(tokens.grants) == {expected}
    assert tokens.refused == []

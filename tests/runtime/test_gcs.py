"""Google Cloud Storage against a real GCS API server: the image's pinned Cloud Storage connector (docker/gcs),
configured with exactly the settings the operator renders for ``spec.state.gcs``, checkpoints a stateful query to
gs://, a second run replays the first's uncommitted batch and continues from that state, and the runtime's
HadoopFileSystem copies the checkpoint on GCS (the savepoint path). The server is the testbed's fake-gcs-server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from headrace.render import manifests
from testbed import gcs
from tests.unit.builders import attempt

pytestmark = pytest.mark.spark
JOB = Path(__file__).parent / "jobs" / "object_store_state.py"


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
        rendered = manifests.spark_conf(attempt(state__checkpointDir=checkpoint, state__gcs=state))
        store_conf = {
            key: value
            for key, value in rendered.items()
            if key.startswith(("spark.hadoop.fs.gs.", "spark.hadoop.fs.AbstractFileSystem.gs."))
            or key == "spark.sql.streaming.checkpointFileManagerClass"
        }
        env = {**os.environ, "STATE_CONF": json.dumps(store_conf)}
        command = [sys.executable, str(JOB), server.endpoint, checkpoint, copy, str(inputs), str(result)]
        completed = subprocess.run(
            [*command, ",".join(map(str, jars))], env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert completed.returncode == 0, completed.stderr[-4000:]
        outcome = json.loads(result.read_text())
        names = server.names("checkpoints/q/")
        assert "checkpoints/q/commits/1" in names
    assert outcome["runs"][0] == {"a": 2, "b": 1}
    assert outcome["runs"][1] == {"a": 3, "b": 3}  # counted on from the state the first run left on GCS
    # the uncommitted batch replayed over its existing state files, with the same counts, then the new file once
    assert outcome["batches"] == [{"a": 2, "b": 1}, {"a": 2, "b": 1}, {"a": 3, "b": 3}]
    assert outcome["missing"] == ["offsets/999"]  # asked for, never there
    assert outcome["copied"] == outcome["files"]
    assert outcome["server_side"] == 0  # through Hadoop: the bytes pass through the driver on GCS
    assert any(name.startswith("state/") for name in outcome["files"])
    assert {f"checkpoints/q/{name}" for name in outcome["files"]} <= set(names)

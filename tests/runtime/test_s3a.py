"""S3A against a real S3 server: the image's pinned hadoop-aws + AWS SDK modules (docker/s3a) checkpoint a
stateful query to s3a:// with the operator's S3 checkpoint defaults, a second run replays the first's uncommitted
batch and continues from that state, and the runtime's HadoopFileSystem copies the checkpoint on S3 (the savepoint
path). The server is the testbed's versitygw over a temporary directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import objectstore

pytestmark = pytest.mark.spark
JOB = Path(__file__).parent / "jobs" / "object_store_state.py"


def test_checkpoint_on_s3_survives_a_restart_and_copies(tmp_path: Path) -> None:
    jars = objectstore.s3a_jars()
    inputs = tmp_path / "input"
    inputs.mkdir()
    (inputs / "a.txt").write_text("a\nb\n")
    (inputs / "b.txt").write_text("a\n")
    result = tmp_path / "result.json"
    with objectstore.ObjectStore() as store:
        env = {**os.environ, "AWS_ACCESS_KEY_ID": store.access_key, "AWS_SECRET_ACCESS_KEY": store.secret_key}
        checkpoint, copy = f"s3a://{store.bucket}/checkpoints/q", f"s3a://{store.bucket}/savepoints/sp-1"
        command = [sys.executable, str(JOB), store.endpoint, checkpoint, copy, str(inputs), str(result)]
        completed = subprocess.run(
            [*command, ",".join(map(str, jars))], env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert completed.returncode == 0, completed.stderr[-4000:]
        outcome = json.loads(result.read_text())
        keys = store.client().list_keys(store.bucket, "checkpoints/q/")
        assert keys, "nothing was written to the bucket"
        assert (store.root / store.bucket / "checkpoints" / "q" / "commits" / "1").is_file()
    assert outcome["runs"][0] == {"a": 2, "b": 1}
    assert outcome["runs"][1] == {"a": 3, "b": 3}  # counted on from the state the first run left on S3
    # the uncommitted batch replayed over its existing state files (kept, not replaced: the operator's S3
    # checkpoint defaults), with the same counts, then the new file counted once
    assert outcome["batches"] == [{"a": 2, "b": 1}, {"a": 2, "b": 1}, {"a": 3, "b": 3}]
    assert outcome["missing"] == ["offsets/999"]  # asked for, never there
    assert outcome["copied"] == outcome["files"]
    assert outcome["server_side"] == len(outcome["files"])  # every file copied by the server (CopyObject)
    assert any(name.startswith("state/") for name in outcome["files"])
    assert {f"checkpoints/q/{name}" for name in outcome["files"]} <= set(keys)

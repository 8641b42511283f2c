"""S3A against a real S3 server: the image's pinned hadoop-aws + AWS SDK modules (docker/s3a) checkpoint a
stateful query to s3a:// with the operator's S3 checkpoint defaults, a second run replays the first's uncommitted
batch and continues from that state, and the runtime's HadoopFileSystem copies the checkpoint on S3 (the savepoint
path). The server is the testbed's versitygw over a temporary directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed import objectstore

from .store_cases import check_replayed_and_copied, run_state_job

pytestmark = pytest.mark.spark


def test_checkpoint_on_s3_survives_a_restart_and_copies(tmp_path: Path) -> None:
    with objectstore.ObjectStore() as store:
        env = {**os.environ, "AWS_ACCESS_KEY_ID": store.access_key, "AWS_SECRET_ACCESS_KEY": store.secret_key}
        checkpoint, copy = f"s3a://{store.bucket}/checkpoints/q", f"s3a://{store.bucket}/savepoints/sp-1"
        outcome = run_state_job(tmp_path, store.endpoint, checkpoint, copy, jars=objectstore.s3a_jars(), env=env)
        keys = store.client().list_keys(store.bucket, "checkpoints/q/")
        assert (store.root / store.bucket / "checkpoints" / "q" / "commits" / "1").is_file()
    # the uncommitted batch replays over its existing state files: kept, not replaced (the operator's S3 defaults)
    check_replayed_and_copied(outcome, keys, disposed=False)

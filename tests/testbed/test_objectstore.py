"""The testbed's S3 server: a real versitygw built from its Go module, reached with SigV4 requests."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from testbed import objectstore, procs


def test_sigv4_matches_the_aws_documentation_example() -> None:
    """AWS's published GET Object example (S3 API reference, 'Signature Calculations ... Authorization Header')."""
    headers = objectstore.sign(
        "GET",
        "https://examplebucket.s3.amazonaws.com/test.txt",
        {"Range": "bytes=0-9"},
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        access_key="AKIAIOSFODNN7EXAMPLE",
        secret_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        now=datetime(2013, 5, 24, tzinfo=UTC),
    )
    assert headers["Authorization"].endswith(
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    )
    assert "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date" in headers["Authorization"]


def test_server_stores_lists_copies_and_leaves_nothing() -> None:
    with objectstore.ObjectStore() as store:
        s3 = store.client()
        assert s3.list_buckets() == [objectstore.BUCKET]
        s3.put_object(store.bucket, "state/0/1.changelog", b"delta")
        s3.copy_object(store.bucket, "state/0/1.changelog", "savepoints/sp/state/0/1.changelog")
        assert s3.get_object(store.bucket, "savepoints/sp/state/0/1.changelog") == b"delta"
        assert sorted(s3.list_keys(store.bucket, "savepoints/")) == ["savepoints/sp/state/0/1.changelog"]
        assert (store.root / store.bucket / "state" / "0" / "1.changelog").read_bytes() == b"delta"
        status, _ = objectstore.S3Client(store.endpoint, store.access_key, "wrong").request("GET", "/")
        assert status == 403
        pid, workdir = store.pid, store.workdir
    assert pid is not None and not procs.pid_exists(pid)
    assert not workdir.exists()


def test_the_server_stopped_refuses_and_started_again_serves_the_same_objects() -> None:
    with objectstore.ObjectStore() as store:
        s3 = store.client()
        s3.put_object(store.bucket, "state/commits/0", b"v1")
        first = store.pid
        store.stop_server()
        assert first is not None and not procs.pid_exists(first)
        with pytest.raises(OSError):
            s3.request("GET", "/", timeout=5)
        assert (store.root / store.bucket / "state" / "commits" / "0").read_bytes() == b"v1", "files are kept"
        store.start_server()
        assert store.pid != first
        assert s3.get_object(store.bucket, "state/commits/0") == b"v1"
        with pytest.raises(RuntimeError, match="running"):
            store.start_server()

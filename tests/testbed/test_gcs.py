"""The testbed's Cloud Storage server: a real fake-gcs-server built from its Go module, reached through its JSON
API (`testbed.gcs`)."""

from __future__ import annotations

import urllib.error
from pathlib import Path

import pytest

from testbed import gcs, procs


def test_the_server_hands_out_its_own_url_and_keeps_objects_in_memory() -> None:
    argv = gcs.server_argv(Path("/bin/fake-gcs-server"), "10.1.0.1", 4443, Path("/tmp/w"))
    flags = dict(zip(argv[1::2], argv[2::2], strict=True))
    assert flags["-external-url"] == "http://10.1.0.1:4443"  # where resumable uploads continue: pods reach it
    assert flags["-host"] == "10.1.0.1"
    assert (flags["-scheme"], flags["-backend"], flags["-port"]) == ("http", "memory", "4443")


def test_server_creates_its_bucket_lists_and_reads_objects_and_leaves_nothing() -> None:
    with gcs.FakeGcs() as server:
        client = server.client()
        assert client.answers()
        client.upload(server.bucket, "state/0/1.changelog", b"delta")
        assert server.names("state/") == ["state/0/1.changelog"]
        assert server.names("savepoints/") == []
        assert client.read(server.bucket, "state/0/1.changelog") == b"delta"
        client.create_bucket(server.bucket)  # already there: fine
        with pytest.raises(urllib.error.HTTPError):
            client.read(server.bucket, "missing")
        assert server._process is not None
        pid, workdir = server._process.pid, server.workdir
    assert not procs.pid_exists(pid)
    assert not workdir.exists()

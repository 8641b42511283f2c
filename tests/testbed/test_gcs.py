"""The testbed's Cloud Storage server: a real fake-gcs-server built from its Go module, reached through its JSON
API, and the stand-ins of Google's token sources (`testbed.gcs`)."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

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


def _assertion(key: rsa.RSAPrivateKey, issuer: str) -> str:
    def encode(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = json.dumps({"alg": "RS256"}).encode()
    signing_input = f"{encode(header)}.{encode(json.dumps({'iss': issuer}).encode())}"
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{encode(signature)}"


def _grant(tokens: gcs.GoogleTokens, assertion: str) -> int:
    form = urllib.parse.urlencode({"grant_type": gcs.JWT_BEARER, "assertion": assertion}).encode()
    request = urllib.request.Request(f"http://{tokens.metadata_host}/token", data=form, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - the stand-in on loopback
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_the_token_stand_in_grants_only_a_grant_signed_with_its_key_and_the_metadata_token_only_to_google() -> None:
    with gcs.GoogleTokens() as tokens:
        pem = tokens.service_account_key()["private_key"].encode()
        own = serialization.load_pem_private_key(pem, password=None)
        assert isinstance(own, rsa.RSAPrivateKey)
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        assert _grant(tokens, _assertion(other, gcs.SERVICE_ACCOUNT)) == 400
        assert _grant(tokens, _assertion(own, gcs.SERVICE_ACCOUNT)) == 200
        url = f"http://{tokens.metadata_host}{gcs.METADATA_TOKEN_PATH}"
        with pytest.raises(urllib.error.HTTPError):  # no Metadata-Flavor header: not a metadata client
            urllib.request.urlopen(url, timeout=10)
        request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - the stand-in on loopback
            assert answer.headers["Metadata-Flavor"] == "Google"
            assert json.loads(answer.read())["token_type"] == "Bearer"
    assert tokens.grants == [f"jwt-bearer {gcs.SERVICE_ACCOUNT}", "metadata"]
    assert tokens.refused == ["/token"]

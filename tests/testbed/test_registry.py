"""The testbed registry (`testbed.registry`) and pushing images to it (`testbed.images.push_image`, what
``make images REGISTRY=...`` runs): the pure configuration, and a real registry that refuses anonymous
clients and serves what podman pushed to the user."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

import headrace
from testbed import images, registry


def test_htpasswd_is_bcrypt_and_checks_the_password() -> None:
    line = registry.htpasswd_line("alice", "s3cret", bcrypt.gensalt(registry.BCRYPT_ROUNDS))
    user, digest = line.rstrip("\n").split(":", 1)
    assert user == "alice"
    assert digest.startswith("$2b$04$")
    assert bcrypt.checkpw(b"s3cret", digest.encode())
    assert not bcrypt.checkpw(b"wrong", digest.encode())


def test_configuration_serves_tls_with_htpasswd_on_the_given_storage() -> None:
    text = registry.registry_config(
        "127.0.0.1:5443", Path("/s"), Path("/h"), (Path("/c.crt"), Path("/c.key")), "sekret"
    )
    config = json.loads(text)
    assert config["http"]["addr"] == "127.0.0.1:5443"
    assert config["http"]["tls"] == {"certificate": "/c.crt", "key": "/c.key"}
    assert config["auth"] == {"htpasswd": {"realm": registry.REALM, "path": "/h"}}
    assert config["storage"]["filesystem"] == {"rootdirectory": "/s"}


def test_docker_config_carries_the_basic_auth_of_the_user() -> None:
    config = registry.docker_config("localhost", "u", "p:w")
    assert config == {"auths": {"localhost": {"username": "u", "password": "p:w", "auth": "dTpwOnc="}}}


def test_a_pull_secret_carries_the_docker_config_for_the_image_names_registry() -> None:
    access = registry.RegistryAccess("10.89.1.1:5443", Path("/ca.crt"), "u", "p")
    secret = registry.pull_secret("pull", "localhost", access)
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    assert secret["metadata"] == {"name": "pull"}
    config = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    assert config == registry.docker_config("localhost", "u", "p")


def test_pushed_references_and_the_push_command() -> None:
    assert images.pushed_reference("r.example:5000/team/", "spark") == (
        f"r.example:5000/team/headrace/spark:{headrace.__version__}"
    )
    with pytest.raises(ValueError, match="unknown image target"):
        images.pushed_reference("r", "driver")
    command = images.podman_push_command("localhost/x:1", "r:1/x:1", "u:p", Path("/certs"))
    assert command[:2] == ["podman", "push"]
    assert "--tls-verify=true" in command
    assert command[-2:] == ["localhost/x:1", "docker://r:1/x:1"]
    assert images.shown_command(command).count("u:p") == 0  # the password is never printed


@pytest.fixture(scope="module")
def running() -> Iterator[registry.Registry]:
    with registry.Registry() as started:
        yield started


@pytest.mark.e2e
def test_the_registry_refuses_anonymous_clients(running: registry.Registry) -> None:
    assert running.status("/v2/") == 200
    assert running.status("/v2/", authenticated=False) == 401


@pytest.mark.e2e
def test_a_registry_on_another_address_serves_tls_for_that_address(tmp_path: Path) -> None:
    # The kind cluster's registry listens on its podman network's gateway; 127.0.0.2 stands in for it here.
    with registry.Registry(tmp_path / "storage", host="127.0.0.2") as elsewhere:
        assert elsewhere.access.address == f"127.0.0.2:{elsewhere.port}"
        assert elsewhere.status("/v2/") == 200  # TLS verified against its CA: the certificate names 127.0.0.2
        assert elsewhere.status("/v2/", authenticated=False) == 401


@pytest.mark.e2e
def test_an_image_pushed_as_make_images_does_is_served_to_the_user_only(running: registry.Registry) -> None:
    access = running.access
    destination = images.pushed_reference(access.address, "operator")
    command = ["push", "--registry", access.address, "--target", "operator"]
    command += ["--creds", access.credentials, "--cert-dir", str(running.cert_dir)]
    assert images.main(command) == 0
    manifest = f"/v2/headrace/operator/manifests/{headrace.__version__}"
    assert running.status(manifest) == 200
    assert running.status(manifest, authenticated=False) == 401
    # A client without the credentials is refused too (podman, as a node's runtime would be).
    anonymous = subprocess.run(
        ["podman", "pull", "--quiet", "--cert-dir", str(running.cert_dir), f"docker://{destination}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert anonymous.returncode != 0
    assert "unauthorized" in anonymous.stderr.lower() or "authentication required" in anonymous.stderr.lower()

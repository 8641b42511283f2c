"""A real OCI registry for the testbed: the CNCF distribution registry, built from its Go module, with htpasswd
authentication over TLS (a CA of its own, `pki.ClusterPKI`), as a private registry of a real cluster is.

Owns: building the registry binary into the cache (`build.go_build_main`: its command with filesystem storage
and htpasswd only), its configuration, htpasswd file and certificates (rendered by pure functions below), a
running registry on loopback or on another address of this machine (`Registry`, a context manager that always
cleans up), what a node needs to pull from it (`RegistryAccess`: the CA, the address, the credentials), a client's
docker config for it and the image pull Secret that carries it (`pull_secret`).
Never: builds or pushes images (testbed.images does), or configures a node (testbed.node does).

Its blobs are kept under ``~/.cache/headrace/registry`` across runs (``HEADRACE_REGISTRY_STORAGE`` overrides it),
so a push of an unchanged image uploads nothing; the credentials are new at every start.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import socket
import ssl
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt

from testbed import build, procs
from testbed.pki import ClusterPKI

REGISTRY_MODULE = "github.com/distribution/distribution/v3"
REGISTRY_VERSION = "v3.1.2"
# The registry's own command with only what the testbed uses: filesystem storage and htpasswd. Its cmd/registry
# also links the S3, GCS and Azure drivers, token auth and the pull-through proxy (their SDKs doubled the build).
_REGISTRY_MAIN = """package main

import (
\t"github.com/distribution/distribution/v3/registry"
\t_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
\t_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() { _ = registry.RootCmd.Execute() }
"""
LOOPBACK = "127.0.0.1"
USER = "headrace"
REALM = "headrace-testbed"
# bcrypt's cost: the registry checks the password on every request (a pull makes dozens), so the cheapest one.
BCRYPT_ROUNDS = 4
START_TIMEOUT_SECONDS = 30.0
# The same port every run when it is free: podman remembers which blobs a registry (host and port) holds, so a
# push of an unchanged image to the kept storage then uploads nothing (a new port re-compresses every layer).
PREFERRED_PORT = 5443
MANIFEST_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json")


def binary_path() -> Path:
    """Where the pinned registry binary lives in the cache (it may not exist yet)."""
    return build.cache_root() / "bin" / f"registry-{REGISTRY_VERSION}-fs" / "registry"


def ensure_binary() -> Path:
    """Build the registry (filesystem storage and htpasswd only) into the cache if missing; return its path."""
    name = binary_path().parent.name
    requirement = f"{REGISTRY_MODULE} {REGISTRY_VERSION}"
    return build.go_build_main(name, requirement, _REGISTRY_MAIN, binary_path(), go_version="1.26.0")


def storage_root() -> Path:
    """The registry's blobs and manifests, kept across runs."""
    return Path(os.environ.get("HEADRACE_REGISTRY_STORAGE") or build.cache_root() / "registry")


# --- pure decisions -------------------------------------------------------------------------------


def htpasswd_line(user: str, password: str, salt: bytes) -> str:
    """One htpasswd entry; the registry accepts bcrypt only (`salt` from ``bcrypt.gensalt``)."""
    return f"{user}:{bcrypt.hashpw(password.encode(), salt).decode()}\n"


def registry_config(address: str, storage: Path, htpasswd: Path, tls: tuple[Path, Path], secret: str) -> str:
    """The registry's configuration: filesystem storage, TLS, htpasswd authentication, no access log."""
    config = {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {
            "filesystem": {"rootdirectory": str(storage)},
            "delete": {"enabled": True},
            "maintenance": {"uploadpurging": {"enabled": False}},
        },
        "http": {
            "addr": address,
            "secret": secret,
            "tls": {"certificate": str(tls[0]), "key": str(tls[1])},
            "draintimeout": "1s",
        },
        "auth": {"htpasswd": {"realm": REALM, "path": str(htpasswd)}},
        "health": {"storagedriver": {"enabled": False}},
    }
    return json.dumps(config, indent=2)  # YAML is a superset of JSON


def basic_auth(user: str, password: str) -> str:
    """The ``auth`` value of a docker config entry (base64 of ``user:password``)."""
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def docker_config(server: str, user: str, password: str) -> dict[str, Any]:
    """A docker config (an image pull Secret's ``.dockerconfigjson``) with credentials for `server`, the registry
    name images are named by (``localhost``, ``registry.example.com:5000``), optionally with a path prefix."""
    return {"auths": {server: {"username": user, "password": password, "auth": basic_auth(user, password)}}}


@dataclass(frozen=True)
class RegistryAccess:
    """What a client needs to reach a running registry: its address, the CA of its certificate, credentials."""

    address: str  # host:port
    ca: Path
    user: str
    password: str

    @property
    def server(self) -> str:
        """The registry's URL."""
        return f"https://{self.address}"

    @property
    def credentials(self) -> str:
        """``user:password``, as ``podman push --creds`` takes it."""
        return f"{self.user}:{self.password}"

    def reference(self, repository: str) -> str:
        """An image reference in this registry, e.g. ``127.0.0.1:5443/headrace/spark:0.1.0``."""
        return f"{self.address}/{repository}"


def pull_secret(name: str, server: str, access: RegistryAccess) -> dict[str, Any]:
    """An image pull Secret (``kubernetes.io/dockerconfigjson``) named `name` with `access`'s credentials for
    `server`, the registry name the images carry (``localhost``)."""
    config = json.dumps(docker_config(server, access.user, access.password))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(config.encode()).decode()},
    }


# --- the running registry -------------------------------------------------------------------------


def _port(host: str) -> int:
    """`PREFERRED_PORT` on `host` if it is free now, else any free port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Go's listen: a TIME_WAIT is no conflict
        try:
            probe.bind((host, PREFERRED_PORT))
        except OSError:
            return procs.free_port(host)
    return PREFERRED_PORT


class Registry(procs.ProcessInWorkdir):
    """The registry on a free port of `host` (loopback unless told: the kind cluster's nodes reach it on their podman
    network's gateway), serving TLS with a CA of its own for ``localhost``, loopback and `host`, one user with a fresh
    password."""

    def __init__(self, storage: Path | None = None, *, host: str = LOOPBACK) -> None:
        self.storage = storage or storage_root()
        self.host = host
        self.workdir = Path(tempfile.mkdtemp(prefix="headrace-registry-"))
        self.port = _port(host)
        self.password = secrets.token_urlsafe(18)
        self._pki = ClusterPKI.create(self.workdir / "pki")
        self._process: procs.Process | None = None

    @property
    def address(self) -> str:
        """``<host>:<port>`` (``127.0.0.1:<port>`` by default)."""
        return f"{self.host}:{self.port}"

    @property
    def access(self) -> RegistryAccess:
        """The address, CA and credentials."""
        return RegistryAccess(self.address, self._pki.ca_cert, USER, self.password)

    @property
    def cert_dir(self) -> Path:
        """A directory holding only the CA certificate (``podman push --cert-dir``, ``helm --ca-file`` its file)."""
        return self._pki.ca_cert.parent / "trust"

    def start(self) -> Registry:
        self.storage.mkdir(parents=True, exist_ok=True)
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self._pki.ca_cert, self.cert_dir / "ca.crt")
        certificate, key = self._pki.issue_serving_cert("registry", ["localhost"], sorted({LOOPBACK, self.host}))
        htpasswd = self.workdir / "htpasswd"
        htpasswd.write_text(htpasswd_line(USER, self.password, bcrypt.gensalt(BCRYPT_ROUNDS)))
        config = self.workdir / "config.yml"
        config.write_text(
            registry_config(self.address, self.storage, htpasswd, (certificate, key), secrets.token_hex(16))
        )
        argv = [str(ensure_binary()), "serve", str(config)]
        self._process = procs.spawn("registry", argv, self.workdir / "registry.log")
        procs.wait_until_healthy(self._process, self.answers, timeout_seconds=START_TIMEOUT_SECONDS)
        return self

    def status(self, path: str, *, authenticated: bool = True) -> int:
        """The HTTP status of a GET of `path` (``/v2/...``), with or without the credentials."""
        request = urllib.request.Request(f"https://{self.address}{path}")
        if authenticated:
            request.add_header("Authorization", f"Basic {basic_auth(USER, self.password)}")
        request.add_header(
            "Accept", "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json"
        )
        context = ssl.create_default_context(cafile=str(self._pki.ca_cert))
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as response:  # noqa: S310
                return int(response.status)
        except urllib.error.HTTPError as error:
            return int(error.code)

    def answers(self) -> bool:
        """True once the registry serves its API to the user (``GET /v2/`` is 200)."""
        try:
            return self.status("/v2/") == 200
        except OSError:
            return False

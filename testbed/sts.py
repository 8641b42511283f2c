"""A real STS for tests of web identity: MinIO's server (S3 and STS in one, built from its Go module at the pinned
pseudo-version) trusting an OpenID issuer.

Owns: building the MinIO binary into the cache (`build.go_install`), a local OpenID issuer (discovery document,
JWKS, RS256 tokens for an audience, like a cluster's ServiceAccount issuer), and a running MinIO whose one role
(readwrite, the role ARN MinIO derives from the client id) is assumed with such tokens through
AssumeRoleWithWebIdentity; with one bucket. A context manager that always cleans up.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import shutil
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from testbed import build, procs
from testbed.objectstore import LOOPBACK, REGION, S3Client

MINIO_MODULE = "github.com/minio/minio"
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"  # no tagged versions: the pseudo-version @latest resolved to
START_TIMEOUT_SECONDS = 60.0
ROLE_POLICY = "readwrite"


def binary_path() -> Path:
    """Where the pinned MinIO binary lives in the cache (it may not exist yet)."""
    return build.cache_root() / "bin" / f"minio-{MINIO_VERSION}" / "minio"


def ensure_binary() -> Path:
    """Build MinIO (`go install <module>@<version>`) into the cache if missing; return its path."""
    return build.go_install(MINIO_MODULE, MINIO_VERSION, binary_path())


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def role_arn(client_id: str, region: str = REGION) -> str:
    """The ARN MinIO gives the role of an OpenID provider with a role policy: base64url(sha1(client id)) as id."""
    resource = _b64url(hashlib.sha1(client_id.encode()).digest())  # noqa: S324  # MinIO's naming, not security
    return f"arn:minio:iam:{region}::role/{resource}"


class OpenIdIssuer(procs.Started):
    """An OpenID issuer on loopback: its discovery document and JWKS, and RS256 tokens signed with its key."""

    def __init__(self) -> None:
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = procs.free_port(LOOPBACK)

    @property
    def url(self) -> str:
        """The issuer (`iss`), whose /.well-known/openid-configuration MinIO reads."""
        return f"http://{LOOPBACK}:{self.port}"

    def _documents(self) -> dict[str, bytes]:
        numbers = self._key.public_key().public_numbers()
        jwk = {
            "kty": "RSA",
            "kid": "headrace-test",
            "use": "sig",
            "alg": "RS256",
            "n": _b64url(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")),
            "e": _b64url(numbers.e.to_bytes(3, "big")),
        }
        discovery = {
            "issuer": self.url,
            "jwks_uri": f"{self.url}/keys",
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
        }
        return {
            "/.well-known/openid-configuration": json.dumps(discovery).encode(),
            "/keys": json.dumps({"keys": [jwk]}).encode(),
        }

    def token(self, subject: str, audience: str, lifetime_seconds: int = 3600) -> str:
        """A signed token for `audience`, as a projected ServiceAccount token is."""
        now = int(time.time())
        header = {"alg": "RS256", "kid": "headrace-test", "typ": "JWT"}
        claims = {"iss": self.url, "sub": subject, "aud": [audience], "iat": now, "nbf": now}
        claims["exp"] = now + lifetime_seconds
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = self._key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64url(signature)}"

    def start(self) -> OpenIdIssuer:
        documents = self._documents()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = documents.get(self.path.split("?")[0])
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args: Any) -> None:
                del args

        self._server = ThreadingHTTPServer((LOOPBACK, self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None


class MinioSts(procs.Started):
    """MinIO on loopback over a temporary directory, trusting `issuer` for `audience`, with one bucket."""

    def __init__(self, issuer: OpenIdIssuer, audience: str, bucket: str = "headrace") -> None:
        self.issuer, self.audience, self.bucket = issuer, audience, bucket
        self.workdir = Path(tempfile.mkdtemp(prefix="headrace-minio-"))
        self.port = procs.free_port(LOOPBACK)
        self.console_port = procs.free_port(LOOPBACK)
        self.access_key = "HR" + secrets.token_hex(9).upper()
        self.secret_key = secrets.token_hex(20)
        self._process: procs.Process | None = None

    @property
    def endpoint(self) -> str:
        """S3 and STS endpoint."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def role_arn(self) -> str:
        """The role the issuer's tokens for `audience` assume."""
        return role_arn(self.audience)

    @property
    def root(self) -> Path:
        """The directory MinIO serves (its own layout: objects are not plain files)."""
        return self.workdir / "data"

    def client(self) -> S3Client:
        """A client with the root credentials."""
        return S3Client(self.endpoint, self.access_key, self.secret_key)

    def start(self) -> MinioSts:
        self.root.mkdir(parents=True)
        env = {
            **os.environ,
            "MINIO_ROOT_USER": self.access_key,
            "MINIO_ROOT_PASSWORD": self.secret_key,
            "MINIO_SITE_REGION": REGION,
            "MINIO_BROWSER": "off",
            "MINIO_UPDATE": "off",
            "MINIO_IDENTITY_OPENID_CONFIG_URL": f"{self.issuer.url}/.well-known/openid-configuration",
            "MINIO_IDENTITY_OPENID_CLIENT_ID": self.audience,
            "MINIO_IDENTITY_OPENID_ROLE_POLICY": ROLE_POLICY,
        }
        address = ["--address", f"{LOOPBACK}:{self.port}", "--console-address", f"{LOOPBACK}:{self.console_port}"]
        argv = [str(ensure_binary()), "server", "--quiet", *address, str(self.root)]
        self._process = procs.spawn("minio", argv, self.workdir / "minio.log", env=env)
        procs.wait_until_healthy(
            self._process, self.client().answers, timeout_seconds=START_TIMEOUT_SECONDS, interval_seconds=0.3
        )
        self.client().create_bucket(self.bucket)
        return self

    def keys(self, prefix: str = "") -> list[str]:
        """Object keys of the bucket under `prefix` (root credentials)."""
        return self.client().list_keys(self.bucket, prefix)

    def stop(self) -> None:
        try:
            if self._process is not None:
                procs.stop(self._process, grace_seconds=5)
                self._process = None
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)

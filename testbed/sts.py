"""A real STS for tests of web identity: MinIO's server (S3 and STS in one, built from its Go module at the pinned
pseudo-version) trusting an OpenID issuer.

Owns: building the MinIO binary into the cache (`build.go_install`), the OpenID providers MinIO can trust (a
cluster's ServiceAccount issuer, served by its kube-apiserver and readable anonymously once
`allow_anonymous_discovery` binds it; or a local issuer of our own whose RS256 tokens stand in for one), a running
MinIO whose one role (readwrite, the role ARN MinIO derives from the client id) is assumed with such tokens through
AssumeRoleWithWebIdentity, with one bucket (a context manager that always cleans up), and the STS call itself
(`assume_role_with_web_identity`), as the AWS SDK makes it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import shutil
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from testbed import build, procs
from testbed.controlplane import OPENID_CONFIGURATION_PATH
from testbed.objectstore import LOOPBACK, REGION, S3Client

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from testbed.controlplane import ControlPlane

MINIO_MODULE = "github.com/minio/minio"
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"  # no tagged versions: the pseudo-version @latest resolved to
START_TIMEOUT_SECONDS = 60.0
ROLE_POLICY = "readwrite"
STS_VERSION = "2011-06-15"
DISCOVERY_ROLE = "system:service-account-issuer-discovery"  # the apiserver's own ClusterRole
DISCOVERY_BINDING = "headrace-testbed:anonymous-issuer-discovery"


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


class OpenIdProvider(Protocol):
    """What MinIO needs of an OpenID provider: where its discovery document is, and the CA its TLS needs."""

    @property
    def config_url(self) -> str: ...

    @property
    def ca_cert(self) -> Path | None: ...


@dataclass(frozen=True)
class ClusterIssuer:
    """A cluster's ServiceAccount issuer as an OpenID provider: its kube-apiserver serves the discovery document
    and the JWKS (`--service-account-jwks-uri` names where this machine reaches them) over the cluster CA's TLS."""

    apiserver_url: str
    ca_cert: Path

    @classmethod
    def of(cls, control_plane: ControlPlane) -> ClusterIssuer:
        """The issuer of the testbed's control plane, as clients on this machine reach it."""
        return cls(control_plane.url, control_plane.ca_cert)

    @property
    def config_url(self) -> str:
        """The discovery document's URL."""
        return f"{self.apiserver_url}{OPENID_CONFIGURATION_PATH}"


def allow_anonymous_discovery(api: ApiClient) -> None:
    """Let unauthenticated clients (an STS fetching the issuer's keys) read the discovery document and JWKS: bind
    the apiserver's `system:service-account-issuer-discovery` ClusterRole to `system:unauthenticated`, as managed
    clusters publish their issuer. Idempotent."""
    from kubernetes import client

    body: Any = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": DISCOVERY_BINDING},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": DISCOVERY_ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:unauthenticated"}],
    }
    try:
        client.RbacAuthorizationV1Api(api).create_cluster_role_binding(body)
    except client.ApiException as error:
        if error.status != 409:
            raise


def service_account_token(api: ApiClient, namespace: str, account: str, audience: str, seconds: int = 600) -> str:
    """A ServiceAccount token for `audience` (TokenRequest), as the kubelet projects into a pod."""
    from kubernetes import client

    request: Any = {"spec": {"audiences": [audience], "expirationSeconds": seconds}}
    answer = client.CoreV1Api(api).create_namespaced_service_account_token(account, namespace, request)
    if answer.status is None:
        raise RuntimeError(f"TokenRequest for {namespace}/{account} answered no token")
    return str(answer.status.token)


class StsRefused(RuntimeError):
    """The STS refused the token: its error code (e.g. ``InvalidIdentityToken``) and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"STS answered {status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


def _xml_field(text: str, name: str) -> str:
    start, end = text.find(f"<{name}>"), text.find(f"</{name}>")
    return text[start + len(name) + 2 : end] if 0 <= start < end else ""


def assume_role_with_web_identity(endpoint: str, role: str, token: str, seconds: int = 900) -> S3Client:
    """Exchange a web identity token for temporary credentials (STS AssumeRoleWithWebIdentity, unsigned, as the
    AWS SDK calls it); an S3 client signing with them. Raises `StsRefused` when the STS refuses."""
    form = {
        "Action": "AssumeRoleWithWebIdentity",
        "Version": STS_VERSION,
        "RoleArn": role,
        "RoleSessionName": "headrace-test",
        "WebIdentityToken": token,
        "DurationSeconds": str(seconds),
    }
    if not endpoint.startswith(("http://", "https://")):
        raise ValueError(f"not an STS endpoint URL: {endpoint}")
    request = urllib.request.Request(endpoint, data=urllib.parse.urlencode(form).encode(), method="POST")  # noqa: S310
    request.add_header("Content-Type", "application/x-www-form-urlencoded")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - our own endpoint
            text = response.read().decode()
    except urllib.error.HTTPError as error:
        text = error.read().decode()
        raise StsRefused(error.code, _xml_field(text, "Code"), _xml_field(text, "Message")) from None
    return S3Client(
        endpoint,
        _xml_field(text, "AccessKeyId"),
        _xml_field(text, "SecretAccessKey"),
        session_token=_xml_field(text, "SessionToken"),
    )


class OpenIdIssuer(procs.HttpServerThread):
    """An OpenID issuer on loopback: its discovery document and JWKS, and RS256 tokens signed with its key."""

    ca_cert: Path | None = None  # plain HTTP

    def __init__(self, key_id: str = "headrace-test") -> None:
        self.key_id = key_id
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.port = procs.free_port(LOOPBACK)

    @property
    def url(self) -> str:
        """The issuer (`iss`), whose /.well-known/openid-configuration MinIO reads."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def config_url(self) -> str:
        """The discovery document's URL."""
        return f"{self.url}{OPENID_CONFIGURATION_PATH}"

    def _documents(self) -> dict[str, bytes]:
        numbers = self._key.public_key().public_numbers()
        jwk = {
            "kty": "RSA",
            "kid": self.key_id,
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
            OPENID_CONFIGURATION_PATH: json.dumps(discovery).encode(),
            "/keys": json.dumps({"keys": [jwk]}).encode(),
        }

    def token(self, subject: str, audience: str, lifetime_seconds: int = 3600, issuer: str = "") -> str:
        """A signed token for `audience`, as a projected ServiceAccount token is (`issuer`: claim another's name)."""
        now = int(time.time())
        header = {"alg": "RS256", "kid": self.key_id, "typ": "JWT"}
        claims = {"iss": issuer or self.url, "sub": subject, "aud": [audience], "iat": now, "nbf": now}
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

        self._serve(LOOPBACK, self.port, Handler)
        return self


class MinioSts(procs.ProcessInWorkdir):
    """MinIO over a temporary directory, trusting `issuer` for `audience`, with one bucket. It listens on
    `address` (loopback; the node's bridge gateway for pods, which this machine reaches too)."""

    def __init__(
        self, issuer: OpenIdProvider, audience: str, bucket: str = "headrace", address: str = LOOPBACK
    ) -> None:
        self.issuer, self.audience, self.bucket, self.address = issuer, audience, bucket, address
        self.workdir = Path(tempfile.mkdtemp(prefix="headrace-minio-"))
        self.port = procs.free_port(address)
        self.console_port = procs.free_port(LOOPBACK)
        self.access_key = "HR" + secrets.token_hex(9).upper()
        self.secret_key = secrets.token_hex(20)
        self._process: procs.Process | None = None

    @property
    def endpoint(self) -> str:
        """S3 and STS endpoint."""
        return f"http://{self.address}:{self.port}"

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
            "MINIO_IDENTITY_OPENID_CONFIG_URL": self.issuer.config_url,
            "MINIO_IDENTITY_OPENID_CLIENT_ID": self.audience,
            "MINIO_IDENTITY_OPENID_ROLE_POLICY": ROLE_POLICY,
        }
        # MinIO trusts the CAs in <certs-dir>/CAs (the apiserver's); with no key pair there it serves plain HTTP.
        certs = self.workdir / "certs"
        (certs / "CAs").mkdir(parents=True)
        if self.issuer.ca_cert is not None:
            shutil.copy(self.issuer.ca_cert, certs / "CAs" / "issuer-ca.crt")
        address = ["--address", f"{self.address}:{self.port}", "--console-address", f"{LOOPBACK}:{self.console_port}"]
        argv = [str(ensure_binary()), "server", "--quiet", "--certs-dir", str(certs), *address, str(self.root)]
        self._process = procs.spawn("minio", argv, self.workdir / "minio.log", env=env)
        procs.wait_until_healthy(
            self._process, self.client().answers, timeout_seconds=START_TIMEOUT_SECONDS, interval_seconds=0.3
        )
        self.client().create_bucket(self.bucket)
        return self

    def keys(self, prefix: str = "") -> list[str]:
        """Object keys of the bucket under `prefix` (root credentials)."""
        return self.client().list_keys(self.bucket, prefix)

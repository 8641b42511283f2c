"""A real Google Cloud Storage API server for tests of gs:// state: fake-gcs-server, built from its Go module.

Owns: building ``fake-gcs-server`` at the pinned version into the cache (`build.go_install`), running it over
plain HTTP on one address (loopback, or the node's bridge gateway so pods reach it) with its objects in memory,
the bucket it creates at start, the image's pinned connector jar for local-mode Spark, a small JSON API client
(create a bucket, list object names, write and read one) for tests, and Google's token sources (OAuth's token
endpoint for a service account key, the metadata server of Application Default Credentials) as stand-ins.
Never: used by the operator or the runtime. The server authenticates nothing: it takes any token (those the
stand-ins hand out) or none (``spec.state.gcs.credentialsMode: unauthenticatedEmulator``).
`python -m testbed.gcs` runs one on loopback in the foreground until interrupted.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from testbed import REPOSITORY, build, maven, procs

FAKE_GCS_MODULE = "github.com/fsouza/fake-gcs-server"
FAKE_GCS_VERSION = "v1.56.1"
LOOPBACK = "127.0.0.1"
BUCKET = "headrace"
PROJECT = "headrace-test"
START_TIMEOUT_SECONDS = 30.0
SERVICE_ACCOUNT = f"headrace-test@{PROJECT}.iam.gserviceaccount.com"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
METADATA_TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
GCS_POM = REPOSITORY / "docker" / "gcs" / "pom.xml"
GCS_CHECKSUMS = REPOSITORY / "docker" / "gcs" / "jars.sha256"


def connector_jars() -> list[Path]:
    """The Cloud Storage connector jar the Spark image ships (docker/gcs/pom.xml), for local-mode Spark's
    ``spark.jars``; checked against docker/gcs/jars.sha256 as the image build checks it."""
    return maven.pinned_jars(GCS_POM, GCS_CHECKSUMS)


def binary_path() -> Path:
    """Where the pinned server binary lives in the cache (it may not exist yet)."""
    return build.cache_root() / "bin" / f"fake-gcs-server-{FAKE_GCS_VERSION}" / "fake-gcs-server"


def ensure_binary() -> Path:
    """Build the server (`go install <module>@<version>`) into the cache if missing; return its path."""
    return build.go_install(FAKE_GCS_MODULE, FAKE_GCS_VERSION, binary_path())


def server_argv(binary: Path, address: str, port: int, workdir: Path) -> list[str]:
    """The server's command line: plain HTTP on `address`:`port`, objects in memory, and its own URL as the one it
    hands out (resumable uploads continue at the Location it returns, which must be reachable from the pods)."""
    url = f"http://{address}:{port}"
    return [
        str(binary),
        "-backend",
        "memory",
        "-scheme",
        "http",
        "-host",
        address,
        "-port",
        str(port),
        "-external-url",
        url,
        "-public-host",
        f"{address}:{port}",
        "-data",
        str(workdir / "seed"),  # absent: no objects to load
        "-log-level",
        "warn",
    ]


class GcsClient:
    """The JSON API calls tests need, unauthenticated (the emulator checks no token)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint.rstrip("/")

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 30) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.endpoint + path, data=data, method=method)  # noqa: S310
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 - our own endpoint
            text = answer.read()
        return json.loads(text) if text else None

    def answers(self) -> bool:
        """Whether the server lists buckets (a start-up health check)."""
        try:
            self._call("GET", "/storage/v1/b", timeout=2)
        except (OSError, ValueError):
            return False
        return True

    def create_bucket(self, name: str, project: str = PROJECT) -> None:
        """Create bucket `name` (one the server already has is fine)."""
        try:
            self._call("POST", f"/storage/v1/b?project={urllib.parse.quote(project)}", {"name": name})
        except urllib.error.HTTPError as error:
            if error.code != 409:
                raise

    def object_names(self, bucket: str, prefix: str = "") -> list[str]:
        """Names of every object of `bucket` under `prefix`, following the pages."""
        names: list[str] = []
        token = ""
        while True:
            query = {"prefix": prefix, **({"pageToken": token} if token else {})}
            page = self._call("GET", f"/storage/v1/b/{urllib.parse.quote(bucket)}/o?{urllib.parse.urlencode(query)}")
            names += [item["name"] for item in page.get("items", [])]
            token = page.get("nextPageToken", "")
            if not token:
                return names

    def upload(self, bucket: str, name: str, data: bytes) -> None:
        """Write one object (a simple media upload)."""
        query = urllib.parse.urlencode({"uploadType": "media", "name": name})
        path = f"/upload/storage/v1/b/{urllib.parse.quote(bucket)}/o?{query}"
        request = urllib.request.Request(self.endpoint + path, data=data, method="POST")  # noqa: S310
        with urllib.request.urlopen(request, timeout=30):  # noqa: S310 - our own endpoint
            pass

    def read(self, bucket: str, name: str) -> bytes:
        """The content of one object."""
        path = f"/storage/v1/b/{urllib.parse.quote(bucket)}/o/{urllib.parse.quote(name, safe='')}?alt=media"
        with urllib.request.urlopen(self.endpoint + path, timeout=30) as answer:  # noqa: S310 - our own endpoint
            data: bytes = answer.read()
        return data


class FakeGcs(procs.ProcessInWorkdir):
    """fake-gcs-server with one bucket, listening on `address` (loopback; the node's bridge gateway for pods, which
    this machine reaches too). Its objects live in memory: they go when it stops."""

    def __init__(self, bucket: str = BUCKET, address: str = LOOPBACK, port: int | None = None) -> None:
        self.bucket, self.address = bucket, address
        self.port = port or procs.free_port(address)
        self.workdir = Path(tempfile.mkdtemp(prefix="headrace-gcs-"))
        self._process: procs.Process | None = None

    @property
    def endpoint(self) -> str:
        """The storage root URL (``spec.state.gcs.endpoint``, the connector's ``fs.gs.storage.root.url``)."""
        return f"http://{self.address}:{self.port}/"

    def client(self) -> GcsClient:
        return GcsClient(self.endpoint)

    def start(self) -> FakeGcs:
        argv = server_argv(ensure_binary(), self.address, self.port, self.workdir)
        self._process = procs.spawn("fake-gcs-server", argv, self.workdir / "fake-gcs-server.log")
        procs.wait_until_healthy(
            self._process, self.client().answers, timeout_seconds=START_TIMEOUT_SECONDS, interval_seconds=0.2
        )
        self.client().create_bucket(self.bucket)
        return self

    def names(self, prefix: str = "") -> list[str]:
        """Object names of the bucket under `prefix`."""
        return self.client().object_names(self.bucket, prefix)


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class GoogleTokens(procs.HttpServerThread):
    """Google's two token sources on loopback, as the connector's auth library calls them: OAuth 2.0's token
    endpoint for a service account key (a JWT bearer grant signed with the key's private key, verified here against
    its public key), and the metadata server that Application Default Credentials ask on GCE and GKE (GKE Workload
    Identity's metadata server answers the same calls; clients find it at ``GCE_METADATA_HOST``). `grants` records
    each token handed out: ``jwt-bearer <client_email>`` or ``metadata``, and `sources` the client address of each;
    `refused` each grant refused. It listens on `address` (loopback; the node's bridge gateway for pods)."""

    def __init__(self, address: str = LOOPBACK) -> None:
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.address = address
        self.port = procs.free_port(address)
        self.grants: list[str] = []
        self.sources: list[str] = []
        self.refused: list[str] = []

    @property
    def metadata_host(self) -> str:
        """``GCE_METADATA_HOST`` of the metadata server (and the host of the key's token endpoint)."""
        return f"{self.address}:{self.port}"

    def service_account_key(self) -> dict[str, str]:
        """A service account JSON key (its `token_uri` here), as Google's console downloads one."""
        pem = self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return {
            "type": "service_account",
            "project_id": PROJECT,
            "private_key_id": "headrace-test-key",
            "private_key": pem.decode(),
            "client_email": SERVICE_ACCOUNT,
            "client_id": "1",
            "token_uri": f"http://{self.metadata_host}/token",
        }

    def _verified_issuer(self, assertion: str) -> str | None:
        """The issuer of a JWT signed with the key's private key (RS256), or None."""
        try:
            header, claims, signature = assertion.split(".")
            self._key.public_key().verify(
                _unb64url(signature), f"{header}.{claims}".encode(), padding.PKCS1v15(), hashes.SHA256()
            )
            return str(json.loads(_unb64url(claims))["iss"])
        except (ValueError, KeyError, InvalidSignature):
            return None

    def start(self) -> GoogleTokens:
        tokens = self
        token = json.dumps({"access_token": "ya29.headrace-test", "expires_in": 3600, "token_type": "Bearer"})

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, body: str, flavor: bool = False) -> None:
                data = body.encode()
                self.send_response(status)
                if flavor:
                    self.send_header("Metadata-Flavor", "Google")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.headers.get("Metadata-Flavor") != "Google":
                    self._answer(403, "{}")
                    return
                if self.path.split("?")[0] == METADATA_TOKEN_PATH:
                    tokens.grants.append("metadata")
                    tokens.sources.append(self.client_address[0])
                    self._answer(200, token, flavor=True)
                    return
                self._answer(200, SERVICE_ACCOUNT if "email" in self.path else "", flavor=True)  # the ping, and more

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                assertion = form.get("assertion", [""])[0]
                issuer = self._verified_issuer(assertion) if form.get("grant_type") == [JWT_BEARER] else None
                if self.path.split("?")[0] != "/token" or issuer is None:
                    tokens.refused.append(self.path)
                    self._answer(400, json.dumps({"error": "invalid_grant"}))
                    return
                tokens.grants.append(f"jwt-bearer {issuer}")
                tokens.sources.append(self.client_address[0])
                self._answer(200, token)

            def _verified_issuer(self, assertion: str) -> str | None:
                return tokens._verified_issuer(assertion)

            def log_message(self, *args: Any) -> None:
                del args

        self._serve(self.address, self.port, Handler)
        return self


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.gcs", description=__doc__)
    parser.add_argument("--address", default=LOOPBACK)
    parser.add_argument("--port", type=int, default=4443)
    parser.add_argument("--bucket", default=BUCKET)
    args = parser.parse_args(argv)
    # A plain kill unwinds too, so the server stops and its directory goes.
    with (
        contextlib.suppress(KeyboardInterrupt),
        procs.terminated_as_interrupt(),
        FakeGcs(args.bucket, args.address, args.port) as server,
    ):
        print(f"fake-gcs-server at {server.endpoint} with bucket {server.bucket}; Ctrl-C stops it", flush=True)
        assert server._process is not None
        server._process.popen.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

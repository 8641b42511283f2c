"""A real Azure Blob Storage API server for tests of abfs:// state: Azurite's Blob service, installed from npm.

Owns: installing Azurite at the version and with the whole dependency tree testbed/azurite/package-lock.json pins
(`npm ci`, integrity hashes checked) into the cache, running its Blob service over plain HTTP on one address with its
blobs in its own work directory, the container it creates at start, the image's pinned ABFS jars for local-mode
Spark, a small Blob REST client signed with Shared Key (create a container, list blob names) for tests, and a
stand-in of Entra ID's token endpoint for Workload Identity's exchange (a client assertion for an access token).
Never: used by the operator or the runtime. Azurite knows one account, devstoreaccount1, whose key is public (its
documentation prints it); it checks Shared Key signatures, and, over HTTPS with ``--oauth basic``, a bearer token's
lifetime, issuer and audience (not its signature).
`python -m testbed.azure` runs one on loopback in the foreground until interrupted.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import hmac
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from testbed import REPOSITORY, build, maven, procs

AZURITE_DIR = REPOSITORY / "testbed" / "azurite"
AZURITE_VERSION = json.loads((AZURITE_DIR / "package.json").read_text())["dependencies"]["azurite"]
LOOPBACK = "127.0.0.1"
CONTAINER = "headrace"
ACCOUNT = "devstoreaccount1"
# Azurite's one account key, public by design (Azure's storage emulator documentation gives it).
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
ACCOUNT_HOST = f"{ACCOUNT}.dfs.core.windows.net"  # the account's host in abfs:// URIs (its endpoint: ours)
API_VERSION = "2021-08-06"
START_TIMEOUT_SECONDS = 60.0
MSI_TOKEN_PATH = "/metadata/identity/oauth2/token"
AZURE_POM = REPOSITORY / "docker" / "azure" / "pom.xml"
AZURE_CHECKSUMS = REPOSITORY / "docker" / "azure" / "jars.sha256"


def connector_jars() -> list[Path]:
    """The ABFS jars the Spark image ships (docker/azure/pom.xml), for local-mode Spark's ``spark.jars``; checked
    against docker/azure/jars.sha256 as the image build checks them."""
    return maven.pinned_jars(AZURE_POM, AZURE_CHECKSUMS)


def install_dir() -> Path:
    """Where the pinned Azurite lives in the cache (it may not exist yet)."""
    return build.cache_root() / "npm" / f"azurite-{AZURITE_VERSION}"


def ensure_azurite() -> Path:
    """Install Azurite with `npm ci` from the pinned lock file into the cache if missing (no install scripts run);
    return its Blob service's executable."""
    target = install_dir()
    binary = target / "node_modules" / ".bin" / "azurite-blob"
    if binary.exists():
        return binary
    staging = target.with_name(f".{target.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(AZURITE_DIR / name, staging / name)
    command = ["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--omit=dev"]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, cwd=staging, check=True)
    staging.rename(target)
    return binary


def server_argv(
    binary: Path, address: str, port: int, workdir: Path, tls: tuple[Path, Path] | None = None
) -> list[str]:
    """The Blob service's command line: plain HTTP on `address`:`port` (HTTPS with `tls`, a certificate and its key,
    then taking OAuth bearer tokens too), its blobs and metadata under `workdir`."""
    https = ["--cert", str(tls[0]), "--key", str(tls[1]), "--oauth", "basic"] if tls else []
    return [
        str(binary),
        *https,
        "--blobHost",
        address,
        "--blobPort",
        str(port),
        "--location",
        str(workdir / "data"),
        "--silent",
        "--disableTelemetry",  # else it sends usage data to Application Insights
        "--skipApiVersionCheck",  # the connector may send a newer x-ms-version than this Azurite knows
        "--disableProductStyleUrl",  # <host>:<port>/<account>/<container>, as the connector's emulator address
    ]


class BlobClient:
    """The Blob REST calls tests need, signed with the account's Shared Key."""

    def __init__(self, endpoint: str, account: str = ACCOUNT, key: str = ACCOUNT_KEY, ca: Path | None = None) -> None:
        self.endpoint, self.account, self._key = endpoint.rstrip("/"), account, base64.b64decode(key)
        self._context = ssl.create_default_context(cafile=str(ca)) if ca else None

    def _open(self, request: urllib.request.Request, timeout: float) -> Any:
        return urllib.request.urlopen(request, timeout=timeout, context=self._context)  # noqa: S310 - our emulator

    def _signed(self, method: str, path: str, query: dict[str, str], body: bytes = b"") -> urllib.request.Request:
        headers = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": API_VERSION}
        canonical_headers = "".join(f"{name}:{value}\n" for name, value in sorted(headers.items()))
        resource = f"/{self.account}/{self.account}{path}" + "".join(
            f"\n{name}:{value}" for name, value in sorted(query.items())
        )
        length = str(len(body)) if body else ""
        # VERB, Content-Encoding, -Language, -Length, -MD5, -Type, Date, If-Modified-Since, If-Match, If-None-Match,
        # If-Unmodified-Since, Range, then the x-ms- headers and the resource (Azure Storage's Shared Key scheme).
        string_to_sign = f"{method}\n\n\n{length}\n\n\n\n\n\n\n\n\n{canonical_headers}{resource}"
        signature = base64.b64encode(hmac.new(self._key, string_to_sign.encode(), hashlib.sha256).digest()).decode()
        url = f"{self.endpoint}/{self.account}{path}?{urllib.parse.urlencode(query)}"
        request = urllib.request.Request(url, data=body or None, method=method)  # noqa: S310 - our own endpoint
        for name, value in {**headers, "Authorization": f"SharedKey {self.account}:{signature}"}.items():
            request.add_header(name, value)
        return request

    def answers(self) -> bool:
        """Whether the service lists containers (a start-up health check)."""
        try:
            with self._open(self._signed("GET", "/", {"comp": "list"}), timeout=2):
                return True
        except (OSError, ValueError):
            return False

    def create_container(self, name: str) -> None:
        """Create container `name` (one the service already has is fine)."""
        try:
            with self._open(self._signed("PUT", f"/{name}", {"restype": "container"}), timeout=30):
                pass
        except urllib.error.HTTPError as error:
            if error.code != 409:
                raise

    def blob_names(self, container: str, prefix: str = "") -> list[str]:
        """Names of every blob of `container` under `prefix`, following the pages (directory markers included)."""
        names: list[str] = []
        marker = ""
        while True:
            query = {"comp": "list", "restype": "container", "prefix": prefix, **({"marker": marker} if marker else {})}
            with self._open(self._signed("GET", f"/{container}", query), timeout=30) as answer:
                root = ElementTree.fromstring(answer.read())  # noqa: S314 - our own emulator's answer
            names += [element.text or "" for element in root.iter("Name")]
            marker = root.findtext("NextMarker") or ""
            if not marker:
                return names


class Azurite(procs.ProcessInWorkdir):
    """Azurite's Blob service with one container, listening on `address` (loopback; the node's bridge gateway for
    pods). Its blobs live in its work directory: they go when it stops."""

    def __init__(
        self,
        container: str = CONTAINER,
        address: str = LOOPBACK,
        port: int | None = None,
        tls: tuple[Path, Path, Path] | None = None,
        accounts: tuple[str, ...] = (ACCOUNT,),
    ) -> None:
        """`tls`: (CA certificate, serving certificate, its key) to serve HTTPS and take OAuth tokens; `accounts`:
        the storage accounts it knows (each with the emulator's key and the container)."""
        self.container, self.address, self.tls, self.accounts = container, address, tls, accounts
        self.port = port or procs.free_port(address)
        self.workdir = Path(tempfile.mkdtemp(prefix="headrace-azurite-"))
        self._process: procs.Process | None = None

    @property
    def endpoint(self) -> str:
        """The emulator's address (``spec.state.azure.endpoint``, the connector's ``fs.azure.abfs.endpoint``)."""
        return f"{'https' if self.tls else 'http'}://{self.address}:{self.port}"

    def client(self, account: str = ACCOUNT) -> BlobClient:
        return BlobClient(self.endpoint, account=account, ca=self.tls[0] if self.tls else None)

    def uri(self, path: str, account: str = ACCOUNT) -> str:
        """The abfs:// URI of `path` in the container of `account` (abfss:// over HTTPS)."""
        host = f"{account}.dfs.core.windows.net"
        return f"abfs{'s' if self.tls else ''}://{self.container}@{host}/{path.lstrip('/')}"

    def start(self) -> Azurite:
        tls = (self.tls[1], self.tls[2]) if self.tls else None
        argv = server_argv(ensure_azurite(), self.address, self.port, self.workdir, tls)
        env = {**os.environ, "AZURITE_ACCOUNTS": ";".join(f"{account}:{ACCOUNT_KEY}" for account in self.accounts)}
        self._process = procs.spawn("azurite-blob", argv, self.workdir / "azurite.log", env=env)
        procs.wait_until_healthy(
            self._process, self.client().answers, timeout_seconds=START_TIMEOUT_SECONDS, interval_seconds=0.2
        )
        for account in self.accounts:
            self.client(account).create_container(self.container)
        return self

    def names(self, prefix: str = "", account: str = ACCOUNT) -> list[str]:
        """Blob names of the container of `account` under `prefix`."""
        return self.client(account).blob_names(self.container, prefix)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class EntraTokens(procs.HttpServerThread):
    """Entra ID's token endpoint for Workload Identity, as the ABFS connector's WorkloadIdentityTokenProvider calls it:
    POST <authority><tenant>/oauth2/v2.0/token with a client-credentials grant whose client assertion is the pod's
    ServiceAccount token; and the instance metadata service's managed identity endpoint, as its MsiTokenProvider
    calls it (GET /metadata/identity/oauth2/token with ``Metadata: true``, at `msi_endpoint`). It answers `assertion`
    (the projected token's content) for `client_id`, and the metadata call for `client_id`, with an access token for
    Azure Storage (a JWT with the lifetime, issuer and audience Azurite checks, unsigned); `grants` records
    ``<client id> <tenant>`` or ``managed <client id>`` of each token handed out, `refused` each request refused."""

    def __init__(self, assertion: str, client_id: str, tenant: str, address: str = LOOPBACK) -> None:
        self.assertion, self.client_id, self.tenant, self.address = assertion, client_id, tenant, address
        self.port = procs.free_port(address)
        self.grants: list[str] = []
        self.refused: list[str] = []

    @property
    def authority(self) -> str:
        """The authority host (``spec.state.azure.workloadIdentity.authority``)."""
        return f"http://{self.address}:{self.port}/"

    @property
    def msi_endpoint(self) -> str:
        """The managed identity endpoint (the connector's fs.azure.account.oauth2.msi.endpoint)."""
        return f"http://{self.address}:{self.port}{MSI_TOKEN_PATH}"

    def access_token(self) -> str:
        now = int(time.time())
        claims = {
            "aud": "https://storage.azure.com",
            "iss": f"https://sts.windows.net/{self.tenant}/",
            "iat": now,
            "nbf": now - 60,
            "exp": now + 3600,
            "appid": self.client_id,
        }
        header = _b64url(json.dumps({"alg": "none", "typ": "JWT"}).encode())
        return f"{header}.{_b64url(json.dumps(claims).encode())}."

    def start(self) -> EntraTokens:
        tokens = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                params = {key: values[0] for key, values in urllib.parse.parse_qs(query).items()}
                wanted = params.get("client_id", tokens.client_id) == tokens.client_id
                if path != MSI_TOKEN_PATH or self.headers.get("Metadata") != "true" or not wanted:
                    tokens.refused.append(self.path)
                    self._answer(400, {"error": "invalid_request"})
                    return
                tokens.grants.append(f"managed {params.get('client_id', '')}".strip())
                expires_on = str(int(time.time()) + 3600)
                answer = {"access_token": tokens.access_token(), "expires_in": "3600", "expires_on": expires_on}
                self._answer(200, {**answer, "resource": params.get("resource", ""), "token_type": "Bearer"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = {
                    key: values[0] for key, values in urllib.parse.parse_qs(self.rfile.read(length).decode()).items()
                }
                expected = {
                    "grant_type": "client_credentials",
                    "client_id": tokens.client_id,
                    "client_assertion": tokens.assertion,
                    "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                }
                path_ok = self.path.split("?")[0] == f"/{tokens.tenant}/oauth2/v2.0/token"
                if not path_ok or any(form.get(key) != value for key, value in expected.items()):
                    tokens.refused.append(f"{self.path} {sorted(form)}")
                    self._answer(400, {"error": "invalid_client"})
                    return
                tokens.grants.append(f"{form['client_id']} {tokens.tenant}")
                answer = {"access_token": tokens.access_token(), "expires_in": 3600, "token_type": "Bearer"}
                self._answer(200, answer)

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                del args

        self._serve(self.address, self.port, Handler)
        return self


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.azure", description=__doc__)
    parser.add_argument("--address", default=LOOPBACK)
    parser.add_argument("--port", type=int, default=10000)
    parser.add_argument("--container", default=CONTAINER)
    args = parser.parse_args(argv)
    # A plain kill unwinds too, so the service stops and its directory goes.
    with (
        contextlib.suppress(KeyboardInterrupt),
        procs.terminated_as_interrupt(),
        Azurite(args.container, args.address, args.port) as server,
    ):
        print(f"Azurite's Blob service at {server.endpoint} with container {server.container}; Ctrl-C stops it")
        assert server._process is not None
        server._process.popen.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

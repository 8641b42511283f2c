"""A real Azure Blob Storage API server for tests of abfs:// state: Azurite's Blob service, installed from npm.

Owns: installing Azurite at the version and with the whole dependency tree testbed/azurite/package-lock.json pins
(`npm ci`, integrity hashes checked) into the cache, running its Blob service over plain HTTP on one address with its
blobs in its own work directory, the container it creates at start, the image's pinned ABFS jars for local-mode
Spark, and a small Blob REST client signed with Shared Key (create a container, list blob names) for tests.
Never: used by the operator or the runtime. Azurite knows one account, devstoreaccount1, whose key is public (its
documentation prints it); it checks Shared Key signatures, and accepts OAuth tokens only over HTTPS.
`python -m testbed.azure` runs one on loopback in the foreground until interrupted.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import hmac
import json
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from email.utils import formatdate
from pathlib import Path
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


def server_argv(binary: Path, address: str, port: int, workdir: Path) -> list[str]:
    """The Blob service's command line: plain HTTP on `address`:`port`, its blobs and metadata under `workdir`."""
    return [
        str(binary),
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

    def __init__(self, endpoint: str, account: str = ACCOUNT, key: str = ACCOUNT_KEY) -> None:
        self.endpoint, self.account, self._key = endpoint.rstrip("/"), account, base64.b64decode(key)

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
            with urllib.request.urlopen(self._signed("GET", "/", {"comp": "list"}), timeout=2):  # noqa: S310
                return True
        except (OSError, ValueError):
            return False

    def create_container(self, name: str) -> None:
        """Create container `name` (one the service already has is fine)."""
        try:
            with urllib.request.urlopen(self._signed("PUT", f"/{name}", {"restype": "container"}), timeout=30):  # noqa: S310
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
            with urllib.request.urlopen(self._signed("GET", f"/{container}", query), timeout=30) as answer:  # noqa: S310
                root = ElementTree.fromstring(answer.read())  # noqa: S314 - our own emulator's answer
            names += [element.text or "" for element in root.iter("Name")]
            marker = root.findtext("NextMarker") or ""
            if not marker:
                return names


class Azurite(procs.ProcessInWorkdir):
    """Azurite's Blob service with one container, listening on `address` (loopback; the node's bridge gateway for
    pods). Its blobs live in its work directory: they go when it stops."""

    def __init__(self, container: str = CONTAINER, address: str = LOOPBACK, port: int | None = None) -> None:
        self.container, self.address = container, address
        self.port = port or procs.free_port(address)
        self.workdir = Path(tempfile.mkdtemp(prefix="headrace-azurite-"))
        self._process: procs.Process | None = None

    @property
    def endpoint(self) -> str:
        """The emulator's address (``spec.state.azure.endpoint``, the connector's ``fs.azure.abfs.endpoint``)."""
        return f"http://{self.address}:{self.port}"

    def client(self) -> BlobClient:
        return BlobClient(self.endpoint)

    def uri(self, path: str) -> str:
        """The abfs:// URI of `path` in the container (plain HTTP: abfs://, not abfss://)."""
        return f"abfs://{self.container}@{ACCOUNT_HOST}/{path.lstrip('/')}"

    def start(self) -> Azurite:
        argv = server_argv(ensure_azurite(), self.address, self.port, self.workdir)
        self._process = procs.spawn("azurite-blob", argv, self.workdir / "azurite.log")
        procs.wait_until_healthy(
            self._process, self.client().answers, timeout_seconds=START_TIMEOUT_SECONDS, interval_seconds=0.2
        )
        self.client().create_container(self.container)
        return self

    def names(self, prefix: str = "") -> list[str]:
        """Blob names of the container under `prefix`."""
        return self.client().blob_names(self.container, prefix)


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

"""A real S3-compatible object store for the local cluster: the Versity S3 Gateway over a directory.

Owns: building ``versitygw`` from its Go module at a pinned version into the cache (like `testbed.build`
does etcd), running it in its own process group with throw-away root credentials on loopback and on the
node's bridge gateway, creating the bucket at start, a small SigV4-signed client (create and list buckets,
list, put and server-side copy objects) for tests and benches, the selectorless ``s3`` Service in namespace
``s3`` (``http://s3.s3.svc:9000`` for pods) and the credentials Secret an app references, and removing
every file it made when it stops.
Never: used by the operator or the runtime; never listens beyond loopback and the bridge gateway.
`python -m testbed.objectstore` runs one on loopback in the foreground until interrupted.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import hmac
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from testbed import REPOSITORY, build, host_services, maven, procs

VERSITYGW_VERSION = "1.8.0"
VERSITYGW_MODULE = "github.com/versity/versitygw/cmd/versitygw"
LOOPBACK = "127.0.0.1"
REGION = "us-east-1"
BUCKET = "headrace"
NAMESPACE = "s3"
SERVICE = "s3"
PORT = 9000
SERVICE_ENDPOINT = f"http://{SERVICE}.{NAMESPACE}.svc:{PORT}"
SECRET_NAME = "s3-credentials"
DISCOVERY = "s3-testbed"  # ConfigMap in NAMESPACE: bucket, hostEndpoint, hostRoot
ACCESS_KEY_ID_KEY = "accessKeyId"
SECRET_ACCESS_KEY_KEY = "secretAccessKey"
START_TIMEOUT_SECONDS = 30.0
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


S3A_POM = REPOSITORY / "docker" / "s3a" / "pom.xml"
S3A_CHECKSUMS = REPOSITORY / "docker" / "s3a" / "jars.sha256"


def s3a_jars() -> list[Path]:
    """hadoop-aws and the AWS SDK modules the Spark image ships (docker/s3a/pom.xml), for local-mode Spark's
    ``spark.jars``; each checked against docker/s3a/jars.sha256 as the image build checks them."""
    return maven.pinned_jars(S3A_POM, S3A_CHECKSUMS)


def binary_path() -> Path:
    """Where the pinned gateway binary lives in the cache (it may not exist yet)."""
    return build.cache_root() / "bin" / f"versitygw-{VERSITYGW_VERSION}" / "versitygw"


def ensure_binary() -> Path:
    """Build the gateway (`go install <module>@v<version>`) into the cache if missing; return its path."""
    target = binary_path()
    if target.exists():
        return target
    if not shutil.which("go"):
        raise RuntimeError("the testbed needs the Go toolchain on PATH to build the S3 gateway from source")
    workdir = build.cache_root() / "src" / f"versitygw-{VERSITYGW_VERSION}"
    workdir.mkdir(parents=True, exist_ok=True)
    staging = target.parent / ".partial"
    env = {**build._go_env(workdir), "GOBIN": str(staging), "GOFLAGS": ""}  # the shared Go environment
    command = ["go", "install", "-trimpath", "-ldflags", "-s -w", f"{VERSITYGW_MODULE}@v{VERSITYGW_VERSION}"]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, cwd=workdir, env=env, check=True)
    (staging / "versitygw").rename(target)
    staging.rmdir()
    return target


# --- SigV4 ----------------------------------------------------------------------------------------


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def sign(
    method: str,
    url: str,
    headers: Mapping[str, str],
    payload_sha256: str,
    *,
    access_key: str,
    secret_key: str,
    region: str = REGION,
    now: datetime | None = None,
) -> dict[str, str]:
    """`headers` plus the AWS Signature Version 4 headers (x-amz-date, x-amz-content-sha256, Authorization)
    for an S3 request; every given header and ``host`` is signed."""
    parsed = urlsplit(url)
    moment = now or datetime.now(UTC)
    amz_date = moment.strftime("%Y%m%dT%H%M%SZ")
    signed_headers = {
        **{name.lower(): value.strip() for name, value in headers.items()},
        "host": parsed.netloc,
        "x-amz-content-sha256": payload_sha256,
        "x-amz-date": amz_date,
    }
    names = sorted(signed_headers)
    pairs = sorted(
        (quote(unquote(key), safe="-_.~"), quote(unquote(value), safe="-_.~"))
        for key, _, value in (part.partition("=") for part in parsed.query.split("&") if part)
    )
    canonical = "\n".join(
        [
            method,
            parsed.path or "/",  # callers pass the path URI-encoded once, as S3 signs it
            "&".join(f"{key}={value}" for key, value in pairs),
            "".join(f"{name}:{signed_headers[name]}\n" for name in names),
            ";".join(names),
            payload_sha256,
        ]
    )
    scope = f"{amz_date[:8]}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(("AWS4" + secret_key).encode(), amz_date[:8])
    for part in (region, "s3", "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    authorization = (
        f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return {
        **dict(headers),
        **{k: v for k, v in signed_headers.items() if k.startswith("x-amz")},
        "Authorization": authorization,
    }


@dataclass(frozen=True)
class S3Client:
    """A minimal path-style S3 client (SigV4, no dependencies) for tests, benches and the testbed."""

    endpoint: str
    access_key: str
    secret_key: str
    region: str = REGION
    session_token: str = ""  # temporary credentials (STS) sign with their session token too

    def answers(self) -> bool:
        """Whether the server lists buckets for these credentials (a start-up health check)."""
        try:
            self.list_buckets()
        except (OSError, RuntimeError):
            return False
        return True

    def request(
        self, method: str, path: str, body: bytes = b"", headers: Mapping[str, str] | None = None, timeout: float = 60
    ) -> tuple[int, bytes]:
        """Send one signed request; returns (status, body) for any HTTP status."""
        url = self.endpoint.rstrip("/") + path
        payload = hashlib.sha256(body).hexdigest() if body else _EMPTY_SHA256
        token = {"x-amz-security-token": self.session_token} if self.session_token else {}
        signed = sign(
            method,
            url,
            {**(headers or {}), **token},
            payload,
            access_key=self.access_key,
            secret_key=self.secret_key,
            region=self.region,
        )
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"not an S3 endpoint URL: {url}")
        request = urllib.request.Request(url, data=body if body or method == "PUT" else None, method=method)  # noqa: S310
        for name, value in signed.items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - our own endpoint
                return int(response.status), response.read()
        except urllib.error.HTTPError as error:
            return int(error.code), error.read()

    def _ok(self, method: str, path: str, body: bytes = b"", headers: Mapping[str, str] | None = None) -> bytes:
        status, answer = self.request(method, path, body, headers)
        if status // 100 != 2:
            raise RuntimeError(f"S3 {method} {path} answered {status}: {answer[:500]!r}")
        return answer

    def create_bucket(self, bucket: str) -> None:
        """Create a bucket (an existing one owned by us is fine)."""
        status, answer = self.request("PUT", f"/{bucket}")
        if status // 100 != 2 and b"BucketAlreadyOwnedByYou" not in answer:
            raise RuntimeError(f"S3 create bucket {bucket} answered {status}: {answer[:500]!r}")

    def list_buckets(self) -> list[str]:
        """Names of the buckets."""
        return re.findall(r"<Name>([^<]+)</Name>", self._ok("GET", "/").decode())

    def put_object(self, bucket: str, key: str, body: bytes) -> None:
        """Write one object."""
        self._ok("PUT", f"/{bucket}/{quote(key)}", body)

    def get_object(self, bucket: str, key: str) -> bytes:
        """Read one object."""
        return self._ok("GET", f"/{bucket}/{quote(key)}")

    def copy_object(self, bucket: str, source_key: str, target_key: str) -> None:
        """Server-side copy within a bucket (CopyObject: no bytes pass through this process)."""
        source = quote(f"/{bucket}/{source_key}")
        self._ok("PUT", f"/{bucket}/{quote(target_key)}", headers={"x-amz-copy-source": source})

    def list_keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every key under `prefix` (ListObjectsV2, following continuation tokens)."""
        keys: list[str] = []
        token = ""
        while True:
            query = f"list-type=2&prefix={quote(prefix, safe='')}"
            if token:
                query += f"&continuation-token={quote(token, safe='')}"
            text = self._ok("GET", f"/{bucket}?{query}").decode()
            keys += re.findall(r"<Key>([^<]+)</Key>", text)
            match = re.search(r"<NextContinuationToken>([^<]+)</NextContinuationToken>", text)
            if not match:
                return keys
            token = match.group(1)


# --- the server -----------------------------------------------------------------------------------


class ObjectStore(procs.Started):
    """A running gateway over a temporary directory, with one bucket; a context manager that always cleans up.

    It listens on loopback (for this machine) and, with `pod_address`, also there (for pods).
    """

    def __init__(self, workdir: Path | None = None, pod_address: str | None = None, bucket: str = BUCKET) -> None:
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="headrace-s3-"))
        self._own_workdir = workdir is None
        self.pod_address = pod_address
        self.bucket = bucket
        self.port = procs.free_port(LOOPBACK)
        self.pod_port = procs.free_port(pod_address) if pod_address else None
        self.access_key = "HR" + secrets.token_hex(9).upper()
        self.secret_key = base64.b64encode(secrets.token_bytes(30)).decode()
        self._process: procs.Process | None = None
        self._argv: list[str] = []
        self._env: dict[str, str] = {}
        self.start_seconds = 0.0

    @property
    def endpoint(self) -> str:
        """The endpoint for clients on this machine."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def root(self) -> Path:
        """The directory the gateway serves: ``<root>/<bucket>/<key>``."""
        return self.workdir / "data"

    @property
    def pid(self) -> int | None:
        """Process id of the gateway, once started."""
        return self._process.pid if self._process is not None else None

    def client(self) -> S3Client:
        """A client with the root credentials."""
        return S3Client(self.endpoint, self.access_key, self.secret_key)

    def start(self) -> ObjectStore:
        """Start the gateway, wait until it answers, create the bucket."""
        began = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        listen = ["--port", f"{LOOPBACK}:{self.port}"]
        if self.pod_address:
            listen += ["--port", f"{self.pod_address}:{self.pod_port}"]
        argv = [str(ensure_binary()), *listen, "--region", REGION, "--quiet", "posix", str(self.root)]
        env = {**os.environ, "ROOT_ACCESS_KEY_ID": self.access_key, "ROOT_SECRET_ACCESS_KEY": self.secret_key}
        self._process = procs.spawn("versitygw", argv, self.workdir / "versitygw.log", env=env)
        procs.wait_until_healthy(
            self._process, self.client().answers, timeout_seconds=START_TIMEOUT_SECONDS, interval_seconds=0.2
        )
        self._argv, self._env = argv, env
        self.client().create_bucket(self.bucket)
        self.start_seconds = time.monotonic() - began
        return self

    def stop_server(self) -> None:
        """Stop the gateway process alone, keeping its files: clients get connection refused until `start_server`."""
        if self._process is not None:
            procs.stop(self._process, grace_seconds=5)
            self._process = None

    def start_server(self) -> None:
        """Start the gateway again after `stop_server`: same ports, credentials and files."""
        if self._process is not None or not self._argv:
            raise RuntimeError("the gateway is running, or was never started")
        self._process = procs.spawn("versitygw", self._argv, self.workdir / "versitygw.log", env=self._env)
        procs.wait_until_healthy(
            self._process, self.client().answers, timeout_seconds=START_TIMEOUT_SECONDS, interval_seconds=0.2
        )

    def stop(self) -> None:
        """Stop the gateway and remove its directory (when it made it). Idempotent."""
        try:
            if self._process is not None:
                procs.stop(self._process, grace_seconds=5)
                self._process = None
        finally:
            if self._own_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
            else:
                shutil.rmtree(self.root, ignore_errors=True)


class ClusterObjectStore(procs.Started):
    """The cluster's S3 server: `start()` runs it on loopback and the bridge gateway, creates the bucket and
    publishes the ``s3`` Service (``http://s3.s3.svc:9000``) with its EndpointSlice and the root credentials
    as the Secret ``s3-credentials`` in namespace ``s3`` (an app's Secret must be in its own namespace:
    `secret_for` gives the copy). The Kubernetes objects go with the cluster; `stop()` removes the server's files.
    """

    def __init__(self, workdir: Path, gateway: str, kubectl: Path, kubeconfig: Path) -> None:
        self.workdir, self.gateway, self.kubectl, self.kubeconfig = workdir, gateway, kubectl, kubeconfig
        self.store: ObjectStore | None = None

    def _running(self) -> ObjectStore:
        if self.store is None:
            raise RuntimeError("the cluster's object store is not running")
        return self.store

    @property
    def endpoint(self) -> str:
        """The endpoint for clients on this machine (pods use `SERVICE_ENDPOINT`)."""
        return self._running().endpoint

    @property
    def bucket(self) -> str:
        """The bucket made at start."""
        return self._running().bucket

    @property
    def root(self) -> Path:
        """The directory the server stores objects in (``<root>/<bucket>/<key>``), readable on this machine."""
        return self._running().root

    def client(self) -> S3Client:
        """A client for this machine with the root credentials."""
        return self._running().client()

    def stop_server(self) -> None:
        """Stop the server process alone (its files and the Service stay): pods get connection refused."""
        self._running().stop_server()

    def start_server(self) -> None:
        """Start the server again after `stop_server`."""
        self._running().start_server()

    def secret_for(self, namespace: str, name: str = SECRET_NAME) -> dict[str, Any]:
        """The credentials Secret for an app in `namespace` (``spec.state.s3`` from `s3_spec` references it)."""
        store = self._running()
        return credentials_secret(namespace, store.access_key, store.secret_key, name)

    def discovery(self) -> dict[str, Any]:
        """The ConfigMap telling tools on this machine (the quick start) where the server and its files are."""
        store = self._running()
        data = {"bucket": store.bucket, "hostEndpoint": store.endpoint, "hostRoot": str(store.root)}
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": DISCOVERY, "namespace": NAMESPACE},
            "data": data,
        }

    def start(self) -> ClusterObjectStore:
        """Start the server, then apply the namespace, Service, EndpointSlice and credentials Secret."""
        self.store = ObjectStore(self.workdir, pod_address=self.gateway).start()
        assert self.store.pod_port is not None
        ports = [host_services.HostPort("http", PORT, self.store.pod_port)]
        manifests = [
            host_services.namespace_manifest(NAMESPACE),
            *host_services.host_service(NAMESPACE, SERVICE, self.gateway, ports),
            self.secret_for(NAMESPACE),
            self.discovery(),
        ]
        host_services.apply(self.kubectl, self.kubeconfig, manifests)
        return self

    def stop(self) -> None:
        """Stop the server and remove its files. Idempotent."""
        store, self.store = self.store, None
        if store is not None:
            store.stop()
            shutil.rmtree(self.workdir, ignore_errors=True)


@dataclass(frozen=True)
class AppStorage:
    """Where an app in one namespace keeps its state on the cluster's S3 server, as seen from this machine."""

    bucket: str
    namespace: str
    host_root: Path

    @property
    def state(self) -> dict[str, Any]:
        """``spec.state`` locations and settings: ``s3a://<bucket>/<namespace>/state`` and ``.../savepoints``."""
        return {
            "checkpointDir": f"s3a://{self.bucket}/{self.namespace}/state",
            "savepointDir": f"s3a://{self.bucket}/{self.namespace}/savepoints",
            "s3": s3_spec(),
        }

    def host_path(self, uri: str) -> Path:
        """The file on this machine holding an ``s3a://`` object or prefix of the bucket."""
        return self.host_root / self.bucket / uri.removeprefix(f"s3a://{self.bucket}/")


def storage_for(api: Any, namespace: str) -> AppStorage | None:
    """Prepare `namespace` for state on the cluster's S3 server: copy the credentials Secret into it (an app's
    secretKeyRef reads its own namespace) and tell where the bucket lies. None when the cluster has none."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    try:
        found = core.read_namespaced_config_map(DISCOVERY, NAMESPACE).data or {}
        secret = core.read_namespaced_secret(SECRET_NAME, NAMESPACE)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    body: Any = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": SECRET_NAME, "namespace": namespace},
        "data": secret.data,
    }
    try:
        core.create_namespaced_secret(namespace, body)
    except client.ApiException as error:
        if error.status != 409:
            raise
        core.replace_namespaced_secret(SECRET_NAME, namespace, body)
    return AppStorage(found["bucket"], namespace, Path(found["hostRoot"]))


def credentials_secret(namespace: str, access_key: str, secret_key: str, name: str = SECRET_NAME) -> dict[str, Any]:
    """The Secret an app's ``spec.state.s3.credentialsSecret`` references (keys accessKeyId, secretAccessKey)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": {ACCESS_KEY_ID_KEY: access_key, SECRET_ACCESS_KEY_KEY: secret_key},
    }


def s3_spec(secret_name: str = SECRET_NAME) -> dict[str, Any]:
    """``spec.state.s3`` for an app using the cluster's object store through its Service."""
    return {
        "endpoint": SERVICE_ENDPOINT,
        "region": REGION,
        "pathStyleAccess": True,
        "credentialsSecret": {
            "name": secret_name,
            "accessKeyIdKey": ACCESS_KEY_ID_KEY,
            "secretAccessKeyKey": SECRET_ACCESS_KEY_KEY,
        },
    }


def main(argv: list[str] | None = None) -> int:
    """Run one gateway on loopback in the foreground, printing its endpoint and credentials, until interrupted."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--bucket", default=BUCKET)
    args = parser.parse_args(argv)
    with ObjectStore(bucket=args.bucket) as store:
        print(f"versitygw {VERSITYGW_VERSION} on {store.endpoint} (started in {store.start_seconds:.2f}s)")
        keys = store.workdir / "credentials.env"
        keys.touch(mode=0o600)
        keys.write_text(f"AWS_ACCESS_KEY_ID={store.access_key}\nAWS_SECRET_ACCESS_KEY={store.secret_key}\n")
        print(f"bucket {store.bucket}; credentials in {keys}")
        print(f"data: {store.root}; Ctrl-C stops it and removes {store.workdir}", flush=True)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.default_int_handler)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

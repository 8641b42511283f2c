"""A real Kubernetes control plane for tests: etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

Owns: choosing ports, the throw-away PKI and kubeconfigs of one control plane, the command lines of its
four components (pure functions of a `Plan`), starting them in order and waiting until each is healthy,
stopping them, and `python -m testbed.controlplane` to run one in the foreground. Modelled on
controller-runtime's envtest, plus the controller-manager and the scheduler.
Never: builds binaries (see `testbed.build`), runs a node, or touches anything outside its
workdir.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import ipaddress
import shutil
import signal
import ssl
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

import yaml

from testbed import build, procs
from testbed.pki import ClusterPKI

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# The issuer's discovery document and keys (an OpenID provider's), served by the apiserver itself.
OPENID_CONFIGURATION_PATH = "/.well-known/openid-configuration"
JWKS_PATH = "/openid/v1/jwks"
APISERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
FRONT_PROXY_CLIENT = "front-proxy-client"
ADMISSION_PLUGINS = ("NodeRestriction",)  # on top of the apiserver's default set
WILDCARD_ADDRESSES = ("0.0.0.0", "::")  # noqa: S104 - names of the wildcard, not a bind
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
START_ATTEMPTS = 3  # a port picked as free can be taken by someone else before the component binds it
ETCD_TIMEOUT_SECONDS = 30.0
APISERVER_TIMEOUT_SECONDS = 120.0
COMPONENT_TIMEOUT_SECONDS = 90.0


class ControlPlaneError(RuntimeError):
    """The control plane could not start; the message names the component and carries its log's tail."""


# ------------------------------------------------------------------------------------------------
# Pure: what to run, given the addresses, ports and file locations.
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ports:
    """The TCP ports of one control plane (all on loopback except the apiserver's bind address)."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int


@dataclass(frozen=True)
class Layout:
    """Where each file of a control plane lives inside its workdir."""

    workdir: Path

    @property
    def pki(self) -> Path:
        """Certificates and keys."""
        return self.workdir / "pki"

    @property
    def etcd_data(self) -> Path:
        """etcd's data directory."""
        return self.workdir / "etcd-data"

    @property
    def logs(self) -> Path:
        """One log file per component."""
        return self.workdir / "logs"

    @property
    def kubeconfigs(self) -> Path:
        """Kubeconfig files (admin, components, users, service accounts)."""
        return self.workdir / "kubeconfigs"

    def log(self, component: str) -> Path:
        """The log file of one component."""
        return self.logs / f"{component}.log"

    def kubeconfig(self, user: str) -> Path:
        """The kubeconfig file of one user."""
        return self.kubeconfigs / f"{user}.kubeconfig"


@dataclass(frozen=True)
class Credentials:
    """The files each component authenticates and serves with."""

    ca_cert: Path
    ca_key: Path
    service_account_key: Path
    service_account_public_key: Path
    apiserver_cert: Path
    apiserver_key: Path
    kubelet_client_cert: Path
    kubelet_client_key: Path
    front_proxy_client: tuple[Path, Path]
    controller_manager_serving: tuple[Path, Path]
    scheduler_serving: tuple[Path, Path]


@dataclass(frozen=True)
class Plan:
    """Everything the command lines depend on."""

    binaries: Path
    layout: Layout
    ports: Ports
    credentials: Credentials
    bind_address: str
    advertise_address: str | None


def host_for_clients(bind_address: str) -> str:
    """The address local clients use to reach a server bound to `bind_address`."""
    return "127.0.0.1" if bind_address in WILDCARD_ADDRESSES else bind_address


def https_url(host: str, port: int) -> str:
    """`https://host:port`, with IPv6 literals bracketed."""
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def apiserver_subject_alternative_names(
    bind_address: str, advertise_address: str | None, extra_sans: Sequence[str]
) -> tuple[list[str], list[str]]:
    """(DNS names, IP addresses) the apiserver's serving certificate must be valid for."""
    candidates = ["127.0.0.1", KUBERNETES_SERVICE_IP, bind_address, advertise_address or "", *extra_sans]
    addresses = [value for value in candidates if _is_ip(value) and value not in WILDCARD_ADDRESSES]
    dns_names = [*APISERVER_DNS_NAMES, *(value for value in extra_sans if value and not _is_ip(value))]
    return list(dict.fromkeys(dns_names)), list(dict.fromkeys(addresses))


def etcd_command(plan: Plan) -> list[str]:
    """etcd on loopback with a throw-away data directory and no fsync."""
    client = f"http://127.0.0.1:{plan.ports.etcd_client}"
    peer = f"http://127.0.0.1:{plan.ports.etcd_peer}"
    return [
        str(plan.binaries / "etcd"),
        "--name=default",
        f"--data-dir={plan.layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=default={peer}",
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]


def apiserver_command(plan: Plan) -> list[str]:
    """kube-apiserver with client-certificate and ServiceAccount authentication, Node and RBAC authorization."""
    credentials = plan.credentials
    command = [
        str(plan.binaries / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{plan.ports.etcd_client}",
        f"--bind-address={plan.bind_address}",
        f"--secure-port={plan.ports.apiserver}",
        f"--tls-cert-file={credentials.apiserver_cert}",
        f"--tls-private-key-file={credentials.apiserver_key}",
        f"--client-ca-file={credentials.ca_cert}",
        "--authorization-mode=Node,RBAC",
        f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={credentials.service_account_public_key}",
        f"--service-account-signing-key-file={credentials.service_account_key}",
        # The discovery document names the keys where this machine's clients reach them (an STS trusting the
        # issuer fetches them; the issuer's own name resolves only inside the cluster).
        f"--service-account-jwks-uri={https_url(host_for_clients(plan.bind_address), plan.ports.apiserver)}{JWKS_PATH}",
        f"--kubelet-client-certificate={credentials.kubelet_client_cert}",
        f"--kubelet-client-key={credentials.kubelet_client_key}",
        "--kubelet-preferred-address-types=InternalIP",
        # The aggregation layer (front proxy), as kubeadm sets it up; components read this CA too.
        f"--requestheader-client-ca-file={credentials.ca_cert}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={credentials.front_proxy_client[0]}",
        f"--proxy-client-key-file={credentials.front_proxy_client[1]}",
        "--allow-privileged=true",
        "--profiling=false",
    ]
    if plan.advertise_address:
        command.append(f"--advertise-address={plan.advertise_address}")
    return command


def _controller_common_flags(plan: Plan, user: str, port: int, serving: tuple[Path, Path]) -> list[str]:
    kubeconfig = plan.layout.kubeconfig(user)
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--tls-cert-file={serving[0]}",
        f"--tls-private-key-file={serving[1]}",
        "--leader-elect=false",
        "--profiling=false",
    ]


def controller_manager_command(plan: Plan) -> list[str]:
    """kube-controller-manager running every default controller, with per-controller credentials."""
    credentials = plan.credentials
    return [
        str(plan.binaries / "kube-controller-manager"),
        *_controller_common_flags(
            plan, "kube-controller-manager", plan.ports.controller_manager, credentials.controller_manager_serving
        ),
        f"--root-ca-file={credentials.ca_cert}",
        f"--service-account-private-key-file={credentials.service_account_key}",
        "--use-service-account-credentials=true",
        "--controllers=*",
        f"--cluster-signing-cert-file={credentials.ca_cert}",
        f"--cluster-signing-key-file={credentials.ca_key}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
    ]


def scheduler_command(plan: Plan) -> list[str]:
    """kube-scheduler with its default profile."""
    return [
        str(plan.binaries / "kube-scheduler"),
        *_controller_common_flags(plan, "kube-scheduler", plan.ports.scheduler, plan.credentials.scheduler_serving),
    ]


def kubeconfig_document(server: str, ca_cert: Path, user_name: str, user: Mapping[str, str]) -> dict[str, Any]:
    """A kubeconfig with one cluster, one user and one current context."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "headrace-testbed", "cluster": {"server": server, "certificate-authority": str(ca_cert)}}
        ],
        "users": [{"name": user_name, "user": dict(user)}],
        "contexts": [{"name": user_name, "context": {"cluster": "headrace-testbed", "user": user_name}}],
        "current-context": user_name,
    }


def client_certificate_user(cert: Path, key: Path) -> dict[str, str]:
    """The kubeconfig user entry for a client certificate."""
    return {"client-certificate": str(cert), "client-key": str(key)}


# ------------------------------------------------------------------------------------------------
# I/O: files, health probes and processes.
# ------------------------------------------------------------------------------------------------


def write_kubeconfig(path: Path, document: Mapping[str, Any]) -> Path:
    """Write a kubeconfig readable only by its owner."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.write_text(yaml.safe_dump(dict(document), sort_keys=False))
    return path


def http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    """True if GET `url` answers 200 within two seconds."""
    # Never through a proxy from the environment: every probe targets this host.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(url, timeout=2) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


Probe = tuple[str, ssl.SSLContext | None]


def all_ok(probes: Sequence[Probe]) -> bool:
    """True if every (url, TLS context) probe answers 200."""
    return all(http_ok(url, context) for url, context in probes)


def _tls_context(ca_cert: Path, client: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_cert))
    if client:
        context.load_cert_chain(str(client[0]), str(client[1]))
    return context


def _pick_ports(bind_address: str) -> Ports:
    free = procs.free_port
    return Ports(free(), free(), free(bind_address), free(), free())


def _issue_credentials(pki: ClusterPKI, sans: tuple[list[str], list[str]]) -> Credentials:
    apiserver_cert, apiserver_key = pki.issue_serving_cert("kube-apiserver", sans[0], sans[1])
    kubelet_client = pki.issue_client_cert("kube-apiserver-kubelet-client", ["system:masters"])
    return Credentials(
        ca_cert=pki.ca_cert,
        ca_key=pki.ca_key,
        service_account_key=pki.service_account_key,
        service_account_public_key=pki.service_account_public_key,
        apiserver_cert=apiserver_cert,
        apiserver_key=apiserver_key,
        kubelet_client_cert=kubelet_client[0],
        kubelet_client_key=kubelet_client[1],
        front_proxy_client=pki.issue_client_cert(FRONT_PROXY_CLIENT),
        controller_manager_serving=pki.issue_serving_cert("kube-controller-manager", ["localhost"], ["127.0.0.1"]),
        scheduler_serving=pki.issue_serving_cert("kube-scheduler", ["localhost"], ["127.0.0.1"]),
    )


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class _Running:
    """What exists while the control plane runs."""

    pki: ClusterPKI
    credentials: Credentials
    ports: Ports | None = None
    processes: dict[str, procs.Process] = field(default_factory=dict)


class ControlPlane:
    """etcd + kube-apiserver (+ kube-controller-manager, + kube-scheduler), as a context manager.

    `workdir` must be missing or empty; everything the control plane writes goes there, and `stop()`
    removes it unless `keep_workdir` is set. With `bind_address="0.0.0.0"` the apiserver also serves
    other hosts (pods on a bridge); give `advertise_address` and put that address in `extra_sans`.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        bind_address: str = "127.0.0.1",
        advertise_address: str | None = None,
        extra_sans: Sequence[str] = (),
        controllers: bool = True,
        scheduler: bool = True,
        keep_workdir: bool = False,
        binaries: Path | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.bind_address = bind_address
        self.advertise_address = advertise_address
        self.extra_sans = tuple(extra_sans)
        self.controllers = controllers
        self.scheduler = scheduler
        self.keep_workdir = keep_workdir
        self.binaries = binaries or build.bin_dir()
        self.layout = Layout(self.workdir)
        self.startup_seconds: float | None = None
        # Seconds from start() until each step was done ("pki", then each component healthy).
        self.ready_after: dict[str, float] = {}
        self._began = 0.0
        self._running: _Running | None = None
        self._owns_workdir = False

    # --- public attributes -----------------------------------------------------------------------

    @property
    def pki(self) -> ClusterPKI:
        """The cluster's PKI: issue more certificates (e.g. a kubelet's) from it."""
        return self._require_running().pki

    @property
    def ca_cert(self) -> Path:
        """The cluster CA certificate (trust anchor for the apiserver)."""
        return self.layout.pki / "ca.crt"

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (user `headrace-admin` in `system:masters`: bypasses RBAC)."""
        return self.layout.kubeconfig("admin")

    @property
    def ports(self) -> Ports:
        """The ports in use."""
        ports = self._require_running().ports
        if ports is None:
            raise RuntimeError("the control plane has no ports yet")
        return ports

    @property
    def url(self) -> str:
        """The apiserver URL for clients on this host."""
        return https_url(host_for_clients(self.bind_address), self.ports.apiserver)

    @property
    def advertised_url(self) -> str:
        """The apiserver URL for other hosts (pods): the advertise address, else the client URL."""
        return https_url(self.advertise_address, self.ports.apiserver) if self.advertise_address else self.url

    @property
    def processes(self) -> Mapping[str, procs.Process]:
        """The running components by name."""
        return dict(self._running.processes) if self._running else {}

    def memory(self) -> dict[str, int]:
        """Resident memory (bytes) of each running component."""
        return {name: procs.rss_bytes(process.pid) for name, process in self.processes.items()}

    # --- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start every component and wait until all are healthy; on failure stop everything and raise."""
        if self._running:
            raise RuntimeError("the control plane is already running")
        self._prepare_workdir()
        self._began = time.monotonic()
        self.ready_after = {}
        try:
            self._running = self._create_credentials()
            self._record_ready("pki")
            self._start_with_retries(self._running)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - self._began

    def stop(self) -> None:
        """Stop every component (SIGTERM, then SIGKILL), remove the workdir unless kept. Idempotent."""
        running, self._running = self._running, None
        try:
            if running:
                self._stop_processes(running)
        finally:
            if self._owns_workdir and not self.keep_workdir:
                _remove_tree(self.workdir)
                self._owns_workdir = False

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver alone (SIGTERM, then SIGKILL): etcd and the controllers keep running, clients get
        connection refused until `start_apiserver`."""
        procs.stop(self._require_running().processes.pop("kube-apiserver"))

    def start_apiserver(self) -> None:
        """Start kube-apiserver again after `stop_apiserver`, on the same port with the same certificates, and wait
        until it is ready."""
        running = self._require_running()
        if "kube-apiserver" in running.processes:
            raise RuntimeError("kube-apiserver is already running")
        apiserver = self._spawn(running, "kube-apiserver", apiserver_command(self._plan(running)))
        admin_tls = _tls_context(self.ca_cert, self._admin_client_cert())
        self._wait(apiserver, [(f"{self.url}/readyz", admin_tls)], APISERVER_TIMEOUT_SECONDS)

    # --- clients --------------------------------------------------------------------------------

    def kubeconfig_for(self, user_cert: Path, user_key: Path, *, server: str | None = None) -> Path:
        """A kubeconfig authenticating with a client certificate issued by `pki` (server: `url`).

        Written to `kubeconfigs/user-<certificate file stem>.kubeconfig`; a later call for the same
        certificate overwrites it.
        """
        user = Path(user_cert).stem
        document = kubeconfig_document(
            server or self.url, self.ca_cert, user, client_certificate_user(user_cert, user_key)
        )
        return write_kubeconfig(self.layout.kubeconfig(f"user-{user}"), document)

    def service_account_kubeconfig(
        self, namespace: str, name: str, *, expiration_seconds: int = 86400, server: str | None = None
    ) -> Path:
        """A kubeconfig with a TokenRequest token of an existing ServiceAccount (so RBAC applies)."""
        from kubernetes import client

        with self.api_client() as api:
            request = client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration_seconds)
            )
            answer = client.CoreV1Api(api).create_namespaced_service_account_token(name, namespace, request)
        if answer.status is None or not answer.status.token:
            raise ControlPlaneError(f"TokenRequest for ServiceAccount {namespace}/{name} returned no token")
        user = f"system:serviceaccount:{namespace}:{name}"
        document = kubeconfig_document(server or self.url, self.ca_cert, user, {"token": str(answer.status.token)})
        return write_kubeconfig(self.layout.kubeconfig(f"sa-{namespace}-{name}"), document)

    def api_client(self, kubeconfig: Path | None = None) -> ApiClient:
        """A `kubernetes.client.ApiClient` for `kubeconfig` (default: admin). Close it after use."""
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig or self.kubeconfig), client_configuration=configuration
        )
        configuration.no_proxy = "*"  # this control plane is local: never use a proxy from the environment
        return client.ApiClient(configuration)

    # --- internals ------------------------------------------------------------------------------

    def _require_running(self) -> _Running:
        if not self._running:
            raise RuntimeError("the control plane is not running; call start()")
        return self._running

    def _prepare_workdir(self) -> None:
        if self.workdir.exists() and any(self.workdir.iterdir()):
            raise ControlPlaneError(f"workdir {self.workdir} must be missing or empty")
        self._owns_workdir = True
        for directory in (self.layout.pki, self.layout.logs, self.layout.kubeconfigs):
            directory.mkdir(parents=True, exist_ok=True)

    def _create_credentials(self) -> _Running:
        pki = ClusterPKI.create(self.layout.pki)
        sans = apiserver_subject_alternative_names(self.bind_address, self.advertise_address, self.extra_sans)
        running = _Running(pki, _issue_credentials(pki, sans))
        self._write_component_kubeconfigs(pki)
        return running

    def _write_component_kubeconfigs(self, pki: ClusterPKI) -> None:
        users = {
            "admin": ("headrace-admin", ["system:masters"]),
            "kube-controller-manager": ("system:kube-controller-manager", []),
            "kube-scheduler": ("system:kube-scheduler", []),
        }
        for file_name, (common_name, groups) in users.items():
            cert, key = pki.issue_client_cert(common_name, groups)
            # Written with a placeholder server; the real URL is filled in once ports are chosen.
            document = kubeconfig_document(
                "https://127.0.0.1:0", self.ca_cert, common_name, client_certificate_user(cert, key)
            )
            write_kubeconfig(self.layout.kubeconfig(file_name), document)

    def _point_kubeconfigs_at(self, url: str) -> None:
        for file_name in ("admin", "kube-controller-manager", "kube-scheduler"):
            path = self.layout.kubeconfig(file_name)
            document = yaml.safe_load(path.read_text())
            document["clusters"][0]["cluster"]["server"] = url
            write_kubeconfig(path, document)

    def _start_with_retries(self, running: _Running) -> None:
        for attempt in range(1, START_ATTEMPTS + 1):
            running.ports = _pick_ports(self.bind_address)
            self._point_kubeconfigs_at(self.url)
            try:
                self._start_components(running)
                return
            except procs.ProcessFailedError as error:
                self._stop_processes(running)
                if attempt == START_ATTEMPTS or not procs.bind_conflict(str(error)):
                    raise ControlPlaneError(str(error)) from error
                _remove_tree(self.layout.etcd_data)

    def _plan(self, running: _Running) -> Plan:
        assert running.ports is not None
        return Plan(
            self.binaries, self.layout, running.ports, running.credentials, self.bind_address, self.advertise_address
        )

    def _start_components(self, running: _Running) -> None:
        plan = self._plan(running)
        admin_tls = _tls_context(self.ca_cert, self._admin_client_cert())
        serving_tls = _tls_context(self.ca_cert)
        etcd = self._spawn(running, "etcd", etcd_command(plan))
        self._wait(etcd, [(f"http://127.0.0.1:{plan.ports.etcd_client}/health", None)], ETCD_TIMEOUT_SECONDS)
        apiserver = self._spawn(running, "kube-apiserver", apiserver_command(plan))
        self._wait(apiserver, [(f"{self.url}/readyz", admin_tls)], APISERVER_TIMEOUT_SECONDS)
        self._start_optional_components(running, plan, admin_tls, serving_tls)

    def _start_optional_components(
        self, running: _Running, plan: Plan, admin_tls: ssl.SSLContext, serving_tls: ssl.SSLContext
    ) -> None:
        pending: list[tuple[procs.Process, list[Probe]]] = []
        if self.controllers:
            manager = self._spawn(running, "kube-controller-manager", controller_manager_command(plan))
            # Healthy is not enough: wait until its controllers act (the default ServiceAccount exists),
            # so that pods can be created in `default` as soon as start() returns.
            default_account = f"{self.url}/api/v1/namespaces/default/serviceaccounts/default"
            health = f"https://127.0.0.1:{plan.ports.controller_manager}/healthz"
            pending.append((manager, [(health, serving_tls), (default_account, admin_tls)]))
        if self.scheduler:
            scheduler = self._spawn(running, "kube-scheduler", scheduler_command(plan))
            pending.append((scheduler, [(f"https://127.0.0.1:{plan.ports.scheduler}/healthz", serving_tls)]))
        for process, probes in pending:
            self._wait(process, probes, COMPONENT_TIMEOUT_SECONDS)

    def _wait(self, process: procs.Process, probes: list[Probe], timeout_seconds: float) -> None:
        procs.wait_until_healthy(process, functools.partial(all_ok, probes), timeout_seconds=timeout_seconds)
        self._record_ready(process.name)

    def _record_ready(self, step: str) -> None:
        self.ready_after[step] = round(time.monotonic() - self._began, 3)

    def _admin_client_cert(self) -> tuple[Path, Path]:
        user = yaml.safe_load(self.kubeconfig.read_text())["users"][0]["user"]
        return Path(user["client-certificate"]), Path(user["client-key"])

    def _spawn(self, running: _Running, name: str, command: list[str]) -> procs.Process:
        process = procs.spawn(name, command, self.layout.log(name))
        running.processes[name] = process
        return process

    @staticmethod
    def _stop_processes(running: _Running) -> None:
        """Stop in reverse start order; an interruption (Ctrl-C) still stops the rest, then propagates."""
        interrupted: BaseException | None = None
        while running.processes:
            process = running.processes.pop(next(reversed(running.processes)))
            try:
                procs.stop(process)
            except BaseException as error:  # re-raised below, once every process is stopped
                interrupted = interrupted or error
                procs.stop(process, grace_seconds=0)
        if interrupted:
            raise interrupted


def ensure_control_plane_binaries() -> Path:
    """Build the testbed binaries only if one the control plane runs is missing; return their directory.

    Unlike calling `build.ensure_binaries()` unconditionally, this never starts a (second) build of node
    binaries the control plane does not need.
    """
    if any(not build.binary(name).exists() for name in COMPONENTS):
        return build.ensure_binaries()
    return build.bin_dir()


# ------------------------------------------------------------------------------------------------
# Namespaces for tests (used by tests/conftest.py).
# ------------------------------------------------------------------------------------------------


def create_namespace(
    api: ApiClient, prefix: str = "test", *, wait_for_service_account: bool = True, timeout_seconds: float = 60.0
) -> str:
    """Create a uniquely named namespace and return its name.

    By default it also waits until the controller-manager has made its `default` ServiceAccount:
    until then the apiserver refuses pods that use it.
    """
    from kubernetes import client

    core = client.CoreV1Api(api)
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    if wait_for_service_account:
        deadline = time.monotonic() + timeout_seconds
        while not core.list_namespaced_service_account(name, field_selector="metadata.name=default").items:
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"namespace {name} got no default ServiceAccount in {timeout_seconds:.0f}s")
            time.sleep(0.1)
    return name


def delete_namespace(api: ApiClient, name: str) -> None:
    """Delete a namespace (its contents go with it, in the background); a missing one is fine."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        client.CoreV1Api(api).delete_namespace(name)
    except ApiException as error:
        if error.status != 404:
            raise


@contextlib.contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    """SIGTERM or SIGINT interrupt like Ctrl-C, once: later ones are ignored so that cleanup can finish.

    (`timeout` and `uv run`, for example, each deliver their own copy of one SIGTERM.)
    """
    handled = (signal.SIGTERM, signal.SIGINT)

    def interrupt(signum: int, frame: FrameType | None) -> None:
        for number in handled:
            signal.signal(number, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = {number: signal.signal(number, interrupt) for number in handled}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run a Headrace testbed control plane in the foreground.")
    parser.add_argument("--workdir", type=Path, help="missing or empty directory (default: a new temporary one)")
    parser.add_argument("--bind-address", default="127.0.0.1", help="apiserver bind address (default 127.0.0.1)")
    parser.add_argument("--advertise-address", default=None, help="apiserver address advertised to pods")
    parser.add_argument("--extra-san", action="append", default=[], help="extra apiserver certificate name or IP")
    parser.add_argument("--no-controllers", action="store_true", help="do not run kube-controller-manager")
    parser.add_argument("--no-scheduler", action="store_true", help="do not run kube-scheduler")
    parser.add_argument("--keep-workdir", action="store_true", help="keep the workdir (logs, PKI) after stopping")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m testbed.controlplane`: run until Ctrl-C or SIGTERM, then stop cleanly."""
    arguments = _parse_arguments(argv)
    workdir = arguments.workdir or Path(tempfile.mkdtemp(prefix="headrace-controlplane-"))
    plane = ControlPlane(
        workdir,
        bind_address=arguments.bind_address,
        advertise_address=arguments.advertise_address,
        extra_sans=arguments.extra_san,
        controllers=not arguments.no_controllers,
        scheduler=not arguments.no_scheduler,
        keep_workdir=arguments.keep_workdir,
    )
    with _stop_on_sigterm():
        try:
            ensure_control_plane_binaries()
            with plane:
                print(f"control plane ready in {plane.startup_seconds:.1f}s at {plane.url}", flush=True)
                print(f"kubeconfig: {plane.kubeconfig}", flush=True)
                print(f"export KUBECONFIG={plane.kubeconfig}", flush=True)
                return _supervise(plane)
        except KeyboardInterrupt:
            print("stopped", flush=True)
            return 0
        except ControlPlaneError as error:
            print(f"error: {error}", file=sys.stderr, flush=True)
            return 1


def _supervise(plane: ControlPlane) -> int:
    """Block while every component runs; report the first one that dies."""
    while True:
        for name, process in plane.processes.items():
            if not process.alive():
                print(f"error: {name} exited:\n{process.tail()}", file=sys.stderr, flush=True)
                return 1
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())

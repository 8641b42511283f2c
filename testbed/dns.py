"""Cluster DNS for the local cluster: CoreDNS on the node, serving ``cluster.local`` from the API server.

Owns: the pinned CoreDNS version and its build (``go install`` through the Go module proxy, cached under
``~/.cache/headrace/bin``), its Corefile (the ``kubernetes`` plugin reading the API server with its own
client certificate; every other name forwarded to the host's resolver), the RBAC it needs, and the
``kube-dns`` Service at `CLUSTER_DNS_IP` whose EndpointSlice points at the address CoreDNS listens on.
The kubelet hands `CLUSTER_DNS_IP` and `CLUSTER_DOMAIN` to every pod (``clusterDNS``/``clusterDomain``).
Also `lookup`, a minimal DNS client asking one server directly (for probes and tests).
Never: starts or stops the process (the node does, with its other components).
"""

from __future__ import annotations

import os
import secrets
import socket
import struct
import subprocess
from pathlib import Path
from typing import Any

from testbed import build
from testbed.host_services import HostPort, host_service

COREDNS_VERSION = "1.15.0"
CLUSTER_DOMAIN = "cluster.local"
CLUSTER_DNS_IP = "10.96.0.10"  # the conventional address in the control plane's 10.96.0.0/16 service range
DNS_PORT = 53
USER = "system:coredns"
HOST_RESOLV_CONF = Path("/etc/resolv.conf")


def coredns_binary() -> Path:
    """Where the pinned CoreDNS binary is cached (it may not exist yet; see `ensure_coredns`)."""
    return build.cache_root() / "bin" / f"coredns-{COREDNS_VERSION}" / "coredns"


def ensure_coredns() -> Path:
    """Build CoreDNS (``go install github.com/coredns/coredns@vX``) into the cache if missing; return its path."""
    target = coredns_binary()
    if target.exists():
        return target
    workdir = build.cache_root() / "src" / f"coredns-{COREDNS_VERSION}"
    workdir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "GOMODCACHE": os.environ.get("GOMODCACHE", str(build.cache_root() / "go" / "mod")),
        "GOCACHE": os.environ.get("GOCACHE", str(build.cache_root() / "go" / "build")),
        "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", "auto"),
        "CGO_ENABLED": "0",
        "GOFLAGS": "",
        "GOBIN": str(target.parent),
    }
    command = ["go", "install", "-trimpath", "-ldflags", "-s -w", f"github.com/coredns/coredns@v{COREDNS_VERSION}"]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, cwd=workdir, env=env, check=True)
    return target


def corefile(listen_address: str, kubeconfig: Path, health_port: int, ready_port: int) -> str:
    """The Corefile: ``cluster.local`` (and reverse lookups of Services and pods) from the API server,
    everything else forwarded to the resolvers of the host's /etc/resolv.conf; health and readiness
    on loopback (``ready`` answers 200 once the kubernetes plugin has synced)."""
    return f""".:{DNS_PORT} {{
    bind {listen_address}
    errors
    health 127.0.0.1:{health_port}
    ready 127.0.0.1:{ready_port}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    forward . {HOST_RESOLV_CONF}
    cache 30
    loadbalance
}}
"""


def command(binary: Path, corefile_path: Path, pidfile: Path) -> list[str]:
    """CoreDNS's command line (the pid file names the node's short root, so a dead node's CoreDNS is found)."""
    return [str(binary), "-conf", str(corefile_path), "-pidfile", str(pidfile)]


def manifests(listen_address: str) -> list[dict[str, Any]]:
    """RBAC for CoreDNS's user, and the ``kube-dns`` Service in kube-system with its EndpointSlice."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": USER},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["endpoints", "services", "pods", "namespaces"],
                "verbs": ["list", "watch"],
            },
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": USER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": USER},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
    }
    ports = [HostPort("dns", DNS_PORT, DNS_PORT, "UDP"), HostPort("dns-tcp", DNS_PORT, DNS_PORT, "TCP")]
    service = host_service("kube-system", "kube-dns", listen_address, ports, cluster_ip=CLUSTER_DNS_IP)
    service[0]["metadata"]["labels"]["k8s-app"] = "kube-dns"
    return [role, binding, *service]


def lookup(name: str, server: str, port: int = DNS_PORT, timeout: float = 2.0) -> list[str]:
    """IPv4 addresses of `name` asked of one DNS server over UDP (no search path, no cache): a probe for
    tests and readiness checks that does not depend on the host's resolver. Empty when the name does not exist."""
    query_id = secrets.randbits(16)
    question = b"".join(bytes([len(label)]) + label.encode() for label in name.rstrip(".").split(".")) + b"\0"
    packet = struct.pack(">HHHHHH", query_id, 0x0100, 1, 0, 0, 0) + question + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(packet, (server, port))
        reply = sock.recv(4096)
    answer_id, flags, _, answers, _, _ = struct.unpack(">HHHHHH", reply[:12])
    if answer_id != query_id or flags & 0x000F not in (0, 3):  # NOERROR or NXDOMAIN
        raise OSError(f"DNS server {server}:{port} answered {name} with flags {flags:#06x}")
    offset = 12 + len(question) + 4
    found: list[str] = []
    for _ in range(answers):
        offset = _skip_name(reply, offset)
        kind, _, _, length = struct.unpack(">HHIH", reply[offset : offset + 10])
        offset += 10
        if kind == 1 and length == 4:
            found.append(socket.inet_ntoa(reply[offset : offset + 4]))
        offset += length
    return found


def _skip_name(message: bytes, offset: int) -> int:
    """The offset after a (possibly compressed) name in a DNS message."""
    while message[offset]:
        if message[offset] & 0xC0 == 0xC0:
            return offset + 2
        offset += message[offset] + 1
    return offset + 1

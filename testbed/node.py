"""One real Kubernetes node on this machine: containerd + runc, a bridge CNI, kubelet, kube-proxy, CoreDNS.

Owns: the node's configuration files (rendered by pure functions below), its own containerd
instance (own root, state, socket and runc root: it never touches another containerd), the ``hr0``
bridge and the pod subnet, the kubelet and kube-proxy processes, cluster DNS (CoreDNS on the bridge
gateway behind the ``kube-dns`` Service, configured by `testbed.dns`), the registries its containerd pulls
from (hosts.toml, as a real node's: `NodeRegistry`) and the kubelet's node-wide registry credentials, importing
images into its containerd (optionally into an image store kept across runs), and a teardown that works from the
files on disk alone (so ``cluster down`` in a new process, or a start after a crash, cleans up what
an earlier process left): pods, processes, mounts, network devices, the iptables rules it added,
its cgroups and its directories.
Never: starts the control plane (it is handed a started one), builds application images, or
touches iptables chains, mounts, cgroups or devices that are not a node's own.

Only one node can run on a machine at a time (they would share kube-proxy's iptables chains and the
bridge): a lock file under the cache directory enforces it, and whoever holds it may remove what
dead nodes left behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import itertools
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Protocol

from testbed import build, dns, host_services, procs
from testbed.controlplane import http_ok
from testbed.pause import PAUSE_IMAGE, pause_image
from testbed.registry import RegistryAccess, basic_auth

CNI_BIN_DIR = Path("/usr/lib/cni")
CONTAINER_LOG_LINKS = Path("/var/log/containers")
CGROUP_MOUNTS = Path("/sys/fs/cgroup")
CNI_CACHE = Path("/var/lib/cni/results")
SHORT_ROOTS = Path("/var/lib/headrace")
IPTABLES_TABLES = ("filter", "nat", "mangle", "raw")
PORTMAP_SHARED_CHAINS = ("CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SETMARK", "CNI-HOSTPORT-MASQ")
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248
KUBE_PROXY_HEALTHZ = "127.0.0.1:10256"
KUBE_PROXY_METRICS = "127.0.0.1:10249"
READY_TIMEOUT_SECONDS = 180.0
STOP_GRACE_SECONDS = 10.0
NODE_PROGRAMS = frozenset({"containerd", "containerd-shim-runc-v2", "kubelet", "kube-proxy", "coredns"})


class NodeError(RuntimeError):
    """The node could not start, or could not be cleaned up completely (the message says what is left)."""


# ------------------------------------------------------------------------------------------------
# What the node needs from the control plane (testbed.controlplane.ControlPlane has it).
# ------------------------------------------------------------------------------------------------


class CertificateIssuer(Protocol):
    """Issues certificates signed by the cluster CA."""

    def issue_client_cert(self, common_name: str, organizations: Sequence[str] = ()) -> tuple[Path, Path]:
        """Client certificate and key files for a user and its groups."""
        ...

    def issue_serving_cert(
        self, common_name: str, dns_names: Sequence[str] = (), ip_addresses: Sequence[str] = ()
    ) -> tuple[Path, Path]:
        """Serving certificate and key files for the given names."""
        ...


class ControlPlaneLike(Protocol):
    """A started control plane."""

    @property
    def pki(self) -> CertificateIssuer:
        """The cluster PKI."""
        ...

    @property
    def ca_cert(self) -> Path:
        """The cluster CA certificate."""
        ...

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig."""
        ...

    def kubeconfig_for(self, user_cert: Path, user_key: Path, *, server: str | None = None) -> Path:
        """A kubeconfig for a client certificate."""
        ...


# ------------------------------------------------------------------------------------------------
# Pure: network, layout and configuration files.
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeNetwork:
    """The pod network: a Linux bridge with the gateway address, a pod subnet, the cluster CIDRs."""

    bridge: str = "hr0"
    # Not kind's pod subnet (10.244.0.0/16, `testbed.kind.nodeimage.POD_SUBNET`): with the host's bridge netfilter on,
    # this node's per-pod MASQUERADE rules (the bridge plugin's ipMasq, matched on the pod's address) also rewrote
    # the kind nodes' bridged traffic from a kind pod with the same address (the operator, CoreDNS) to the podman
    # gateway's, which the per-app NetworkPolicy then rejected: the two clusters run side by side in `make test`.
    pod_cidr: str = "10.240.0.0/24"
    cni_name: str = "headrace-pods"

    @property
    def gateway(self) -> str:
        """The bridge's address: the pods' default gateway, and the node's (and apiserver's) address."""
        return str(next(ipaddress.ip_network(self.pod_cidr).hosts()))

    @property
    def gateway_cidr(self) -> str:
        """The gateway address with the subnet's prefix length (as set on the bridge)."""
        return f"{self.gateway}/{ipaddress.ip_network(self.pod_cidr).prefixlen}"


@dataclass(frozen=True)
class NodeLayout:
    """Where every file of one node lives: under ``root``, its short root and, when given, an image store.

    The image store (containerd's persistent root: content, snapshots, metadata) may outlive the node
    so that big images are imported once; everything else is removed with the node.
    """

    root: Path
    image_store: Path | None = None

    @property
    def containerd_config(self) -> Path:
        """containerd's configuration."""
        return self.root / "containerd" / "config.toml"

    @property
    def short_root(self) -> Path:
        """A short directory named after the root, for what holds unix sockets (paths of at most 104 bytes):
        containerd's socket and the kubelet's ``--root-dir`` (pod volumes, plugin and pod-resources sockets)."""
        return SHORT_ROOTS / hashlib.sha256(str(self.root.resolve()).encode()).hexdigest()[:12]

    @property
    def kubelet_root(self) -> Path:
        """The kubelet's ``--root-dir``."""
        return self.short_root / "kubelet"

    @property
    def roots(self) -> tuple[Path, Path]:
        """The directories removed with the node."""
        return self.root, self.short_root

    @property
    def mount_roots(self) -> tuple[Path, ...]:
        """Every directory whose mounts are this node's (the roots and the image store)."""
        return (*self.roots, self.image_store) if self.image_store else self.roots

    @property
    def containerd_socket(self) -> Path:
        """containerd's gRPC socket (the CRI endpoint, and what ``ctr -a`` takes)."""
        return self.short_root / "containerd.sock"

    @property
    def markers(self) -> tuple[str, str]:
        """Strings that appear in the command line of every process of this node."""
        return str(self.root), str(self.short_root)

    @property
    def containerd_root(self) -> Path:
        """containerd's persistent data (content store, snapshots): the image store if there is one."""
        return self.image_store or self.root / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        """containerd's runtime state (task bundles, sandbox shm, network namespaces)."""
        return self.root / "containerd" / "state"

    @property
    def registry_hosts_dir(self) -> Path:
        """containerd's registry configuration directory (``<name>/hosts.toml`` per registry name)."""
        return self.root / "containerd" / "certs.d"

    @property
    def runc_root(self) -> Path:
        """runc's state directory for this node's containers."""
        return self.root / "runc"

    @property
    def cni_conf_dir(self) -> Path:
        """The CNI network configuration directory containerd reads."""
        return self.root / "cni" / "net.d"

    @property
    def ipam_dir(self) -> Path:
        """host-local IPAM's lease files."""
        return self.root / "cni" / "ipam"

    @property
    def kubelet_dir(self) -> Path:
        """The kubelet's configuration, certificates and ``--root-dir``."""
        return self.root / "kubelet"

    @property
    def pod_logs(self) -> Path:
        """The kubelet's podLogsDir."""
        return self.root / "pod-logs"

    @property
    def kube_proxy_config(self) -> Path:
        """kube-proxy's configuration."""
        return self.root / "kube-proxy" / "config.yaml"

    @property
    def coredns_dir(self) -> Path:
        """CoreDNS's Corefile and kubeconfig."""
        return self.root / "coredns"

    @property
    def logs(self) -> Path:
        """Logs of containerd, kubelet, kube-proxy and CoreDNS."""
        return self.root / "logs"

    @property
    def state_file(self) -> Path:
        """What is running (process ids, names): read by a teardown from another process."""
        return self.root / "node-state.json"

    def log(self, component: str) -> Path:
        """The log file of one component."""
        return self.logs / f"{component}.log"


def cgroup_root(name: str) -> str:
    """The kubelet's cgroupRoot for a node: every pod cgroup of the node lives below it."""
    return f"/headrace-{name}"


def containerd_config(layout: NodeLayout, sandbox_image: str = PAUSE_IMAGE) -> str:
    """containerd 1.6 configuration (version 2): CRI on cgroupfs, overlayfs, own dirs and socket."""
    cri = '[plugins."io.containerd.grpc.v1.cri"]'
    disabled = ", ".join(f'"io.containerd.snapshotter.v1.{name}"' for name in ("aufs", "btrfs", "devmapper", "zfs"))
    return f"""version = 2
root = "{layout.containerd_root}"
state = "{layout.containerd_state}"
oom_score = 0
disabled_plugins = [{disabled}]

[grpc]
  address = "{layout.containerd_socket}"

[ttrpc]
  address = "{layout.containerd_socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{layout.root / "containerd" / "opt"}"

{cri}
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  {cri[:-1]}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    discard_unpacked_layers = false
    {cri[:-1]}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      {cri[:-1]}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{layout.runc_root}"
  {cri[:-1]}.registry]
    config_path = "{layout.registry_hosts_dir}"
  {cri[:-1]}.cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{layout.cni_conf_dir}"
    max_conf_num = 1
"""


@dataclass(frozen=True)
class NodeRegistry:
    """A registry the node pulls from, configured as a real node's: containerd's hosts.toml for `name` (the registry
    name images carry, e.g. ``localhost``) sends pulls to the registry's address and trusts its CA; the kubelet's
    node-wide credentials (config.json in its root directory) cover the images under `node_credentials_for` (e.g.
    ``localhost/headrace``, as a cloud node's credentials cover its platform's registry) and no others: any other
    image of the registry needs an image pull Secret."""

    name: str
    access: RegistryAccess
    node_credentials_for: str | None = None


def hosts_toml(access: RegistryAccess) -> str:
    """containerd's hosts.toml for one registry name: pull and resolve from the registry, trusting its CA.

    containerd 1.6 refuses a file without a ``[host."..."]`` table ("invalid `host` tree") and then falls back to
    plain HTTP on port 80 for ``localhost``; the same settings at the top apply to `server`, tried after it."""
    settings = f'capabilities = ["pull", "resolve"]\nca = "{access.ca}"\n'
    return f'server = "{access.server}"\n{settings}\n[host."{access.server}"]\n{settings}'


def kubelet_docker_config(registries: Iterable[NodeRegistry]) -> dict[str, Any]:
    """The kubelet's node-wide credentials (``<root-dir>/config.json``): one entry per covered path."""
    auths = {
        entry.node_credentials_for: {"auth": basic_auth(entry.access.user, entry.access.password)}
        for entry in registries
        if entry.node_credentials_for
    }
    return {"auths": auths}


def cni_conflist(network: NodeNetwork, ipam_dir: Path) -> str:
    """The bridge CNI network: host-local IPAM in the pod subnet, masquerading, and port mappings.

    The loopback interface of each pod is set up by containerd's CRI itself (with the ``loopback``
    plugin from the same bin dir), so it is not part of this list.
    """
    bridge = {
        "type": "bridge",
        "bridge": network.bridge,
        "isGateway": True,
        "ipMasq": True,
        "hairpinMode": True,
        "ipam": {
            "type": "host-local",
            "ranges": [[{"subnet": network.pod_cidr, "gateway": network.gateway}]],
            "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": str(ipam_dir),
        },
    }
    portmap = {"type": "portmap", "capabilities": {"portMappings": True}}
    return json.dumps({"cniVersion": "1.0.0", "name": network.cni_name, "plugins": [bridge, portmap]}, indent=2)


@dataclass(frozen=True)
class KubeletFiles:
    """The credentials the kubelet uses."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path


def kubelet_config(layout: NodeLayout, network: NodeNetwork, name: str, files: KubeletFiles) -> str:
    """KubeletConfiguration (JSON, which is YAML) for cgroup v1 with cgroupfs, no swap checks, no image GC."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root(name),
        "failCgroupV1": False,
        "failSwapOn": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "podCIDR": network.pod_cidr,
        "clusterDNS": [dns.CLUSTER_DNS_IP],
        "clusterDomain": dns.CLUSTER_DOMAIN,
        "address": network.gateway,
        "port": KUBELET_PORT,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "readOnlyPort": 0,
        "tlsCertFile": str(files.serving_cert),
        "tlsPrivateKeyFile": str(files.serving_key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(files.ca_cert)},
        },
        "authorization": {"mode": "Webhook"},
        "podLogsDir": str(layout.pod_logs),
        "registerNode": True,
        "maxPods": 110,
        "serializeImagePulls": False,
        "nodeStatusReportFrequency": "10s",
    }
    return json.dumps(config, indent=2)


def kube_proxy_config(network: NodeNetwork, name: str, kubeconfig: Path) -> str:
    """KubeProxyConfiguration in iptables mode that changes no conntrack sysctls (not allowed here)."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": name,
        "clusterCIDR": network.pod_cidr,
        "healthzBindAddress": KUBE_PROXY_HEALTHZ,
        "metricsBindAddress": KUBE_PROXY_METRICS,
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": False},
        "nodePortAddresses": ["primary"],
    }
    return json.dumps(config, indent=2)


def kubelet_command(binary: Path, layout: NodeLayout, network: NodeNetwork, name: str, kubeconfig: Path) -> list[str]:
    """The kubelet's command line (everything else is in its config file)."""
    return [
        str(binary),
        f"--config={layout.kubelet_dir / 'config.yaml'}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={layout.kubelet_root}",
        f"--cert-dir={layout.kubelet_dir / 'pki'}",
        f"--hostname-override={name}",
        f"--node-ip={network.gateway}",
        "--v=2",
    ]


# --- Pure: reading what the system reports, deciding what to clean ------------------------------


def mounts_under(mountinfo: str, roots: Iterable[Path]) -> list[str]:
    """Mount points (from /proc/self/mountinfo text) at or below any of ``roots``, deepest first."""
    prefixes = [str(root).rstrip("/") for root in roots]
    found: list[str] = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        point = fields[4].encode().decode("unicode_escape")
        if any(point == prefix or point.startswith(prefix + "/") for prefix in prefixes):
            found.append(point)
    return sorted(dict.fromkeys(found), key=lambda point: (-point.count("/"), point))


@dataclass
class _Table:
    chains: list[str] = field(default_factory=list)
    rules: list[list[str]] = field(default_factory=list)


def _parse_iptables_save(text: str) -> _Table:
    table = _Table()
    for line in text.splitlines():
        if line.startswith(":"):
            table.chains.append(line[1:].split()[0])
        elif line.startswith("-A "):
            table.rules.append(shlex.split(line))
    return table


def _jump_target(rule: Sequence[str]) -> str | None:
    for flag, target in itertools.pairwise(rule):
        if flag in ("-j", "-g", "--jump", "--goto"):
            return target
    return None


def _tagged(rule: Sequence[str], cni_name: str) -> bool:
    return any(f'name: "{cni_name}"' in word for word in rule)


def _owned_chains(table: _Table, cni_name: str) -> set[str]:
    owned = {chain for chain in table.chains if chain.startswith("KUBE-")}
    for rule in table.rules:
        if _tagged(rule, cni_name):
            owned.update(name for name in (rule[1], _jump_target(rule)) if name and name.startswith("CNI-"))
    foreign_port_mappings = any(c.startswith("CNI-DN-") and c not in owned for c in table.chains)
    if not foreign_port_mappings:
        owned.update(chain for chain in PORTMAP_SHARED_CHAINS if chain in table.chains)
    return owned


def iptables_cleanup(table_name: str, save_output: str, cni_name: str) -> list[list[str]]:
    """Arguments (after the ``iptables`` command) that remove this node's rules and chains from one table.

    Owned: every ``KUBE-*`` chain (kubelet and kube-proxy), every ``CNI-*`` chain that holds or is
    the target of a rule commented with this node's CNI network name, and portmap's shared
    ``CNI-HOSTPORT-*`` chains when nothing else uses them. Rules elsewhere that jump to an owned
    chain or carry the network's comment are deleted first, then owned chains are flushed and removed.
    """
    table = _parse_iptables_save(save_output)
    owned = _owned_chains(table, cni_name)
    commands: list[list[str]] = []
    for rule in table.rules:
        if rule[1] not in owned and (_jump_target(rule) in owned or _tagged(rule, cni_name)):
            commands.append(["-t", table_name, "-D", *rule[1:]])
    ordered = sorted(owned)
    commands += [["-t", table_name, "-F", chain] for chain in ordered if chain in table.chains]
    commands += [["-t", table_name, "-X", chain] for chain in ordered if chain in table.chains]
    return commands


def cni_cache_owner(file_name: str, cni_name: str) -> str | None:
    """The sandbox id a libcni result cache file belongs to, if it is of this network or the loopback."""
    for prefix in (f"{cni_name}-", "cni-loopback-"):
        if file_name.startswith(prefix) and "-" in file_name.removeprefix(prefix):
            return file_name.removeprefix(prefix).rsplit("-", 1)[0]
    return None


def archive_images(index: Mapping[str, Any]) -> dict[str, str]:
    """Full image names and their manifest digests in an OCI layout's ``index.json``."""
    images: dict[str, str] = {}
    for manifest in index.get("manifests", []):
        annotations = manifest.get("annotations") or {}
        name = annotations.get("io.containerd.image.name") or annotations.get("org.opencontainers.image.ref.name")
        if name and "/" in name:
            images[name] = manifest["digest"]
    return images


def listed_images(ctr_images_ls: str) -> dict[str, str]:
    """Image names and manifest digests from the output of ``ctr images ls``."""
    rows = [line.split() for line in ctr_images_ls.splitlines()[1:]]
    return {row[0]: row[2] for row in rows if len(row) >= 3}


def stale_image_ids(listing: Mapping[str, str]) -> list[str]:
    """The CRI's ``sha256:<id>`` references whose manifest no named image points at any more.

    They pin every replaced version of a re-imported image; removing them lets containerd collect it.
    """
    named = {digest for reference, digest in listing.items() if not reference.startswith("sha256:")}
    return sorted(ref for ref, digest in listing.items() if ref.startswith("sha256:") and digest not in named)


def owned_processes(cmdlines: dict[int, list[str]], markers: Sequence[str]) -> list[int]:
    """Ids of a node's component processes: a node binary whose arguments mention one of ``markers``."""
    return sorted(
        pid
        for pid, argv in cmdlines.items()
        if argv and Path(argv[0]).name in NODE_PROGRAMS and any(m in arg for arg in argv[1:] for m in markers)
    )


# ------------------------------------------------------------------------------------------------
# I/O helpers.
# ------------------------------------------------------------------------------------------------


def _run(argv: Sequence[str], *, check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise NodeError(f"{shlex.join(argv)} failed ({result.returncode}): {result.stderr.strip() or result.stdout}")
    return result


def _cmdlines() -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                raw = (entry / "cmdline").read_bytes()
                if raw:
                    found[int(entry.name)] = raw.rstrip(b"\0").decode(errors="replace").split("\0")
    return found


def import_image(containerd_socket: Path, oci_archive: Path) -> str:
    """Import an image archive into a containerd's ``k8s.io`` namespace (every platform it holds); ctr's output.

    Skipped when every image the archive names is already there with the same manifest digest.
    """
    ctr = ["ctr", "-n", "k8s.io", "-a", str(containerd_socket), "images"]
    wanted = archive_images(_archive_index(oci_archive))
    if wanted and wanted.items() <= listed_images(_run([*ctr, "ls"]).stdout).items():
        return "".join(f"{name} already present ({digest})\n" for name, digest in sorted(wanted.items()))
    return _run([*ctr, "import", "--all-platforms", str(oci_archive)], timeout=600).stdout


def _archive_index(oci_archive: Path) -> dict[str, Any]:
    with tarfile.open(oci_archive) as archive:
        for member in archive:
            if member.name.removeprefix("./") == "index.json":
                handle = archive.extractfile(member)
                return dict(json.load(handle)) if handle else {}
    return {}


def link_exists(name: str) -> bool:
    """True if a network device of this name exists."""
    return Path("/sys/class/net", name).exists()


def bridge_ports(bridge: str) -> list[str]:
    """Devices enslaved to ``bridge`` (the host ends of pod veths)."""
    directory = Path("/sys/class/net", bridge, "brif")
    return sorted(entry.name for entry in directory.iterdir()) if directory.is_dir() else []


def ensure_bridge(network: NodeNetwork) -> None:
    """Create the bridge with the gateway address, up; enable IPv4 forwarding. Idempotent."""
    if not link_exists(network.bridge):
        _run(["ip", "link", "add", network.bridge, "type", "bridge"])
    addresses = _run(["ip", "-o", "-4", "addr", "show", "dev", network.bridge]).stdout
    if f" {network.gateway_cidr} " not in addresses:
        _run(["ip", "addr", "add", network.gateway_cidr, "dev", network.bridge])
    _run(["ip", "link", "set", network.bridge, "up"])
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")
    with contextlib.suppress(OSError):
        Path("/proc/sys/net/bridge/bridge-nf-call-iptables").write_text("1\n")


def _delete_links(network: NodeNetwork) -> None:
    for port in bridge_ports(network.bridge):
        _run(["ip", "link", "del", port], check=False)
    if link_exists(network.bridge):
        _run(["ip", "link", "del", network.bridge], check=False)


def _clean_iptables(cni_name: str) -> None:
    for command in ("iptables", "ip6tables"):
        for table in IPTABLES_TABLES:
            saved = _run([f"{command}-save", "-t", table], check=False)
            if saved.returncode != 0:
                continue
            for arguments in iptables_cleanup(table, saved.stdout, cni_name):
                _run([command, "-w", *arguments], check=False)


def iptables_leftovers(cni_name: str) -> list[str]:
    """Descriptions of iptables rules or chains of this node that still exist."""
    left: list[str] = []
    for command in ("iptables", "ip6tables"):
        for table in IPTABLES_TABLES:
            saved = _run([f"{command}-save", "-t", table], check=False)
            if saved.returncode == 0:
                left += [f"{command} -t {table} {' '.join(a)}" for a in iptables_cleanup(table, saved.stdout, cni_name)]
    return left


def _mounts_now(roots: Iterable[Path]) -> list[str]:
    return mounts_under(Path("/proc/self/mountinfo").read_text(), roots)


def _unmount_all(roots: Sequence[Path]) -> list[str]:
    for _ in range(3):
        points = _mounts_now(roots)
        if not points:
            return []
        for point in points:
            if _run(["umount", point], check=False).returncode != 0:
                _run(["umount", "-l", point], check=False)
    return _mounts_now(roots)


def _cgroup_dirs(name: str) -> list[Path]:
    """This node's cgroup directories in every mounted hierarchy, deepest first."""
    relative = cgroup_root(name).lstrip("/")
    tops = [hierarchy / relative for hierarchy in CGROUP_MOUNTS.iterdir() if (hierarchy / relative).is_dir()]
    found = [path for top in tops for path, _, _ in os.walk(top)]
    return sorted((Path(path) for path in found), key=lambda path: -len(path.parts))


def _kill_and_remove_cgroups(name: str) -> None:
    directories = _cgroup_dirs(name)
    for directory in directories:
        with contextlib.suppress(OSError):
            for pid in (directory / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
    for directory in directories:
        for _ in range(50):
            try:
                directory.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)


def _ensure_cgroup_root(name: str) -> None:
    relative = cgroup_root(name).lstrip("/")
    for hierarchy in CGROUP_MOUNTS.iterdir():
        if (hierarchy / "cgroup.procs").exists():
            (hierarchy / relative).mkdir(exist_ok=True)


def _sandbox_ids(layout: NodeLayout) -> set[str]:
    """Ids of every pod sandbox containerd's CRI recorded for this node."""
    cri = "io.containerd.grpc.v1.cri"
    directories = (layout.containerd_root / cri / "sandboxes", layout.containerd_state / cri / "sandboxes")
    return {entry.name for directory in directories if directory.is_dir() for entry in directory.iterdir()}


def _remove_cni_cache(sandboxes: set[str], cni_name: str) -> None:
    """libcni's result cache (global, under /var/lib/cni) of this node's sandboxes (left when CNI DEL never ran)."""
    if not CNI_CACHE.is_dir():
        return
    for entry in CNI_CACHE.iterdir():
        if cni_cache_owner(entry.name, cni_name) in sandboxes:
            entry.unlink(missing_ok=True)


def _remove_log_links(pod_logs: Path) -> None:
    if not CONTAINER_LOG_LINKS.is_dir():
        return
    for link in CONTAINER_LOG_LINKS.iterdir():
        if link.is_symlink() and os.readlink(link).startswith(str(pod_logs)):
            link.unlink(missing_ok=True)


def _signal_and_wait(pids: Sequence[int], grace_seconds: float) -> None:
    """SIGTERM each process group (then each process), SIGKILL whatever is left after the grace period."""
    for signum, wait in ((signal.SIGTERM, grace_seconds), (signal.SIGKILL, 5.0)):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getpgid(pid) == pid:
                    os.killpg(pid, signum)
                else:
                    os.kill(pid, signum)
        deadline = time.monotonic() + wait
        while any(procs.pid_exists(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)


# --- The CRI helper: removes pod sandboxes through containerd's CRI (so CNI DEL runs) ------------

_CRI_TOOL_MAIN = """package main

// hr-cri stops and removes every container and pod sandbox of one CRI endpoint (so the CRI plugin
// tears each pod's network down through CNI), or lists the sandboxes.

import (
\t"context"
\t"fmt"
\t"os"
\t"time"

\t"google.golang.org/grpc"
\t"google.golang.org/grpc/credentials/insecure"
\truntime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
\tif len(os.Args) != 3 {
\t\tfmt.Fprintln(os.Stderr, "usage: hr-cri <unix socket> list|teardown")
\t\tos.Exit(2)
\t}
\tconn, err := grpc.NewClient("unix://"+os.Args[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
\tcheck(err)
\tdefer conn.Close()
\tclient := runtime.NewRuntimeServiceClient(conn)
\tctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
\tdefer cancel()
\tpods, err := client.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{})
\tcheck(err)
\tif os.Args[2] == "list" {
\t\tfor _, pod := range pods.Items {
\t\t\tfmt.Println(pod.Id, pod.Metadata.Namespace+"/"+pod.Metadata.Name, pod.State)
\t\t}
\t\treturn
\t}
\tcontainers, err := client.ListContainers(ctx, &runtime.ListContainersRequest{})
\tcheck(err)
\tfailed := false
\tfor _, c := range containers.Containers {
\t\t_, errStop := client.StopContainer(ctx, &runtime.StopContainerRequest{ContainerId: c.Id, Timeout: 2})
\t\t_, errRemove := client.RemoveContainer(ctx, &runtime.RemoveContainerRequest{ContainerId: c.Id})
\t\tfailed = report("container", c.Id, errStop, errRemove) || failed
\t}
\tfor _, pod := range pods.Items {
\t\t_, errStop := client.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: pod.Id})
\t\t_, errRemove := client.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: pod.Id})
\t\tfailed = report("sandbox", pod.Id, errStop, errRemove) || failed
\t}
\tif failed {
\t\tos.Exit(1)
\t}
}

func report(kind, id string, errs ...error) bool {
\tbad := false
\tfor _, err := range errs {
\t\tif err != nil {
\t\t\tfmt.Fprintf(os.Stderr, "%s %s: %v\\n", kind, id, err)
\t\t\tbad = true
\t\t}
\t}
\treturn bad
}

func check(err error) {
\tif err != nil {
\t\tfmt.Fprintln(os.Stderr, "hr-cri:", err)
\t\tos.Exit(1)
\t}
}
"""

CRI_API_VERSION = f"v0.{build.KUBERNETES_VERSION.split('.', 1)[1]}"


def cri_tool_path() -> Path:
    """Where the ``hr-cri`` helper is cached."""
    return build.cache_root() / "tools" / f"hr-cri-{CRI_API_VERSION}"


def cri_tool() -> Path:
    """The ``hr-cri`` helper (built once with Go from ``k8s.io/cri-api``; crictl is not on the Go proxy)."""
    target = cri_tool_path()
    if target.exists():
        return target
    workdir = build.cache_root() / "src" / "hr-cri"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "go.mod").write_text(
        f"module headrace.dev/testbed/hrcri\n\ngo 1.25.0\n\nrequire k8s.io/cri-api {CRI_API_VERSION}\n"
    )
    (workdir / "main.go").write_text(_CRI_TOOL_MAIN)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    for command in (["go", "mod", "tidy"], ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(partial), "."]):
        subprocess.run(command, cwd=workdir, env=build._go_env(workdir), check=True, capture_output=True)
    partial.rename(target)
    return target


# ------------------------------------------------------------------------------------------------
# The node.
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeState:
    """What a teardown needs to know, written to the state file as soon as it is known."""

    name: str
    network: NodeNetwork
    pids: dict[str, int] = field(default_factory=dict)
    image_store: str | None = None

    def to_json(self) -> str:
        """The state file's text."""
        network = {"bridge": self.network.bridge, "pod_cidr": self.network.pod_cidr, "cni_name": self.network.cni_name}
        document = {"name": self.name, "network": network, "pids": self.pids, "image_store": self.image_store}
        return json.dumps(document, indent=2)

    @classmethod
    def from_json(cls, text: str) -> NodeState:
        """Parse a state file."""
        data = json.loads(text)
        pids = {k: int(v) for k, v in data["pids"].items()}
        return cls(data["name"], NodeNetwork(**data["network"]), pids, data.get("image_store"))

    def layout(self, workdir: Path) -> NodeLayout:
        """The layout of the node this state describes."""
        return NodeLayout(Path(workdir), Path(self.image_store) if self.image_store else None)


def _lock_path() -> Path:
    return build.cache_root() / "node.lock"


def _acquire_machine_lock() -> IO[str]:
    path = _lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip()
        handle.close()
        raise NodeError(
            f"another headrace node runs on this machine ({path} is held: {holder}); stop it first "
            "(`python -m testbed.cluster down`)"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}\n")
    handle.flush()
    return handle


class Node:
    """A kubelet node with its own containerd, bridge CNI and kube-proxy, joined to a control plane.

    ``start()`` returns once the Node is Ready and kube-proxy has programmed the Services;
    ``stop()`` removes everything the node made (see the module docstring). Both are safe to call
    after a failure; ``Node.teardown(workdir)`` does the same cleanup from another process.
    """

    def __init__(
        self,
        workdir: Path,
        control_plane: ControlPlaneLike,
        *,
        name: str = "headrace-node",
        network: NodeNetwork | None = None,
        ready_timeout_seconds: float = READY_TIMEOUT_SECONDS,
        binaries: Path | None = None,
        image_store: Path | None = None,
        registries: Sequence[NodeRegistry] = (),
    ) -> None:
        self.layout = NodeLayout(Path(workdir), image_store)
        self.registries = tuple(registries)
        self.control_plane = control_plane
        self.name = name
        self.network = network or NodeNetwork()
        self.ready_timeout_seconds = ready_timeout_seconds
        self.binaries = binaries or build.bin_dir()
        self.startup_seconds: float | None = None
        self._processes: dict[str, procs.Process] = {}
        self._lock: IO[str] | None = None
        self._dns_ready_port = 0

    # --- public -----------------------------------------------------------------------------------

    @property
    def containerd_socket(self) -> Path:
        """containerd's socket: ``ctr -n k8s.io -a <this>``."""
        return self.layout.containerd_socket

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig of the cluster this node joined."""
        return self.control_plane.kubeconfig

    @property
    def processes(self) -> dict[str, procs.Process]:
        """The running components by name."""
        return dict(self._processes)

    def __enter__(self) -> Node:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start containerd, kube-proxy and the kubelet; wait until the Node is Ready. Cleans up on failure."""
        if self._lock is not None:
            raise NodeError("the node is already running")
        self._lock = _acquire_machine_lock()
        began = time.monotonic()
        try:
            self._claim_workdir()
            _reclaim_machine(self.layout, self.name, self.network)
            self._start_components()
            self._wait_ready(time.monotonic() + self.ready_timeout_seconds)
        except BaseException as error:
            try:
                self.stop()
            except NodeError as cleanup:
                error.add_note(f"cleanup after the failed start: {cleanup}")
            raise
        self.startup_seconds = time.monotonic() - began

    def stop(self) -> None:
        """Remove every pod and stop every component, then clean mounts, network, iptables, cgroups, dirs.

        Idempotent. Raises `NodeError` naming what could not be removed.
        """
        if self._lock is None and not any(path.exists() for path in (self.layout.state_file, *self.layout.roots)):
            return
        # The bridge and KUBE-* chains are shared by name: only the lock holder may clean them.
        lock, self._lock = self._lock or _acquire_machine_lock(), None
        try:
            self._teardown()
        finally:
            self._processes.clear()
            lock.close()

    def import_image(self, oci_archive: Path) -> str:
        """Import an OCI (or docker) image archive into this node's containerd (namespace ``k8s.io``)."""
        return import_image(self.containerd_socket, oci_archive)

    def images(self) -> list[str]:
        """Names of the images in this node's containerd (namespace ``k8s.io``)."""
        command = ["ctr", "-n", "k8s.io", "-a", str(self.containerd_socket), "images", "ls", "-q"]
        return _run(command).stdout.split()

    def leftovers(self) -> list[str]:
        """What of this node still exists on the machine (empty after a complete stop)."""
        return node_leftovers(self.layout, self.name, self.network)

    @staticmethod
    def teardown(workdir: Path, *, name: str = "headrace-node", network: NodeNetwork | None = None) -> None:
        """Clean up a node from its workdir alone (for ``cluster down``, or after a crash). Idempotent.

        The node's own state file, when present, names what to clean; otherwise ``name`` and
        ``network`` do. Raises `NodeError` naming whatever could not be removed.
        """
        state = NodeState(name, network or NodeNetwork())
        with contextlib.suppress(FileNotFoundError):
            state = NodeState.from_json(NodeLayout(Path(workdir)).state_file.read_text())
        layout = state.layout(Path(workdir))
        # The bridge and KUBE-* chains are shared by name: never clean while another node runs.
        lock = _acquire_machine_lock()
        try:
            _teardown(layout, state, {})
        finally:
            lock.close()

    # --- starting ---------------------------------------------------------------------------------

    def _claim_workdir(self) -> None:
        """The workdir must be missing, empty, or left by an earlier node (which is cleaned up first)."""
        if self.layout.state_file.exists():
            self._teardown()
        elif self.layout.root.exists() and any(self.layout.root.iterdir()):
            raise NodeError(f"node workdir {self.layout.root} must be missing or empty (stop() removes it)")

    def _record(self) -> None:
        pids = {name: process.pid for name, process in self._processes.items()}
        store = str(self.layout.image_store) if self.layout.image_store else None
        self.layout.state_file.write_text(NodeState(self.name, self.network, pids, store).to_json())

    def _start_components(self) -> None:
        layout = self.layout
        for directory in (layout.logs, layout.kubelet_dir, layout.kube_proxy_config.parent, layout.short_root):
            directory.mkdir(parents=True, exist_ok=True)
        self._record()
        tool = cri_tool()
        image = pause_image()
        coredns = dns.ensure_coredns()
        ensure_bridge(self.network)
        _ensure_cgroup_root(self.name)
        self._write_configs()
        self._spawn("containerd", ["containerd", "--config", str(self.layout.containerd_config)])
        self._wait(
            "containerd", lambda: _run([str(tool), str(self.containerd_socket), "list"], check=False).returncode == 0
        )
        # Pods an earlier, killed node left in a kept image store: remove them before the kubelet starts.
        _run([str(tool), str(self.containerd_socket), "teardown"], timeout=180)
        self.import_image(image)
        self._prune_replaced_images()
        self._start_dns(coredns)
        self._spawn("kube-proxy", [str(self.binaries / "kube-proxy"), f"--config={self.layout.kube_proxy_config}"])
        kubelet_kubeconfig = self.layout.kubelet_dir / "kubeconfig"
        self._spawn(
            "kubelet",
            kubelet_command(self.binaries / "kubelet", self.layout, self.network, self.name, kubelet_kubeconfig),
        )

    def _start_dns(self, coredns: Path) -> None:
        """The ``kube-dns`` Service and CoreDNS's RBAC, then CoreDNS on the gateway; waits until it has synced."""
        kubectl = self.binaries / "kubectl"
        host_services.apply(kubectl, self.kubeconfig, dns.manifests(self.network.gateway))
        corefile = self.layout.coredns_dir / "Corefile"
        self._spawn("coredns", dns.command(coredns, corefile, self.layout.short_root / "coredns.pid"))
        ready = f"http://127.0.0.1:{self._dns_ready_port}/ready"
        self._wait("coredns", lambda: http_ok(ready))

    def _prune_replaced_images(self) -> None:
        """Before any pod runs: drop image versions only the CRI's id references still hold (a kept store grows)."""
        ctr = ["ctr", "-n", "k8s.io", "-a", str(self.containerd_socket), "images"]
        stale = stale_image_ids(listed_images(_run([*ctr, "ls"]).stdout))
        if stale:
            _run([*ctr, "rm", "--sync", *stale], timeout=300)

    def _write_configs(self) -> None:
        plane = self.control_plane
        serving = plane.pki.issue_serving_cert(self.name, [self.name, "localhost"], [self.network.gateway, "127.0.0.1"])
        files = KubeletFiles(plane.ca_cert, *serving)
        kubelet_user = plane.pki.issue_client_cert(f"system:node:{self.name}", ["system:nodes"])
        proxy_user = plane.pki.issue_client_cert("system:kube-proxy", ["system:node-proxier"])
        _copy(plane.kubeconfig_for(*kubelet_user), self.layout.kubelet_dir / "kubeconfig")
        proxy_kubeconfig = self.layout.kube_proxy_config.parent / "kubeconfig"
        _copy(plane.kubeconfig_for(*proxy_user), proxy_kubeconfig)
        dns_kubeconfig = self.layout.coredns_dir / "kubeconfig"
        dns_kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        _copy(plane.kubeconfig_for(*plane.pki.issue_client_cert(dns.USER)), dns_kubeconfig)
        self._dns_ready_port = procs.free_port()
        corefile = dns.corefile(self.network.gateway, dns_kubeconfig, procs.free_port(), self._dns_ready_port)
        writes = {
            self.layout.containerd_config: containerd_config(self.layout),
            self.layout.cni_conf_dir / "10-headrace.conflist": cni_conflist(self.network, self.layout.ipam_dir),
            self.layout.kubelet_dir / "config.yaml": kubelet_config(self.layout, self.network, self.name, files),
            self.layout.kube_proxy_config: kube_proxy_config(self.network, self.name, proxy_kubeconfig),
            self.layout.coredns_dir / "Corefile": corefile,
            self.layout.kubelet_root / "config.json": json.dumps(kubelet_docker_config(self.registries)),
            **{
                self.layout.registry_hosts_dir / entry.name / "hosts.toml": hosts_toml(entry.access)
                for entry in self.registries
            },
        }
        for path, text in writes.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)

    def _spawn(self, name: str, argv: list[str]) -> None:
        self._processes[name] = procs.spawn(name, argv, self.layout.log(name))
        self._record()

    def _wait(self, name: str, check: Callable[[], bool]) -> None:
        procs.wait_until_healthy(self._processes[name], check, timeout_seconds=60, interval_seconds=0.2)

    def _wait_ready(self, deadline: float) -> None:
        proxy_health = f"http://{KUBE_PROXY_HEALTHZ}/healthz"
        while True:
            for process in self._processes.values():
                if not process.alive():
                    raise process.failure(f"exited with code {process.popen.returncode} before the node was Ready")
            if http_ok(proxy_health) and self._node_ready():
                return
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {name}:\n{p.tail(15)}" for name, p in self._processes.items())
                raise NodeError(f"node {self.name} not Ready within {self.ready_timeout_seconds:.0f}s\n{tails}")
            time.sleep(0.5)

    def _node_ready(self) -> bool:
        command = [str(self.binaries / "kubectl"), "--kubeconfig", str(self.kubeconfig), "get", "node", self.name]
        result = _run([*command, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}"], check=False)
        return result.returncode == 0 and result.stdout.strip() == "True"

    # --- stopping ---------------------------------------------------------------------------------

    def _teardown(self) -> None:
        store = str(self.layout.image_store) if self.layout.image_store else None
        state = NodeState(self.name, self.network, {}, store)
        with contextlib.suppress(FileNotFoundError):
            state = NodeState.from_json(self.layout.state_file.read_text())
        _teardown(state.layout(self.layout.root), state, self._processes)


def _copy(source: Path, target: Path) -> None:
    target.write_text(source.read_text())


def _stop_component(name: str, state: NodeState, layout: NodeLayout, running: dict[str, procs.Process]) -> None:
    if name in running:
        procs.stop(running.pop(name), grace_seconds=STOP_GRACE_SECONDS)
        return
    pid = state.pids.get(name)
    if pid is not None and pid in owned_processes(_cmdlines(), layout.markers):
        _signal_and_wait([pid], STOP_GRACE_SECONDS)


def _remove_pods(layout: NodeLayout) -> None:
    """Remove every sandbox through the CRI while containerd still runs (CNI DEL frees veths and rules)."""
    cmdlines = _cmdlines()
    alive = any(Path(cmdlines[pid][0]).name == "containerd" for pid in owned_processes(cmdlines, layout.markers))
    if alive and cri_tool_path().exists():
        _run([str(cri_tool_path()), str(layout.containerd_socket), "teardown"], check=False, timeout=180)


def _kill_runtime_leftovers(layout: NodeLayout, name: str) -> None:
    """After containerd: kill what is left of the node's programs (shims) and every process in its cgroups."""
    _signal_and_wait(owned_processes(_cmdlines(), layout.markers), 2.0)
    _kill_and_remove_cgroups(name)


def _reclaim_machine(layout: NodeLayout, name: str, network: NodeNetwork) -> None:
    """With the machine lock held, no other node lives: remove what dead ones left (a session stopped hard).

    Their programs (anything naming a short root), the processes in this node name's cgroups, mounts
    and directories under other short roots, the bridge and this network's iptables rules.
    """
    others = [root for root in SHORT_ROOTS.iterdir() if root != layout.short_root] if SHORT_ROOTS.is_dir() else []
    orphans = owned_processes(_cmdlines(), [str(SHORT_ROOTS)])
    found = [f"processes {orphans}"] if orphans else []
    found += [f"device {network.bridge}"] if link_exists(network.bridge) else []
    found += [f"directory {root}" for root in others]
    if not found:
        return
    print(f"headrace node: removing what an earlier node left: {', '.join(found)}", file=sys.stderr)
    _signal_and_wait(orphans, 2.0)
    _kill_and_remove_cgroups(name)
    _unmount_all(others)
    _delete_links(network)
    _clean_iptables(network.cni_name)
    for root in others:
        _remove_tree(root)


def _teardown(layout: NodeLayout, state: NodeState, running: dict[str, procs.Process]) -> None:
    _stop_component("kubelet", state, layout, running)
    _remove_pods(layout)
    _stop_component("kube-proxy", state, layout, running)
    _stop_component("coredns", state, layout, running)
    _stop_component("containerd", state, layout, running)
    _kill_runtime_leftovers(layout, state.name)
    stuck = _unmount_all(layout.mount_roots)
    _delete_links(state.network)
    _clean_iptables(state.network.cni_name)
    _remove_log_links(layout.pod_logs)
    _remove_cni_cache(_sandbox_ids(layout), state.network.cni_name)
    if stuck:
        raise NodeError(f"could not unmount {stuck}; left {layout.root} in place")
    for root in layout.roots:
        _remove_tree(root)
    problems = node_leftovers(layout, state.name, state.network)
    if problems:
        raise NodeError("node teardown left: " + "; ".join(problems))


def _remove_tree(root: Path) -> None:
    if root.exists():
        _run(["rm", "-rf", "--one-file-system", str(root)], check=False)


def node_leftovers(layout: NodeLayout, name: str, network: NodeNetwork) -> list[str]:
    """Processes, mounts, devices, iptables rules, cgroups and directories of a node that still exist."""
    problems = [f"process {pid}: {' '.join(argv)[:120]}" for pid, argv in _owned(layout).items()]
    problems += [f"mount {point}" for point in _mounts_now(layout.mount_roots)]
    problems += [f"device {port} (on {network.bridge})" for port in bridge_ports(network.bridge)]
    problems += [f"device {network.bridge}"] if link_exists(network.bridge) else []
    problems += iptables_leftovers(network.cni_name)
    problems += [f"cgroup {path}" for path in _cgroup_dirs(name)]
    problems += [f"directory {path}" for path in layout.roots if path.exists()]
    return problems


def _owned(layout: NodeLayout) -> dict[int, list[str]]:
    cmdlines = _cmdlines()
    return {pid: cmdlines[pid] for pid in owned_processes(cmdlines, layout.markers)}

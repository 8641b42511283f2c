"""A kind cluster of podman containers (one control plane, two workers), through pytest-kind.

Owns: the cluster's kind configuration, `PodmanKindCluster` (pytest-kind's `KindCluster` running kind
and podman with this machine's runtime wrapper), its own podman network, the registries its nodes' containerd
pulls from (a hosts.toml and CA per registry name in a host directory every node mounts as
``/etc/containerd/certs.d``, as kind's own local-registry recipe configures them; no image is ever loaded into a
node), and the leak check after ``kind delete``: no container, volume or network of the cluster, no netdev, mount
or iptables rule it made. Never: decides what a test does on the cluster, or runs a registry.

``python -m testbed kind up|down|status`` drives it by hand.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pytest_kind import KindCluster  # type: ignore[import-untyped]

from testbed import build, scenario
from testbed.kind import nodeimage, podman, tools
from testbed.node import hosts_toml
from testbed.registry import RegistryAccess

CLUSTER_NAME = "headrace"
READY_TIMEOUT_SECONDS = 300
WORKERS = 2
# A host directory every node mounts at the same path: the shared storage (an NFS share's part) that a driver's
# checkpoint, input and output live on, so that the next driver reads them from any node, and this process too.
SHARED_DATA = scenario.POD_DATA_BASE / "kind"
# A node that stopped reporting is marked unreachable (and tainted, so nothing new is scheduled there) after this,
# instead of the default 50 s: the tests' recovery must not race the node controller for where the next driver goes.
NODE_MONITOR_GRACE = "20s"
# Where each node's containerd finds its registries' hosts.toml (containerd reads it at every pull: a registry
# configured after the nodes started is used without a restart).
NODE_REGISTRY_HOSTS = Path("/etc/containerd/certs.d")


def cluster_config(registry_hosts: Path) -> str:
    """kind's configuration: three nodes, each mounting the shared data and (read-only) `registry_hosts` as its
    containerd's registry configuration directory. The kubelet refuses cgroup v1 from 1.35 on unless told
    otherwise; this host is cgroup v1."""
    mounts = (
        f"  extraMounts:\n  - hostPath: {SHARED_DATA}\n    containerPath: {SHARED_DATA}\n"
        f"  - hostPath: {registry_hosts}\n    containerPath: {NODE_REGISTRY_HOSTS}\n    readOnly: true\n"
    )
    nodes = "- role: control-plane\n" + mounts + "".join("- role: worker\n" + mounts for _ in range(WORKERS))
    return f"""\
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  podSubnet: {nodeimage.POD_SUBNET}
nodes:
{nodes}containerdConfigPatches:
- |-
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{NODE_REGISTRY_HOSTS}"
kubeadmConfigPatches:
- |
  kind: KubeletConfiguration
  failCgroupV1: false
- |
  kind: ClusterConfiguration
  controllerManager:
    extraArgs:
      node-monitor-grace-period: "{NODE_MONITOR_GRACE}"
"""


def network_name(cluster: str) -> str:
    """Each cluster's own podman network (kind's default, ``kind``, is shared by every kind cluster)."""
    return f"{cluster}-kind"


def environment(cluster: str = CLUSTER_NAME) -> dict[str, str]:
    """The environment kind and podman run with: the per-run containers.conf, the podman provider and
    the cluster's own network."""
    env = dict(os.environ)
    env.update(podman.environment())
    env["KIND_EXPERIMENTAL_PODMAN_NETWORK"] = network_name(cluster)
    return env


@contextlib.contextmanager
def _process_environment(cluster: str) -> Iterator[None]:
    """pytest-kind runs kind with the process's environment: lend it ours for the call."""
    saved = dict(os.environ)
    os.environ.update(environment(cluster))
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _podman(*args: str, check: bool = True) -> str:
    result = subprocess.run(["podman", *args], env=environment(), check=check, capture_output=True, text=True)
    return result.stdout


@dataclass(frozen=True)
class HostState:
    """What a cluster can leave behind on the host, to compare before and after."""

    containers: frozenset[str]
    volumes: frozenset[str]
    networks: frozenset[str]
    links: frozenset[str]
    mounts: frozenset[str]
    iptables: frozenset[str]

    def leftovers(self, before: HostState) -> dict[str, list[str]]:
        """What is here now and was not `before` (an empty dict when the host is clean)."""
        found = {}
        for field in ("containers", "volumes", "networks", "links", "mounts", "iptables"):
            extra = sorted(getattr(self, field) - getattr(before, field))
            if extra:
                found[field] = extra
        return found


def _iptables_rules() -> frozenset[str]:
    rules: set[str] = set()
    for table in ("filter", "nat"):
        result = subprocess.run(["iptables", "-t", table, "-S"], check=False, capture_output=True, text=True)
        rules |= {f"{table}: {line}" for line in result.stdout.splitlines()}
    return frozenset(rules)


# Only what podman's network stack (netavark) makes is the cluster's: its bridges and veths, its iptables chains. The
# single-node testbed and benches of other users on a shared machine make links (hr0, veth<hex>) and KUBE-/CNI- rules
# of their own at any time.
_PODMAN_LINK = re.compile(r"^(podman|veth)[0-9]+$")
_OTHER_BRIDGE = re.compile(r" master (?!podman[0-9]+ )\S+")  # a veth of another bridge (hr0) whose hex is all digits


def _link_name(line: str) -> str:
    return re.sub(r"@\S+", "", line.split(":")[1].strip())


def _podman_link(line: str) -> bool:
    """Whether a line of ``ip -o link show`` is a link podman's network stack made (not one of another bridge)."""
    return bool(_PODMAN_LINK.match(_link_name(line))) and not _OTHER_BRIDGE.search(line)


def _cluster_mount(point: str) -> bool:
    """A mount a node container makes (podman's network namespace, its volumes and bind mounts); not a containerd
    network namespace of another user's single-node testbed (under its own state directory). Not the overlay root
    filesystems under podman's storage: other users' podman (image builds, their containers) mount and unmount those
    all the time on a shared machine; a node's is gone with its container, which the check sees."""
    return (point.startswith(("/run/netns/", "/var/run/netns/")) or "/containers/" in point) and not point.startswith(
        _OVERLAY_STORAGE
    )


_OVERLAY_STORAGE = "/var/lib/containers/storage/overlay"


def host_state() -> HostState:
    """The host's podman containers, volumes and networks, and podman's netdevs, container mounts and iptables rules
    now."""
    links = subprocess.run(["ip", "-o", "link", "show"], check=True, capture_output=True, text=True).stdout
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    return HostState(
        containers=frozenset(_podman("ps", "-a", "--format", "{{.Names}}").split()),
        volumes=frozenset(_podman("volume", "ls", "--format", "{{.Name}}").split()),
        networks=frozenset(_podman("network", "ls", "--format", "{{.Name}}").split()),
        links=frozenset(_link_name(line) for line in links.splitlines() if _podman_link(line)),
        mounts=frozenset(line.split()[4] for line in mounts if _cluster_mount(line.split()[4])),
        iptables=_netavark_rules(),
    )


class PodmanKindCluster(KindCluster):  # type: ignore[misc]
    """pytest-kind's cluster on podman with the testbed's node image, kind and kubectl."""

    def __init__(self, name: str = CLUSTER_NAME, *, workdir: Path) -> None:
        super().__init__(
            name,
            kubeconfig=workdir / "kubeconfig",
            image=None,
            kind_path=tools.ensure_kind(),
            kubectl_path=build.binary("kubectl"),
        )
        self.workdir = workdir

    @property
    def registry_hosts(self) -> Path:
        """The host directory every node mounts as its containerd's registry configuration."""
        return self.workdir / "certs.d"

    def create(self, config_file: str | Path | None = None) -> None:
        """Build (or reuse) the node image, then ``kind create cluster`` with three nodes."""
        self.image = nodeimage.build_node_image()
        scenario.pod_data_root(SHARED_DATA.name)  # world-writable all the way down, before the nodes mount it
        Path("/lib/modules").mkdir(parents=True, exist_ok=True)  # kind mounts it into every node
        self.registry_hosts.mkdir(parents=True, exist_ok=True)
        if config_file is None:
            config_file = self.workdir / "kind.yaml"
            Path(config_file).write_text(cluster_config(self.registry_hosts))
        with _process_environment(self.name):
            super().create(config_file)
        # kind returns once every node joined; the nodes turn Ready once kube-router has set up their
        # pod network, and cluster DNS once CoreDNS runs on it.
        self.kubectl("wait", "--for=condition=Ready", "nodes", "--all", f"--timeout={READY_TIMEOUT_SECONDS}s")
        # kube-router fills its set of pod ranges (whose traffic it does not masquerade) when it starts: the control
        # plane's started before the workers joined and knows only its own range, so its pods' traffic to the
        # workers' pods left masqueraded as the node, which NetworkPolicies then judged (the operator's calls to a
        # driver were rejected). Restarted now, it knows every node's.
        self._restart_kube_router(f"spec.nodeName={self.name}-control-plane")
        # Cluster DNS runs on the control-plane node (kind puts it anywhere): a test's worker lost, partitioned or
        # drained must not take the cluster's DNS with it.
        on_control_plane = {"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}}
        patch = json.dumps({"spec": {"template": {"spec": on_control_plane}}})
        self.kubectl("patch", "-n", "kube-system", "deployment/coredns", "-p", patch)
        self.kubectl(
            "rollout", "status", "-n", "kube-system", "deployment/coredns", f"--timeout={READY_TIMEOUT_SECONDS}s"
        )

    def load_docker_image(self, docker_image: str) -> None:
        """Refused: the nodes pull their images from a registry, as a real cluster's do (`trust_registry`)."""
        raise NotImplementedError(
            f"no image is loaded into the kind nodes ({docker_image}): push it to the registry the nodes pull from "
            "(testbed.kind.headrace.cluster_registry)"
        )

    def gateway(self) -> str:
        """The IPv4 address of this machine on the cluster's podman network: where the nodes reach a service of
        the host (the registry)."""
        (network,) = json.loads(_podman("network", "inspect", network_name(self.name)))
        gateways = [subnet["gateway"] for subnet in network["subnets"] if "." in subnet.get("gateway", "")]
        if not gateways:
            raise RuntimeError(f"podman network {network_name(self.name)} has no IPv4 gateway: {network['subnets']}")
        return str(gateways[0])

    def trust_registry(self, name: str, access: RegistryAccess) -> None:
        """Make every node's containerd pull images named `name/...` (``localhost/headrace/spark:0.1.0``) from the
        registry `access` describes, trusting its CA: its hosts.toml and CA in the directory the nodes mount. No
        credentials: a pod pulls with its image pull Secrets."""
        directory = self.registry_hosts / name
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(access.ca, directory / "ca.crt")
        on_node = dataclasses.replace(access, ca=NODE_REGISTRY_HOSTS / name / "ca.crt")
        (directory / "hosts.toml").write_text(hosts_toml(on_node))

    def delete(self) -> None:
        """``kind delete cluster``, then the cluster's podman network."""
        with _process_environment(self.name):
            super().delete()
        network = network_name(self.name)
        if network in _podman("network", "ls", "--format", "{{.Name}}").split():
            _podman("network", "rm", network)

    def node_names(self) -> list[str]:
        """The cluster's node containers (control plane first)."""
        names = _podman("ps", "-a", "--filter", f"label=io.x-k8s.kind.cluster={self.name}", "--format", "{{.Names}}")
        return sorted(names.split(), key=lambda name: (not name.endswith("control-plane"), name))

    def node_exec(self, node: str, *command: str) -> str:
        """Run a command inside a node container and return its output."""
        return _podman("exec", node, *command)

    def node_address(self, node: str, *, ipv6: bool = False) -> str:
        """The node container's IPv4 (or IPv6) address on the cluster's network (it changes when it restarts)."""
        field = "GlobalIPv6Address" if ipv6 else "IPAddress"
        template = f"{{{{range .NetworkSettings.Networks}}}}{{{{.{field}}}}}{{{{end}}}}"
        return _podman("inspect", node, "--format", template).strip()

    def power_off(self, node: str) -> None:
        """The node dies at once with everything on it (``podman kill``: its systemd, kubelet and containers)."""
        _podman("kill", node)

    def power_on(self, node: str, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        """Start a powered-off node again and wait until its kubelet reports it Ready afresh (kind's entrypoint
        gives the kubelet the container's new address), then until every node routes to every other node's pod range
        again. The other nodes' kube-router peer (iBGP) with the addresses the nodes had when it started: with the old
        one, none of them routed to this node's pod range (nor it to theirs) for minutes, so no reply of the API
        server reached a pod there (a driver failed at its SparkContext: "timeout ... getting a connection to
        10.96.0.1:443"). Restarted, they peer with its new address."""
        started = time.time()
        _podman("start", node)
        self._wait_ready_since(node, started, timeout, "its restart")
        self._restart_kube_router(f"spec.nodeName!={node}")
        deadline = time.monotonic() + timeout
        while missing := missing_pod_routes(self._pod_ranges(), self._routes()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"after node {node}'s restart, pod routes still missing: {missing}")
            time.sleep(2)

    def _restart_kube_router(self, field_selector: str) -> None:
        """Restart the kube-router pods of the nodes `field_selector` picks, and wait until every one runs again."""
        self.kubectl(
            "delete", "pod", "-n", "kube-system", "-l", "k8s-app=kube-router", "--field-selector", field_selector
        )
        self.kubectl(
            "rollout", "status", "-n", "kube-system", "daemonset/kube-router", f"--timeout={READY_TIMEOUT_SECONDS}s"
        )

    def _pod_ranges(self) -> dict[str, str]:
        """Node name -> its pod range (spec.podCIDR)."""
        nodes = json.loads(self.kubectl("get", "nodes", "-o", "json"))["items"]
        return {node["metadata"]["name"]: node["spec"].get("podCIDR", "") for node in nodes}

    def _routes(self) -> dict[str, str]:
        """Node name -> its routing table (``ip route``)."""
        return {node: self.node_exec(node, "ip", "route") for node in self.node_names()}

    def restart_kubelet(self, node: str, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        """Restart the node's kubelet (as an upgrade of the kubelet or a crash of it does; its pods' containers run
        on under containerd) and wait until it reports the node Ready afresh."""
        started = time.time()
        self.node_exec(node, "systemctl", "restart", "kubelet")
        self._wait_ready_since(node, started, timeout, "its kubelet's restart")

    def _wait_ready_since(self, node: str, moment: float, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not self._ready_since(node, moment):
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {node} not Ready within {timeout:.0f} s of {what}")
            time.sleep(2)

    def _ready_since(self, node: str, moment: float) -> bool:
        status = json.loads(self.kubectl("get", "node", node, "-o", "json"))["status"]
        ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), None)
        if ready is None or ready["status"] != "True":
            return False
        heartbeat = datetime.fromisoformat(ready["lastHeartbeatTime"].replace("Z", "+00:00")).timestamp()
        return heartbeat >= moment - 1

    def wait_workers_schedulable(self, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        """Wait until every worker takes new pods again: Ready, not cordoned, no NoSchedule or NoExecute taint left
        by an earlier fault (the node controller lifts its not-ready and unreachable taints some seconds after the
        node turns Ready): a fault measured before that finds nowhere to put a pod."""
        deadline = time.monotonic() + timeout
        while blocked := unschedulable_workers(json.loads(self.kubectl("get", "nodes", "-o", "json"))["items"]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers still take no new pods after {timeout:.0f} s: {blocked}")
            time.sleep(2)

    def partition(self, node: str, peer: str) -> None:
        """Cut `node` off from `peer` (the control plane: its API server, and the pods on it, the operator among
        them) while everything on it keeps running and reaches every other node: packets from and to the peer's
        address and pod range are dropped inside the node (its own pods' traffic too: the mangle table, before and
        after kube-proxy's translation of the API server's Service). The peer's IPv6 address too: the node resolves
        the peer's name to both, and the kubelet may dial either."""
        cidr = json.loads(self.kubectl("get", "node", peer, "-o", "json"))["spec"]["podCIDR"]
        blocked = {"iptables": [self.node_address(peer), cidr], "ip6tables": [self.node_address(peer, ipv6=True)]}
        script = []
        for tool, addresses in blocked.items():
            script.append(f"{tool} -t mangle -N {_PARTITION}")
            for address in filter(None, addresses):
                script += [f"{tool} -t mangle -A {_PARTITION} {way} {address} -j DROP" for way in ("-s", "-d")]
            script += [f"{tool} -t mangle -I {chain} -j {_PARTITION}" for chain in _PARTITIONED_CHAINS]
        self.node_exec(node, "sh", "-ec", "; ".join(script))

    def heal(self, node: str) -> None:
        """Undo `partition`."""
        script = []
        for tool in ("iptables", "ip6tables"):
            script += [f"{tool} -t mangle -D {chain} -j {_PARTITION}" for chain in _PARTITIONED_CHAINS]
            script += [f"{tool} -t mangle -F {_PARTITION}", f"{tool} -t mangle -X {_PARTITION}"]
        self.node_exec(node, "sh", "-ec", "; ".join(script))


def unschedulable_workers(nodes: list[dict[str, Any]]) -> dict[str, str]:
    """Worker (not control-plane) Node objects that take no new pods -> why: not Ready, cordoned, or tainted."""
    blocked = {}
    for node in nodes:
        metadata, spec = node["metadata"], node.get("spec") or {}
        if "node-role.kubernetes.io/control-plane" in (metadata.get("labels") or {}):
            continue
        conditions = (node.get("status") or {}).get("conditions") or []
        ready: dict[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
        taints = [t["key"] for t in spec.get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]
        if ready.get("status") != "True":
            blocked[metadata["name"]] = "not Ready"
        elif spec.get("unschedulable"):
            blocked[metadata["name"]] = "cordoned"
        elif taints:
            blocked[metadata["name"]] = "tainted " + ",".join(taints)
    return blocked


def missing_pod_routes(pod_ranges: dict[str, str], routes: dict[str, str]) -> list[str]:
    """`<node> -> <range>` for every other node's pod range that a node's routing table (``ip route`` output, per
    node) has no route to (its own range is on its bridge)."""
    missing = []
    for node, table in sorted(routes.items()):
        destinations = {line.split()[0] for line in table.splitlines() if line.strip()}
        missing += [
            f"{node} -> {cidr}"
            for other, cidr in sorted(pod_ranges.items())
            if other != node and cidr and cidr not in destinations
        ]
    return missing


_PARTITION = "HEADRACE-PARTITION"
_PARTITIONED_CHAINS = ("PREROUTING", "POSTROUTING")


@contextlib.contextmanager
def running_cluster(workdir: Path, *, name: str = CLUSTER_NAME) -> Iterator[PodmanKindCluster]:
    """A cluster up for the block, deleted after it even when creating it fails half way; the netavark chains its
    network added to the host removed with it."""
    before = _netavark_rules()
    cluster = PodmanKindCluster(name, workdir=workdir)
    try:
        cluster.create()
        yield cluster
    finally:
        cluster.delete()
        remove_added_netavark_rules(before)


def _netavark_rules() -> frozenset[str]:
    return frozenset(rule for rule in _iptables_rules() if "NETAVARK" in rule)


def netavark_removals(added: frozenset[str]) -> list[list[str]]:
    """The iptables commands that remove `added` (lines of ``iptables -S`` as `_iptables_rules` names them): every
    rule first (``-A`` becomes ``-D``), then the chains, which must be empty and unreferenced by then."""
    rules, chains = [], []
    for line in sorted(added):
        table, spec = line.split(": ", 1)
        words = shlex.split(spec)
        if words[0] == "-A":
            rules.append(["iptables", "-t", table, "-D", *words[1:]])
        elif words[0] == "-N":
            chains.append(["iptables", "-t", table, "-X", words[1]])
    return rules + chains


def remove_added_netavark_rules(before: frozenset[str]) -> None:
    """Remove the netavark rules and chains that were not on the host `before` (netavark makes its host-wide base
    chains the first time a podman network is used and never removes them), unless a podman container is still
    there (another user's may need them)."""
    if _podman("ps", "-aq", check=False).strip():
        return
    for command in netavark_removals(_netavark_rules() - before):
        subprocess.run(command, check=False, capture_output=True)


def _timed(label: str, started: float) -> None:
    print(f"{label} in {time.monotonic() - started:.0f} s", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m testbed kind up|down|status``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument("--workdir", type=Path, default=build.cache_root() / "kind" / "cluster")
    arguments = parser.parse_args(argv)
    arguments.workdir.mkdir(parents=True, exist_ok=True)
    cluster = PodmanKindCluster(workdir=arguments.workdir)
    started = time.monotonic()
    if arguments.command == "up":
        cluster.create()
        _timed("cluster up", started)
        print(f"export KUBECONFIG={cluster.kubeconfig_path}")
    elif arguments.command == "down":
        cluster.delete()
        _timed("cluster down", started)
    else:
        print("\n".join(cluster.node_names()) or "no cluster")
    return 0


if __name__ == "__main__":
    sys.exit(main())

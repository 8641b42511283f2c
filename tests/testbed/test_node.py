"""The testbed node: pure rendering and cleanup planning, the OCI image writer, and (marked e2e) a real
node — containerd + runc + bridge CNI + kubelet + kube-proxy — joined to a real control plane.

The e2e tests need root, the built Kubernetes binaries, gcc and Debian's containerd, runc and CNI plugins.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import ipaddress
import json
import subprocess
import tarfile
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from testbed import build
from testbed.controlplane import ControlPlane, create_namespace, delete_namespace
from testbed.kind import nodeimage
from testbed.node import (
    NODE_PROGRAMS,
    Node,
    NodeError,
    NodeLayout,
    NodeNetwork,
    NodeRegistry,
    archive_images,
    bridge_ports,
    cni_cache_owner,
    cni_conflist,
    containerd_config,
    cri_tool,
    hosts_toml,
    iptables_cleanup,
    kubelet_docker_config,
    link_exists,
    listed_images,
    mounts_under,
    owned_processes,
    stale_image_ids,
)
from testbed.pause import PAUSE_IMAGE, static_c_image
from testbed.pause.image import ImageFile, oci_archive
from testbed.registry import RegistryAccess

# --------------------------------------------------------------------------------------------------
# Pure parts.
# --------------------------------------------------------------------------------------------------


def test_network_gateway_is_first_host_of_the_pod_subnet() -> None:
    network = NodeNetwork(bridge="hrx", pod_cidr="10.250.3.0/24")
    assert network.gateway == "10.250.3.1"
    assert network.gateway_cidr == "10.250.3.1/24"


def test_cni_conflist_uses_bridge_subnet_and_private_ipam_dir(tmp_path: Path) -> None:
    config = json.loads(cni_conflist(NodeNetwork(), tmp_path / "ipam"))
    bridge, portmap = config["plugins"]
    assert (bridge["type"], bridge["bridge"], bridge["ipMasq"], bridge["isGateway"]) == ("bridge", "hr0", True, True)
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.240.0.0/24", "gateway": "10.240.0.1"}]]
    assert bridge["ipam"]["dataDir"] == str(tmp_path / "ipam")
    assert portmap["type"] == "portmap"


def test_containerd_config_keeps_every_path_under_the_node_root(tmp_path: Path) -> None:
    layout = NodeLayout(tmp_path)
    text = containerd_config(layout)
    paths = [line.split('"')[1] for line in text.splitlines() if '= "/' in line]
    outside = [p for p in paths if not p.startswith((str(tmp_path), str(layout.short_root))) and p != "/usr/lib/cni"]
    assert outside == []
    for setting in ("SystemdCgroup = false", "restrict_oom_score_adj = true", 'snapshotter = "overlayfs"'):
        assert setting in text
    assert f'sandbox_image = "{PAUSE_IMAGE}"' in text
    assert f'config_path = "{layout.registry_hosts_dir}"' in text  # registries are read from hosts.toml files


def test_a_registry_is_pulled_from_over_tls_and_node_credentials_cover_one_path_only() -> None:
    access = RegistryAccess("127.0.0.1:5443", Path("/pki/ca.crt"), "u", "p")
    hosts = tomllib.loads(hosts_toml(access))
    assert hosts["server"] == "https://127.0.0.1:5443"
    assert hosts["ca"] == "/pki/ca.crt"
    # containerd 1.6 ignores a file without a host table (and pulls localhost/... over plain HTTP instead)
    assert hosts["host"] == {"https://127.0.0.1:5443": {"capabilities": ["pull", "resolve"], "ca": "/pki/ca.crt"}}
    covered = NodeRegistry("localhost", access, "localhost/headrace")
    uncovered = NodeRegistry("other", access)
    assert kubelet_docker_config([covered, uncovered]) == {"auths": {"localhost/headrace": {"auth": "dTpw"}}}


MOUNTINFO = """\
22 1 8:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
90 22 0:50 / /w/node/containerd/state/x/rootfs rw - overlay overlay rw
91 22 0:51 / /w/node/kubelet/root/pods/a/volumes/kube-api-access rw - tmpfs tmpfs rw
92 22 0:52 / /w/node-other/y rw - tmpfs tmpfs rw
93 22 0:53 / /w/node/with\\040space rw - tmpfs tmpfs rw
94 90 0:54 / /w/node/containerd/state/x/rootfs/dev rw - tmpfs tmpfs rw
"""


def test_mounts_under_lists_only_the_roots_mounts_deepest_first() -> None:
    assert mounts_under(MOUNTINFO, [Path("/w/node")]) == [
        "/w/node/kubelet/root/pods/a/volumes/kube-api-access",
        "/w/node/containerd/state/x/rootfs/dev",
        "/w/node/containerd/state/x/rootfs",
        "/w/node/with space",
    ]


NAT_SAVE = """\
*nat
:PREROUTING ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:CNI-aaa - [0:0]
:CNI-bbb - [0:0]
:KUBE-SERVICES - [0:0]
:NETAVARK-1 - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -s 10.244.0.2/32 -m comment --comment "name: \\"headrace-pods\\" id: \\"c1\\"" -j CNI-aaa
-A POSTROUTING -s 10.88.0.2/32 -m comment --comment "name: \\"podman\\" id: \\"c2\\"" -j CNI-bbb
-A POSTROUTING -s 10.89.0.0/24 -j NETAVARK-1
-A CNI-aaa -d 10.244.0.0/24 -m comment --comment "name: \\"headrace-pods\\" id: \\"c1\\"" -j ACCEPT
-A CNI-bbb -d 10.88.0.0/16 -m comment --comment "name: \\"podman\\" id: \\"c2\\"" -j ACCEPT
COMMIT
"""


COMMENT = ("-m", "comment", "--comment")
TAG = 'name: "headrace-pods" id: "c1"'


def test_iptables_cleanup_removes_only_this_nodes_rules_and_chains() -> None:
    commands = iptables_cleanup("nat", NAT_SAVE, "headrace-pods")
    assert commands == [
        ["-t", "nat", "-D", "PREROUTING", *COMMENT, "kubernetes service portals", "-j", "KUBE-SERVICES"],
        [
            "-t",
            "nat",
            "-D",
            "POSTROUTING",
            "-s",
            "10.244.0.2/32",
            *COMMENT,
            'name: "headrace-pods" id: "c1"',
            "-j",
            "CNI-aaa",
        ],
        ["-t", "nat", "-F", "CNI-aaa"],
        ["-t", "nat", "-F", "KUBE-SERVICES"],
        ["-t", "nat", "-X", "CNI-aaa"],
        ["-t", "nat", "-X", "KUBE-SERVICES"],
    ]


def test_iptables_cleanup_of_a_clean_table_is_empty() -> None:
    assert iptables_cleanup("filter", "*filter\n:INPUT ACCEPT [0:0]\nCOMMIT\n", "headrace-pods") == []


def test_owned_processes_match_node_programs_naming_the_root() -> None:
    cmdlines = {
        1: ["/usr/bin/containerd-shim-runc-v2", "-address", "/w/node/containerd/containerd.sock"],
        2: ["/bin/bash", "-c", "ls /w/node"],
        3: ["containerd", "--config", "/other/config.toml"],
        4: ["/bin/kubelet", "--config=/w/node/kubelet/config.yaml"],
        5: ["containerd-shim-runc-v2", "-address", "/var/lib/headrace/abc/containerd.sock"],
    }
    assert owned_processes(cmdlines, ("/w/node", "/var/lib/headrace/abc")) == [1, 4, 5]


@pytest.mark.parametrize(
    ("file_name", "owner"),
    [
        ("headrace-pods-abc123-eth0", "abc123"),
        ("cni-loopback-abc123-lo", "abc123"),
        ("podman-abc123-eth0", None),
        ("headrace-pods", None),
    ],
)
def test_cni_cache_owner(file_name: str, owner: str | None) -> None:
    assert cni_cache_owner(file_name, "headrace-pods") == owner


def test_archive_and_listed_images_compare_by_name_and_digest() -> None:
    index = {
        "manifests": [
            {"digest": "sha256:aa", "annotations": {"io.containerd.image.name": "localhost/x/spark:1"}},
            {"digest": "sha256:bb", "annotations": {"org.opencontainers.image.ref.name": "localhost/x/op:1"}},
            {"digest": "sha256:cc", "annotations": {"org.opencontainers.image.ref.name": "1"}},  # a bare tag
        ]
    }
    listing = (
        "REF TYPE DIGEST SIZE PLATFORMS LABELS\n"
        "localhost/x/spark:1 application/vnd.oci.image.manifest.v1+json sha256:aa 1.0 MiB linux/amd64 -\n"
    )
    assert archive_images(index) == {"localhost/x/spark:1": "sha256:aa", "localhost/x/op:1": "sha256:bb"}
    assert listed_images(listing) == {"localhost/x/spark:1": "sha256:aa"}


def test_stale_image_ids_are_id_references_no_named_image_shares() -> None:
    listing = {
        "localhost/x/spark:1": "sha256:new",
        "localhost/x/spark:dev": "sha256:new",
        "sha256:id-new": "sha256:new",
        "sha256:id-old": "sha256:old",
    }
    assert stale_image_ids(listing) == ["sha256:id-old"]


def test_a_second_node_on_the_machine_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADRACE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    with (tmp_path / "cache" / "node.lock").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        node = Node(tmp_path / "node", control_plane=None, binaries=tmp_path)  # type: ignore[arg-type]
        with pytest.raises(NodeError, match="another headrace node runs on this machine"):
            node.start()
        node.stop()  # nothing was started: a no-op that touches nothing shared
    assert not (tmp_path / "node").exists()


def test_oci_archive_is_a_valid_content_addressed_layout() -> None:
    archive = oci_archive({"hello": ImageFile(b"#!binary", 0o755)}, name="localhost/x/y:1.2", entrypoint=["/hello"])
    assert archive == oci_archive(
        {"hello": ImageFile(b"#!binary", 0o755)}, name="localhost/x/y:1.2", entrypoint=["/hello"]
    )
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        files = {member.name: tar.extractfile(member).read() for member in tar if member.isfile()}  # type: ignore[union-attr]
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    index = json.loads(files["index.json"])
    descriptor = index["manifests"][0]
    assert descriptor["annotations"]["io.containerd.image.name"] == "localhost/x/y:1.2"
    manifest = json.loads(files["blobs/sha256/" + descriptor["digest"].split(":")[1]])
    config = json.loads(files["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    assert config["config"]["Entrypoint"] == ["/hello"]
    layer = files["blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1]]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        (member,) = tar.getmembers()
        assert (member.name, member.mode) == ("hello", 0o755)


# --------------------------------------------------------------------------------------------------
# A real node (e2e).
# --------------------------------------------------------------------------------------------------

PROBE_IMAGE = "localhost/headrace/probe:test"
# A tiny static program: `probe exit N` exits with N; `probe connect IPV4 PORT` exits 0 once a TCP
# connection is established.
PROBE_SOURCE = r"""
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int probe_connect(const char *host, int port) {
    struct sockaddr_in address;
    memset(&address, 0, sizeof(address));
    address.sin_family = AF_INET;
    address.sin_port = htons((unsigned short)port);
    if (inet_pton(AF_INET, host, &address.sin_addr) != 1) {
        fprintf(stderr, "probe: bad address %s\n", host);
        return 2;
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof(address)) != 0) {
        perror("probe: connect");
        return 1;
    }
    printf("probe: connected to %s:%d\n", host, port);
    close(fd);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "exit") == 0) {
        printf("probe: exiting with %s\n", argv[2]);
        return atoi(argv[2]);
    }
    if (argc == 4 && strcmp(argv[1], "connect") == 0) {
        return probe_connect(argv[2], atoi(argv[3]));
    }
    fprintf(stderr, "usage: probe exit N | probe connect IPV4 PORT\n");
    return 2;
}
"""


@dataclass
class RunningNode:
    control_plane: ControlPlane
    node: Node
    api: ApiClient
    workdir: Path


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningNode]:
    """A control plane reachable from pods plus a Ready node with the probe image imported."""
    build.ensure_binaries()
    cri_tool()
    workdir = tmp_path_factory.mktemp("node-e2e")
    network = NodeNetwork()
    plane = ControlPlane(
        workdir / "control-plane",
        bind_address="0.0.0.0",  # noqa: S104 - the pods' path to the apiserver
        advertise_address=network.gateway,
        extra_sans=[network.gateway],
    )
    node = Node(workdir / "node", plane, network=network)
    with plane:
        try:
            node.start()
            node.import_image(static_c_image(PROBE_SOURCE, name=PROBE_IMAGE, binary="probe"))
            with plane.api_client() as api:
                yield RunningNode(plane, node, api, workdir / "node")
        finally:
            node.stop()


@pytest.fixture
def namespace(running: RunningNode) -> Iterator[str]:
    """A fresh namespace in the node's cluster (overrides the shared control plane's fixture)."""
    name = create_namespace(running.api, "node")
    try:
        yield name
    finally:
        delete_namespace(running.api, name)


def _pod(
    name: str, image: str, args: list[str] | None = None, restart: str = "Never", *, token: bool = False
) -> client.V1Pod:
    container = client.V1Container(name="main", image=image, image_pull_policy="Never", args=args)
    spec = client.V1PodSpec(containers=[container], restart_policy=restart, automount_service_account_token=token)
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name), spec=spec)


def _wait_for(predicate: Callable[[], object], timeout: float = 60.0, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def _run_pod(api: ApiClient, namespace: str, pod: client.V1Pod, phases: set[str]) -> client.V1Pod:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, pod)

    def reached() -> client.V1Pod | None:
        current = core.read_namespaced_pod(pod.metadata.name, namespace)
        return current if current.status.phase in phases else None

    return _wait_for(reached, what=f"pod {pod.metadata.name} in {phases}")  # type: ignore[return-value]


@pytest.mark.e2e
def test_node_is_ready_with_the_bridge_gateway_as_address(running: RunningNode) -> None:
    node = client.CoreV1Api(running.api).read_node(running.node.name)
    ready = {condition.type: condition.status for condition in node.status.conditions}["Ready"]
    addresses = {address.type: address.address for address in node.status.addresses}
    assert ready == "True"
    assert addresses["InternalIP"] == running.node.network.gateway
    assert node.status.node_info.container_runtime_version.startswith("containerd://1.6")
    assert PAUSE_IMAGE in running.node.images()
    assert running.node.containerd_socket.is_socket()


@pytest.mark.e2e
def test_pause_pod_runs_with_an_address_in_the_pod_subnet(running: RunningNode, namespace: str) -> None:
    pod = _run_pod(running.api, namespace, _pod("sleeper", PAUSE_IMAGE, restart="Always"), {"Running"})
    prefix = running.node.network.pod_cidr.rsplit(".", 1)[0] + "."
    assert pod.status.pod_ip.startswith(prefix)
    assert pod.status.pod_ip != running.node.network.gateway
    assert bridge_ports(running.node.network.bridge)


@pytest.mark.e2e
@pytest.mark.parametrize(("code", "phase"), [(0, "Succeeded"), (3, "Failed")])
def test_container_exit_code_reaches_the_pod_status(
    running: RunningNode, namespace: str, code: int, phase: str
) -> None:
    pod = _run_pod(
        running.api, namespace, _pod(f"exit-{code}", PROBE_IMAGE, ["exit", str(code)]), {"Succeeded", "Failed"}
    )
    assert pod.status.phase == phase
    assert pod.status.container_statuses[0].state.terminated.exit_code == code
    log = client.CoreV1Api(running.api).read_namespaced_pod_log(f"exit-{code}", namespace)
    assert f"exiting with {code}" in log  # the apiserver reads logs from the kubelet


@pytest.mark.e2e
def test_pod_reaches_the_apiserver_through_the_kubernetes_service(running: RunningNode, namespace: str) -> None:
    pod = _run_pod(
        running.api,
        namespace,
        _pod("reach", PROBE_IMAGE, ["connect", "10.96.0.1", "443"], token=True),
        {"Succeeded", "Failed"},
    )
    log = client.CoreV1Api(running.api).read_namespaced_pod_log("reach", namespace)
    assert (pod.status.phase, log.strip()) == ("Succeeded", "probe: connected to 10.96.0.1:443")


@pytest.mark.e2e
def test_deleting_a_pod_removes_its_containers_and_network(running: RunningNode, namespace: str) -> None:
    core = client.CoreV1Api(running.api)
    earlier_ports = set(bridge_ports(running.node.network.bridge))
    pod = _run_pod(running.api, namespace, _pod("doomed", PAUSE_IMAGE, restart="Always"), {"Running"})
    doomed_ports = set(bridge_ports(running.node.network.bridge)) - earlier_ports  # (earlier pods only leave)
    assert doomed_ports, "the pod's sandbox added no port to the bridge"
    container = pod.status.container_statuses[0].container_id.removeprefix("containerd://")
    core.delete_namespaced_pod("doomed", namespace, grace_period_seconds=0)

    def gone() -> bool:
        try:
            core.read_namespaced_pod("doomed", namespace)
        except ApiException as error:
            return error.status == 404
        return False

    def task_gone() -> bool:
        tasks = subprocess.run(
            ["ctr", "-n", "k8s.io", "-a", str(running.node.containerd_socket), "tasks", "ls"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return container not in tasks

    # With no grace period the API object goes at once; the kubelet tears the pod down after.
    _wait_for(gone, what="pod deletion")
    _wait_for(lambda: not doomed_ports & set(bridge_ports(running.node.network.bridge)), what="veth removal")
    _wait_for(task_gone, what="the container's task to end")


@pytest.mark.e2e
def test_stop_leaves_no_process_mount_device_rule_or_directory(running: RunningNode, namespace: str) -> None:
    """Runs last in this module: stops the node with a pod still running and checks what is left."""
    _run_pod(running.api, namespace, _pod("left-running", PAUSE_IMAGE, restart="Always", token=True), {"Running"})
    veths = bridge_ports(running.node.network.bridge)
    assert veths
    # The pod's token volume, rootfs and netns are mounted below the node's directories.
    assert len(mounts_under(Path("/proc/self/mountinfo").read_text(), running.node.layout.roots)) >= 3
    running.node.stop()
    table = subprocess.run(["ps", "-ewwo", "args"], capture_output=True, text=True, check=True).stdout.splitlines()
    mine = [line for line in table if str(running.workdir) in line and Path(line.split()[0]).name in NODE_PROGRAMS]
    assert mine == []
    assert mounts_under(Path("/proc/self/mountinfo").read_text(), running.node.layout.roots) == []
    assert not link_exists(running.node.network.bridge)
    assert [veth for veth in veths if link_exists(veth)] == []
    assert running.node.leftovers() == []
    assert not running.workdir.exists()


def test_the_pod_network_does_not_overlap_the_kind_clusters() -> None:
    """`make test` runs this node beside the kind cluster: with the host's bridge netfilter on, this node's per-pod
    MASQUERADE rules rewrote the kind nodes' bridged traffic from a kind pod that had the address of one of ours."""
    ours = ipaddress.ip_network(NodeNetwork().pod_cidr)
    assert not ours.overlaps(ipaddress.ip_network(nodeimage.POD_SUBNET))

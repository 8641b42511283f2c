"""testbed.kind without a cluster: the runtime wrapper, the per-run podman configuration, the node
image's recipe and the cluster's leak check."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from testbed.kind import cluster, nodeimage, podman


def _fake_runc(tmp_path: Path) -> Path:
    """A stand-in runc that records its arguments (the wrapper's job ends at exec)."""
    script = tmp_path / "runc"
    script.write_text(f'#!/bin/sh\necho "$@" > {tmp_path / "argv"}\n')
    script.chmod(0o755)
    return script


def _wrapper(tmp_path: Path, *arguments: str) -> str:
    env = {**os.environ, "HEADRACE_RUNC": str(_fake_runc(tmp_path))}
    subprocess.run([str(podman.RUNTIME_WRAPPER), *arguments], env=env, check=True)
    return (tmp_path / "argv").read_text().strip()


def test_the_runtime_wrapper_drops_rlimits_from_the_bundle_and_passes_every_argument(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    spec = {"process": {"args": ["/sbin/init"], "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1048576}]}}
    (bundle / "config.json").write_text(json.dumps(spec))
    argv = _wrapper(tmp_path, "--root", "/run/x", "--log-format", "json", "create", "--bundle", str(bundle), "c1")
    assert argv == f"--root /run/x --log-format json create --bundle {bundle} c1"
    assert json.loads((bundle / "config.json").read_text()) == {"process": {"args": ["/sbin/init"]}}


def test_the_runtime_wrapper_drops_rlimits_from_an_exec_process_file(tmp_path: Path) -> None:
    process = tmp_path / "process.json"
    process.write_text(json.dumps({"args": ["ls"], "rlimits": [{"type": "RLIMIT_NPROC", "hard": 4194304}]}))
    _wrapper(tmp_path, "exec", "--process", str(process), "--detach", "c1")
    assert json.loads(process.read_text()) == {"args": ["ls"]}


def test_the_runtime_wrapper_leaves_other_commands_alone(tmp_path: Path) -> None:
    assert _wrapper(tmp_path, "--root", "/run/x", "state", "c1") == "--root /run/x state c1"


def test_podman_runs_the_wrapper_through_a_per_checkout_conf_never_the_global_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HEADRACE_CACHE", str(tmp_path))
    env = podman.environment()
    conf = Path(env["CONTAINERS_CONF"])
    assert conf.is_relative_to(tmp_path)
    assert f'headrace-runc = ["{podman.RUNTIME_WRAPPER}"]' in conf.read_text()
    assert 'runtime = "headrace-runc"' in conf.read_text()
    assert env["KIND_EXPERIMENTAL_PROVIDER"] == "podman"


def test_the_cluster_config_has_one_control_plane_two_workers_and_allows_cgroup_v1() -> None:
    config = yaml.safe_load(cluster.cluster_config(Path("/w/certs.d")))
    assert [node["role"] for node in config["nodes"]] == ["control-plane", "worker", "worker"]
    assert config["networking"]["podSubnet"] == nodeimage.POD_SUBNET
    assert yaml.safe_load(config["kubeadmConfigPatches"][0]) == {
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
    }


def test_every_node_takes_its_registries_from_the_mounted_hosts_directory_and_no_credentials() -> None:
    config = yaml.safe_load(cluster.cluster_config(Path("/w/certs.d")))
    for node in config["nodes"]:
        hosts = [mount for mount in node["extraMounts"] if mount["containerPath"] == str(cluster.NODE_REGISTRY_HOSTS)]
        assert hosts == [{"hostPath": "/w/certs.d", "containerPath": "/etc/containerd/certs.d", "readOnly": True}]
    (patch,) = config["containerdConfigPatches"]
    assert '[plugins."io.containerd.grpc.v1.cri".registry]' in patch
    assert 'config_path = "/etc/containerd/certs.d"' in patch
    assert "auth" not in patch  # credentials come with each pod's image pull Secrets


def test_the_default_cni_is_kube_router_from_the_preloaded_image_enforcing_policies() -> None:
    documents = list(yaml.safe_load_all(nodeimage.kube_router_manifest()))
    daemonset = next(document for document in documents if document["kind"] == "DaemonSet")
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == nodeimage.KUBE_ROUTER_IMAGE
    assert container["imagePullPolicy"] == "Never"
    assert "--run-firewall=true" in container["args"]
    assert "--run-router=true" in container["args"]


def test_the_base_runtime_spec_has_no_rlimits() -> None:
    default = {"process": {"rlimits": [{"type": "RLIMIT_NOFILE"}], "args": []}, "hooks": {}}
    spec = nodeimage.cri_base_spec(default)
    assert spec == {"process": {"args": []}, "hooks": {}}
    assert "rlimits" in default["process"]  # the input is left as it was


def test_the_node_containerd_restricts_oom_score_adj_and_uses_kubeadms_pause_image() -> None:
    config = nodeimage.containerd_config("registry.k8s.io/pause:3.10.1")
    assert 'sandbox_image = "registry.k8s.io/pause:3.10.1"' in config
    assert "restrict_oom_score_adj = true" in config


def test_image_names_and_the_node_image_digest() -> None:
    assert nodeimage.image_name_of("registry.k8s.io/coredns/coredns:v1.12.1") == "coredns"
    assert nodeimage.image_name_of("registry.k8s.io/kube-apiserver:v1.35.4") == "kube-apiserver"
    one = nodeimage.inputs_digest([("a", "1"), ("b", "2")])
    assert one == nodeimage.inputs_digest([("b", "2"), ("a", "1")])
    assert one != nodeimage.inputs_digest([("a", "1"), ("b", "3")])
    assert nodeimage.node_image_ref(one).startswith("localhost/headrace/kind-node:v")


def test_leftovers_name_only_what_appeared_since() -> None:
    empty: frozenset[str] = frozenset()
    before = cluster.HostState(frozenset({"other"}), empty, frozenset({"podman"}), frozenset({"eth0"}), empty, empty)
    containers, links = frozenset({"other", "headrace-worker"}), frozenset({"eth0", "veth1"})
    after = cluster.HostState(containers, empty, frozenset({"podman"}), links, empty, empty)
    assert after.leftovers(before) == {"containers": ["headrace-worker"], "links": ["veth1"]}
    assert before.leftovers(before) == {}


def test_every_node_mounts_the_shared_data_directory_and_silent_nodes_turn_unreachable_after_20_s() -> None:
    config = yaml.safe_load(cluster.cluster_config(Path("/w/certs.d")))
    shared = {"hostPath": str(cluster.SHARED_DATA), "containerPath": str(cluster.SHARED_DATA)}
    assert all(node["extraMounts"][0] == shared for node in config["nodes"])
    patches = [yaml.safe_load(patch) for patch in config["kubeadmConfigPatches"]]
    manager = next(patch for patch in patches if patch["kind"] == "ClusterConfiguration")["controllerManager"]
    assert manager["extraArgs"] == {"node-monitor-grace-period": "20s"}


def test_the_leak_check_watches_node_mounts_but_not_other_podman_users_overlays() -> None:
    assert cluster._cluster_mount("/run/netns/netns-1234")
    assert cluster._cluster_mount("/var/lib/containers/storage/volumes/abc/_data")
    assert not cluster._cluster_mount("/var/lib/containers/storage/overlay")
    assert not cluster._cluster_mount("/var/lib/containers/storage/overlay/0a1b/merged")
    assert not cluster._cluster_mount("/proc")


def test_the_leak_check_counts_podmans_links_and_rules_not_the_single_node_testbeds() -> None:
    assert cluster._PODMAN_LINK.match(cluster._link_name("7: podman1: <BROADCAST> mtu 1500"))
    assert cluster._PODMAN_LINK.match(cluster._link_name("9: veth3@if2: <BROADCAST> mtu 1500"))
    assert not cluster._PODMAN_LINK.match(cluster._link_name("5: hr0: <BROADCAST> mtu 1500"))
    assert not cluster._PODMAN_LINK.match(cluster._link_name("6: veth50ba2e3d@if2: <BROADCAST> mtu 1500"))
    # a testbed node's veth whose 8 hex digits are all decimal (seen: a kind run failed its leak check on it)
    assert not cluster._podman_link("605: veth71966317@if2: <BROADCAST,UP> mtu 1500 qdisc noqueue master hr0 state UP")
    assert cluster._podman_link("9: veth3@if2: <BROADCAST,UP> mtu 1500 qdisc noqueue master podman1 state UP")
    assert cluster._podman_link("7: podman1: <BROADCAST,UP> mtu 1500 qdisc noqueue state UP")
    assert not cluster._cluster_mount("/tmp/headrace-bench-1/cluster/node/containerd/state/cri/netns/cni-1")


def test_pod_routes_missing_after_a_node_came_back_with_a_new_address_are_named() -> None:
    ranges = {"cp": "10.244.0.0/24", "w1": "10.244.2.0/24", "w2": "10.244.1.0/24"}
    own = {
        "cp": "default via 10.89.0.1 dev eth0\n10.244.0.0/24 dev kube-bridge proto kernel scope link src 10.244.0.1\n",
        "w1": "10.244.2.0/24 dev kube-bridge proto kernel scope link src 10.244.2.1 linkdown\n",
        "w2": "10.244.1.0/24 dev kube-bridge proto kernel scope link src 10.244.1.1 linkdown\n",
    }
    # as seen on the cluster after w2's power-off and restart: nobody routed to anybody's pod range
    assert cluster.missing_pod_routes(ranges, own) == [
        "cp -> 10.244.2.0/24", "cp -> 10.244.1.0/24", "w1 -> 10.244.0.0/24",
        "w1 -> 10.244.1.0/24", "w2 -> 10.244.0.0/24", "w2 -> 10.244.2.0/24",
    ]  # fmt: skip
    routed = {
        node: table
        + "".join(f"{cidr} via 10.89.0.9 dev eth0 proto 17\n" for other, cidr in ranges.items() if other != node)
        for node, table in own.items()
    }
    assert cluster.missing_pod_routes(ranges, routed) == []


def test_workers_that_take_no_new_pods_are_named_with_why() -> None:
    def node(name: str, ready: str = "True", *, control_plane: bool = False, **spec: object) -> dict[str, object]:
        labels = {"node-role.kubernetes.io/control-plane": ""} if control_plane else {}
        return {
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
            "status": {"conditions": [{"type": "Ready", "status": ready}]},
        }

    nodes = [
        node(
            "cp", control_plane=True, taints=[{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
        ),
        node("healthy", taints=[{"key": "example.com/prefer", "effect": "PreferNoSchedule"}]),
        node("down", "Unknown"),
        node("drained", unschedulable=True),
        node("healed", taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]),
    ]
    assert cluster.unschedulable_workers(nodes) == {
        "down": "not Ready",
        "drained": "cordoned",
        "healed": "tainted node.kubernetes.io/unreachable",
    }


def test_the_netavark_chains_a_cluster_added_are_removed_rules_first_then_chains() -> None:
    added = frozenset(
        {
            "nat: -N NETAVARK-HOSTPORT-DNAT",
            "nat: -A PREROUTING -m addrtype --dst-type LOCAL -j NETAVARK-HOSTPORT-DNAT",
            'filter: -A FORWARD -m comment --comment "netavark firewall plugin rules" -j NETAVARK_FORWARD',
            "filter: -N NETAVARK_FORWARD",
        }
    )
    assert cluster.netavark_removals(added) == [
        ["iptables", "-t", "filter", "-D", "FORWARD", "-m", "comment", "--comment", "netavark firewall plugin rules",
         "-j", "NETAVARK_FORWARD"],
        ["iptables", "-t", "nat", "-D", "PREROUTING", "-m", "addrtype", "--dst-type", "LOCAL", "-j",
         "NETAVARK-HOSTPORT-DNAT"],
        ["iptables", "-t", "filter", "-X", "NETAVARK_FORWARD"],
        ["iptables", "-t", "nat", "-X", "NETAVARK-HOSTPORT-DNAT"],
    ]  # fmt: skip

"""The testbed cluster: the ``up`` decision table, the state file, and (marked e2e) a real cluster through
the `Cluster` context manager and through the detached ``python -m testbed.cluster up|down`` commands.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client, config

from testbed import REPOSITORY, build, procs
from testbed.cluster import Cluster, ClusterState, cluster_home, kubeconfig_path, up_action
from testbed.node import NODE_PROGRAMS, NodeLayout, NodeNetwork, link_exists, mounts_under, node_leftovers
from testbed.pause import PAUSE_IMAGE, pause_image

READY = ClusterState(supervisor_pid=10, workdir="/w", ready=True, kubeconfig="/k", up_seconds=12.5)
STARTING = ClusterState(supervisor_pid=10, workdir="/w")


@pytest.mark.parametrize(
    ("state", "alive", "action"),
    [
        (None, False, "start"),
        (READY, True, "already-up"),
        (STARTING, True, "wait"),
        (READY, False, "clean-then-start"),
        (STARTING, False, "clean-then-start"),
    ],
)
def test_up_action(state: ClusterState | None, alive: bool, action: str) -> None:
    assert up_action(state, alive) == action


def test_state_round_trips_through_json() -> None:
    assert ClusterState.from_json(READY.to_json()) == READY


def _processes_mentioning(path: Path) -> list[str]:
    table = subprocess.run(["ps", "-ewwo", "args"], capture_output=True, text=True, check=True).stdout.splitlines()
    return [line for line in table if str(path) in line]


def _node_ready(kubeconfig: Path, name: str) -> bool:
    with config.new_client_from_config(config_file=str(kubeconfig)) as api:
        node = client.CoreV1Api(api).read_node(name)
    return {c.type: c.status for c in node.status.conditions}.get("Ready") == "True"


def _assert_nothing_left(workdir: Path) -> None:
    layout = NodeLayout(workdir / "node")
    assert _processes_mentioning(workdir) == []
    assert _processes_mentioning(layout.short_root) == []
    assert mounts_under(Path("/proc/self/mountinfo").read_text(), [workdir, *layout.roots]) == []
    assert not link_exists(NodeNetwork().bridge)
    assert node_leftovers(layout, "headrace-node", NodeNetwork()) == []


def _cluster_command(*arguments: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "testbed.cluster", *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=900, check=False, cwd=REPOSITORY)


@pytest.fixture
def background_cluster_slot() -> None:
    """Skips when a developer's background cluster is up: the test must not take it down."""
    state_file = cluster_home() / "state.json"
    if state_file.exists():
        state = ClusterState.from_json(state_file.read_text())
        if procs.pid_exists(state.supervisor_pid):
            pytest.skip(f"a background cluster is running (supervisor {state.supervisor_pid})")
    build.ensure_binaries()


@pytest.mark.e2e
@pytest.mark.usefixtures("background_cluster_slot")
def test_up_detaches_and_down_removes_everything() -> None:
    try:
        up = _cluster_command("up")
        assert up.returncode == 0, up.stderr
        assert up.stdout.strip() == f"export KUBECONFIG={kubeconfig_path()}"
        state = ClusterState.from_json((cluster_home() / "state.json").read_text())
        assert procs.pid_exists(state.supervisor_pid)  # survived the command
        assert _node_ready(kubeconfig_path(), "headrace-node")
        imported = _cluster_command("import", str(pause_image()))
        assert imported.returncode == 0, imported.stderr
        assert PAUSE_IMAGE in imported.stdout
        again = _cluster_command("up")
        assert (again.returncode, again.stdout) == (0, up.stdout)  # already up: same cluster
        assert ClusterState.from_json((cluster_home() / "state.json").read_text()) == state
    finally:
        down = _cluster_command("down")
    assert down.returncode == 0, down.stderr
    assert not procs.pid_exists(state.supervisor_pid)
    assert not kubeconfig_path().exists()
    _assert_nothing_left(Path(state.workdir))
    assert not Path(state.workdir).exists()


@pytest.mark.e2e
@pytest.mark.usefixtures("background_cluster_slot")
def test_a_new_node_and_down_clean_up_after_a_killed_supervisor(tmp_path: Path) -> None:
    """The supervisor dies by SIGKILL (no cleanup runs), as in a session stopped hard: pods, shims and the network
    outlive it. A new node still starts through the `Cluster` context manager (it reclaims the machine; its own
    processes run and are all gone after it), and `down` removes the rest. (The context manager's own test on a
    clean machine was folded in here: one cluster start less.)"""
    try:
        up = _cluster_command("up")
        assert up.returncode == 0, up.stderr
        state = ClusterState.from_json((cluster_home() / "state.json").read_text())
        with config.new_client_from_config(config_file=str(kubeconfig_path())) as api:
            container = client.V1Container(name="main", image=PAUSE_IMAGE, image_pull_policy="Never")
            pod = client.V1Pod(
                metadata=client.V1ObjectMeta(name="orphan"), spec=client.V1PodSpec(containers=[container])
            )
            client.CoreV1Api(api).create_namespaced_pod("default", pod)
            deadline = time.monotonic() + 60
            while client.CoreV1Api(api).read_namespaced_pod("orphan", "default").status.phase != "Running":
                assert time.monotonic() < deadline, "the pod never ran"
                time.sleep(0.3)
        os.kill(state.supervisor_pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while procs.pid_exists(state.supervisor_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        status = _cluster_command("status")
        assert status.returncode == 1
        assert "supervisor dead" in status.stdout
        assert link_exists(NodeNetwork().bridge)  # left behind by the killed supervisor
        # The `Cluster` context manager (what the e2e tests and benches use) brings a ready node up over what the
        # killed one left, and removes everything of its own.
        workdir = tmp_path / "next"
        with Cluster(workdir) as cluster:
            assert _node_ready(cluster.kubeconfig, "headrace-node")
            running = [line for line in _processes_mentioning(workdir) if Path(line.split()[0]).name in NODE_PROGRAMS]
            assert len(running) >= 3  # containerd, kube-proxy, kubelet
        assert cluster.up_seconds is not None
        assert cluster.down_seconds is not None
        print(f"cluster up {cluster.up_seconds:.1f}s, down {cluster.down_seconds:.1f}s")
        _assert_nothing_left(workdir)
    finally:
        down = _cluster_command("down")
    assert down.returncode == 0, down.stderr
    _assert_nothing_left(Path(state.workdir))

"""A whole single-node Kubernetes cluster on this machine: the control plane, one node, Kafka, S3 and a registry.

Owns: composing `ControlPlane`, `Node` (which brings cluster DNS), the cluster's Kafka broker
(``kafka.kafka.svc:9092``, `testbed.cluster_kafka`), S3 server (``http://s3.s3.svc:9000``,
`testbed.objectstore`) and, when asked, the authenticated registry the node pulls ``localhost/...`` images
from (`testbed.registry`; the node's credentials cover ``localhost/headrace/...`` only) in the right order
(the apiserver listens on every address and advertises the bridge gateway, so pods reach it through the
``kubernetes`` Service), the `Cluster` context manager for tests, and
``python -m testbed.cluster up|down|status|import`` commands: ``up`` starts a detached supervisor that keeps
the cluster running after the command returns, writes the admin kubeconfig to a fixed place and prints
``export KUBECONFIG=...``; ``import`` loads image archives into its containerd (the quick start's way:
its cluster has no registry); ``down`` stops it and checks that no process, mount, device, iptables rule or
directory is left.
Never: configures components itself (the control plane and node modules do), or builds images.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType

from testbed import REPOSITORY, build, host, procs
from testbed.cluster_kafka import ClusterKafka
from testbed.controlplane import ControlPlane
from testbed.node import Node, NodeError, NodeLayout, NodeNetwork, NodeRegistry, import_image
from testbed.objectstore import ClusterObjectStore
from testbed.registry import Registry

# The registry name the project's images carry (``localhost/headrace/spark:0.1.0``): the node resolves it to the
# testbed registry, whose credentials the node holds for this path (`NODE_CREDENTIALS_FOR`) only.
REGISTRY_NAME = "localhost"
NODE_CREDENTIALS_FOR = "localhost/headrace"

UP_TIMEOUT_SECONDS = 1800.0  # a cold start may build the Kubernetes binaries first
DOWN_TIMEOUT_SECONDS = 120.0


def cluster_home() -> Path:
    """Where the background cluster keeps its state, log, kubeconfig and workdir."""
    return build.cache_root() / "cluster"


def image_store() -> Path:
    """containerd's image store of the background cluster, kept across ``down`` (``down --purge`` removes it)."""
    return cluster_home() / "containerd-images"


def kubeconfig_path() -> Path:
    """The fixed place of the background cluster's admin kubeconfig."""
    return cluster_home() / "kubeconfig"


class Cluster:
    """Control plane + node (+ Kafka unless ``kafka=False``, + an S3 server unless ``object_store=False``).
    ``up(workdir)`` returns the admin kubeconfig; ``down()`` removes everything.

    As a context manager it is up for the duration of the block (``Cluster(workdir)``).
    """

    def __init__(
        self,
        workdir: Path | None = None,
        *,
        node_name: str = "headrace-node",
        network: NodeNetwork | None = None,
        image_store: Path | None = None,
        kafka: bool = True,
        object_store: bool = True,
        registry: bool = False,
    ) -> None:
        self.workdir = workdir
        self.with_registry = registry
        self.registry: Registry | None = None
        self.with_kafka = kafka
        self.kafka: ClusterKafka | None = None
        self.with_object_store = object_store
        self.object_store: ClusterObjectStore | None = None
        self.image_store = image_store
        self.node_name = node_name
        self.network = network or NodeNetwork()
        self.control_plane: ControlPlane | None = None
        self.node: Node | None = None
        self.up_seconds: float | None = None
        self.down_seconds: float | None = None

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (valid while the cluster is up)."""
        if self.control_plane is None:
            raise RuntimeError("the cluster is not up")
        return self.control_plane.kubeconfig

    @property
    def kafka_bootstrap(self) -> str:
        """``bootstrap.servers`` of the cluster's Kafka for clients on this machine ('' without Kafka)."""
        return self.kafka.bootstrap_servers if self.kafka is not None else ""

    def import_image(self, oci_archive: Path) -> str:
        """Import an image archive into the node's containerd."""
        if self.node is None:
            raise RuntimeError("the cluster is not up")
        return self.node.import_image(oci_archive)

    def up(self, workdir: Path | None = None) -> Path:
        """Start the control plane and the node (waits until the Node is Ready); return the admin kubeconfig."""
        workdir = Path(workdir or self.workdir or "")
        if not str(workdir):
            raise ValueError("Cluster.up needs a workdir")
        self.workdir = workdir
        began = time.monotonic()
        host.require()  # a missing host package is named up front, with the command that installs it
        build.ensure_binaries()
        gateway = self.network.gateway
        self.control_plane = ControlPlane(
            workdir / "control-plane",
            bind_address="0.0.0.0",  # noqa: S104 - pods reach the apiserver through the bridge gateway
            advertise_address=gateway,
            extra_sans=[gateway],
        )
        try:
            registries = []
            if self.with_registry:
                self.registry = Registry()  # assigned first: a failed start is stopped by the teardown too
                self.registry.start()
                registries.append(NodeRegistry(REGISTRY_NAME, self.registry.access, NODE_CREDENTIALS_FOR))
            self.node = Node(
                workdir / "node",
                self.control_plane,
                name=self.node_name,
                network=self.network,
                image_store=self.image_store,
                registries=registries,
            )
            self.control_plane.start()
            self.node.start()
            if self.with_kafka:
                kubectl = build.binary("kubectl")
                self.kafka = ClusterKafka(workdir / "kafka", gateway, kubectl, self.control_plane.kubeconfig)
                self.kafka.start()
            if self.with_object_store:
                kubectl = build.binary("kubectl")
                self.object_store = ClusterObjectStore(workdir / "s3", gateway, kubectl, self.control_plane.kubeconfig)
                self.object_store.start()
        except BaseException as error:
            self._down_keeping(error)
            raise
        self.up_seconds = time.monotonic() - began
        return self.control_plane.kubeconfig

    def down(self) -> None:
        """Stop the node, then the control plane. Idempotent; raises `NodeError` if something is left."""
        began = time.monotonic()
        node, plane, self.node, self.control_plane = self.node, self.control_plane, None, None
        kafka, self.kafka = self.kafka, None
        store, self.object_store = self.object_store, None
        registry, self.registry = self.registry, None
        try:
            try:
                if store is not None:
                    store.stop()
            finally:
                try:
                    if kafka is not None:
                        kafka.stop()
                finally:
                    if registry is not None:
                        registry.stop()
        finally:
            try:
                if node is not None:
                    node.stop()
            finally:
                if plane is not None:
                    plane.stop()
                self.down_seconds = time.monotonic() - began

    def _down_keeping(self, cause: BaseException) -> None:
        """Tear down after `cause`; a teardown failure is attached to `cause` as a note, never raised over it."""
        try:
            self.down()
        except Exception as teardown:
            cause.add_note(f"tearing the cluster down afterwards also failed: {teardown!r}")

    def __enter__(self) -> Cluster:
        self.up()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if exc is None:
            self.down()
        else:
            self._down_keeping(exc)


# ------------------------------------------------------------------------------------------------
# The background cluster: state file and commands.
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterState:
    """The background cluster's state file: who supervises it, where it lives, whether it is ready."""

    supervisor_pid: int
    workdir: str
    ready: bool = False
    kubeconfig: str = ""
    up_seconds: float | None = None
    error: str = ""
    kafka_bootstrap: str = ""

    def to_json(self) -> str:
        """The state file's text."""
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> ClusterState:
        """Parse a state file."""
        return cls(**json.loads(text))


def _run_dir() -> Path:
    return cluster_home() / "run"


def _state_file() -> Path:
    return cluster_home() / "state.json"


def _read_state() -> ClusterState | None:
    with contextlib.suppress(FileNotFoundError, ValueError, TypeError):
        return ClusterState.from_json(_state_file().read_text())
    return None


def _write_state(state: ClusterState) -> None:
    partial = _state_file().with_suffix(".partial")
    partial.write_text(state.to_json())
    partial.rename(_state_file())


def up_action(state: ClusterState | None, supervisor_alive: bool) -> str:
    """What ``up`` does: ``start`` a new cluster, report one ``already-up``, ``wait`` for one starting,
    or ``clean-then-start`` when a dead supervisor left state behind."""
    if state is None:
        return "start"
    if not supervisor_alive:
        return "clean-then-start"
    return "already-up" if state.ready else "wait"


def serve(workdir: Path) -> int:
    """Run the cluster in this process until SIGTERM or SIGINT, recording progress in the state file."""
    with procs.terminated_as_interrupt():
        cluster = Cluster(workdir, image_store=image_store())
        _write_state(ClusterState(os.getpid(), str(workdir)))
        try:
            kubeconfig = cluster.up()
            shutil.copyfile(kubeconfig, kubeconfig_path())
            ready = ClusterState(os.getpid(), str(workdir), True, str(kubeconfig_path()), cluster.up_seconds)
            _write_state(dataclasses.replace(ready, kafka_bootstrap=cluster.kafka_bootstrap))
            print(f"cluster up in {cluster.up_seconds:.1f}s", flush=True)
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("stopping", flush=True)
        except Exception as error:
            _write_state(ClusterState(os.getpid(), str(workdir), error=f"{type(error).__name__}: {error}"))
            raise
        finally:
            cluster.down()
            print(f"cluster down in {cluster.down_seconds:.1f}s", flush=True)
    return 0


def _spawn_supervisor(workdir: Path) -> int:
    log = cluster_home() / "supervisor.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "testbed.cluster", "serve", "--workdir", str(workdir)],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=REPOSITORY,
        )
    return process.pid


def _wait_until_ready(pid: int, timeout_seconds: float) -> ClusterState:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        state = _read_state()
        if state is not None and state.supervisor_pid == pid and state.ready:
            return state
        if not procs.pid_exists(pid):
            tail = procs.log_tail(cluster_home() / "supervisor.log")
            raise RuntimeError(f"the cluster supervisor exited before the cluster was ready:\n{tail}")
        time.sleep(0.5)
    raise RuntimeError(f"the cluster was not ready within {timeout_seconds:.0f}s (see {cluster_home()})")


def command_up(timeout_seconds: float = UP_TIMEOUT_SECONDS) -> int:
    """``up``: start the background cluster (or find it running) and print the KUBECONFIG export."""
    cluster_home().mkdir(parents=True, exist_ok=True)
    state = _read_state()
    action = up_action(state, state is not None and procs.pid_exists(state.supervisor_pid))
    began = time.monotonic()
    if (action == "clean-then-start" or (action == "start" and _run_dir().exists())) and command_down() != 0:
        print("error: could not clean up what an earlier cluster left (see above)", file=sys.stderr)
        return 1
    if action in ("start", "clean-then-start"):
        pid = _spawn_supervisor(_run_dir())
    else:
        assert state is not None
        pid = state.supervisor_pid
    try:
        ready = _wait_until_ready(pid, timeout_seconds)
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if action != "already-up":
        print(f"# cluster up in {time.monotonic() - began:.1f}s", file=sys.stderr)
    print(f"export KUBECONFIG={ready.kubeconfig}")
    return 0


def _stop_supervisor(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + DOWN_TIMEOUT_SECONDS
    while procs.pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if procs.pid_exists(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def command_down(purge: bool = False) -> int:
    """``down``: stop the background cluster and verify nothing of it is left (``purge``: its images too)."""
    began = time.monotonic()
    state = _read_state()
    if state is not None and procs.pid_exists(state.supervisor_pid):
        _stop_supervisor(state.supervisor_pid)
    workdir = Path(state.workdir) if state else _run_dir()
    try:
        Node.teardown(workdir / "node")
    except NodeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    shutil.rmtree(workdir, ignore_errors=True)
    if purge:
        shutil.rmtree(image_store(), ignore_errors=True)
    for path in (_state_file(), kubeconfig_path()):
        path.unlink(missing_ok=True)
    print(f"# cluster down in {time.monotonic() - began:.1f}s", file=sys.stderr)
    return 0


def kafka_bootstrap() -> str:
    """``bootstrap.servers`` of the background cluster's Kafka for clients on this machine."""
    state = _read_state()
    if state is None or not state.ready or not state.kafka_bootstrap:
        raise RuntimeError("the background cluster (with its Kafka) is not up: `python -m testbed cluster up` first")
    return state.kafka_bootstrap


def command_import(archives: Sequence[Path]) -> int:
    """``import ARCHIVE...``: import image archives into the background cluster's containerd."""
    state = _read_state()
    if state is None or not state.ready or not procs.pid_exists(state.supervisor_pid):
        print("error: the background cluster is not up (`up` first)", file=sys.stderr)
        return 1
    socket = NodeLayout(Path(state.workdir) / "node").containerd_socket
    try:
        for archive in archives:
            print(import_image(socket, archive), end="", flush=True)
    except NodeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


def command_status() -> int:
    """``status``: print the state file and whether its supervisor lives."""
    state = _read_state()
    if state is None:
        print("down")
        return 1
    alive = procs.pid_exists(state.supervisor_pid)
    print(state.to_json())
    print("supervisor alive" if alive else "supervisor dead (run `down` to clean up)")
    return 0 if alive and state.ready else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m testbed.cluster up|down|status`` (``serve`` is the detached supervisor)."""
    parser = argparse.ArgumentParser(description="A single-node Kubernetes cluster for Headrace's tests.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("up", help="start in the background; prints `export KUBECONFIG=...`")
    down_parser = commands.add_parser("down", help="stop and remove everything but the image store")
    down_parser.add_argument("--purge", action="store_true", help="also remove the imported images")
    commands.add_parser("status", help="show the background cluster's state")
    import_parser = commands.add_parser("import", help="import OCI image archives into the node's containerd")
    import_parser.add_argument("archives", type=Path, nargs="+")
    serve_parser = commands.add_parser("serve", help="run in the foreground (used by `up`)")
    serve_parser.add_argument("--workdir", type=Path, required=True)
    arguments = parser.parse_args(argv)
    if arguments.command == "serve":
        return serve(arguments.workdir)
    if arguments.command == "import":
        return command_import(arguments.archives)
    if arguments.command == "down":
        return command_down(arguments.purge)
    handlers = {"up": command_up, "status": command_status}
    return handlers[arguments.command]()


if __name__ == "__main__":
    sys.exit(main())

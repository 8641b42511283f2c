"""The kind node image, assembled on this machine: no base image pulled, no registry.

Owns: the recipe of ``localhost/headrace/kind-node`` (what ``kind build node-image`` would make from
kind's base image): a Debian root filesystem from ``debootstrap`` with systemd, containerd, runc and
the CNI plugins; kind's own systemd units and entrypoint (from kind's Go module); the testbed's
kubelet, kubeadm and kubectl; the control-plane, CoreDNS, pause, kube-proxy and kube-router images,
built here and preloaded into the node's containerd; ``/kind/version`` and the default CNI manifest
(kube-router: routes between the nodes' pod CIDRs and enforces NetworkPolicies). The result is cached
as a tarball under ``~/.cache/headrace/kind`` keyed by a digest of every input, so an unchanged recipe
is only re-imported into podman (seconds), never rebuilt.

Cold cost (2 cores, measured 2026-11-27): see ``docs/testbed.md`` ("Multi-node cluster").

Never: runs a node; pulls anything but Debian packages.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from testbed import build, images
from testbed.kind import podman, tools
from testbed.pause import PAUSE_SOURCE, compile_static_c
from testbed.pause.image import ImageFile, layer_blob, oci_archive

IMAGE_REPOSITORY = "localhost/headrace/kind-node"
KUBE_ROUTER_IMAGE = f"localhost/headrace/kube-router:{tools.KUBE_ROUTER_VERSION}"
# The node's own Debian (bash, socat, getent, ip) as an image, for tests' probe pods; preloaded too.
TOOLBOX_IMAGE = "localhost/headrace/kind-toolbox:1"
POD_SUBNET = "10.244.0.0/16"

# What kind's base image installs, less what this recipe does not use (fuse, NFS, iSCSI), plus the
# Debian containerd/runc/CNI plugins (kind builds its own) and ipset (kube-router's policies).
NODE_PACKAGES = (
    "systemd",
    "systemd-sysv",
    "containerd",
    "runc",
    "containernetworking-plugins",
    "iptables",
    "ipset",
    "conntrack",
    "iproute2",
    "ethtool",
    "kmod",
    "libseccomp2",
    "ca-certificates",
    "procps",
    "socat",
    "mount",
    "util-linux",
)
NODE_BINARIES = ("kubelet", "kubeadm", "kubectl")
_IMAGE_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

CONTAINERD_CONFIG = """\
version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  tolerate_missing_hugepages_controller = true
  # No CAP_SYS_RESOURCE here: runc cannot lower a process's oom_score_adj below the caller's.
  restrict_oom_score_adj = true
[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
  discard_unpacked_layers = true
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  base_runtime_spec = "/etc/containerd/cri-base.json"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = true
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "/etc/cni/net.d"
"""

# kind's unit minus what fails without CAP_SYS_RESOURCE (raising limits, a negative OOM score).
CONTAINERD_SERVICE = """\
[Unit]
Description=containerd container runtime
After=network.target local-fs.target
StartLimitIntervalSec=0

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=1
TasksMax=infinity

[Install]
WantedBy=multi-user.target
"""

# kube-router as kind's "default CNI": bridge + host-local per node from the node's podCIDR, routes
# to the other nodes' pod CIDRs (iBGP between nodes), and NetworkPolicy enforcement (iptables+ipset).
KUBE_ROUTER_MANIFEST = """\
apiVersion: v1
kind: ServiceAccount
metadata: {name: kube-router, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kube-router}
rules:
- apiGroups: [""]
  resources: [namespaces, pods, services, nodes, endpoints]
  verbs: [list, get, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, get, watch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
- apiGroups: [""]
  resources: [services/status]
  verbs: [update]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kube-router}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kube-router}
subjects: [{kind: ServiceAccount, name: kube-router, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: kube-router-cfg, namespace: kube-system}
data:
  cni-conf.json: |
    {"cniVersion": "0.3.1", "name": "kubernetes", "plugins": [
      {"type": "bridge", "bridge": "kube-bridge", "isDefaultGateway": true, "mtu": 1500,
       "ipam": {"type": "host-local"}},
      {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kube-router
  namespace: kube-system
  labels: {k8s-app: kube-router}
spec:
  selector: {matchLabels: {k8s-app: kube-router}}
  template:
    metadata: {labels: {k8s-app: kube-router}}
    spec:
      priorityClassName: system-node-critical
      serviceAccountName: kube-router
      hostNetwork: true
      hostPID: true
      tolerations: [{operator: Exists}]
      initContainers:
      - name: install-cni
        image: {image}
        imagePullPolicy: Never
        command:
        - /bin/sh
        - -c
        - >-
          cp /etc/kube-router/cni-conf.json /etc/cni/net.d/.kr &&
          mv /etc/cni/net.d/.kr /etc/cni/net.d/10-kuberouter.conflist
        volumeMounts:
        - {name: cni-conf-dir, mountPath: /etc/cni/net.d}
        - {name: kube-router-cfg, mountPath: /etc/kube-router}
      containers:
      - name: kube-router
        image: {image}
        imagePullPolicy: Never
        command: [/usr/local/bin/kube-router]
        args: [--run-router=true, --run-firewall=true, --run-service-proxy=false, --bgp-graceful-restart=true,
               --enable-cni=true, --enable-pod-egress=true, --health-port=20244]
        env:
        - name: NODE_NAME
          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        - {name: KUBE_ROUTER_CNI_CONF_FILE, value: /etc/cni/net.d/10-kuberouter.conflist}
        securityContext: {privileged: true}
        resources: {requests: {cpu: 50m, memory: 64Mi}}
        volumeMounts:
        - {name: lib-modules, mountPath: /lib/modules, readOnly: true}
        - {name: cni-conf-dir, mountPath: /etc/cni/net.d}
        - {name: xtables-lock, mountPath: /run/xtables.lock}
      volumes:
      - {name: lib-modules, hostPath: {path: /lib/modules}}
      - {name: cni-conf-dir, hostPath: {path: /etc/cni/net.d}}
      - {name: kube-router-cfg, configMap: {name: kube-router-cfg}}
      - {name: xtables-lock, hostPath: {path: /run/xtables.lock, type: FileOrCreate}}
"""

# Bump when the recipe changes in a way the digest of this file would not show (it does show edits here).
RECIPE_VERSION = "1"


# --- pure decisions -------------------------------------------------------------------------------


def kube_router_manifest(image: str = KUBE_ROUTER_IMAGE) -> str:
    """The manifest kind applies as its default CNI."""
    return KUBE_ROUTER_MANIFEST.replace("{image}", image)


def containerd_config(pause_image: str) -> str:
    """The node's containerd 1.6 configuration (CRI with the pause image kubeadm names)."""
    return CONTAINERD_CONFIG.format(pause=pause_image)


def cri_base_spec(default_spec: dict[str, object]) -> dict[str, object]:
    """kind's base runtime spec: containerd's default without rlimits (kind's product-files hook is left
    out: it needs jq, and only fakes /sys/class/dmi/id/product_* inside pods)."""
    spec: dict[str, Any] = json.loads(json.dumps(default_spec))
    spec.get("process", {}).pop("rlimits", None)
    return spec


def image_name_of(reference: str) -> str:
    """``kube-apiserver`` for ``registry.k8s.io/kube-apiserver:v1.35.4`` (the repository's last part)."""
    return reference.rsplit("/", 1)[-1].split(":", 1)[0]


def node_image_ref(digest: str) -> str:
    """The node image's local name for one state of the inputs."""
    return f"{IMAGE_REPOSITORY}:v{build.KUBERNETES_VERSION}-{digest[:12]}"


def inputs_digest(parts: Sequence[tuple[str, str]]) -> str:
    """A digest of named input fingerprints (order-independent)."""
    digest = hashlib.sha256(RECIPE_VERSION.encode())
    for name, value in sorted(parts):
        digest.update(f"{name}\0{value}\0".encode())
    return digest.hexdigest()


# --- effects --------------------------------------------------------------------------------------


def kind_cache() -> Path:
    """Where the node image's tarballs are cached."""
    return build.cache_root() / "kind"


def _run(command: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(command), flush=True)
    return subprocess.run(list(command), check=True, text=True, **kwargs)  # type: ignore[call-overload,no-any-return]


def _fingerprint(path: Path) -> str:
    stat = path.stat()
    return f"{stat.st_size}:{stat.st_mtime_ns}"


def _rootfs_tarball() -> Path:
    """``debootstrap --variant=minbase`` with the node's packages, slimmed, as a cached tarball (~2 min)."""
    key = hashlib.sha256(" ".join(NODE_PACKAGES).encode()).hexdigest()[:12]
    tarball = kind_cache() / f"node-rootfs-{images.BASE_SUITE}-{key}.tar"
    if tarball.exists():
        return tarball
    kind_cache().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=kind_cache(), prefix=".debootstrap-") as scratch:
        rootfs = Path(scratch) / "rootfs"
        include = "--include=" + ",".join(NODE_PACKAGES)
        _run(["debootstrap", "--variant=minbase", include, images.BASE_SUITE, str(rootfs), images.BASE_MIRROR])
        images.slim_rootfs(rootfs)
        partial = tarball.with_suffix(".partial")
        _run(["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", str(partial), "."])
        partial.rename(tarball)
    return tarball


def _kubeadm_images(kubeadm: Path) -> list[str]:
    command = [str(kubeadm), "config", "images", "list", f"--kubernetes-version=v{build.KUBERNETES_VERSION}"]
    return _run(command, capture_output=True).stdout.split()


def _write_image_archives(out: Path, references: Sequence[str], base_layer: bytes) -> list[Path]:
    """OCI archives of every image the cluster runs, made from the testbed's binaries."""
    from testbed import dns  # the CoreDNS build lives beside the testbed's DNS

    binaries = {
        "kube-apiserver": build.binary("kube-apiserver"),
        "kube-controller-manager": build.binary("kube-controller-manager"),
        "kube-scheduler": build.binary("kube-scheduler"),
        "kube-proxy": build.binary("kube-proxy"),
        "etcd": build.binary("etcd"),
    }
    base = layer_blob(base_layer)
    archives = []
    for reference in [*references, KUBE_ROUTER_IMAGE, TOOLBOX_IMAGE]:
        name = image_name_of(reference)
        if name == "pause":
            executable = out / "pause.bin"
            compile_static_c(PAUSE_SOURCE.read_text(), executable)
            data = oci_archive({"pause": ImageFile(executable.read_bytes())}, name=reference, entrypoint=["/pause"])
        elif name == "coredns":
            files = {"coredns": ImageFile(dns.ensure_coredns().read_bytes())}
            data = oci_archive(files, name=reference, entrypoint=["/coredns"], env=[_IMAGE_PATH])
        elif name in ("kube-proxy", "kube-router"):
            # They run iptables/ipset: the node's own root filesystem is their base layer.
            binary = binaries["kube-proxy"] if name == "kube-proxy" else tools.ensure_kube_router()
            files = {f"usr/local/bin/{name}": ImageFile(binary.read_bytes())}
            data = oci_archive(files, name=reference, entrypoint=[], env=[_IMAGE_PATH], base_layers=[base])
        elif name == "kind-toolbox":
            files = {"etc/headrace-toolbox": ImageFile(b"the kind node's root filesystem as an image\n", 0o644)}
            data = oci_archive(files, name=reference, entrypoint=["/bin/bash"], env=[_IMAGE_PATH], base_layers=[base])
        elif name in binaries:
            files = {f"usr/local/bin/{name}": ImageFile(binaries[name].read_bytes())}
            data = oci_archive(files, name=reference, entrypoint=[], env=[_IMAGE_PATH])
        else:
            raise RuntimeError(f"kubeadm names an image this recipe cannot build: {reference}")
        archive = out / f"{name}.oci.tar"
        archive.write_bytes(data)
        archives.append(archive)
    return archives


@contextmanager
def _containerd_on(root: Path, scratch: Path) -> Iterator[Path]:
    """A containerd (without CRI) whose store is the node's ``/var/lib/containerd``; yields its socket."""
    socket = scratch / "containerd.sock"
    config = scratch / "containerd.toml"
    config.write_text(
        f'version = 2\nroot = "{root}"\nstate = "{scratch / "state"}"\n'
        f'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n[grpc]\n  address = "{socket}"\n'
    )
    log = (scratch / "containerd.log").open("w")
    process = subprocess.Popen(["containerd", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"containerd for the node image did not start: {scratch / 'containerd.log'}")
            time.sleep(0.1)
        yield socket
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def _preload(rootfs: Path, archives: Sequence[Path], scratch: Path) -> None:
    """Import the images into the node's containerd store, unpacked for overlayfs, as kind's builder does."""
    with _containerd_on(rootfs / "var/lib/containerd", scratch) as socket:
        ctr = ["ctr", "-a", str(socket), "-n", "k8s.io"]
        for archive in archives:
            _run([*ctr, "images", "import", "--all-platforms", "--snapshotter=overlayfs", str(archive)])
        # Like kind's discard_unpacked_layers: the unpacked snapshots are what runs; drop the layer blobs.
        listing = _run([*ctr, "content", "ls", "-q"], capture_output=True).stdout.split()
        layers = [digest for digest in listing if _is_layer(rootfs, digest)]
        if layers:
            _run([*ctr, "content", "rm", *layers], capture_output=True)
    # containerd deletes unreferenced blobs only at its next garbage collection, which a store that
    # stops right away never runs: the metadata no longer names them, so remove the files (~800 MB).
    for digest in layers:
        _blob(rootfs, digest).unlink(missing_ok=True)


def _blob(rootfs: Path, digest: str) -> Path:
    return rootfs / "var/lib/containerd/io.containerd.content.v1.content/blobs/sha256" / digest.split(":", 1)[1]


def _is_layer(rootfs: Path, digest: str) -> bool:
    return _blob(rootfs, digest).stat().st_size > 1_000_000


def _copy_kind_files(rootfs: Path) -> None:
    """kind's base-image files (entrypoint, systemd units, /kind/bin scripts), adapted to this machine."""
    files = tools.kind_sources() / "images" / "base" / "files"
    for source in files.rglob("*"):
        relative = source.relative_to(files)
        target = rootfs / relative
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        executable = relative.parts[0] in ("usr", "kind") and ("bin" in relative.parts)
        target.chmod(0o755 if executable else 0o644)


def _configure(rootfs: Path, pause_image: str) -> None:
    _copy_kind_files(rootfs)
    (rootfs / "etc/containerd/config.toml").write_text(containerd_config(pause_image))
    default_spec = json.loads(_run(["ctr", "oci", "spec"], capture_output=True).stdout)
    (rootfs / "etc/containerd/cri-base.json").write_text(json.dumps(cri_base_spec(default_spec), indent=2))
    (rootfs / "etc/systemd/system/containerd.service").write_text(CONTAINERD_SERVICE)
    (rootfs / "opt/cni").mkdir(parents=True, exist_ok=True)
    (rootfs / "opt/cni/bin").symlink_to("/usr/lib/cni")
    for name in NODE_BINARIES:
        shutil.copyfile(build.binary(name), rootfs / "usr/bin" / name)
        (rootfs / "usr/bin" / name).chmod(0o755)
    (rootfs / "kind/manifests").mkdir(parents=True, exist_ok=True)
    (rootfs / "kind/version").write_text(f"v{build.KUBERNETES_VERSION}")
    (rootfs / "kind/manifests/default-cni.yaml").write_text(kube_router_manifest())
    (rootfs / "etc/kubernetes/manifests").mkdir(parents=True, exist_ok=True)
    # As kind's base image: no units wanted but ours, no kernel log reading, and a masked binfmt.
    for pattern in (
        "lib/systemd/system/multi-user.target.wants/*",
        "etc/systemd/system/*.wants/*",
        "lib/systemd/system/local-fs.target.wants/*",
        "lib/systemd/system/sockets.target.wants/*udev*",
        "lib/systemd/system/sockets.target.wants/*initctl*",
        "lib/systemd/system/basic.target.wants/*",
        "lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service",
    ):
        for path in rootfs.glob(pattern):
            path.unlink()
    with (rootfs / "etc/systemd/journald.conf").open("a") as journald:
        journald.write("ReadKMsg=no\n")
    wants = rootfs / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    for unit in ("kubelet.service", "containerd.service", "undo-mount-hacks.service"):
        (wants / unit).symlink_to(f"/etc/systemd/system/{unit}")
    (rootfs / "etc/systemd/system/systemd-binfmt.service").symlink_to("/dev/null")


def node_image_inputs() -> list[tuple[str, str]]:
    """Fingerprints of everything the node image is made from (binaries by size and mtime)."""
    from testbed import dns

    parts = [("recipe", hashlib.sha256(Path(__file__).read_bytes()).hexdigest())]
    parts += [("pause.c", hashlib.sha256(PAUSE_SOURCE.read_bytes()).hexdigest())]
    parts += [("packages", " ".join(NODE_PACKAGES)), ("kind", tools.KIND_VERSION)]
    names = (*NODE_BINARIES, "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "etcd")
    parts += [(name, _fingerprint(build.binary(name))) for name in names]
    parts += [("coredns", _fingerprint(dns.ensure_coredns()))]
    parts += [("kube-router", _fingerprint(tools.ensure_kube_router()))]
    return parts


def build_node_image() -> str:
    """The node image's reference in podman's store: imported from the cached tarball, built if missing."""
    build.ensure_binaries()
    digest = inputs_digest(node_image_inputs())
    reference = node_image_ref(digest)
    env = {**os.environ, **podman.environment()}
    kind_cache().mkdir(parents=True, exist_ok=True)
    with images.exclusive(kind_cache() / ".node.lock"):
        if subprocess.run(["podman", "image", "exists", reference], env=env, check=False).returncode == 0:
            return reference
        tarball = kind_cache() / f"node-{digest[:16]}.tar"
        if not tarball.exists():
            _build_tarball(tarball)
        _run(_podman_import_command(tarball, reference), env=env, stdout=subprocess.DEVNULL)
        for stale in kind_cache().glob("node-*.tar"):
            if stale != tarball and not stale.name.startswith("node-rootfs-"):
                stale.unlink()
        listed = _run(
            ["podman", "images", "--format", "{{.Repository}}:{{.Tag}}", IMAGE_REPOSITORY], env=env, capture_output=True
        )
        for stale_image in set(listed.stdout.split()) - {reference}:
            subprocess.run(["podman", "rmi", stale_image], env=env, check=False, capture_output=True)
    return reference


def _podman_import_command(tarball: Path, reference: str) -> list[str]:
    changes = [
        'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]',
        "ENV container=docker",
        "STOPSIGNAL SIGRTMIN+3",
    ]
    command = ["podman", "import"]
    for change in changes:
        command += ["--change", change]
    return [*command, str(tarball), reference]


def _build_tarball(tarball: Path) -> None:
    rootfs_tar = _rootfs_tarball()
    kubeadm = build.binary("kubeadm")
    references = _kubeadm_images(kubeadm)
    pause = next(reference for reference in references if image_name_of(reference) == "pause")
    with tempfile.TemporaryDirectory(dir=kind_cache(), prefix=".node-") as scratch_name:
        scratch = Path(scratch_name)
        rootfs = scratch / "rootfs"
        rootfs.mkdir()
        _run(["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-xf", str(rootfs_tar)])
        _configure(rootfs, pause)
        archives = _write_image_archives(scratch, references, rootfs_tar.read_bytes())
        _preload(rootfs, archives, scratch)
        partial = tarball.with_suffix(".partial")
        _run(["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", str(partial), "."])
        partial.rename(tarball)


def main(argv: list[str] | None = None) -> int:
    """``python -m testbed.kind.nodeimage``: build (or reuse) the node image and print its name."""
    argparse.ArgumentParser(description=__doc__).parse_args(argv)
    started = time.monotonic()
    print(build_node_image(), f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Build the testbed's Kubernetes and etcd binaries from official sources through the Go module proxy.

Owns: the wrapper Go modules that make `k8s.io/kubernetes` and etcd buildable with plain `go build`,
and the cache of built binaries under ``~/.cache/headrace`` (``HEADRACE_CACHE`` overrides it).
Never: starts anything, or writes inside the repository.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

KUBERNETES_VERSION = "1.35.4"
ETCD_VERSION = "3.6.16"
HELM_VERSION = "3.22.0"

KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl", "kube-proxy")

# The staging modules of k8s.io/kubernetes 1.35: its go.mod requires them at v0.0.0, so a wrapper
# module must pin each to the matching v0.35.N release.
STAGING_MODULES = (
    "api",
    "apiextensions-apiserver",
    "apimachinery",
    "apiserver",
    "cli-runtime",
    "client-go",
    "cloud-provider",
    "cluster-bootstrap",
    "code-generator",
    "component-base",
    "component-helpers",
    "controller-manager",
    "cri-api",
    "cri-client",
    "csi-translation-lib",
    "dynamic-resource-allocation",
    "endpointslice",
    "externaljwt",
    "kms",
    "kube-aggregator",
    "kube-controller-manager",
    "kube-proxy",
    "kube-scheduler",
    "kubectl",
    "kubelet",
    "metrics",
    "mount-utils",
    "pod-security-admission",
    "sample-apiserver",
    "sample-cli-plugin",
    "sample-controller",
)


def cache_root() -> Path:
    """The directory holding every heavy artefact the testbed builds (outside the repository)."""
    return Path(os.environ.get("HEADRACE_CACHE", Path.home() / ".cache" / "headrace"))


def bin_dir() -> Path:
    """Where the built binaries of the pinned versions live."""
    return cache_root() / "bin" / f"k8s-{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}"


def binary(name: str) -> Path:
    """Path of one built binary (it may not exist yet; call `ensure_binaries`)."""
    return bin_dir() / name


def _kube_go_mod() -> str:
    minor = KUBERNETES_VERSION.split(".", 1)[1]
    replaces = "\n".join(f"\tk8s.io/{name} => k8s.io/{name} v0.{minor}" for name in STAGING_MODULES)
    return (
        "module headrace.dev/testbed/kubebuild\n\ngo 1.25.0\n\n"
        f"require k8s.io/kubernetes v{KUBERNETES_VERSION}\n\nreplace (\n{replaces}\n)\n"
    )


_ETCD_MAIN = """package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
"""


def _go_env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GOMODCACHE", str(cache_root() / "go" / "mod"))
    env.setdefault("GOCACHE", str(cache_root() / "go" / "build"))
    env["CGO_ENABLED"] = "0"
    env["GOFLAGS"] = "-mod=mod"
    env.setdefault("GOTOOLCHAIN", "auto")
    env["PWD"] = str(workdir)
    return env


def _run(command: list[str], workdir: Path) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, cwd=workdir, env=_go_env(workdir), check=True)


def _build_kubernetes(out: Path) -> None:
    workdir = cache_root() / "src" / f"kubebuild-{KUBERNETES_VERSION}"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "go.mod").write_text(_kube_go_mod())
    major, minor, _ = KUBERNETES_VERSION.split(".")
    ldflags = " ".join(
        [
            "-s -w",
            f"-X k8s.io/component-base/version.gitVersion=v{KUBERNETES_VERSION}",
            f"-X k8s.io/component-base/version.gitMajor={major}",
            f"-X k8s.io/component-base/version.gitMinor={minor}",
            "-X k8s.io/component-base/version.gitTreeState=clean",
            "-X k8s.io/client-go/pkg/version.gitVersion=v" + KUBERNETES_VERSION,
        ]
    )
    _run(["go", "get", f"k8s.io/kubernetes@v{KUBERNETES_VERSION}"], workdir)
    for name in KUBE_COMMANDS:
        if (out / name).exists():
            continue
        target = out / f".{name}.partial"
        command = ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(target), f"k8s.io/kubernetes/cmd/{name}"]
        _run(command, workdir)
        target.rename(out / name)


def _build_etcd(out: Path) -> None:
    if (out / "etcd").exists():
        return
    workdir = cache_root() / "src" / f"etcdbuild-{ETCD_VERSION}"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "go.mod").write_text(
        f"module headrace.dev/testbed/etcdbuild\n\ngo 1.25.0\n\nrequire go.etcd.io/etcd/server/v3 v{ETCD_VERSION}\n"
    )
    (workdir / "main.go").write_text(_ETCD_MAIN)
    _run(["go", "mod", "tidy"], workdir)
    target = out / ".etcd.partial"
    _run(["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(target), "."], workdir)
    target.rename(out / "etcd")


def ensure_helm() -> Path:
    """Build helm (`go install helm.sh/helm/v3/cmd/helm`) into the cache if missing; return its path."""
    target = cache_root() / "bin" / f"helm-{HELM_VERSION}" / "helm"
    if target.exists():
        return target
    workdir = cache_root() / "src" / f"helm-{HELM_VERSION}"
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**_go_env(workdir), "GOBIN": str(target.parent), "GOFLAGS": ""}
    command = ["go", "install", "-trimpath", "-ldflags", "-s -w", f"helm.sh/helm/v3/cmd/helm@v{HELM_VERSION}"]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, cwd=workdir, env=env, check=True)
    return target


def missing_binaries() -> list[str]:
    """Names of the pinned binaries not built yet."""
    return [name for name in (*KUBE_COMMANDS, "etcd") if not binary(name).exists()]


def ensure_binaries() -> Path:
    """Build whatever is missing (slow only the first time) and return the binary directory."""
    out = bin_dir()
    out.mkdir(parents=True, exist_ok=True)
    if not shutil.which("go"):
        raise RuntimeError("the testbed needs the Go toolchain on PATH to build Kubernetes from source")
    if "etcd" in missing_binaries():
        _build_etcd(out)
    if any(name != "etcd" for name in missing_binaries()):
        _build_kubernetes(out)
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m testbed.build`: build the testbed binaries into the cache."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.parse_args(argv)
    print(ensure_binaries())
    print(ensure_helm())
    from testbed import dns  # imports this module: CoreDNS's build lives beside its configuration

    print(dns.ensure_coredns())
    from testbed import objectstore  # imports this module too: the S3 server's build lives beside its runner

    print(objectstore.ensure_binary())
    return 0


if __name__ == "__main__":
    sys.exit(main())

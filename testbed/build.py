"""Build the testbed's Kubernetes and etcd binaries from official sources through the Go module proxy.

Owns: the wrapper Go modules that make `k8s.io/kubernetes` and etcd buildable with plain `go build`,
and the cache of built binaries under ``~/.cache/headrace`` (``HEADRACE_CACHE`` overrides it).
Never: starts anything, or writes inside the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

KUBERNETES_VERSION = "1.35.4"
ETCD_VERSION = "3.6.16"
HELM_VERSION = "3.22.0"

KUBE_COMMANDS = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kubectl",
    "kube-proxy",
    "kubeadm",  # the kind node image's (testbed.kind)
)

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
    go_build_main(f"etcdbuild-{ETCD_VERSION}", f"go.etcd.io/etcd/server/v3 v{ETCD_VERSION}", _ETCD_MAIN, out / "etcd")


def go_build_main(name: str, requirement: str, main_source: str, target: Path, go_version: str = "1.25.0") -> Path:
    """Build `main_source` (one file, package main) in a wrapper module ``headrace.dev/testbed/<name>`` requiring
    `requirement` (``module version``) as `target`, once; return it. Only the packages that main imports are built
    (a module's own command may pull in far more)."""
    if target.exists():
        return target
    workdir = cache_root() / "src" / name
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "go.mod").write_text(f"module headrace.dev/testbed/{name}\n\ngo {go_version}\n\nrequire {requirement}\n")
    (workdir / "main.go").write_text(main_source)
    _run(["go", "mod", "tidy"], workdir)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f".{target.name}.partial"
    _run(["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(partial), "."], workdir)
    partial.rename(target)
    return target


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


def go_module_dir(module: str, version: str, expected_sum: str) -> Path:
    """The source directory of `module@version` in the Go module cache, downloaded through the proxy if
    missing; raises if the module's checksum (``h1:...``, as go.sum writes it) is not `expected_sum`."""
    workdir = cache_root() / "src"
    workdir.mkdir(parents=True, exist_ok=True)
    command = ["go", "mod", "download", "-json", f"{module}@{version}"]
    env = {**_go_env(workdir), "GOFLAGS": ""}
    answer = json.loads(subprocess.run(command, cwd=workdir, env=env, check=True, capture_output=True).stdout)
    if answer.get("Sum") != expected_sum:
        raise RuntimeError(f"{module}@{version} has checksum {answer.get('Sum')}, pinned {expected_sum}")
    return Path(answer["Dir"])


def go_install(package: str, version: str, target: Path, *, tags: tuple[str, ...] = ()) -> Path:
    """`go install package@version` (a module without replace directives) as `target`, once; return it.
    `tags` are Go build tags (e.g. one that leaves optional plugins out)."""
    if target.exists():
        return target
    workdir = cache_root() / "src" / target.parent.name
    workdir.mkdir(parents=True, exist_ok=True)
    staging = target.parent / ".partial"
    env = {**_go_env(workdir), "GOBIN": str(staging), "GOFLAGS": ""}
    command = ["go", "install", "-trimpath", "-ldflags", "-s -w", *(["-tags", ",".join(tags)] if tags else [])]
    command.append(f"{package}@{version}")
    print("+", " ".join(command), flush=True)
    subprocess.run(command, cwd=workdir, env=env, check=True)
    (staging / package.rsplit("/", 1)[1]).rename(target)
    staging.rmdir()
    return target


_REPLACE_BLOCK = re.compile(r"^replace \($(?P<body>.*?)^\)$", re.MULTILINE | re.DOTALL)
_REPLACE_LINE = re.compile(r"^replace (?P<line>\S.*)$", re.MULTILINE)


def replace_directives(go_mod: str) -> list[str]:
    """The ``old => new version`` lines of a go.mod's replace directives (block and single-line forms)."""
    lines = [line.strip() for block in _REPLACE_BLOCK.finditer(go_mod) for line in block["body"].splitlines()]
    lines += [match["line"].strip() for match in _REPLACE_LINE.finditer(go_mod) if match["line"] != "("]
    return [line for line in lines if "=>" in line and not line.startswith("//")]


def wrapper_go_mod(name: str, module: str, version: str, replaces: list[str]) -> str:
    """A go.mod requiring `module@version` with that module's own replace directives, which `go install`
    ignores (and refuses to build with) when the module is not the main one."""
    body = "\n".join(f"\t{line}" for line in replaces)
    block = f"\nreplace (\n{body}\n)\n" if replaces else ""
    return f"module headrace.dev/testbed/{name}\n\ngo 1.25.0\n\nrequire {module} {version}\n{block}"


def go_build_wrapped(module: str, version: str, expected_sum: str, package: str, target: Path) -> Path:
    """Build `package` of `module@version` as `target` through a wrapper module carrying the module's replace
    directives (see `wrapper_go_mod`), once; return it."""
    if target.exists():
        return target
    source = go_module_dir(module, version, expected_sum)
    workdir = cache_root() / "src" / f"{target.parent.name}-wrapper"
    workdir.mkdir(parents=True, exist_ok=True)
    replaces = replace_directives((source / "go.mod").read_text())
    (workdir / "go.mod").write_text(wrapper_go_mod(target.parent.name.replace(".", "-"), module, version, replaces))
    _run(["go", "get", f"{module}@{version}"], workdir)
    staging = target.parent / f".{target.name}.partial"
    target.parent.mkdir(parents=True, exist_ok=True)
    _run(["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(staging), package], workdir)
    staging.rename(target)
    return target


def missing_binaries() -> list[str]:
    """Names of the pinned binaries not built yet."""
    return [name for name in (*KUBE_COMMANDS, "etcd") if not binary(name).exists()]


def ensure_binaries() -> Path:
    """Build whatever is missing (slow only the first time) and return the binary directory."""
    out = bin_dir()
    out.mkdir(parents=True, exist_ok=True)
    if missing_binaries() and not shutil.which("go"):  # built already: no toolchain needed
        raise RuntimeError("the testbed needs the Go toolchain on PATH to build Kubernetes from source")
    if "etcd" in missing_binaries():
        _build_etcd(out)
    if any(name != "etcd" for name in missing_binaries()):
        _build_kubernetes(out)
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m testbed.build`: build the testbed binaries, resolve the Kafka jars and build the kind node image
    into the cache.

    `make test` runs it before the two pytest workers start, so they never build or download the same thing at once
    on a cold cache, and no test's fixture pays the node image's build inside its time-out."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.parse_args(argv)
    print(ensure_binaries())
    print(ensure_helm())
    from testbed import dns  # imports this module: CoreDNS's build lives beside its configuration

    print(dns.ensure_coredns())
    from testbed import objectstore  # imports this module too: the S3 server's build lives beside its runner

    print(objectstore.ensure_binary())
    from testbed import sts  # MinIO, the STS of the web identity tests (about 14 min cold on 2 cores)

    print(sts.ensure_binary())
    from testbed import registry  # the registry e2e pulls from (about 4 min cold on 2 cores, modules included)

    print(registry.ensure_binary())
    from testbed import kwok  # imports this module too: the simulated nodes' build lives beside their runner

    print(kwok.ensure_kwok())
    from testbed import kafka  # the broker's and Spark's Kafka jars, resolved once into the Maven cache

    print(*kafka.broker_jars()[:1], *kafka.spark_kafka_jars()[:1], sep="\n")
    from testbed.kind import nodeimage, tools  # the kind cluster's tool and node image (10-12 min cold on 2 cores)

    print(tools.ensure_kind())
    print(nodeimage.build_node_image())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""kind's and kube-router's binaries, built from their Go modules into the cache.

Owns: the pinned versions and checksums, and where the binaries and kind's own sources (its node
image files) live. Never: runs them.
"""

from __future__ import annotations

from pathlib import Path

from testbed import build

KIND_VERSION = "v0.33.0"
KIND_MODULE_SUM = "h1:AjvDv3vOygb/VKLVQW87lfktIBzkxR8Ump9DjxC8+Lk="
KUBE_ROUTER_VERSION = "v2.1.0"


def ensure_kind() -> Path:
    """``kind`` (``go install sigs.k8s.io/kind``), built once (about a minute cold)."""
    target = build.cache_root() / "bin" / f"kind-{KIND_VERSION}" / "kind"
    return build.go_install("sigs.k8s.io/kind", KIND_VERSION, target)


def kind_sources() -> Path:
    """kind's module source (its ``images/base/files`` are the node image's systemd units and scripts)."""
    return build.go_module_dir("sigs.k8s.io/kind", KIND_VERSION, KIND_MODULE_SUM)


def ensure_kube_router() -> Path:
    """``kube-router`` (routes between nodes' pod CIDRs and NetworkPolicy enforcement), built once."""
    target = build.cache_root() / "bin" / f"kube-router-{KUBE_ROUTER_VERSION}" / "kube-router"
    return build.go_install("github.com/cloudnativelabs/kube-router/v2/cmd/kube-router", KUBE_ROUTER_VERSION, target)

"""promtool, Prometheus's rule checker and unit tester, built from its Go module for the chart's rule tests.

Owns: the pinned Prometheus module version and the build of ``cmd/promtool`` (``go install`` through the Go
module proxy, cached under ``~/.cache/headrace/bin``; the module has no replace directives), without Prometheus's
service-discovery plugins (build tag ``remove_all_sd``: checking and unit-testing rules needs none of them, and the
cloud SDKs they pull in are most of a full build's compile time).
Never: runs Prometheus, or anything but the build; callers run the binary.
"""

from __future__ import annotations

from pathlib import Path

from testbed import build

PROMETHEUS_MODULE = "github.com/prometheus/prometheus"
PROMETHEUS_VERSION = "v0.316.0"  # Prometheus 3.x's Go module tag (the module proxy serves v0.MAJOR*100+MINOR)

BUILD_TAGS = ("remove_all_sd",)


def binary_path() -> Path:
    """Where the pinned promtool is cached (it may not exist yet; see `ensure_promtool`)."""
    return build.cache_root() / "bin" / f"promtool-{PROMETHEUS_VERSION.lstrip('v')}" / "promtool"


def ensure_promtool() -> Path:
    """Build promtool into the cache if missing (minutes cold, see docs/metrics.md); return its path."""
    target = binary_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    return build.go_install(f"{PROMETHEUS_MODULE}/cmd/promtool", PROMETHEUS_VERSION, target, tags=BUILD_TAGS)


def main() -> int:
    print(ensure_promtool())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

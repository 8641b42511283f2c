"""podman as kind's provider on a machine without CAP_SYS_RESOURCE, configured per run.

Owns: the ``containers.conf`` that makes ``oci-runtime`` (runc minus rlimits) podman's runtime, and
the environment (``CONTAINERS_CONF``, ``KIND_EXPERIMENTAL_PROVIDER``) handed to podman and kind.
Never: writes ``/etc/containers`` or any other global configuration: the file lives in the cache
and only processes given `environment()` read it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from testbed.build import cache_root

RUNTIME_WRAPPER = Path(__file__).with_name("oci-runtime")
RUNTIME_NAME = "headrace-runc"


def containers_conf(wrapper: Path = RUNTIME_WRAPPER) -> str:
    """A containers.conf whose default OCI runtime is the rlimit-dropping wrapper."""
    return f'[engine]\nruntime = "{RUNTIME_NAME}"\n\n[engine.runtimes]\n{RUNTIME_NAME} = ["{wrapper}"]\n'


def conf_path(wrapper: Path = RUNTIME_WRAPPER) -> Path:
    """Where this checkout's containers.conf lives (one per checkout: the wrapper's path is in it)."""
    digest = hashlib.sha256(str(wrapper).encode()).hexdigest()[:12]
    return cache_root() / "kind" / f"containers-{digest}.conf"


def ensure_conf(wrapper: Path = RUNTIME_WRAPPER) -> Path:
    """Write this checkout's containers.conf if missing or different; return its path."""
    path = conf_path(wrapper)
    text = containers_conf(wrapper)
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(text)
        partial.rename(path)
    return path


def environment() -> dict[str, str]:
    """The variables podman and kind need (added to the caller's environment)."""
    return {"CONTAINERS_CONF": str(ensure_conf()), "KIND_EXPERIMENTAL_PROVIDER": "podman"}

"""The host packages the local cluster and the tests need, checked up front and installed by `make setup`.

Owns: the one list of Debian packages (and the commands or files that show each is there), the check
that names what is missing with the command that fixes it, and the idempotent installer.
Never: installs anything the list does not name, or anything at all from `check`.

`python -m testbed host check` reports; `python -m testbed host install` installs what is missing
(as root, or through sudo) and says what it installs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HostPackage:
    """A Debian package and what proves it is installed (commands on PATH, or files)."""

    name: str
    commands: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    why: str = ""

    def present(self) -> bool:
        """True when every command is on PATH and every file exists."""
        return all(shutil.which(command) for command in self.commands) and all(Path(f).exists() for f in self.files)


# Everything beyond what a machine of the project's kind has when new (Go, Java 17, Python, gcc, tar, ip).
HOST_PACKAGES = (
    HostPackage("containerd", ("containerd", "ctr"), why="the node's container runtime (CRI)"),
    HostPackage("runc", ("runc",), why="the OCI runtime containerd starts containers with"),
    HostPackage("containernetworking-plugins", files=("/usr/lib/cni/bridge",), why="pod networking (bridge CNI)"),
    HostPackage("iptables", ("iptables", "iptables-save", "ip6tables"), why="kube-proxy, CNI masquerading"),
    HostPackage("conntrack", ("conntrack",), why="kube-proxy"),
    HostPackage("iproute2", ("ip",), why="the node's bridge and network namespaces"),
    HostPackage("podman", ("podman",), why="builds the operator and Spark images from the Dockerfile"),
    HostPackage("debootstrap", ("debootstrap",), why="the images' Debian base root filesystem"),
    HostPackage("lua5.4", ("lua5.4",), why="tests of the Argo CD health checks (Lua)"),
    HostPackage("lua5.1", ("lua5.1",), why="tests of the Argo CD health checks (Argo's Lua is 5.1)"),
    HostPackage("nodejs", ("node",), why="Azurite, the Azure Blob API server of tests of abfs:// state"),
    HostPackage("npm", ("npm",), why="installs Azurite from its pinned lock file (testbed/azurite)"),
)


def missing(packages: Sequence[HostPackage] = HOST_PACKAGES) -> list[HostPackage]:
    """The packages whose commands or files are not there."""
    return [package for package in packages if not package.present()]


def install_command(packages: Sequence[HostPackage]) -> list[str]:
    """The apt-get command that installs `packages` (empty when there is nothing to install)."""
    if not packages:
        return []
    return ["apt-get", "install", "-y", *(package.name for package in packages)]


class HostNotReady(RuntimeError):
    """Host packages are missing; the message names them and the command that installs them."""


def require(packages: Sequence[HostPackage] = HOST_PACKAGES) -> None:
    """Raise `HostNotReady` naming every missing package and the fix, before anything is started."""
    absent = missing(packages)
    if absent:
        lines = "\n".join(f"  - {package.name}: {package.why}" for package in absent)
        raise HostNotReady(
            f"the local cluster needs host packages that are not installed:\n{lines}\n"
            "Install them with `make setup` (runs `python -m testbed host install`), or by hand: "
            f"apt-get update && {' '.join(install_command(absent))}"
        )


def _privileged(command: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return command
    if shutil.which("sudo"):
        return ["sudo", *command]
    raise HostNotReady(f"installing host packages needs root: run `{' '.join(command)}` as root")


def install(packages: Sequence[HostPackage] = HOST_PACKAGES) -> list[str]:
    """Install the missing packages with apt-get (idempotent); return the names installed."""
    absent = missing(packages)
    if not absent:
        print("host packages: all present", flush=True)
        return []
    names = [package.name for package in absent]
    print(f"host packages: installing {', '.join(names)}", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(_privileged(["apt-get", "update", "-q"]), check=True, env=env)
    subprocess.run(_privileged(install_command(absent)), check=True, env=env)
    still = missing(absent)
    if still:
        raise HostNotReady(f"installed, yet still missing: {', '.join(p.name for p in still)}")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m testbed host check|install`."""
    parser = argparse.ArgumentParser(prog="python -m testbed host", description=__doc__)
    parser.add_argument("action", choices=["check", "install"])
    args = parser.parse_args(argv)
    try:
        if args.action == "install":
            install()
        else:
            require()
            print("host packages: all present")
    except HostNotReady as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

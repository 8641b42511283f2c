"""The commands the quick start documents, linked where a new shell finds them.

Owns: which tools the README and the quick start's printed steps call by name (`uv`, `headrace`,
`kubectl-headrace`, and the `kubectl` built with the cluster), and linking each into one directory on
every shell's PATH (``/usr/local/bin``; ``HEADRACE_TOOL_DIR`` overrides it), as root or through sudo.
`make setup` links what exists then; the quick start links `kubectl` once the build made it.
Never: replaces a file that is not a link (it says so and leaves it), installs anything, or fails the setup:
without root or a password-less sudo it names the links it could not make and the full paths to use.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from testbed import REPOSITORY, build

DEFAULT_TOOL_DIR = Path("/usr/local/bin")


def tool_dir() -> Path:
    """The directory the documented commands are linked into (on PATH in every shell)."""
    return Path(os.environ.get("HEADRACE_TOOL_DIR", str(DEFAULT_TOOL_DIR)))


def sources() -> dict[str, Path]:
    """Each documented command and the file it runs: uv where `make setup` installed it, the CLI from this
    checkout's environment, kubectl from the cluster's build."""
    uv = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    found = {"uv": Path(uv).resolve()} if Path(uv).exists() else {}
    scripts = REPOSITORY / ".venv" / "bin"
    return {
        **found,
        "headrace": scripts / "headrace",
        "kubectl-headrace": scripts / "kubectl-headrace",
        "kubectl": build.binary("kubectl"),
    }


def _privileged(command: list[str]) -> list[str]:
    if os.geteuid() == 0 or os.access(tool_dir(), os.W_OK):
        return command
    if shutil.which("sudo"):
        return ["sudo", "-n", *command]  # never a password prompt in the middle of `make setup`
    raise PermissionError(f"linking into {tool_dir()} needs root")


def link(names: Sequence[str] | None = None) -> list[str]:
    """Link the named tools (all by default) that exist into `tool_dir()`; returns a line per tool saying what
    was done. Idempotent; a regular file of the same name stays (first on PATH or not, the user put it there)."""
    directory = tool_dir()
    done = []
    for name, source in sources().items():
        if names is not None and name not in names:
            continue
        target = directory / name
        if not source.exists():
            done.append(f"{name}: not linked, {source} does not exist yet")
            continue
        if target.is_symlink() and target.resolve() == source.resolve():
            done.append(f"{name}: {target} -> {source} already")
            continue
        if target.exists() and not target.is_symlink():
            done.append(f"{name}: left {target} as it is (not a link); {source} is the one the quick start built")
            continue
        try:
            subprocess.run(_privileged(["ln", "-sfn", str(source), str(target)]), check=True, capture_output=True)
        except (PermissionError, subprocess.CalledProcessError) as error:
            done.append(f"{name}: NOT linked into {directory} ({error}): call {source} by its full path")
            continue
        done.append(f"{name}: linked {target} -> {source}")
    return done


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m testbed tools link [NAME...]`."""
    parser = argparse.ArgumentParser(prog="python -m testbed tools", description=__doc__)
    parser.add_argument("action", choices=["link"])
    parser.add_argument("names", nargs="*", help="tools to link (default: all that exist)")
    args = parser.parse_args(argv)
    for line in link(args.names or None):
        print(f"tools: {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

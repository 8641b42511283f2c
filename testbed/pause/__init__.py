"""The testbed's pause image, and tiny single-binary images made from one C source file.

Owns: compiling a C source statically (``gcc -static``) and packing the binary as an OCI image
archive cached under ``<cache>/images/`` (rebuilt only when the source or the name changes);
``pause.c`` beside this file is the pod sandbox program containerd's CRI runs for every pod.
Never: imports images into a runtime (the node does that) or talks to a registry.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from testbed.build import cache_root
from testbed.pause.image import ImageFile, oci_archive

PAUSE_IMAGE = "localhost/headrace/pause:1.0"
PAUSE_SOURCE = Path(__file__).with_name("pause.c")


def images_dir() -> Path:
    """Where built image archives are cached."""
    return cache_root() / "images"


def compile_static_c(source: str, output: Path) -> None:
    """Compile one C translation unit into a stripped, statically linked executable."""
    if not shutil.which("gcc"):
        raise RuntimeError("building testbed images needs gcc and libc6-dev (apt-get install gcc libc6-dev)")
    with tempfile.TemporaryDirectory(prefix="hr-cc-") as tmp:
        source_path = Path(tmp) / "main.c"
        source_path.write_text(source)
        command = ["gcc", "-static", "-s", "-O2", "-Wall", "-Wextra", "-o", str(output), str(source_path)]
        subprocess.run(command, check=True, capture_output=True, text=True)


def _cache_key(source: str, name: str, binary: str) -> str:
    return hashlib.sha256("\0".join((source, name, binary)).encode()).hexdigest()[:16]


def static_c_image(source: str, *, name: str, binary: str) -> Path:
    """An OCI archive of an image holding only ``/<binary>`` built from ``source``, as its entrypoint.

    The archive is cached by the source text and the names; building takes about a second.
    """
    target = images_dir() / f"{binary}-{_cache_key(source, name, binary)}.oci.tar"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hr-img-") as tmp:
        executable = Path(tmp) / binary
        compile_static_c(source, executable)
        files = {binary: ImageFile(executable.read_bytes())}
        partial = target.with_suffix(".partial")
        partial.write_bytes(oci_archive(files, name=name, entrypoint=[f"/{binary}"]))
        partial.rename(target)
    return target


def pause_image() -> Path:
    """The pause image archive (named `PAUSE_IMAGE`), built on first use."""
    return static_c_image(PAUSE_SOURCE.read_text(), name=PAUSE_IMAGE, binary="pause")

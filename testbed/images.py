"""Build the project's container images on this machine, without a Docker daemon or a registry.

Owns: the local Debian base image (``debootstrap --variant=minbase`` made to look like the official
``debian:bookworm-slim``), building the targets of the repository's ``Dockerfile`` with podman,
the cache of OCI archives under ``~/.cache/headrace/images`` keyed by a digest of the build inputs
(an unchanged tree never rebuilds), pushing an image to a registry (``podman push``), and importing an archive
into a containerd (the quick start's shortcut; tests pull from the testbed registry, testbed.registry).
Never: runs a container (``podman run`` cannot set its rlimits here; containers run under
containerd), or writes inside the repository.

Commands: ``python -m testbed.images build [--target operator|spark]``;
``python -m testbed.images push --registry HOST[:PORT][/PATH] [--target T] [--creds U:P] [--cert-dir D]``
(what ``make images REGISTRY=...`` runs: build, then push ``<registry>/headrace/<target>:<version>``).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import headrace
from testbed import host
from testbed.build import cache_root

TARGETS = ("operator", "spark")
IMAGE_REPOSITORY = "localhost/headrace"
DEV_TAG = "dev"
STALE_ARCHIVE_SECONDS = 3600.0

BASE_SUITE = "bookworm"
BASE_MIRROR = "http://deb.debian.org/debian"
BASE_IMAGE = f"localhost/debian-base:{BASE_SUITE}"
# Bump when the recipe of the local base changes: it is part of every cache key.
BASE_RECIPE_VERSION = "1"

# Everything the Dockerfile reads; a change to any of these makes a new archive.
BUILD_INPUTS = ("Dockerfile", ".dockerignore", "docker", "operator", "apps", "pyproject.toml", "uv.lock", "README.md")
_IGNORED_PARTS = frozenset({"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
_IGNORED_SUFFIXES = (".pyc", ".pyo")

# Where the build sees the machine's CA bundle (pip, Maven and curl inside the build must trust it).
BUILD_CA_PATH = "/run/build-ca.crt"
_CA_ENV_VARIABLES = ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
_DEFAULT_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
_REF_NAME = "org.opencontainers.image.ref.name"

# Like the official slim images: no documentation, manuals or translations, and apt cleans up after itself.
_DPKG_SLIM = """\
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
"""
_APT_CLEAN_COMMAND = (
    "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"
)
_APT_CLEAN = f"""\
DPkg::Post-Invoke {{ "{_APT_CLEAN_COMMAND}"; }};
APT::Update::Post-Invoke {{ "{_APT_CLEAN_COMMAND}"; }};
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Acquire::Languages "none";
"""
_APT_SOURCES = f"""\
Types: deb
URIs: {BASE_MIRROR}
Suites: {BASE_SUITE} {BASE_SUITE}-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: {BASE_SUITE}-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""
_SLIMMED_DIRECTORIES = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "var/lib/apt/lists")


# --- pure decisions -------------------------------------------------------------------------------


def image_ref(target: str, tag: str | None = None) -> str:
    """The local name of a target's image, e.g. ``localhost/headrace/spark:0.1.0``."""
    _check_target(target)
    return f"{IMAGE_REPOSITORY}/{target}:{tag or headrace.__version__}"


def _check_target(target: str) -> None:
    if target not in TARGETS:
        raise ValueError(f"unknown image target {target!r}; the Dockerfile builds {', '.join(TARGETS)}")


def is_build_input(relative: Path) -> bool:
    """Whether a file below the repository root can change an image (caches and bytecode cannot)."""
    if any(part in _IGNORED_PARTS for part in relative.parts):
        return False
    return not relative.name.endswith(_IGNORED_SUFFIXES)


def inputs_digest(files: Iterable[tuple[str, bytes]], salt: str = "") -> str:
    """A digest of (relative path, content) pairs, independent of their order."""
    digest = hashlib.sha256(salt.encode())
    for name, content in sorted(files):
        digest.update(f"{len(name)}:{name}:{len(content)}:".encode())
        digest.update(content)
    return digest.hexdigest()


def archive_name(target: str, version: str, digest: str) -> str:
    """File name of a target's cached OCI archive for one state of the inputs."""
    return f"{target}-{version}-{digest[:16]}.oci.tar"


def ca_bundle(environment: Mapping[str, str], default: Path = _DEFAULT_CA_BUNDLE) -> Path | None:
    """The CA bundle this machine's pip trusts, to be trusted inside the build too (None if none)."""
    for variable in _CA_ENV_VARIABLES:
        if environment.get(variable):
            return Path(environment[variable])
    return default if default.exists() else None


def podman_build_command(target: str, context: Path, ca: Path | None, base: str = BASE_IMAGE) -> list[str]:
    """The ``podman build`` invocation for one target (layer cache on, host network, CA mounted)."""
    command = ["podman", "build", "--network", "host", "--layers", "--pull=never"]
    command += ["--build-arg", f"BASE={base}", "--target", target, "-f", str(context / "Dockerfile")]
    command += ["-t", image_ref(target), "-t", image_ref(target, DEV_TAG)]
    if ca is not None:
        command += ["-v", f"{ca}:{BUILD_CA_PATH}:ro", "--build-arg", f"BUILD_CA={BUILD_CA_PATH}"]
        command += ["--build-arg", f"PIP_CERT={BUILD_CA_PATH}"]
    return [*command, str(context)]


def index_with_references(index: dict[str, Any], references: Iterable[str]) -> dict[str, Any]:
    """An OCI index listing its first manifest once per reference (so an import creates every tag).

    ``podman save --format oci-archive`` names only the first of several tags.
    """
    manifest = index["manifests"][0]
    named = []
    for reference in references:
        entry = copy.deepcopy(manifest)
        entry.setdefault("annotations", {})[_REF_NAME] = reference
        named.append(entry)
    return {**index, "manifests": named}


def pushed_reference(registry: str, target: str, tag: str | None = None) -> str:
    """Where a target's image goes in a registry: ``<registry>/headrace/<target>:<version>``."""
    _check_target(target)
    return f"{registry.rstrip('/')}/headrace/{target}:{tag or headrace.__version__}"


def podman_push_command(
    source: str, destination: str, creds: str | None = None, cert_dir: Path | None = None
) -> list[str]:
    """The ``podman push`` of a local image to a registry (TLS verified; `cert_dir` holds a private CA)."""
    command = ["podman", "push", "--quiet", "--tls-verify=true"]
    if cert_dir is not None:
        command += ["--cert-dir", str(cert_dir)]
    if creds is not None:
        command += ["--creds", creds]
    return [*command, source, f"docker://{destination}"]


def containerd_import_command(archive: Path, address: str, namespace: str) -> list[str]:
    """The ``ctr`` invocation importing an OCI archive into a containerd."""
    return ["ctr", "-a", address, "-n", namespace, "images", "import", "--all-platforms", str(archive)]


# --- the repository and the cache -----------------------------------------------------------------


def repository_root() -> Path:
    """The checkout holding the Dockerfile (``HEADRACE_REPOSITORY`` overrides the search)."""
    if override := os.environ.get("HEADRACE_REPOSITORY"):
        return Path(override)
    for candidate in Path(__file__).resolve().parents:
        if (candidate / "Dockerfile").is_file() and (candidate / "pyproject.toml").is_file():
            return candidate
    raise FileNotFoundError("no Dockerfile above testbed; set HEADRACE_REPOSITORY to the checkout")


def images_cache() -> Path:
    """Where base root filesystems and image archives are cached."""
    return cache_root() / "images"


def _input_files(root: Path) -> Iterator[tuple[str, bytes]]:
    for name in BUILD_INPUTS:
        top = root / name
        paths = sorted(top.rglob("*")) if top.is_dir() else [top]
        for path in paths:
            relative = path.relative_to(root)
            if path.is_file() and is_build_input(relative):
                yield relative.as_posix(), path.read_bytes()


def tree_digest(root: Path, target: str) -> str:
    """The cache key of one target: its build inputs, the base recipe and the target name."""
    return inputs_digest(_input_files(root), salt=f"{target}\0base-{BASE_SUITE}-{BASE_RECIPE_VERSION}")


def archive_path(target: str, root: Path | None = None) -> Path:
    """Where the archive of the current tree lives (it may not be built yet)."""
    root = root or repository_root()
    return images_cache() / archive_name(target, headrace.__version__, tree_digest(root, target))


# --- effects --------------------------------------------------------------------------------------


def shown_command(command: list[str]) -> str:
    """A command as printed: the value of ``--creds`` masked."""
    return " ".join(
        "***" if previous == "--creds" else part for previous, part in zip(["", *command[:-1]], command, strict=True)
    )


def _run(command: list[str], *, quiet: bool = False) -> None:
    print("+", shown_command(command), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL if quiet else None)


def _podman_image_id(reference: str) -> str | None:
    """The id of the image `reference` names in podman's store (None: no such image)."""
    found = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Id}}", reference], check=False, capture_output=True, text=True
    )
    return (found.stdout.strip() or None) if found.returncode == 0 else None


def archive_image_id(archive: Path) -> str:
    """The id of the image in an OCI archive `_save_archive` wrote: the digest of its config, as podman names it."""
    with tarfile.open(archive) as reader:
        members = {member.name.removeprefix("./"): member for member in reader}

        def read(name: str) -> Any:
            content = reader.extractfile(members[name])
            if content is None:
                raise RuntimeError(f"{archive} has no file {name}")
            return json.load(content)

        def blob(digest: str) -> Any:
            algorithm, _, value = digest.partition(":")
            return read(f"blobs/{algorithm}/{value}")

        manifest = blob(read("index.json")["manifests"][0]["digest"])
        return str(manifest["config"]["digest"]).partition(":")[2]


def slim_rootfs(rootfs: Path) -> None:
    """Make a debootstrapped root filesystem look like the official slim images (no docs, no apt lists)."""
    (rootfs / "etc/dpkg/dpkg.cfg.d/docker-slim").write_text(_DPKG_SLIM)
    (rootfs / "etc/apt/apt.conf.d/docker-clean").write_text(_APT_CLEAN)
    (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
    (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(_APT_SOURCES)
    for directory in _SLIMMED_DIRECTORIES:
        shutil.rmtree(rootfs / directory, ignore_errors=True)
        (rootfs / directory).mkdir(parents=True, exist_ok=True)
    for leftover in (rootfs / "var/cache/apt").rglob("*"):
        if leftover.is_file():
            leftover.unlink()


def _base_rootfs_tarball() -> Path:
    """Debootstrap the base once and keep it as a tarball, so a fresh podman store re-imports it fast."""
    tarball = images_cache() / f"debian-{BASE_SUITE}-minbase-r{BASE_RECIPE_VERSION}.tar"
    if tarball.exists():
        return tarball
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tarball.parent, prefix=".debootstrap-") as scratch:
        rootfs = Path(scratch) / "rootfs"
        _run(["debootstrap", "--variant=minbase", BASE_SUITE, str(rootfs), BASE_MIRROR])
        slim_rootfs(rootfs)
        partial = tarball.with_suffix(".partial")
        _run(["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", str(partial), "."])
        partial.rename(tarball)
    return tarball


def ensure_base_image() -> str:
    """Make ``localhost/debian-base:bookworm`` exist in podman's store (debootstrap only the first time)."""
    images_cache().mkdir(parents=True, exist_ok=True)
    with exclusive(images_cache() / ".base.lock"):
        if _podman_image_id(BASE_IMAGE) is None:
            tarball = _base_rootfs_tarball()
            _run(["podman", "import", "--change", 'CMD ["bash"]', str(tarball), BASE_IMAGE])
    return BASE_IMAGE


def build_image(target: str) -> Path:
    """The OCI archive of one Dockerfile target for the current tree; built only when missing.

    Concurrent callers (several test sessions) are serialised per target by a file lock, so one
    builds and the others reuse its archive.
    """
    _check_target(target)
    root = repository_root()
    images_cache().mkdir(parents=True, exist_ok=True)
    with exclusive(images_cache() / f".{target}.lock"):
        archive = archive_path(target, root)
        if archive.exists():
            os.utime(archive)  # in use: a concurrent session's build removes only archives untouched for a while
            return archive
        ensure_base_image()
        _run(podman_build_command(target, root, ca_bundle(os.environ)))
        _save_archive(target, archive)
        _remove_stale_archives(target, keep=archive, now=time.time())
    return archive


@contextlib.contextmanager
def exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive file lock (other sessions building the same thing wait, then reuse it)."""
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _save_archive(target: str, archive: Path) -> None:
    """``podman save`` the image, then name both its tags in the archive's index."""
    saved = archive.with_name(f"{archive.name}.{os.getpid()}.saved")
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
    try:
        # Uncompressed: ten times faster to save and to import (13 s instead of 2 min for spark).
        _run(["podman", "save", "--uncompressed", "--format", "oci-archive", "-o", str(saved), image_ref(target)])
        _copy_archive_with_references(saved, partial, [image_ref(target), image_ref(target, DEV_TAG)])
        partial.rename(archive)
    finally:
        saved.unlink(missing_ok=True)
        partial.unlink(missing_ok=True)


def _copy_archive_with_references(source: Path, destination: Path, references: list[str]) -> None:
    with tarfile.open(source) as reader, tarfile.open(destination, "w") as writer:
        for member in reader:
            content = reader.extractfile(member) if member.isfile() else None
            if member.name.removeprefix("./") == "index.json" and content is not None:
                index = index_with_references(json.load(content), references)
                data = json.dumps(index).encode()
                member.size = len(data)
                writer.addfile(member, io.BytesIO(data))
            else:
                writer.addfile(member, content)


def _remove_stale_archives(target: str, keep: Path, now: float) -> None:
    """Archives of older trees are rarely used again: remove those untouched for a while.

    The grace period lets a concurrent session finish importing the archive it was handed (`build_image` touches
    an archive each time it hands it out, so one built long ago but in use now is kept).
    """
    ours = re.compile(rf"^{re.escape(target)}-[^-]+-[0-9a-f]{{16}}\.oci\.tar$")
    for stale in keep.parent.glob(f"{target}-*.oci.tar"):
        if stale != keep and ours.match(stale.name) and now - stale.stat().st_mtime > STALE_ARCHIVE_SECONDS:
            stale.unlink(missing_ok=True)


def build_all() -> dict[str, Path]:
    """Archives of every target, built when missing."""
    host.require([package for package in host.HOST_PACKAGES if package.name in ("podman", "debootstrap")])
    return {target: build_image(target) for target in TARGETS}


def push_image(target: str, destination: str, *, creds: str | None = None, cert_dir: Path | None = None) -> str:
    """Build (or reuse) a target's image and push it to `destination` (a full reference); return it.

    The image is this tree's (its archive's), pushed by id: podman's store is shared by every worktree on the
    machine, whose builds all tag ``localhost/headrace/<target>:<version>``, so the tag may name another tree's
    image by the time of the push. Layers a registry already holds are not uploaded again (podman asks first),
    so pushing an unchanged tree is quick.
    """
    return push(_loaded(target), destination, creds=creds, cert_dir=cert_dir)


def push(local: str, destination: str, *, creds: str | None = None, cert_dir: Path | None = None) -> str:
    """Push an image of podman's store to `destination` (a full reference); return it."""
    _run(podman_push_command(local, destination, creds, cert_dir), quiet=True)
    return destination


def _loaded(target: str) -> str:
    """The id of this tree's image of `target` in podman's store, pulled from its archive when the store lacks it,
    and tagged again when the tag names another image (another worktree's build) or none."""
    archive = build_image(target)
    wanted = archive_image_id(archive)
    with exclusive(images_cache() / f".{target}.lock"):
        if _podman_image_id(wanted) is None:
            # `podman load` refuses an archive that names two tags ("more than one image in oci"): pull one of them.
            _run(["podman", "pull", "--quiet", f"oci-archive:{archive}:{image_ref(target)}"], quiet=True)
        if _podman_image_id(image_ref(target)) != wanted:
            _run(["podman", "tag", wanted, image_ref(target), image_ref(target, DEV_TAG)], quiet=True)
    return wanted


def in_podman(target: str) -> str:
    """A target's image of this tree in podman's store (built, or loaded from its cached archive, when missing or
    when the tag names another tree's image); its name."""
    _loaded(target)
    return image_ref(target)


def build_app_image(context: Path, reference: str) -> str:
    """Build an application image whose Dockerfile (in `context`) starts ``FROM ${BASE}``, BASE being this
    tree's Spark image (docs/app-image.md); tag it `reference` in podman's store and return it."""
    base = in_podman("spark")
    _run(["podman", "build", "--network", "host", "--pull=never", "--build-arg", f"BASE={base}",
          "-t", reference, str(context)], quiet=True)  # fmt: skip
    return reference


def import_into_containerd(archive: Path, address: str, namespace: str = "k8s.io") -> None:
    """Import an archive (both its tags) into the containerd listening on `address`."""
    _run(containerd_import_command(archive, address, namespace), quiet=True)


# --- command line ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildReport:
    """What one build produced and what it cost."""

    target: str
    archive: Path
    seconds: float

    def line(self) -> str:
        """One human line: target, size, time and path."""
        size_mb = self.archive.stat().st_size / 1e6
        return (
            f"{self.target}: {image_ref(self.target)} {size_mb:.0f} MB archive in {self.seconds:.1f}s -> {self.archive}"
        )


def _timed_build(target: str) -> BuildReport:
    started = time.monotonic()
    archive = build_image(target)
    return BuildReport(target, archive, time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    """``python -m testbed.images build [--target T]``: build (or reuse) the images."""
    parser = argparse.ArgumentParser(description="Build Headrace's images into the local cache.")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build the images that are missing")
    build.add_argument("--target", choices=TARGETS, action="append", help="one target (repeatable); default all")
    push = commands.add_parser("push", help="build what is missing, then push to a registry")
    push.add_argument("--registry", required=True, help="HOST[:PORT][/PATH]; images go to <registry>/headrace/<target>")
    push.add_argument("--target", choices=TARGETS, action="append", help="one target (repeatable); default all")
    push.add_argument("--creds", help="USER:PASSWORD (default: what `podman login` stored)")
    push.add_argument("--cert-dir", type=Path, help="a directory of CA certificates (*.crt) the registry's TLS needs")
    arguments = parser.parse_args(argv)
    if arguments.command == "push":
        for target in arguments.target or TARGETS:
            destination = pushed_reference(arguments.registry, target)
            print(push_image(target, destination, creds=arguments.creds, cert_dir=arguments.cert_dir), flush=True)
        return 0
    reports = [_timed_build(target) for target in arguments.target or TARGETS]
    for report in reports:
        print(report.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Write a one-layer OCI image archive (an OCI image layout packed as a tar) from a few files.

Owns: the byte layout of the archive that ``ctr images import`` reads: the layer tar, the image
config, the manifest, ``index.json`` (naming the image through the ``io.containerd.image.name``
annotation) and ``oci-layout``. The output is deterministic: the same inputs give the same bytes.
Never: reads or writes files, runs programs or reads the clock; the caller does the I/O.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"


@dataclass(frozen=True)
class ImageFile:
    """One regular file of the image's root filesystem."""

    content: bytes
    mode: int = 0o755


@dataclass(frozen=True)
class Blob:
    """A content-addressed blob of the layout and its descriptor fields."""

    data: bytes
    media_type: str

    @property
    def digest(self) -> str:
        """The ``sha256:<hex>`` digest naming this blob."""
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def descriptor(self) -> dict[str, object]:
        """The OCI descriptor pointing at this blob."""
        return {"mediaType": self.media_type, "digest": self.digest, "size": len(self.data)}


def _add(archive: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = 0
    info.uname = info.gname = ""
    archive.addfile(info, io.BytesIO(data))


def _tar(entries: Mapping[str, ImageFile]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in sorted(entries):
            _add(archive, name, entries[name].content, entries[name].mode)
    return buffer.getvalue()


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def layer_blob(tar: bytes) -> Blob:
    """An uncompressed layer made of an existing tar (for example a root filesystem)."""
    return Blob(tar, MEDIA_LAYER)


def image_blobs(
    files: Mapping[str, ImageFile],
    entrypoint: Sequence[str],
    *,
    env: Sequence[str] = ("PATH=/",),
    base_layers: Sequence[Blob] = (),
) -> tuple[Blob, ...]:
    """The layer, config and manifest blobs (manifest last) of a linux/amd64 image holding ``files``
    above ``base_layers``."""
    layers = [*base_layers, Blob(_tar({path.lstrip("/"): item for path, item in files.items()}), MEDIA_LAYER)]
    config = Blob(
        _json(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": {"Entrypoint": list(entrypoint), "Env": list(env)},
                "rootfs": {"type": "layers", "diff_ids": [layer.digest for layer in layers]},
            }
        ),
        MEDIA_CONFIG,
    )
    manifest = Blob(
        _json(
            {
                "schemaVersion": 2,
                "mediaType": MEDIA_MANIFEST,
                "config": config.descriptor(),
                "layers": [layer.descriptor() for layer in layers],
            }
        ),
        MEDIA_MANIFEST,
    )
    return *layers, config, manifest


def _index(manifest: Blob, name: str) -> bytes:
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    descriptor = manifest.descriptor() | {
        "platform": {"architecture": "amd64", "os": "linux"},
        "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": tag},
    }
    return _json(
        {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [descriptor]}
    )


def oci_archive(
    files: Mapping[str, ImageFile],
    *,
    name: str,
    entrypoint: Sequence[str],
    env: Sequence[str] = ("PATH=/",),
    base_layers: Sequence[Blob] = (),
) -> bytes:
    """The bytes of an OCI image layout tar holding one image called ``name`` (a full reference)."""
    blobs = image_blobs(files, entrypoint, env=env, base_layers=base_layers)
    entries = {"blobs/sha256/" + blob.digest.removeprefix("sha256:"): ImageFile(blob.data, 0o644) for blob in blobs}
    entries["oci-layout"] = ImageFile(_json({"imageLayoutVersion": "1.0.0"}), 0o644)
    entries["index.json"] = ImageFile(_index(blobs[-1], name), 0o644)
    return _tar(entries)

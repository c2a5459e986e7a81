"""OCI image layouts written byte for byte the same from the same trees, and read back.

Why this exists: the project's image is built without a container engine or registry
(``build.py``), and "same inputs, same digest" needs layers whose bytes depend only on
the files: entries sorted by path, one fixed mtime (``SOURCE_DATE_EPOCH``), owner root
(or the one given per path), permissions normalised, gzip without a name or time. This
module writes such layers and the layout around them (``oci-layout``, ``index.json``,
the config and manifest blobs of each architecture, and the image index that a tag names);
``unpack`` reads one architecture's image back into a root file system,
which the sandbox runs (``lab/gatekeeper_lab/sandbox/container.py``, ``tests/e2e/test_image.py``).
It uses only the standard library.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "PLATFORMS",
    "Image",
    "Layer",
    "Written",
    "manifest_digest",
    "read_config",
    "read_index",
    "unpack",
    "write_layout",
]

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
INDEX = "application/vnd.oci.image.index.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"


@dataclass(frozen=True)
class Layer:
    """One layer: the tree under ``root``, with ``owners`` (path inside -> (uid, gid)) for the
    few paths not owned by root, and a line for the image's history."""

    root: Path
    comment: str
    owners: Mapping[str, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Image:
    """What the config says: how the image runs, and when it was made."""

    entrypoint: Sequence[str]
    cmd: Sequence[str]
    env: Sequence[str]
    user: str
    workdir: str
    labels: Mapping[str, str]
    epoch: int


def _entries(root: Path) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        out.extend(here / d for d in dirnames)
        out.extend(here / f for f in filenames)
    return sorted(out, key=lambda p: p.relative_to(root).as_posix())


def _tar(layer: Layer, epoch: int) -> bytes:
    """The layer's uncompressed tar: sorted, fixed times and owners, modes 0755/0644 (or as the
    file has, less group and other write), no user or group names."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path in _entries(layer.root):
            name = path.relative_to(layer.root).as_posix()
            st = path.lstat()
            info = tarfile.TarInfo(name)
            info.mtime = epoch
            info.uid, info.gid = layer.owners.get(name, (0, 0))
            info.uname = info.gname = ""
            info.mode = stat.S_IMODE(st.st_mode) & ~0o022
            if stat.S_ISLNK(st.st_mode):
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(path), 0o777
                tar.addfile(info)
            elif stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif stat.S_ISREG(st.st_mode):
                info.size = st.st_size
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
            else:
                raise ValueError(f"{path}: only files, folders and symbolic links go into a layer")
    return buf.getvalue()


def _blob(layout: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return f"sha256:{digest}"


def _json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


#: OCI platform of each Debian architecture the image is built for.
PLATFORMS: Mapping[str, Mapping[str, str]] = {
    "amd64": {"architecture": "amd64", "os": "linux"},
    "arm64": {"architecture": "arm64", "os": "linux", "variant": "v8"},
}


@dataclass(frozen=True)
class Written:
    """A layout's digests: the image index (what a tag names) and each platform's manifest."""

    index: str
    manifests: Mapping[str, str]


def _image_manifest(layout: Path, layers: Sequence[Layer], image: Image, arch: str) -> dict[str, Any]:
    """Write one platform's layers, config and manifest; return the manifest's descriptor."""
    created = _rfc3339(image.epoch)
    descs, diff_ids, history = [], [], []
    for layer in layers:
        raw = _tar(layer, image.epoch)
        gz = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=gz, mtime=0, compresslevel=6) as z:
            z.write(raw)
        data = gz.getvalue()
        descs.append({"mediaType": LAYER, "digest": _blob(layout, data), "size": len(data)})
        diff_ids.append(f"sha256:{hashlib.sha256(raw).hexdigest()}")
        history.append({"created": created, "created_by": layer.comment})
    config = {
        **PLATFORMS[arch],
        "created": created,
        "config": {
            "User": image.user,
            "Env": list(image.env),
            "Entrypoint": list(image.entrypoint),
            "Cmd": list(image.cmd),
            "WorkingDir": image.workdir,
            "Labels": dict(image.labels),
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": history,
    }
    config_bytes = _json(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": _blob(layout, config_bytes), "size": len(config_bytes)},
        "layers": descs,
        "annotations": {"org.opencontainers.image.created": created},
    }
    manifest_bytes = _json(manifest)
    return {
        "mediaType": MANIFEST,
        "digest": _blob(layout, manifest_bytes),
        "size": len(manifest_bytes),
        "platform": dict(PLATFORMS[arch]),
    }


def write_layout(layout: Path, platforms: Mapping[str, Sequence[Layer]], image: Image, tag: str) -> Written:
    """Write an OCI image layout at ``layout`` (emptied first): one image per architecture
    (``platforms``: arch -> its layers, in order), under one image index tagged ``tag``."""
    if layout.exists():
        shutil.rmtree(layout)
    layout.mkdir(parents=True)
    manifests = [_image_manifest(layout, layers, image, arch) for arch, layers in platforms.items()]
    index_bytes = _json({"schemaVersion": 2, "mediaType": INDEX, "manifests": manifests})
    digest = _blob(layout, index_bytes)
    top = {
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [
            {"mediaType": INDEX, "digest": digest, "size": len(index_bytes), "annotations": {REF_NAME: tag}}
        ],
    }
    (layout / "index.json").write_bytes(_json(top))
    (layout / "oci-layout").write_bytes(_json({"imageLayoutVersion": "1.0.0"}))
    by_arch = {arch: m["digest"] for arch, m in zip(platforms, manifests, strict=True)}
    return Written(digest, by_arch)


def _rfc3339(epoch: int) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _read_blob(layout: Path, digest: str) -> bytes:
    algo, hexdigest = digest.split(":", 1)
    data = (layout / "blobs" / algo / hexdigest).read_bytes()
    if hashlib.sha256(data).hexdigest() != hexdigest:
        raise ValueError(f"blob {digest} of {layout} does not match its digest")
    return data


def read_index(layout: Path, tag: str) -> dict[str, Any]:
    """The image index tagged ``tag``: a manifest per platform."""
    top = json.loads((layout / "index.json").read_text())
    for desc in top["manifests"]:
        if desc.get("annotations", {}).get(REF_NAME) == tag:
            if desc.get("mediaType") != INDEX:
                raise ValueError(f"{layout}: {tag} is not an image index")
            index: dict[str, Any] = json.loads(_read_blob(layout, desc["digest"]))
            return index
    raise ValueError(f"{layout} has no image tagged {tag}")


def manifest_digest(layout: Path, tag: str, arch: str = "amd64") -> str:
    """The digest of ``arch``'s manifest in the index tagged ``tag``."""
    for desc in read_index(layout, tag)["manifests"]:
        if desc.get("platform", {}).get("architecture") == arch:
            return str(desc["digest"])
    raise ValueError(f"{layout}: {tag} has no {arch} image")


def _manifest(layout: Path, tag: str, arch: str) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads(_read_blob(layout, manifest_digest(layout, tag, arch)))
    return manifest


def read_config(layout: Path, tag: str, arch: str = "amd64") -> dict[str, Any]:
    """The image config (``config``: User, Env, Entrypoint, ...) of ``arch``'s image tagged ``tag``."""
    config: dict[str, Any] = json.loads(_read_blob(layout, _manifest(layout, tag, arch)["config"]["digest"]))
    return config


def unpack(layout: Path, tag: str, rootfs: Path, arch: str = "amd64") -> None:
    """Extract the layers of ``arch``'s image tagged ``tag`` in order into ``rootfs`` (emptied
    first), as a runtime would.

    Every blob is checked against its digest. Owners are kept when run as root.
    """
    if rootfs.exists():
        shutil.rmtree(rootfs)
    rootfs.mkdir(parents=True)
    for desc in _manifest(layout, tag, arch)["layers"]:
        data = gzip.decompress(_read_blob(layout, desc["digest"]))
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar.getmembers():
                parts = member.name.split("/")
                if member.name.startswith("/") or ".." in parts:
                    raise ValueError(f"{member.name}: a layer's path must stay inside the root")
                if parts[-1].startswith(".wh."):
                    raise ValueError(f"{member.name}: whiteouts are not expected in this image")
            if hasattr(tarfile, "tar_filter"):  # Python 3.11.4 and later
                tar.extractall(rootfs, filter="tar")
            else:
                tar.extractall(rootfs)

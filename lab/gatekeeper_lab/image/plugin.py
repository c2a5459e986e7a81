"""``lws-gatekeeper plugin build``: the kubectl plugin as one file per architecture, and a krew
manifest for them.

Why this exists: ``kubectl lws-gatekeeper why`` is what a cluster's users run, and most of
them install kubectl plugins with krew, which wants one archive per platform holding one
executable. The plugin is Python; the ecosystem's one-file form for it is a PEX (a zip that
Python runs, its dependencies inside): built here from the very wheels the image pins
(``requirements.lock``: CPython 3.11 on manylinux x86_64 and aarch64, hashes checked) and the
project's own wheel, without the Python index, each to a ``.tar.gz`` beside a krew
``Plugin`` manifest naming their SHA-256. The user's machine needs ``python3.11`` on its
PATH (the manifest's caveat says so); elsewhere ``pip install`` the package.

A development tool beside the product (the image builder's sibling); ``./scripts/plugin``
and ``tests/e2e/test_plugin_build.py`` call it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gatekeeper_lab.image import build as image_build
from gatekeeper_lab.image.build import MACHINE

__all__ = ["BIN", "Archive", "build_plugin", "compatible_tags", "krew_manifest"]

BIN = "kubectl-lws_gatekeeper"
"""The plugin's executable, as kubectl finds it (``kubectl lws-gatekeeper``)."""

PYTHON = "python3.11"
"""The interpreter the PEX asks for (its wheels are CPython 3.11's, as the image's)."""


@dataclass(frozen=True)
class Archive:
    """One platform's archive: ``arch`` (krew's, amd64 or arm64), its path and SHA-256."""

    arch: str
    path: Path
    sha256: str


def compatible_tags(arch: str) -> list[str]:
    """The wheel tags CPython 3.11 on glibc 2.17 to 2.36 takes on ``arch``, most specific
    first (what ``image.build.platform_args`` tells pip, as PEX's complete platform)."""
    m = MACHINE[arch]
    platforms = [*(f"manylinux_2_{v}_{m}" for v in range(36, 16, -1)), f"manylinux2014_{m}", f"linux_{m}"]
    if arch == "amd64":
        platforms.insert(-1, "manylinux1_x86_64")
    tags = [f"cp311-{abi}-{p}" for abi in ("cp311", "abi3", "none") for p in platforms]
    tags += [f"cp3{minor}-abi3-{p}" for minor in range(10, 1, -1) for p in platforms]
    pythons = ["py311", "py3", *(f"py3{minor}" for minor in range(10, -1, -1))]
    tags += [f"{py}-none-{p}" for p in [*platforms, "any"] for py in pythons]
    return [*tags, "cp311-none-any"]


def _complete_platform(arch: str) -> dict[str, Any]:
    machine = MACHINE[arch]
    markers = {
        "implementation_name": "cpython",
        "implementation_version": "3.11.0",
        "os_name": "posix",
        "platform_machine": machine,
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": "3.11.0",
        "python_version": "3.11",
        "sys_platform": "linux",
    }
    return {"marker_environment": markers, "compatible_tags": compatible_tags(arch)}


def _requirements(into: Path) -> Path:
    """requirements.lock as exact versions (the wheels' hashes were checked when fetched)."""
    lock = Path(image_build.__file__).with_name("requirements.lock").read_text()
    lines = [line.split(" --hash")[0] for line in lock.splitlines() if line and not line.startswith("#")]
    path = into / "requirements.txt"
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _archive(pex: Path, out: Path, arch: str, epoch: int) -> Archive:
    """``pex`` as krew wants it: ``BIN`` at the archive's root, with fixed owner and time."""
    path = out / f"{BIN}-linux-{arch}.tar.gz"
    info = tarfile.TarInfo(BIN)
    info.size, info.mode, info.mtime = pex.stat().st_size, 0o755, epoch
    # gzip's own header carries a time too: the epoch, so that a build is byte for byte the same.
    with (
        path.open("wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=epoch) as zipped,
        tarfile.open(fileobj=zipped, mode="w") as tar,
        pex.open("rb") as body,
    ):
        tar.addfile(info, body)
    return Archive(arch, path, _sha256(path))


def krew_manifest(version: str, base_url: str, archives: Sequence[Archive], homepage: str) -> dict[str, Any]:
    """A krew ``Plugin`` for ``archives``, each at ``base_url``/its file name."""
    return {
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
        "kind": "Plugin",
        "metadata": {"name": "lws-gatekeeper"},
        "spec": {
            "version": f"v{version}",
            "homepage": homepage,
            "shortDescription": "Why a LeaderWorkerSet's groups wait for their GPU pool",
            "description": (
                "kubectl lws-gatekeeper why LWS -n NAMESPACE: each group of a LeaderWorkerSet\n"
                "that lws-gatekeeper holds, its reason, its pool's usage and queue, and what must\n"
                "free up for its next group. Reads only, with your own rights; exits 0 when every\n"
                "group is admitted, 1 when one waits, 2 when the answer cannot be read.\n"
            ),
            "caveats": (
                f"The plugin is a Python program in one file: it needs {PYTHON} on your PATH.\n"
                "Without it, install the Python package lws-gatekeeper instead.\n"
            ),
            "platforms": [
                {
                    "selector": {"matchLabels": {"os": "linux", "arch": a.arch}},
                    "uri": f"{base_url.rstrip('/')}/{a.path.name}",
                    "sha256": a.sha256,
                    "bin": BIN,
                }
                for a in archives
            ],
        },
    }


def build_plugin(
    source: Path,
    out: Path,
    *,
    base_url: str,
    homepage: str,
    arches: Sequence[str] = tuple(MACHINE),
    say: Callable[[str], None] = print,
) -> tuple[list[Archive], Path]:
    """The plugin of ``source`` for ``arches`` into ``out``: an archive each and the krew
    manifest ``lws-gatekeeper.yaml``; returns them. Needs the ``pex`` package (the lab's)."""
    out.mkdir(parents=True, exist_ok=True)
    wheels = image_build.cache_dir() / "wheels"
    epoch = image_build.source_epoch(source)
    archives: list[Archive] = []
    with tempfile.TemporaryDirectory(prefix="lws-gatekeeper-plugin-") as tmp:
        work = Path(tmp)
        own = image_build.project_wheel(source, image_build.source_files(source), work / "own", epoch)
        requirements = _requirements(work)
        version = own.name.split("-")[1]
        for arch in arches:
            image_build.fetch_wheels(wheels, arch, say)
            platform = work / f"platform-{arch}.json"
            platform.write_text(json.dumps(_complete_platform(arch)))
            pex = work / f"{BIN}-{arch}.pex"
            say(f"building {pex.name} from the pinned wheels")
            subprocess.run(
                [sys.executable, "-m", "pex", "--no-pypi", "-f", str(wheels), "-f", str(own.parent),
                 "--complete-platform", str(platform), "-r", str(requirements), f"lws-gatekeeper=={version}",
                 "-c", BIN, "--python-shebang", f"/usr/bin/env {PYTHON}", "-o", str(pex)],
                check=True, env={**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}, stdout=subprocess.DEVNULL,
            )  # fmt: skip
            archives.append(_archive(pex, out, arch, epoch))
    manifest = out / "lws-gatekeeper.yaml"
    manifest.write_text(yaml.safe_dump(krew_manifest(version, base_url, archives, homepage), sort_keys=False))
    return archives, manifest

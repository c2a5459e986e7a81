"""Debian's part of the image: the pinned packages, fetched from the machine's apt sources and unpacked.

Why this exists: the image's interpreter and its libraries are Debian 12's own packages,
pinned in ``debian.lock`` (name, version, architecture, SHA-256), for each architecture the
image is built for. ``build.py`` calls :func:`fetch` and :func:`unpack_into` for every build
and :func:`closure` when the lock is written again (``lws-gatekeeper image lock``). Packages
are unpacked with ``dpkg-deb``, never configured, so no maintainer script (and no shell) is
needed. A foreign architecture's packages (arm64 on an amd64 host) are read through apt
with a package list of its own in the cache (:func:`apt_options`): the machine's sources
and keys, nothing of the machine's own apt state changed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "ARCHES",
    "DEBIAN_ROOTS",
    "USER_ID",
    "Deb",
    "apt_options",
    "closure",
    "fetch",
    "host_arch",
    "read_lock",
    "run",
    "sha256_ok",
    "suite",
    "unpack_into",
]

#: The Debian packages the image needs; ``lock`` adds their run-time dependencies.
DEBIAN_ROOTS = ("python3.11-minimal", "libpython3.11-stdlib")

#: Dependencies left out: they serve only the configuration of installed packages
#: (maintainer scripts, info and alternatives), and nothing is configured here.
DEBIAN_NOT_NEEDED = frozenset({"dpkg", "install-info", "debconf", "perl-base", "tar"})

#: The architectures the image is built for (Debian's names; an OCI platform's too).
ARCHES = ("amd64", "arm64")

#: The chart's user (``manager.podSecurityContext.runAsUser``), the image's USER too.
USER_ID = 65532

#: Folders of the Debian packages that a program never reads (copyright files stay).
TRIM = ("usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian", "usr/share/bug")


def run(argv: Sequence[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(list(argv), capture_output=True, text=True, check=False, **kw)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return res


@dataclass(frozen=True)
class Deb:
    """One pinned package, as a line of ``debian.lock`` gives it."""

    name: str
    version: str
    arch: str
    sha256: str

    @property
    def file(self) -> str:
        return f"{self.name}_{self.version.replace(':', '%3a')}_{self.arch}.deb"


def read_lock(arch: str, path: Path | None = None) -> list[Deb]:
    """The pinned packages of ``arch`` (its own and those of architecture ``all``)."""
    text = (path or Path(str(resources.files("gatekeeper_lab.image"))) / "debian.lock").read_text()
    debs = [Deb(*line.split()) for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return [d for d in debs if d.arch in (arch, "all")]


def host_arch() -> str:
    return run(["dpkg", "--print-architecture"]).stdout.strip()


def apt_options(arch: str, cache: Path) -> list[str]:
    """apt's options to read ``arch``'s packages: none for the machine's own; for another, a
    package list of its own under ``cache`` (made by ``apt-get update`` on first use)."""
    if arch == host_arch():
        return []
    state = cache / f"apt-{arch}"
    opts = [
        f"-o=Dir::State::Lists={state / 'lists'}",
        f"-o=Dir::Cache={state / 'cache'}",
        f"-o=Dir::State::status={state / 'status'}",
        f"-o=APT::Architecture={arch}",
        f"-o=APT::Architectures::={arch}",
    ]
    if not any((state / "lists").glob("*Packages*")):
        for rel in ("lists/partial", "cache/archives/partial"):
            (state / rel).mkdir(parents=True, exist_ok=True)
        (state / "status").touch()
        run(["apt-get", *opts, "update"])
    return opts


def _apt_show(name: str, opts: Sequence[str]) -> dict[str, str]:
    out = run(["apt-cache", *opts, "show", "--no-all-versions", name]).stdout
    fields: dict[str, str] = {}
    for line in out.splitlines():
        if line and not line.startswith(" ") and ":" in line:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def _first_alternatives(depends: str) -> list[str]:
    """``a (>= 1) | b, c`` -> ``[a, c]`` (the name only, no architecture qualifier)."""
    return [dep.split("|")[0].split()[0].split(":")[0] for dep in depends.split(",") if dep.strip()]


def closure(arch: str, cache: Path) -> list[Deb]:
    """DEBIAN_ROOTS and their run-time dependencies for ``arch``, at the candidate versions."""
    opts = apt_options(arch, cache)
    seen: dict[str, Deb] = {}
    todo = list(DEBIAN_ROOTS)
    while todo:
        name = todo.pop()
        if name in seen or name in DEBIAN_NOT_NEEDED:
            continue
        fields = _apt_show(name, opts)
        seen[name] = Deb(name, fields["Version"], fields["Architecture"], fields["SHA256"])
        for key in ("Pre-Depends", "Depends"):
            todo.extend(_first_alternatives(fields.get(key, "")))
    return sorted(seen.values(), key=lambda d: d.name)


def suite() -> str:
    """The Debian release of the machine's apt sources, e.g. ``debian-12 (bookworm)``."""
    release = dict(
        line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line
    )
    version = release.get("VERSION_ID", "").strip('"')
    return f"debian-{version} ({release.get('VERSION_CODENAME', '')})"


def fetch(debs: Sequence[Deb], into: Path, say: Callable[[str], None], arch: str | None = None) -> None:
    """Each pinned .deb (of ``arch``, the machine's by default) into ``into`` (kept there),
    checked against its SHA-256 from the lock."""
    into.mkdir(parents=True, exist_ok=True)
    missing = [d for d in debs if not sha256_ok(into / d.file, d.sha256)]
    if not missing:
        return
    say(f"fetching {len(missing)} Debian packages from the machine's apt sources")
    opts = apt_options(arch, into.parent) if arch is not None else []
    want = [f"{d.name}={d.version}" for d in missing]
    download = ["apt-get", *opts, "download", *want]
    res = subprocess.run(download, cwd=into, capture_output=True, text=True, check=False)
    if res.returncode != 0 and os.geteuid() == 0:
        say("apt-get download failed; running apt-get update once")
        run(["apt-get", *opts, "update"])
        res = subprocess.run(download, cwd=into, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(
            "the pinned Debian packages could not be fetched (is a version of debian.lock no longer "
            f"served? `lws-gatekeeper image lock` pins what is served now):\n{res.stderr[-2000:]}"
        )
    for d in missing:
        if not sha256_ok(into / d.file, d.sha256):
            raise RuntimeError(f"{d.file}: its SHA-256 is not the one in debian.lock")


def sha256_ok(path: Path, sha256: str) -> bool:
    return path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == sha256


def unpack_into(debs: Sequence[Deb], cache: Path, root: Path) -> None:
    for d in debs:
        run(["dpkg-deb", "-x", str(cache / d.file), str(root)])
    for rel in TRIM:
        shutil.rmtree(root / rel, ignore_errors=True)
    doc = root / "usr/share/doc"
    for path in sorted(doc.rglob("*"), reverse=True) if doc.exists() else []:
        if path.is_file() and path.name != "copyright":
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    etc = root / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text(
        f"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{USER_ID}:{USER_ID}:nonroot:/home/nonroot:/sbin/nologin\n"
    )
    (etc / "group").write_text(f"root:x:0:\nnonroot:x:{USER_ID}:\n")
    for rel in ("tmp", "home/nonroot", "root"):
        (root / rel).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    (root / "root").chmod(0o700)

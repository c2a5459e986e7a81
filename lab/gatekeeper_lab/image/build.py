"""Build the project's container image without an engine: pinned Debian packages, pinned wheels, OCI.

Why this exists: the chart runs ``lws-gatekeeper`` from an image, and our machines (and
CI) have no container engine and reach no image registry, only Debian's and Python's
package registries. So the image is made here from what those serve, all of it pinned:

- Debian: the packages of ``debian.lock`` (Debian's ``python3.11-minimal`` and
  ``libpython3.11-stdlib`` with their run-time dependencies, each at an exact version and
  SHA-256), fetched with ``apt-get download`` from the machine's own apt sources and
  unpacked with ``dpkg-deb`` (``debian.py``: nothing is configured, no maintainer script
  runs, so no shell, dpkg or perl is needed or shipped);
- Python: the wheels of ``requirements.lock`` (exact versions and hashes, for CPython
  3.11 on manylinux x86_64) and the project's own wheel built from the source tree,
  installed by pip into ``/usr/local/lib/python3.11/dist-packages`` and compiled with the
  image's own interpreter (hash-checked ``.pyc``, so a read-only root file system costs
  no start-up);
- three layers (Debian, Python dependencies, the project) written by ``oci.py`` with
  every time set to ``SOURCE_DATE_EPOCH``: the same inputs give the same digest;
- a CycloneDX SBOM listing every Debian package and wheel with its version and hash.

Callers: ``lws-gatekeeper image build`` (``./scripts/image``) and the end-to-end test of
the image (``tests/e2e/test_image.py``), both through :func:`build`, which keeps its
result in the cache folder keyed by every input, so a second build with the same inputs
is a cache hit. ``lock`` writes the two lock files again from what the registries serve now.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from gatekeeper_lab.image import debian, oci
from gatekeeper_lab.image.debian import ARCHES, USER_ID, Deb, run, sha256_ok

__all__ = [
    "Built",
    "build",
    "cache_dir",
    "fetch_wheels",
    "lock",
    "locked_wheels",
    "project_wheel",
    "source_epoch",
    "source_files",
]

PYTHON = "/usr/bin/python3.11"
SITE = "usr/local/lib/python3.11/dist-packages"

#: The machine name of each architecture in wheel tags and Debian's multiarch paths.
MACHINE = {"amd64": "x86_64", "arm64": "aarch64"}
#: Each architecture's dynamic loader, inside its Debian root.
LOADER = {"amd64": "lib64/ld-linux-x86-64.so.2", "arm64": "lib/ld-linux-aarch64.so.1"}


def platform_args(arch: str) -> tuple[str, ...]:
    """pip's target platform: CPython 3.11 on Debian 12's glibc (2.36), on ``arch``."""
    m = MACHINE[arch]
    return (
        *[a for v in range(36, 16, -1) for a in ("--platform", f"manylinux_2_{v}_{m}")],
        *("--platform", f"manylinux2014_{m}"),
        *(("--platform", f"manylinux1_{m}") if arch == "amd64" else ()),
        *("--python-version", "3.11", "--implementation", "cp"),
        *("--abi", "cp311", "--abi", "abi3", "--abi", "none", "--only-binary=:all:"),
    )


def wheel_arch(filename: str) -> str | None:
    """The architecture a wheel file is built for; None for one that runs on any."""
    platform_tag = filename.removesuffix(".whl").split("-")[-1]
    for arch, machine in MACHINE.items():
        if platform_tag.endswith(f"_{machine}") or f"_{machine}." in platform_tag:
            return arch
    return None


def _here() -> Path:
    return Path(str(resources.files("gatekeeper_lab.image")))


def cache_dir() -> Path:
    """Downloads and finished images: ``<cache>/image``, the cache being ``$LWS_GATEKEEPER_CACHE``
    or ``~/.cache/lws-gatekeeper``."""
    env = os.environ.get("LWS_GATEKEEPER_CACHE")
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return (Path(env) if env else Path(xdg) / "lws-gatekeeper") / "image"


# ---- Python -------------------------------------------------------------------------------


def _pip(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], **kw)


def locked_wheels(arch: str) -> list[tuple[str, str]]:
    """(file, SHA-256) of each wheel requirements.lock pins for ``arch``.

    Each ``# file: NAME sha256:HASH`` comment names a wheel of the requirement that follows
    it; a requirement with wheels per architecture lists every hash, so pip (and the
    Containerfile) accept either. Of a requirement's wheels, ``arch``'s own is taken, else the
    one that runs on any machine (a project may publish a compiled wheel for one only)."""
    out: list[tuple[str, str]] = []
    block: list[tuple[str, str]] = []
    for line in (_here() / "requirements.lock").read_text().splitlines():
        if line.startswith("# file: "):
            name, _, sha = line.removeprefix("# file: ").strip().partition(" sha256:")
            block.append((name, sha))
        elif line and not line.startswith("#"):
            own = [w for w in block if wheel_arch(w[0]) == arch]
            out.extend(own or [w for w in block if wheel_arch(w[0]) is None])
            block = []
    return out


def fetch_wheels(into: Path, arch: str, say: Callable[[str], None]) -> None:
    """The wheels of requirements.lock for ``arch`` into ``into`` (kept there); pip checks each hash."""
    if all(sha256_ok(into / f, h) for f, h in locked_wheels(arch)):
        return
    say(f"fetching the pinned wheels (requirements.lock, {arch})")
    into.mkdir(parents=True, exist_ok=True)
    lockfile = str(_here() / "requirements.lock")
    _pip("download", "--no-deps", "--require-hashes", *platform_args(arch), "-d", str(into), "-r", lockfile)


def source_files(source: Path) -> list[str]:
    out = run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=source).stdout
    return sorted(p for p in out.split("\0") if p and os.path.lexists(source / p))


def project_wheel(source: Path, files: Sequence[str], into: Path, epoch: int) -> Path:
    """The project's wheel, built from a copy of its tracked (and new, unignored) files."""
    with tempfile.TemporaryDirectory(prefix="lws-gatekeeper-wheel-") as tmp:
        src = Path(tmp) / "src"
        for rel in files:
            dst = src / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / rel, dst, follow_symlinks=False)
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "PIP_CONSTRAINT": str(_here() / "build.lock")}
        _pip("wheel", "--no-deps", "-w", str(into), str(src), env=env)
    (wheel,) = into.glob("lws_gatekeeper-*.whl")
    return wheel


def _install(wheels: Iterable[Path], root: Path, arch: str) -> None:
    target = root / SITE
    _pip("install", "--no-deps", "--no-index", "--no-compile", *platform_args(arch), "--target", str(target),
         *map(str, wheels))  # fmt: skip
    shutil.rmtree(target / "bin", ignore_errors=True)  # scripts with this machine's interpreter
    for path in target.glob("*.dist-info/direct_url.json"):  # names a temporary folder
        path.unlink()
    for path in target.glob("*.dist-info/RECORD"):  # lists the files removed above
        lines = [
            ln
            for ln in path.read_text().splitlines()
            if not ln.startswith("../../bin/") and "/direct_url.json," not in ln
        ]
        path.write_text("".join(f"{ln}\n" for ln in lines))


def _compile(python_root: Path, arch: str, tree: Path) -> None:
    """Compile ``tree``'s Python files with the image's own interpreter of the machine's
    architecture ``arch`` (run through that image's dynamic loader, from the host),
    hash-checked so that no file time goes into a ``.pyc``. The other architecture's trees are
    compiled by it too: its Debian packages are the same Python at the same version, and
    bytecode does not depend on the machine.

    Reproducible only so: one process (``-j 1``: marshal's output depends on what the process
    compiled before), ``-B`` (else the modules compileall imports get a timestamped ``.pyc``
    that it then keeps), ``-f``, and a fixed ``PYTHONHASHSEED``."""
    loader = python_root / LOADER[arch]
    triplet = f"{MACHINE[arch]}-linux-gnu"
    libs = f"{python_root}/lib/{triplet}:{python_root}/usr/lib/{triplet}"
    argv = [
        str(loader), "--library-path", libs, str(python_root / PYTHON.lstrip("/")),
        "-I", "-B", "-m", "compileall", "-q", "-f", "-j", "1", "--invalidation-mode", "unchecked-hash",
        "-s", str(tree), "-p", "/", str(tree),
    ]  # fmt: skip
    env = {"PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
    run(argv, env=env)


def _entry_point(root: Path) -> None:
    """``lws-gatekeeper`` on PATH, the chart's ``command``: the kernel runs its interpreter, no shell."""
    bin_dir = root / "usr/local/bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "lws-gatekeeper"
    script.write_text(f"#!{PYTHON} -I\nimport sys\nfrom gatekeeper.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)


# ---- SBOM ---------------------------------------------------------------------------------


def _sbom(
    debs: Sequence[Deb], wheels: Sequence[Path], suite: str, version: str, epoch: int
) -> dict[str, Any]:
    unique = {(d.name, d.arch): d for d in debs}  # a package of architecture all serves both
    components: list[dict[str, Any]] = [
        {
            "type": "library" if not d.name.startswith("python3") else "application",
            "bom-ref": f"deb:{d.name}:{d.arch}",
            "name": d.name,
            "version": d.version,
            "purl": f"pkg:deb/debian/{d.name}@{d.version}?arch={d.arch}&distro={suite.split()[0]}",
            "hashes": [{"alg": "SHA-256", "content": d.sha256}],
            "properties": [{"name": "lws-gatekeeper:source", "value": "debian"}],
        }
        for _, d in sorted(unique.items())
    ]
    for wheel in sorted(wheels, key=lambda p: p.name.lower()):
        name, ver = wheel.name.split("-")[:2]
        components.append(
            {
                "type": "library",
                "bom-ref": f"pypi:{wheel.name}",
                "name": name,
                "version": ver,
                # The project's own wheel is not on the Python package index: a generic purl.
                "purl": f"pkg:{'generic' if name == 'lws_gatekeeper' else 'pypi'}/"
                f"{name.lower().replace('_', '-')}@{ver}",
                "hashes": [{"alg": "SHA-256", "content": hashlib.sha256(wheel.read_bytes()).hexdigest()}],
                "properties": [{"name": "lws-gatekeeper:file", "value": wheel.name}],
            }
        )
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {
            "timestamp": oci._rfc3339(epoch),
            "component": {"type": "container", "name": "lws-gatekeeper", "version": version},
        },
        "components": components,
    }


# ---- the whole build ----------------------------------------------------------------------


@dataclass(frozen=True)
class Built:
    """A finished image: its OCI layout, tag, digests, SBOM and size."""

    layout: Path
    tag: str
    digest: str
    """The image index's digest: what the tag names, and what a chart pins (``image.digest``)."""
    manifests: Mapping[str, str]
    """Each architecture's manifest digest (``amd64``, ``arm64``)."""
    sbom: Path
    seconds: float
    cached: bool

    @property
    def size(self) -> int:
        """Bytes of its blobs (compressed layers, configs, manifests, index): what a registry stores."""
        return sum(p.stat().st_size for p in (self.layout / "blobs").rglob("*") if p.is_file())

    def unpacked_size(self, arch: str = "amd64") -> int:
        """Bytes of ``arch``'s layers unpacked (tar streams), as a node of it stores them."""
        import gzip

        blobs = self.layout / "blobs/sha256"
        manifest = json.loads((blobs / self.manifests[arch].split(":")[1]).read_text())
        return sum(
            len(gzip.decompress((blobs / d["digest"].split(":")[1]).read_bytes())) for d in manifest["layers"]
        )


def source_epoch(source: Path) -> int:
    """``$SOURCE_DATE_EPOCH``, else the time of the source's last commit."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return int(os.environ["SOURCE_DATE_EPOCH"])
    return int(run(["git", "log", "-1", "--format=%ct"], cwd=source).stdout.strip())


def _version(source: Path) -> str:
    import tomllib

    return str(tomllib.loads((source / "pyproject.toml").read_text())["project"]["version"])


def _key(source: Path, files: Sequence[str], epoch: int) -> str:
    h = hashlib.sha256(f"epoch={epoch}\n".encode())
    for path in sorted(_here().iterdir()):
        if path.is_file() and path.suffix in (".py", ".lock"):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    for rel in files:
        p = source / rel
        h.update(rel.encode() + b"\0")
        h.update(os.readlink(p).encode() if p.is_symlink() else p.read_bytes())
    return h.hexdigest()[:16]


def _done(text: str) -> tuple[str, str, dict[str, str]]:
    """The cache's record of a build: its key, index digest and each manifest digest."""
    key, index, *platforms = text.split()
    return key, index, dict(p.split("=", 1) for p in platforms)


def _platform_trees(
    t: Path, say: Callable[[str], None]
) -> tuple[dict[str, Path], dict[str, Path], list[Deb], list[Path]]:
    """Each architecture's Debian root and installed wheels under ``t``; every package and wheel."""
    bases: dict[str, Path] = {}
    deps: dict[str, Path] = {}
    every_deb: list[Deb] = []
    every_wheel: list[Path] = []
    for arch in ARCHES:
        debs = debian.read_lock(arch)
        debian.fetch(debs, cache_dir() / "debs", say, arch)
        wheel_cache = cache_dir() / "wheels"
        fetch_wheels(wheel_cache, arch, say)
        say(f"{arch}: unpacking {len(debs)} Debian packages")
        bases[arch] = t / f"debian-{arch}"
        debian.unpack_into(debs, cache_dir() / "debs", bases[arch])
        wheels = [wheel_cache / name for name, _ in locked_wheels(arch)]
        missing = [w.name for w in wheels if not w.is_file()]
        if missing:
            raise RuntimeError(f"wheels of requirements.lock not downloaded: {missing}")
        say(f"{arch}: installing {len(wheels)} wheels")
        deps[arch] = t / f"deps-{arch}"
        _install(wheels, deps[arch], arch)
        every_deb.extend(debs)
        every_wheel.extend(w for w in wheels if w not in every_wheel)
    return bases, deps, every_deb, every_wheel


def _same_python() -> None:
    """Bytecode is compiled once for every architecture: their Pythons must be one version."""
    versions = {
        arch: {d.version for d in debian.read_lock(arch) if d.name == "python3.11-minimal"} for arch in ARCHES
    }
    if len({frozenset(v) for v in versions.values()}) != 1:
        raise RuntimeError(
            f"debian.lock pins python3.11-minimal at different versions per architecture: {versions}"
        )


def build(
    source: Path, *, say: Callable[[str], None] = print, fresh: bool = False, out: Path | None = None
) -> Built:
    """Build the image of the project at ``source`` (or find it in the cache); see the module doc.

    ``fresh`` builds again even on a cache hit (the result must be the same digest).
    ``out`` names the layout folder; by default it lives in the cache, keyed by the inputs.
    """
    started = time.monotonic()
    files = source_files(source)
    epoch = source_epoch(source)
    version = _version(source)
    key = _key(source, files, epoch)
    dest = out or cache_dir() / "images" / key
    layout, sbom_file, done = dest / "oci", dest / "sbom.cdx.json", dest / "digest"
    if done.exists() and not fresh:
        built_key, index, manifests = _done(done.read_text())
        if built_key == key:  # an --out folder may hold the image of other inputs
            return Built(layout, version, index, manifests, sbom_file, time.monotonic() - started, True)
    host = debian.host_arch()
    if host not in ARCHES:
        raise RuntimeError(f"the image is built on an {' or '.join(ARCHES)} machine, not {host}")
    _same_python()
    with tempfile.TemporaryDirectory(prefix="lws-gatekeeper-image-") as tmp:
        t = Path(tmp)
        bases, deps, debs, wheels = _platform_trees(t, say)
        say("installing the project's wheel")
        app = t / "app"
        own = project_wheel(source, files, t / "wheel", epoch)
        _install([own], app, host)
        _entry_point(app)
        for arch in ARCHES:
            for tree in (bases[arch] / "usr/lib/python3.11", deps[arch]):
                _compile(bases[host], host, tree)
        _compile(bases[host], host, app)
        image = oci.Image(
            entrypoint=["/usr/local/bin/lws-gatekeeper"],
            cmd=["run"],
            env=["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "PYTHONUNBUFFERED=1"],
            user=f"{USER_ID}:{USER_ID}",
            workdir="/home/nonroot",
            labels={
                "org.opencontainers.image.title": "lws-gatekeeper",
                "org.opencontainers.image.version": version,
                "org.opencontainers.image.licenses": "Apache-2.0",
            },
            epoch=epoch,
        )
        own_layer = oci.Layer(app, f"lws-gatekeeper {version}")  # the same bytes on every architecture
        platforms = {
            arch: [
                oci.Layer(bases[arch], f"Debian {debian.suite()} {arch}: the packages of debian.lock",
                          owners={"home/nonroot": (USER_ID, USER_ID)}),
                oci.Layer(deps[arch], f"{arch}: the wheels of requirements.lock"),
                own_layer,
            ]
            for arch in ARCHES
        }  # fmt: skip
        say("writing the OCI layout (an image index of " + ", ".join(ARCHES) + ")")
        written = oci.write_layout(layout, platforms, image, version)
        sbom = _sbom(debs, [*wheels, own], debian.suite(), version, epoch)
    sbom_file.write_text(json.dumps(sbom, indent=2, sort_keys=True) + "\n")
    by_arch = " ".join(f"{arch}={d}" for arch, d in written.manifests.items())
    done.write_text(f"{key} {written.index} {by_arch}\n")
    if out is None:
        _prune(dest.parent, keep=dest)
    return Built(
        layout, version, written.index, written.manifests, sbom_file, time.monotonic() - started, False
    )


#: Images kept in the cache (each source change makes a new one).
KEEP_IMAGES = 3


def _prune(images: Path, keep: Path) -> None:
    """Remove all but the newest KEEP_IMAGES cached images (never ``keep``, the one just built)."""
    others = sorted((p for p in images.iterdir() if p != keep), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[KEEP_IMAGES - 1 :]:
        shutil.rmtree(old, ignore_errors=True)


# ---- the lock files -----------------------------------------------------------------------


def _resolve(requirements: Sequence[str], arch: str) -> list[dict[str, Any]]:
    """pip's resolution of ``requirements`` for CPython 3.11 on ``arch``: each wheel it would install."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        _pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
             *platform_args(arch), "--target", str(Path(tmp) / "t"), *requirements)  # fmt: skip
        items: list[dict[str, Any]] = json.loads(report.read_text())["install"]
    return items


def _pinned() -> list[str]:
    """The requirements requirements.lock pins now (``name==version``)."""
    lines = (_here() / "requirements.lock").read_text().splitlines()
    return [ln.split()[0] for ln in lines if ln and not ln.startswith("#")]


def lock(source: Path, say: Callable[[str], None] = print, *, keep_versions: bool = False) -> None:
    """Pin what the registries serve now: ``debian.lock`` (the closure of DEBIAN_ROOTS for every
    architecture, at the candidate versions of the machine's apt sources) and
    ``requirements.lock`` (the project's run-time dependencies resolved for the image's Python
    on the machine's architecture, then the same versions' wheels for the others, with hashes).
    ``keep_versions``: the requirements keep the versions pinned now (only their wheels and
    hashes are written again, for every architecture)."""
    here = _here()
    debs = {(d.name, d.arch): d for arch in ARCHES for d in debian.closure(arch, cache_dir())}
    header = (
        "# Debian packages of the image: name, version, architecture, SHA-256 of the .deb\n"
        f"# ({debian.suite()}; {', '.join(ARCHES)}).\n"
        "# Written by `lws-gatekeeper image lock`; fetched from the machine's apt sources.\n"
    )
    (here / "debian.lock").write_text(
        header + "".join(f"{d.name} {d.version} {d.arch} {d.sha256}\n" for _, d in sorted(debs.items()))
    )
    say(f"debian.lock: {len(debs)} packages")
    import tomllib

    deps = tomllib.loads((source / "pyproject.toml").read_text())["project"]["dependencies"]
    host = debian.host_arch()
    first = _resolve(_pinned() if keep_versions else deps, host)
    pins = [f"{i['metadata']['name']}=={i['metadata']['version']}" for i in first]
    files: dict[str, dict[str, str]] = {}  # requirement -> wheel file -> SHA-256
    for arch in ARCHES:
        for item in first if arch == host else _resolve(pins, arch):
            meta, info = item["metadata"], item["download_info"]
            pin = f"{meta['name']}=={meta['version']}"
            files.setdefault(pin, {})[info["url"].rsplit("/", 1)[1]] = info["archive_info"]["hashes"][
                "sha256"
            ]
    lines = [
        "# The image's Python dependencies: exact versions and wheel hashes\n",
        f"# (CPython 3.11, manylinux {', '.join(MACHINE[a] for a in ARCHES)}): each `# file:` line names\n",
        "# a wheel; a requirement built per architecture lists each one's hash.\n",
        "# Written by `lws-gatekeeper image lock` from pyproject.toml's dependencies.\n",
    ]
    for pin in sorted(files, key=str.lower):
        lines.extend(f"# file: {name} sha256:{sha}\n" for name, sha in sorted(files[pin].items()))
        lines.append(
            f"{pin} " + " ".join(f"--hash=sha256:{sha}" for sha in sorted(set(files[pin].values()))) + "\n"
        )
    (here / "requirements.lock").write_text("".join(lines))
    say(f"requirements.lock: {len(files)} requirements, {sum(map(len, files.values()))} wheels")

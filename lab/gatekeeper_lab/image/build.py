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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from gatekeeper_lab.image import debian, oci
from gatekeeper_lab.image.debian import USER_ID, Deb, run, sha256_ok

__all__ = ["Built", "build", "cache_dir", "lock", "source_epoch"]

PYTHON = "/usr/bin/python3.11"
SITE = "usr/local/lib/python3.11/dist-packages"

#: pip's target platform: CPython 3.11 on Debian 12's glibc (2.36), x86_64.
PLATFORM_ARGS = (
    *[a for v in range(36, 16, -1) for a in ("--platform", f"manylinux_2_{v}_x86_64")],
    *("--platform", "manylinux2014_x86_64", "--platform", "manylinux1_x86_64"),
    *("--python-version", "3.11", "--implementation", "cp"),
    *("--abi", "cp311", "--abi", "abi3", "--abi", "none", "--only-binary=:all:"),
)


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


def _fetch_wheels(into: Path, say: Callable[[str], None]) -> None:
    """The wheels of requirements.lock into ``into`` (kept there); pip checks each hash."""
    lines = (_here() / "requirements.lock").read_text().splitlines()
    files = [ln.removeprefix("# file: ").strip() for ln in lines if ln.startswith("# file: ")]
    hashes = [ln.split("--hash=sha256:")[1].strip() for ln in lines if "--hash=sha256:" in ln]
    if all(sha256_ok(into / f, h) for f, h in zip(files, hashes, strict=True)):
        return
    say("fetching the pinned wheels (requirements.lock)")
    into.mkdir(parents=True, exist_ok=True)
    lockfile = str(_here() / "requirements.lock")
    _pip("download", "--no-deps", "--require-hashes", *PLATFORM_ARGS, "-d", str(into), "-r", lockfile)


def _source_files(source: Path) -> list[str]:
    out = run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=source).stdout
    return sorted(p for p in out.split("\0") if p and os.path.lexists(source / p))


def _project_wheel(source: Path, files: Sequence[str], into: Path, epoch: int) -> Path:
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


def _install(wheels: Iterable[Path], root: Path) -> None:
    target = root / SITE
    _pip("install", "--no-deps", "--no-index", "--no-compile", *PLATFORM_ARGS, "--target", str(target),
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


def _compile(python_root: Path, tree: Path) -> None:
    """Compile ``tree``'s Python files with the image's own interpreter (run through the image's
    dynamic loader, from the host), hash-checked so that no file time goes into a ``.pyc``.

    Reproducible only so: one process (``-j 1``: marshal's output depends on what the process
    compiled before), ``-B`` (else the modules compileall imports get a timestamped ``.pyc``
    that it then keeps), ``-f``, and a fixed ``PYTHONHASHSEED``."""
    loader = python_root / "lib64/ld-linux-x86-64.so.2"
    libs = f"{python_root}/lib/x86_64-linux-gnu:{python_root}/usr/lib/x86_64-linux-gnu"
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
    components: list[dict[str, Any]] = [
        {
            "type": "library" if not d.name.startswith("python3") else "application",
            "bom-ref": f"deb:{d.name}",
            "name": d.name,
            "version": d.version,
            "purl": f"pkg:deb/debian/{d.name}@{d.version}?arch={d.arch}&distro={suite.split()[0]}",
            "hashes": [{"alg": "SHA-256", "content": d.sha256}],
            "properties": [{"name": "lws-gatekeeper:source", "value": "debian"}],
        }
        for d in debs
    ]
    for wheel in sorted(wheels, key=lambda p: p.name.lower()):
        name, ver = wheel.name.split("-")[:2]
        components.append(
            {
                "type": "library",
                "bom-ref": f"pypi:{name.lower()}",
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
    """A finished image: its OCI layout, tag, manifest digest, SBOM and size."""

    layout: Path
    tag: str
    digest: str
    sbom: Path
    seconds: float
    cached: bool

    @property
    def size(self) -> int:
        """Bytes of its blobs (compressed layers, config, manifest): what a registry stores."""
        return sum(p.stat().st_size for p in (self.layout / "blobs").rglob("*") if p.is_file())

    @property
    def unpacked_size(self) -> int:
        """Bytes of its layers unpacked (tar streams), as a node stores it."""
        import gzip

        manifest = json.loads((self.layout / "blobs/sha256" / self.digest.split(":")[1]).read_text())
        return sum(
            len(gzip.decompress((self.layout / "blobs/sha256" / d["digest"].split(":")[1]).read_bytes()))
            for d in manifest["layers"]
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


def build(
    source: Path, *, say: Callable[[str], None] = print, fresh: bool = False, out: Path | None = None
) -> Built:
    """Build the image of the project at ``source`` (or find it in the cache); see the module doc.

    ``fresh`` builds again even on a cache hit (the result must be the same digest).
    ``out`` names the layout folder; by default it lives in the cache, keyed by the inputs.
    """
    started = time.monotonic()
    files = _source_files(source)
    epoch = source_epoch(source)
    version = _version(source)
    key = _key(source, files, epoch)
    dest = out or cache_dir() / "images" / key
    layout, sbom_file, done = dest / "oci", dest / "sbom.cdx.json", dest / "digest"
    if done.exists() and not fresh:
        built_key, _, digest = done.read_text().strip().partition(" ")
        if built_key == key:  # an --out folder may hold the image of other inputs
            return Built(layout, version, digest, sbom_file, time.monotonic() - started, True)
    debs = debian.read_lock()
    debian.fetch(debs, cache_dir() / "debs", say)
    wheel_cache = cache_dir() / "wheels"
    _fetch_wheels(wheel_cache, say)
    with tempfile.TemporaryDirectory(prefix="lws-gatekeeper-image-") as tmp:
        t = Path(tmp)
        base, deps, app = t / "debian", t / "deps", t / "app"
        say(f"unpacking {len(debs)} Debian packages")
        debian.unpack_into(debs, cache_dir() / "debs", base)
        wheels = sorted(wheel_cache / line.split("/")[-1] for line in _wheel_files(wheel_cache))
        say(f"installing {len(wheels)} wheels and the project's wheel")
        _install(wheels, deps)
        own = _project_wheel(source, files, t / "wheel", epoch)
        _install([own], app)
        _entry_point(app)
        for tree in (base / "usr/lib/python3.11", deps, app):
            _compile(base, tree)
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
        layers = [
            oci.Layer(base, f"Debian {debian.suite()}: {len(debs)} packages of debian.lock",
                      owners={"home/nonroot": (USER_ID, USER_ID)}),
            oci.Layer(deps, f"{len(wheels)} wheels of requirements.lock"),
            oci.Layer(app, f"lws-gatekeeper {version}"),
        ]  # fmt: skip
        say("writing the OCI layout")
        digest = oci.write_layout(layout, layers, image, version)
        sbom = _sbom(debs, [*wheels, own], debian.suite(), version, epoch)
    sbom_file.write_text(json.dumps(sbom, indent=2, sort_keys=True) + "\n")
    done.write_text(f"{key} {digest}\n")
    if out is None:
        _prune(dest.parent, keep=dest)
    return Built(layout, version, digest, sbom_file, time.monotonic() - started, False)


#: Images kept in the cache (each source change makes a new one).
KEEP_IMAGES = 3


def _prune(images: Path, keep: Path) -> None:
    """Remove all but the newest KEEP_IMAGES cached images (never ``keep``, the one just built)."""
    others = sorted((p for p in images.iterdir() if p != keep), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[KEEP_IMAGES - 1 :]:
        shutil.rmtree(old, ignore_errors=True)


def _wheel_files(wheel_cache: Path) -> list[str]:
    """The wheel files of requirements.lock (the cache may hold older ones)."""
    names = []
    for line in (_here() / "requirements.lock").read_text().splitlines():
        if line.startswith("# file: "):
            names.append(line.removeprefix("# file: ").strip())
    missing = [n for n in names if not (wheel_cache / n).is_file()]
    if missing:
        raise RuntimeError(f"wheels of requirements.lock not downloaded: {missing}")
    return names


# ---- the lock files -----------------------------------------------------------------------


def lock(source: Path, say: Callable[[str], None] = print) -> None:
    """Pin what the registries serve now: ``debian.lock`` (the closure of DEBIAN_ROOTS at the
    candidate versions of the machine's apt sources) and ``requirements.lock`` (the project's
    run-time dependencies resolved for the image's Python, with hashes)."""
    here = _here()
    debs = debian.closure()
    header = (
        "# Debian packages of the image: name, version, architecture, SHA-256 of the .deb\n"
        f"# ({debian.suite()}).\n"
        "# Written by `lws-gatekeeper image lock`; fetched from the machine's apt sources.\n"
    )
    (here / "debian.lock").write_text(
        header + "".join(f"{d.name} {d.version} {d.arch} {d.sha256}\n" for d in debs)
    )
    say(f"debian.lock: {len(debs)} packages")
    import tomllib

    deps = tomllib.loads((source / "pyproject.toml").read_text())["project"]["dependencies"]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        _pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report), *PLATFORM_ARGS,
             "--target", str(Path(tmp) / "t"), *deps)  # fmt: skip
        items = json.loads(report.read_text())["install"]
    lines = [
        "# The image's Python dependencies: exact versions and wheel hashes\n",
        "# (CPython 3.11, manylinux x86_64).\n",
        "# Written by `lws-gatekeeper image lock` from pyproject.toml's dependencies.\n",
    ]
    for item in sorted(items, key=lambda i: i["metadata"]["name"].lower()):
        meta, info = item["metadata"], item["download_info"]
        sha = info["archive_info"]["hashes"]["sha256"]
        lines.append(f"# file: {info['url'].rsplit('/', 1)[1]}\n")
        lines.append(f"{meta['name']}=={meta['version']} --hash=sha256:{sha}\n")
    (here / "requirements.lock").write_text("".join(lines))
    say(f"requirements.lock: {len(items)} wheels")

"""Build the sandbox's Kubernetes components from pinned Go module versions.

Why this exists: our machines run no containers and download no release binaries,
so etcd, the Kubernetes control plane, KWOK and the LWS controller are compiled from
the Go module proxy. Each component is built once per pin (``pins.toml``) into a cache
folder outside the repository and reused until its pin changes.

Kubernetes cannot be built with ``go install k8s.io/kubernetes/cmd/...@v1.x``: its
go.mod replaces its own staging modules (``k8s.io/api``, ``k8s.io/client-go``, ...)
with local paths. So every component is built inside a small throwaway module that
requires the pinned module and turns each such local ``replace`` into the published
version of the same module. The go tool reads and writes every go.mod here
(``go mod edit``); we parse none by hand.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "BuildError",
    "Component",
    "Installed",
    "build_all",
    "cache_root",
    "link_bins",
    "load_pins",
]


class BuildError(RuntimeError):
    """A component could not be built. Not worth retrying unless the cause is the network."""


@dataclass(frozen=True)
class Component:
    """One pinned Go module and the programs built from it."""

    name: str
    module: str
    version: str
    packages: tuple[str, ...]
    output: str | None = None
    staging: str | None = None
    ldflags: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()

    def key(self, go_version: str) -> str:
        """Cache key: changes when anything that shapes the output changes.

        ``tags`` is left out when empty, so the components that have none keep the keys
        they had before build tags could be pinned (their cache entries stay valid).
        """
        shape = {k: v for k, v in self.__dict__.items() if k != "tags" or v}
        blob = json.dumps([shape, go_version, _RECIPE_VERSION], sort_keys=True, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


@dataclass
class Installed:
    """Where a built component lives: ``bin/`` holds programs, ``files/`` module files."""

    component: Component
    root: Path
    built_now: bool = False
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def files(self) -> Path:
        return self.root / "files"


def _say(msg: str) -> None:
    print(msg, flush=True)


# Bump when the way we build changes, so old cache entries are not reused.
_RECIPE_VERSION = 1


def load_pins(text: str | None = None) -> dict[str, Component]:
    """Read ``pins.toml`` (or the given text) into components, in file order."""
    if text is None:
        text = resources.files("gatekeeper_lab.sandbox").joinpath("pins.toml").read_text()
    data = tomllib.loads(text)
    out: dict[str, Component] = {}
    for name, raw in data["components"].items():
        out[name] = Component(
            name=name,
            module=raw["module"],
            version=raw["version"],
            packages=tuple(raw.get("packages", ())),
            output=raw.get("output"),
            staging=raw.get("staging"),
            ldflags=tuple(raw.get("ldflags", ())),
            files=tuple(raw.get("files", ())),
            tags=tuple(raw.get("tags", ())),
        )
    return out


def cache_root() -> Path:
    """The cache folder: ``$LWS_GATEKEEPER_CACHE``, else ``$XDG_CACHE_HOME/lws-gatekeeper``."""
    env = os.environ.get("LWS_GATEKEEPER_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "lws-gatekeeper"


def go_env(root: Path) -> dict[str, str]:
    """Environment for every go command: our own module and build caches, no toolchain downloads."""
    env = dict(os.environ)
    env.update(
        GOTOOLCHAIN="local",
        GOMODCACHE=str(root / "go" / "mod"),
        GOCACHE=str(root / "go" / "build"),
        GOFLAGS="-mod=mod",
        CGO_ENABLED="0",
        GOWORK="off",
    )
    return env


def _go(args: list[str], cwd: Path, env: Mapping[str, str], log: Path | None = None) -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError("the 'go' command is not on PATH; install Go 1.26 or newer")
    if log is None:
        res = subprocess.run([go, *args], cwd=cwd, env=dict(env), capture_output=True, text=True)
        if res.returncode != 0:
            raise BuildError(f"go {' '.join(args)} failed:\n{res.stderr.strip()[-4000:]}")
        return res.stdout
    with log.open("a") as fh:
        fh.write(f"$ go {' '.join(args)}\n")
        fh.flush()
        code = subprocess.run(
            [go, *args], cwd=cwd, env=dict(env), stdout=fh, stderr=subprocess.STDOUT
        ).returncode
    if code != 0:
        tail = "\n".join(log.read_text().splitlines()[-30:])
        raise BuildError(f"go {' '.join(args)} failed (full log: {log}):\n{tail}")
    return ""


def go_version() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError("the 'go' command is not on PATH; install Go 1.26 or newer")
    return subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()


def _stamp(template: str, comp: Component, info: Mapping[str, Any]) -> str:
    parts = comp.version.lstrip("v").split(".")
    commit = str(info.get("Origin", {}).get("Hash", "")) or "unknown"
    date = str(info.get("Time", "")) or "unknown"
    return template.format(version=comp.version, major=parts[0], minor=parts[1], commit=commit, date=date)


def _prepare_module(comp: Component, work: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """Write the throwaway module that builds ``comp``; return the proxy's record of the tag."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    dl = json.loads(_go(["mod", "download", "-json", f"{comp.module}@{comp.version}"], work, env))
    if dl.get("Error"):
        raise BuildError(f"{comp.module}@{comp.version} cannot be downloaded: {dl['Error']}")
    upstream = json.loads(_go(["mod", "edit", "-json", dl["GoMod"]], work, env))
    info = json.loads(Path(dl["Info"]).read_text())

    _go(["mod", "init", f"lws-gatekeeper.sandbox/build/{comp.name}"], work, env)
    edits = [f"-require={comp.module}@{comp.version}"]
    if upstream.get("Go"):
        edits.append(f"-go={upstream['Go']}")
    for gd in upstream.get("Godebug") or []:
        edits.append(f"-godebug={gd['Key']}={gd['Value']}")
    for rep in upstream.get("Replace") or []:
        old, new = rep["Old"], rep["New"]
        if new["Path"].startswith("."):
            # A local replace of a sub-module: use its published version instead.
            if comp.staging:
                edits.append(f"-replace={old['Path']}={old['Path']}@{comp.staging}")
            continue
        lhs = old["Path"] + (f"@{old['Version']}" if old.get("Version") else "")
        edits.append(f"-replace={lhs}={new['Path']}@{new['Version']}")
    _go(["mod", "edit", *edits], work, env)
    return {"dir": dl["Dir"], "info": info}


def build_component(comp: Component, root: Path, gover: str, say: Callable[[str], None] = _say) -> Installed:
    """Build one component unless the cache already holds it for this pin."""
    dest = root / "components" / f"{comp.name}-{comp.version}-{comp.key(gover)}"
    if (dest / ".complete").exists():
        return Installed(comp, dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Two commands building the same pin at once (a test run and a demo) wait for each
    # other instead of sharing the work folders.
    with (dest.parent / f".{comp.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (dest / ".complete").exists():
            return Installed(comp, dest)
        return _build_locked(comp, root, dest, gover, say)


def _build_locked(
    comp: Component, root: Path, dest: Path, gover: str, say: Callable[[str], None]
) -> Installed:
    env = go_env(root)
    work = root / "work" / comp.name
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"build-{comp.name}.log"
    log.write_text("")
    if dest.exists():
        shutil.rmtree(dest)
    staging_dir = dest.with_name(dest.name + ".partial")
    if staging_dir.exists():
        shutil.rmtree(staging_dir)
    (staging_dir / "bin").mkdir(parents=True)

    start = time.monotonic()
    done = threading.Event()

    def ticker() -> None:
        while not done.wait(15):
            say(f"  ... {comp.name} {comp.version}: {time.monotonic() - start:.0f}s")

    say(f"building {comp.name} {comp.version} ({', '.join(p.rsplit('/', 1)[-1] for p in comp.packages)})")
    thread = threading.Thread(target=ticker, daemon=True)
    thread.start()
    try:
        prep = _prepare_module(comp, work, env)
        flags = ["-s", "-w"] + [f"-X={_stamp(f, comp, prep['info'])}" for f in comp.ldflags]
        out = str(staging_dir / "bin" / comp.output) if comp.output else str(staging_dir / "bin") + "/"
        if comp.packages:  # a component may bring only files (CRDs), nothing to build
            tags = [f"-tags={','.join(comp.tags)}"] if comp.tags else []
            build_args = ["build", "-trimpath", *tags, f"-ldflags={' '.join(flags)}", "-o", out]
            build_args += comp.packages
            _go(build_args, work, env, log)
        for rel in comp.files:
            src = Path(prep["dir"]) / rel
            if not src.is_dir():
                raise BuildError(f"{comp.module}@{comp.version} has no folder {rel}")
            shutil.copytree(src, staging_dir / "files" / rel)
            # The module cache is read-only; our copy need not be.
            for p in (staging_dir / "files" / rel).rglob("*"):
                p.chmod(0o755 if p.is_dir() else 0o644)
    finally:
        done.set()
        thread.join()
    seconds = time.monotonic() - start
    (staging_dir / ".complete").write_text(json.dumps({"seconds": round(seconds, 1), "go": gover}))
    staging_dir.rename(dest)
    shutil.rmtree(work, ignore_errors=True)
    say(f"built {comp.name} {comp.version} in {seconds:.0f}s")
    return Installed(comp, dest, built_now=True, seconds=seconds)


def build_all(names: list[str] | None = None, say: Callable[[str], None] = _say) -> dict[str, Installed]:
    """Build (or find in the cache) the named components, all by default."""
    pins = load_pins()
    root = cache_root()
    gover = go_version()
    wanted = names or list(pins)
    unknown = [n for n in wanted if n not in pins]
    if unknown:
        raise BuildError(f"unknown component(s) {unknown}; pins.toml has {list(pins)}")
    return {n: build_component(pins[n], root, gover, say) for n in wanted}


def _main() -> int:
    start = time.monotonic()
    built = build_all(sys.argv[1:] or None)
    fresh = [i for i in built.values() if i.built_now]
    print(f"{len(built)} component(s) ready, {len(fresh)} built now, in {time.monotonic() - start:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())


def link_bins(bin_dir: Path, installed: Mapping[str, Installed]) -> None:
    """Link every program of ``installed`` into a sandbox's (or hub's) ``bin_dir``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for inst in installed.values():
        for prog in inst.bin.iterdir():
            link = bin_dir / prog.name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(prog)

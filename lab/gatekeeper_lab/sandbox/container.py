"""Run one program from an unpacked image root file system, as a container runtime would, without one.

Why this exists: the chart runs the gatekeeper from its image as user 65532 with a
read-only root file system, a tmpfs where the pod mounts an emptyDir, its ServiceAccount
token at /var/run/secrets/kubernetes.io/serviceaccount and no capabilities. No container
engine runs on the development machines and in CI (podman and crun fail there, see
docs/decisions/image-test-without-a-container-engine.md), so this does what a runtime does
with Linux's own means: a user and a mount namespace (no privilege needed),
the root file system bound read-only, the pod's mounts, ``pivot_root``, the chart's user
and group, no capability, ``no_new_privs``, then ``execve`` of the program with only the
environment given. The network is the host's (the sandbox's API server calls the webhook
on loopback). ``gatekeeper.py`` writes a :class:`Spec` and starts
``python -m gatekeeper_lab.sandbox.container SPEC.json`` as a sandbox process.

The launcher forks: the parent (outside) writes the child's uid and gid maps (inside
65532 is host 65532 when run as root, else the caller's own id), passes signals on and
exits with the program's status; the child sets the mounts up and execs.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["Bind", "Spec", "main"]

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_SET_DUMPABLE = 38, 24, 4
SYS_PIVOT_ROOT = 155  # x86_64


@dataclass(frozen=True)
class Bind:
    """A host path bound at ``target`` inside (a Secret or projected volume of the pod)."""

    source: str
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class Spec:
    """What to run: the program's argv (the pod's command and args, ``$(VAR)`` already expanded),
    its whole environment, its user, and the file system around it."""

    rootfs: str
    argv: list[str]
    env: dict[str, str]
    uid: int
    gid: int
    workdir: str = "/"
    read_only: bool = True
    tmpfs: list[str] = field(default_factory=list)
    binds: list[Bind] = field(default_factory=list)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2))

    @staticmethod
    def read(path: Path) -> Spec:
        data = json.loads(path.read_text())
        data["binds"] = [Bind(**b) for b in data["binds"]]
        return Spec(**data)


_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = [None if v is None else v.encode() for v in (source, target, fstype, data)]
    _check(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


def _locked_flags(path: str) -> int:
    """The flags of the mount ``path`` is on that a remount in a user namespace must keep."""
    st = os.statvfs(path)
    return (
        (MS_NOSUID if st.f_flag & os.ST_NOSUID else 0)
        | (MS_NODEV if st.f_flag & os.ST_NODEV else 0)
        | (MS_NOEXEC if st.f_flag & os.ST_NOEXEC else 0)
    )


def mount_points(spec: Spec) -> None:
    """Make the folders and files the mounts go on, in the unpacked root file system (as a runtime
    makes them in the container's own layer before it turns read-only)."""
    root = Path(spec.rootfs)
    for target in [*spec.tmpfs, *(b.target for b in spec.binds), "/proc", "/dev"]:
        path = root / target.lstrip("/")
        source = next((b.source for b in spec.binds if b.target == target), None)
        if source is not None and Path(source).is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(exist_ok=True)
        else:
            path.mkdir(parents=True, exist_ok=True)


def _child(spec: Spec, ready_r: int) -> None:
    """In the new namespaces (maps written by the parent): mounts, pivot_root, user, exec."""
    os.read(ready_r, 1)
    root = spec.rootfs
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount(root, root, None, MS_BIND | MS_REC)
    if spec.read_only:
        _mount(None, root, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _locked_flags(root))
    for target in spec.tmpfs:
        _mount("tmpfs", root + target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for b in spec.binds:
        where = root + b.target
        _mount(b.source, where, None, MS_BIND)
        if b.read_only:
            _mount(None, where, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _locked_flags(where))
    _mount("/proc", root + "/proc", None, MS_BIND | MS_REC)
    _mount("/dev", root + "/dev", None, MS_BIND | MS_REC)
    os.chdir(root)
    _check(_libc.syscall(SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "umount the old root")
    os.chdir("/")
    for cap in range(64):  # the bounding set: nothing can be gained back
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break
    if _may_setgroups():
        os.setgroups([spec.gid])
    os.setresgid(spec.gid, spec.gid, spec.gid)
    os.setresuid(spec.uid, spec.uid, spec.uid)  # drops every capability at exec
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    os.chdir(spec.workdir)
    program = spec.argv[0]
    if "/" not in program:
        dirs = spec.env.get("PATH", "/usr/bin:/bin").split(":")
        program = next((f"{d}/{program}" for d in dirs if os.access(f"{d}/{program}", os.X_OK)), program)
    os.execve(program, spec.argv, spec.env)


def _may_setgroups() -> bool:
    try:
        return Path("/proc/self/setgroups").read_text().strip() == "allow"
    except OSError:
        return False


def run(spec: Spec) -> int:
    """Run ``spec`` and return its exit status (128 + signal when killed)."""
    mount_points(spec)
    outside_uid, outside_gid = (spec.uid, spec.gid) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    ready_r, ready_w = os.pipe()
    unshared_r, unshared_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_w)
            os.close(unshared_r)
            _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
            _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare")
            os.write(unshared_w, b"u")
            _child(spec, ready_r)
        except BaseException as exc:  # the child must never return into the parent's code
            print(f"container: {exc}", file=sys.stderr, flush=True)
        os._exit(127)
    os.close(ready_r)
    os.close(unshared_w)
    if os.read(unshared_r, 1) != b"u":
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)
    if os.geteuid() != 0:
        Path(f"/proc/{pid}/setgroups").write_text("deny")
    Path(f"/proc/{pid}/uid_map").write_text(f"{spec.uid} {outside_uid} 1\n")
    Path(f"/proc/{pid}/gid_map").write_text(f"{spec.gid} {outside_gid} 1\n")
    os.write(ready_w, b"m")
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: os.kill(pid, s))
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print("usage: python -m gatekeeper_lab.sandbox.container SPEC.json", file=sys.stderr)
        return 2
    return run(Spec.read(Path(args[0])))


if __name__ == "__main__":
    sys.exit(main())

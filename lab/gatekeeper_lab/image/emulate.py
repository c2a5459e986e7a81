"""Run a program of the image built for another architecture, under Debian's user-mode emulator.

Why this exists: the image is an index of an amd64 and an arm64 image (``build.py``), and a
machine of one architecture must still prove that the other one runs, not assume it. Debian's
``qemu-user-static`` (pinned in ``emulator.lock``, fetched like the image's own packages)
executes a program of the other architecture instruction by instruction. It is copied into
the unpacked image and the program is started through it inside the image's root
(``chroot``, as the chart's user): every path the program opens is the image's own, so its
interpreter, libraries, bytecode and the gatekeeper run as they would on a node of that
architecture. No ``binfmt_misc`` registration is needed (nor changed on the machine).

Called by ``tests/e2e/test_image.py``. Needs root (``chroot``), as the sandbox does.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from gatekeeper_lab.image import debian
from gatekeeper_lab.image.build import MACHINE, cache_dir

__all__ = ["emulator", "run_emulated"]

#: Where the emulator is put inside the unpacked image.
IN_ROOT = "/.emulator"


def emulator(arch: str, say: Callable[[str], None] = print) -> Path:
    """Debian's emulator of ``arch`` for this machine, fetched once (checked against
    ``emulator.lock``) and kept in the image cache."""
    lock = Path(__file__).with_name("emulator.lock")
    (deb,) = debian.read_lock(debian.host_arch(), lock)
    binary = f"qemu-{MACHINE[arch]}-static"
    out = cache_dir() / "emulator" / deb.version.replace(":", "_") / binary
    if out.is_file():
        return out
    debs = cache_dir() / "debs"
    debian.fetch([deb], debs, say)
    out.parent.mkdir(parents=True, exist_ok=True)
    with subprocess.Popen(
        ["dpkg-deb", "--fsys-tarfile", str(debs / deb.file)], stdout=subprocess.PIPE
    ) as tar:
        debian.run(
            ["tar", "-x", "-C", str(out.parent), "--strip-components=3", f"./usr/bin/{binary}"],
            stdin=tar.stdout,
        )
    if not out.is_file():
        raise RuntimeError(f"{deb.file} holds no usr/bin/{binary}")
    return out


def run_emulated(
    rootfs: Path, arch: str, argv: Sequence[str], *, user: int = debian.USER_ID, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (its first item an ELF program of ``arch`` in ``rootfs``) inside ``rootfs``
    as ``user``, through the emulator."""
    inside = rootfs / IN_ROOT.lstrip("/")
    shutil.copy2(emulator(arch), inside)
    chroot = shutil.which("chroot") or "/usr/sbin/chroot"
    return subprocess.run(
        [chroot, f"--userspec={user}:{user}", str(rootfs), IN_ROOT, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/home/nonroot"},
    )

"""The sandbox's background processes: ports, start, wait, the one ready probe, stop.

Why this exists: every component of the sandbox (``etcd.py``, ``control_plane.py``,
``kwok.py``, ``lws.py``, ``kueue.py``, ``gatekeeper.py``) is a program started in the
background that must outlive the command that started it, log to its own file, be
recorded in ``state.json`` so ``down`` can stop exactly it, and be waited for until it
answers. This module does that once for all of them; ``cluster.py`` builds the
:class:`Runner` of a sandbox folder and hands it to the components. It knows nothing of
Kubernetes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_LOG_BYTES",
    "Runner",
    "SandboxError",
    "alive",
    "free_ports",
    "ours",
    "pause",
    "ready",
    "resume",
    "stop",
    "stop_all",
]


class SandboxError(RuntimeError):
    """The sandbox could not start or stop. The message names the component and shows its log."""


PORT_FLOOR = 10000
"""The lowest port a sandbox listens on."""

_PORTS_FILE = Path(tempfile.gettempdir()) / "lws-gatekeeper-ports"
"""The next port to hand out, shared by every process of this machine (under a file lock)."""


def _ephemeral_floor() -> int:
    """The lowest port of the kernel's ephemeral range (outgoing connections take theirs there)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return 32768


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback TCP ports free at this moment.

    Taken below the kernel's ephemeral range: a port found free there can be taken by any
    outgoing connection (the sandbox's own clients make many) before its server binds it
    ("address already in use"). Handed out in turn from a counter that every process of
    the machine shares under a file lock, so two sandboxes that start at once (two test
    workers) never pick the same port; a port that is not free now is skipped."""
    top = max(_ephemeral_floor(), PORT_FLOOR + 1000)
    span = top - PORT_FLOOR
    ports: list[int] = []
    with open(_PORTS_FILE, "a+", encoding="ascii") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        text = f.read().strip()
        nxt = int(text) if text.isdigit() else PORT_FLOOR + os.getpid() % span
        for _ in range(span):
            port = PORT_FLOOR + (nxt - PORT_FLOOR) % span
            nxt = port + 1
            if _bindable(port):
                ports.append(port)
                if len(ports) == n:
                    break
        f.seek(0)
        f.truncate()
        f.write(str(nxt))
    if len(ports) < n:
        raise SandboxError(f"fewer than {n} free loopback ports between {PORT_FLOOR} and {top}")
    return ports


def alive(pid: int) -> bool:
    """Does process ``pid`` exist (and is not a zombie)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); look at its state. The leader of a thread group turns
    # zombie before its other threads are torn down, and until they are the process still
    # holds its files and ports (seen: a SIGKILLed kube-apiserver's port still bound when it
    # was started again): it is gone once it is a zombie with no other thread.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return len(os.listdir(f"/proc/{pid}/task")) > 1
    return True


def ours(info: Mapping[str, Any]) -> bool:
    """Is the recorded process still the one we started (same program), not a reused pid?"""
    try:
        cmdline = Path(f"/proc/{int(info['pid'])}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    argv = [str(a) for a in info.get("argv") or []]
    # A launcher may exec the program it was given (``unshare ... sh -c ... exec kueue``):
    # the process is ours when its program is one of the words we started it with.
    return not argv or (bool(cmdline) and cmdline[0].decode(errors="replace") in argv)


def ready(
    url: str, *, context: ssl.SSLContext | None = None, timeout: float = 1, body: bytes | None = None
) -> bool:
    """The ready probe of every component: does ``url`` answer 200 (with ``body`` in it, if given)?

    Any connection error, refusal or error status is "not ready"; ``context`` is for HTTPS.
    """
    try:
        with urllib.request.urlopen(url, context=context, timeout=timeout) as resp:
            return bool(resp.status == 200) and (body is None or body in resp.read())
    except OSError:
        return False


MAX_LOG_BYTES = 32 * 1024 * 1024
"""A log longer than this at a fresh start is kept as ``<name>.1`` and begun again."""


@dataclass(frozen=True)
class Runner:
    """How one sandbox runs its processes: where they run, log and are recorded.

    Each runs in the sandbox folder ``dir`` with its kubeconfig and programs in the
    environment, logs to ``log_dir/<name>.log`` and is recorded in ``state_file``. The
    state is a plain dict (``ports``, ``processes``, ...) the caller keeps; ``start``
    records into it and saves it.
    """

    dir: Path
    log_dir: Path
    bin_dir: Path
    kubeconfig: Path
    state_file: Path

    @property
    def run_dir(self) -> Path:
        """Scratch files of the processes (their configurations); ``down`` removes it."""
        return self.dir / "run"

    def env(self) -> dict[str, str]:
        """Environment for a program driving the sandbox: its kubeconfig, its kubectl first on PATH."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def program(self, name: str) -> str:
        """Path of one of the sandbox's programs (linked into ``bin_dir``)."""
        return str(self.bin_dir / name)

    def load(self) -> dict[str, Any]:
        """The recorded state, empty when nothing is recorded."""
        if not self.state_file.exists():
            return {}
        data: dict[str, Any] = json.loads(self.state_file.read_text())
        return data

    def save(self, state: dict[str, Any]) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)

    def rotate_logs(self, max_bytes: int = MAX_LOG_BYTES) -> list[str]:
        """At a fresh start: each log (the API server's audit log too) over ``max_bytes`` is
        moved to ``<name>.1`` (the one before it is dropped), so a kept sandbox's logs stay
        bounded across starts while the last run's stay readable. Returns the names moved."""
        moved = []
        for log in sorted(self.log_dir.glob("*.log")):
            if log.stat().st_size > max_bytes:
                log.replace(log.with_name(log.name + ".1"))
                moved.append(log.name)
        return moved

    def start(self, state: dict[str, Any], name: str, argv: list[str]) -> None:
        """Start ``argv`` in its own session as component ``name``; record and save it in ``state``."""
        log = self.log_dir / f"{name}.log"
        with log.open("ab") as fh:
            fh.write(f"\n==== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv)}\n".encode())
            fh.flush()
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.dir,
                env=self.env(),
            )
        state["processes"][name] = {"pid": proc.pid, "log": str(log), "argv": argv}
        self.save(state)
        time.sleep(0.2)
        if proc.poll() is not None:
            raise SandboxError(self.failure(name, f"exited at once with code {proc.returncode}"))

    def restart(self, state: dict[str, Any], name: str) -> None:
        """Start recorded component ``name`` again with the very command it was started with
        (same ports, same data), keeping what else was recorded of it."""
        info = dict(state["processes"][name])
        self.start(state, name, [str(a) for a in info["argv"]])
        state["processes"][name] = {**info, **state["processes"][name]}
        self.save(state)

    def failure(self, name: str, what: str) -> str:
        """A message naming the component, what went wrong and the last lines of its log."""
        log = self.log_dir / f"{name}.log"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:]) if log.exists() else ""
        return f"{name} {what}. Last lines of {log}:\n{tail}"

    def wait(self, name: str, ok: Callable[[], bool], *, timeout: float, what: str) -> None:
        """Poll ``ok`` until it holds; fail early if component ``name`` dies, or after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ok():
                return
            pid = self.load()["processes"].get(name, {}).get("pid")
            if pid and not alive(int(pid)):
                raise SandboxError(self.failure(name, f"died while waiting for {what}"))
            time.sleep(0.25)
        raise SandboxError(self.failure(name, f"did not get ready in {timeout:.0f}s (waiting for {what})"))


def pause(pid: int) -> None:
    """SIGSTOP one process group: it keeps its sockets and state and does nothing (a hang)."""
    os.killpg(pid, signal.SIGSTOP)


def resume(pid: int) -> None:
    """SIGCONT a paused process group."""
    os.killpg(pid, signal.SIGCONT)


def stop(pid: int, *, kill: bool = False) -> None:
    """Stop one process group (SIGTERM, or SIGKILL to simulate a crash); SIGKILL after 15 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL if kill else signal.SIGTERM)
    end = time.monotonic() + 15
    while alive(pid) and time.monotonic() < end:
        time.sleep(0.05)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def stop_all(procs: Mapping[str, Mapping[str, Any]]) -> None:
    """Stop recorded processes, last started first: SIGTERM to all, SIGKILL after 15 s.

    Raises when one is still alive 5 s after its SIGKILL.
    """
    order = list(reversed(list(procs)))
    for name in order:
        pid = int(procs[name]["pid"])
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for name in order:
        pid = int(procs[name]["pid"])
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    for name in order:
        pid = int(procs[name]["pid"])
        end = time.monotonic() + 5
        while alive(pid) and time.monotonic() < end:
            time.sleep(0.1)
        if alive(pid):
            raise SandboxError(f"{name} (pid {pid}) did not stop")

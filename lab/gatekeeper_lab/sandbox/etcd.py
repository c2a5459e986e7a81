"""etcd in the sandbox: one member on loopback, its data in the sandbox folder.

Why this exists: the API server needs its store running and healthy first. ``cluster.py``
calls :func:`start` at the beginning of ``up``; ``down`` removes :data:`DATA_DIR`.
"""

from __future__ import annotations

from typing import Any

from gatekeeper_lab.sandbox.process import Runner, ready

__all__ = ["COMPONENT", "DATA_DIR", "PORTS", "start"]

#: The process name in the sandbox's state and logs.
COMPONENT = "etcd"

#: The ports etcd listens on, by their names in the state's ``ports``.
PORTS = ("etcd", "etcd_peer")

#: etcd's data folder, inside the sandbox folder (removed by ``down``).
DATA_DIR = "etcd"


def start(runner: Runner, state: dict[str, Any]) -> None:
    """Run etcd on the state's ports and wait until ``/health`` says so (no fsync: data is scratch)."""
    p = state["ports"]
    runner.start(
        state,
        COMPONENT,
        [
            runner.program("etcd"),
            "--name=sandbox",
            f"--data-dir={runner.dir / DATA_DIR}",
            f"--listen-client-urls=http://127.0.0.1:{p['etcd']}",
            f"--advertise-client-urls=http://127.0.0.1:{p['etcd']}",
            f"--listen-peer-urls=http://127.0.0.1:{p['etcd_peer']}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{p['etcd_peer']}",
            f"--initial-cluster=sandbox=http://127.0.0.1:{p['etcd_peer']}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ],
    )
    health = f"http://127.0.0.1:{p['etcd']}/health"
    runner.wait(COMPONENT, lambda: ready(health, body=b'"health":"true"'), timeout=30, what="/health")

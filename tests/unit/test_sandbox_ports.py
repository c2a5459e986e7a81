"""The sandbox's ports: below the kernel's ephemeral range, and never the same for two
processes that ask at once (two test workers starting their sandboxes).

A port picked free inside the ephemeral range was in use by the time its server bound it
(kube-controller-manager: "bind: address already in use"), and a whole worker's sandbox
failed with it: there, any outgoing connection, or the other worker's pick, may take it."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from gatekeeper_lab.sandbox import process


def _take(n: int, into: multiprocessing.Queue[list[int]]) -> None:
    into.put(process.free_ports(n))


@pytest.fixture
def ports_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ports"
    monkeypatch.setattr(process, "_PORTS_FILE", path)
    return path


def test_ports_are_below_the_ephemeral_range(ports_file: Path) -> None:
    ports = process.free_ports(20)
    assert len(set(ports)) == 20
    assert all(process.PORT_FLOOR <= p < process._ephemeral_floor() for p in ports)


def test_two_processes_asking_at_once_get_different_ports(ports_file: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[list[int]] = ctx.Queue()
    workers = [ctx.Process(target=_take, args=(30, queue)) for _ in range(4)]
    for w in workers:
        w.start()
    got = [queue.get(timeout=30) for _ in workers]
    for w in workers:
        w.join(timeout=30)
    every = [p for ports in got for p in ports]
    assert len(every) == 120 and len(set(every)) == 120, "two processes were given the same port"


def test_a_port_in_use_is_skipped(ports_file: Path) -> None:
    import socket

    first = process.free_ports(1)[0]
    ports_file.write_text(str(first))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", first))
        busy.listen()
        assert first not in process.free_ports(3)

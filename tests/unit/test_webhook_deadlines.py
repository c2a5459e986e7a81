"""The webhook's connection deadlines: a client that connects and waits holds nothing for long.

Each case opens a real TLS connection to the served webhook (its deadlines shortened) and
does one slow thing: no TLS handshake, no request after it, a request head and no body.
The server must close it (or answer 408) on its deadline, and a normal review must still be
answered meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from gatekeeper.webhook import PODS_PATH, connections
from gatekeeper.webhook import server as webhook_server
from gatekeeper_lab.sandbox.pki import make_pki

DEADLINE = 0.5


def closed(why: str) -> float:
    return REGISTRY.get_sample_value("lws_gatekeeper_webhook_connections_closed_total", {"why": why}) or 0.0


def tls() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    return ctx


@pytest.fixture
async def port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[int]:
    monkeypatch.setattr(connections, "HANDSHAKE_SECONDS", DEADLINE)
    monkeypatch.setattr(connections, "READ_SECONDS", DEADLINE)
    monkeypatch.setattr(webhook_server, "READ_SECONDS", DEADLINE)
    pki = make_pki(tmp_path).webhook_dir
    runner = await webhook_server.start_webhook_server("127.0.0.1", 0, pki / "tls.crt", pki / "tls.key")
    try:
        yield int(runner.addresses[0][1])
    finally:
        await runner.cleanup()


async def until_closed(reader: asyncio.StreamReader) -> float:
    """Seconds until the server closes the connection (reads until EOF or a reset)."""
    start = time.monotonic()
    try:
        while await asyncio.wait_for(reader.read(4096), 10):
            pass
    except (ConnectionError, ssl.SSLError):
        pass
    return time.monotonic() - start


def review_bytes() -> bytes:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": {}}
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": str(uuid.uuid4()), "operation": "CREATE", "object": pod},
    }
    return json.dumps(body).encode()


async def review(port: int) -> int:
    """A whole, prompt review: the status of its answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls())
    body = review_bytes()
    head = f"POST {PODS_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    writer.write(f"{head}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    await writer.drain()
    status = int((await asyncio.wait_for(reader.readline(), 10)).split()[1])
    writer.close()
    return status


async def test_a_connection_that_never_shakes_hands_is_closed(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)  # plain TCP, no ClientHello
    took = await until_closed(reader)
    writer.close()
    assert took < DEADLINE + 2, f"held {took:.1f} s"


async def test_a_connection_that_sends_no_request_is_closed_and_others_are_served(port: int) -> None:
    before = closed("no_request")
    idle = [await asyncio.open_connection("127.0.0.1", port, ssl=tls()) for _ in range(20)]
    assert await review(port) == 200, "a review is answered while they wait"
    took = await asyncio.gather(*(until_closed(r) for r, _ in idle))
    for _, w in idle:
        w.close()
    assert max(took) < DEADLINE + 2, f"held up to {max(took):.1f} s"
    assert closed("no_request") >= before + 20


async def test_a_body_that_does_not_come_frees_its_review_slot_with_408(port: int) -> None:
    before = closed("slow_body")
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls())
    writer.write(f"POST {PODS_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{{".encode())
    await writer.drain()
    start = time.monotonic()
    status = await asyncio.wait_for(reader.readline(), 10)
    assert b" 408 " in status, status
    assert time.monotonic() - start < DEADLINE + 2
    assert closed("slow_body") == before + 1
    writer.close()
    assert await review(port) == 200

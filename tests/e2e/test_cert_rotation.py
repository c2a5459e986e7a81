"""The webhook's serving certificate rotated under load: no create fails, no restart needed.

Why this exists: opted-in pods are created only through the gatekeeper's webhook (it
fails closed), so a rotation that breaks TLS for a moment refuses pods for that moment.
With cert-manager the chart signs the serving certificate by a CA Issuer and gives the
API server that CA as the caBundle: a renewed certificate is then trusted before the
webhook serves it, and the webhook picks the new files up at a handshake. This test
does what cert-manager and the kubelet do to those files (a new key and a short-lived
certificate signed by the same CA, written over the served ones by rename), every
second, while pods are created in a loop through the real API server, and counts what
failed. A probe that trusts only the CA, as the API server does, checks every handshake;
that it fails on a certificate signed by another CA (the self-signed Issuer's flaw) is
shown first, so a clean count is not a blind one. cert-manager itself is not run (its
controller's module is not served here); the chart's Issuer chain is checked by
``tests/unit/test_certs.py``.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import ssl
import threading
import time
from pathlib import Path

import anyio
import kr8s
import kr8s.asyncio
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from kr8s.asyncio.objects import Pod

from gatekeeper.controller import x509_build as x509util
from gatekeeper.core.kube.keys import POOL_LABEL, SCHEDULING_GATE
from gatekeeper.webhook.server import CERT_CHECK_SECONDS
from gatekeeper_lab.sandbox import gatekeeper as gk
from gatekeeper_lab.sandbox.cluster import Sandbox

from . import attack_table
from .conftest import Cluster
from .watch import Watch

CREATES = 120
LIFETIME = dt.timedelta(seconds=20)
"""Each rotated certificate's lifetime: short, so a webhook that kept an old one fails."""


def _sandbox(cluster: Cluster) -> Sandbox:
    assert cluster.sandbox is not None, "the rotation test writes the sandbox's webhook files"
    return cluster.sandbox


def _issue(ca_crt: bytes, ca_key: bytes, lifetime: dt.timedelta) -> tuple[bytes, bytes, int]:
    """(certificate PEM, key PEM, serial) of a new serving certificate for 127.0.0.1."""
    ca = x509.load_pem_x509_certificate(ca_crt)
    signer = serialization.load_pem_private_key(ca_key, password=None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    key = x509util.new_key()
    now = dt.datetime.now(dt.UTC)
    cert = x509util.leaf_certificate(
        ca,
        signer,
        key,
        x509util.name("sandbox-webhooks"),
        not_before=now - dt.timedelta(seconds=30),
        not_after=now + lifetime,
        server_names=["127.0.0.1", "localhost"],
    )
    return cert.public_bytes(serialization.Encoding.PEM), x509util.key_pem(key), cert.serial_number


def _another_ca() -> tuple[bytes, bytes]:
    key = x509util.new_key()
    now = dt.datetime.now(dt.UTC)
    cert = x509util.ca_certificate(
        key,
        x509util.name("not-the-bundle"),
        not_before=now - dt.timedelta(minutes=1),
        not_after=now + LIFETIME,
    )
    return cert.public_bytes(serialization.Encoding.PEM), x509util.key_pem(key)


def _write(directory: Path, crt: bytes, key: bytes) -> None:
    """Replace tls.crt and tls.key by rename, each whole (as a kubelet's atomic writer does)."""
    for name, data in (("tls.key", key), ("tls.crt", crt)):
        tmp = directory / f".{name}.new"
        tmp.write_bytes(data)
        os.replace(tmp, directory / name)


def _served_serial(port: int, ca_file: Path) -> int:
    """A fresh handshake that trusts only the sandbox CA, as the API server does; the serial served."""
    context = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def _wait_for_serial(port: int, ca_file: Path, serial: int) -> None:
    deadline = time.monotonic() + CERT_CHECK_SECONDS * 3 + 5
    while time.monotonic() < deadline:
        try:
            if _served_serial(port, ca_file) == serial:
                return
        except (OSError, ssl.SSLError):
            pass
        time.sleep(0.2)
    raise AssertionError(f"the webhook did not serve certificate {serial:x}")


async def test_a_rotated_serving_certificate_never_fails_a_create(
    api: kr8s.asyncio.Api, cluster: Cluster, namespace: str, attack_watch: Watch
) -> None:
    attack_watch.quota = 0  # its pods ask no GPU
    sb = _sandbox(cluster)
    webhook_dir, ca_file = sb.pki.webhook_dir, sb.pki.ca_crt
    port = int(sb.state()["ports"]["gk_webhook"])
    ca_crt, ca_key = ca_file.read_bytes(), sb.pki.ca_key.read_bytes()
    kept = {n: (webhook_dir / n).read_bytes() for n in ("tls.crt", "tls.key")}
    log = sb.log_dir / f"{gk.COMPONENT}.log"
    reloads_before = log.read_text().count("certificate reloaded")
    try:
        # The probe can fail: a certificate signed by a CA outside the bundle is refused.
        other_crt, other_key = _another_ca()
        crt, key, _ = _issue(other_crt, other_key, LIFETIME)
        _write(webhook_dir, crt, key)
        await anyio.sleep(CERT_CHECK_SECONDS + 1)
        refused = False
        try:
            _served_serial(port, ca_file)
        except ssl.SSLCertVerificationError:
            refused = True
        assert refused, "a certificate outside the caBundle was trusted: the probe sees nothing"
        crt, key, serial = _issue(ca_crt, ca_key, LIFETIME)
        _write(webhook_dir, crt, key)
        _wait_for_serial(port, ca_file, serial)

        stop = threading.Event()
        rotations: list[int] = []
        handshakes = {"ok": 0, "failed": 0}

        def rotate() -> None:
            while not stop.is_set():
                crt, key, serial = _issue(ca_crt, ca_key, LIFETIME)
                _write(webhook_dir, crt, key)
                rotations.append(serial)
                stop.wait(1.0)

        def probe() -> None:
            while not stop.is_set():
                try:
                    _served_serial(port, ca_file)
                    handshakes["ok"] += 1
                except (OSError, ssl.SSLError):
                    handshakes["failed"] += 1
                stop.wait(0.2)

        threads = [threading.Thread(target=rotate, daemon=True), threading.Thread(target=probe, daemon=True)]
        for t in threads:
            t.start()
        failed: list[str] = []
        gated = 0
        started = time.monotonic()
        try:
            for i in range(CREATES):
                body = {
                    "metadata": {"name": f"p-{i}", "namespace": namespace, "labels": {POOL_LABEL: "nowhere"}},
                    "spec": {"containers": [{"name": "c", "image": "x"}]},
                }
                try:
                    pod = await Pod(body, api=api)
                    await pod.create()
                    gates = {g["name"] for g in pod.raw["spec"].get("schedulingGates", [])}
                    gated += SCHEDULING_GATE in gates
                except kr8s.ServerError as err:
                    failed.append(f"p-{i}: {err}")
                await anyio.sleep(0.2)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=10)
        took = time.monotonic() - started
        # The last certificate written is the one served: the webhook followed every rotation.
        _wait_for_serial(port, ca_file, rotations[-1])
    finally:
        _write(webhook_dir, kept["tls.crt"], kept["tls.key"])
    reloads = log.read_text().count("certificate reloaded") - reloads_before
    print(
        f"\n{CREATES} creates in {took:.0f} s, {len(rotations)} rotations, {reloads} reloads, "
        f"probe handshakes {handshakes}, failed creates {len(failed)}"
    )
    assert failed == [], failed[:5]
    assert gated == CREATES, "every pod went through the webhook (it gates opted-in pods)"
    assert handshakes["failed"] == 0, handshakes
    assert len(rotations) >= took - 2, rotations
    assert reloads >= took / (CERT_CHECK_SECONDS + 1), "the webhook reloaded as it served"
    attack_table.add(
        "serving certificate rotated every second while pods are created",
        "contained",
        f"{len(failed)} of {CREATES} creates failed, {handshakes['failed']} of "
        f"{handshakes['ok'] + handshakes['failed']} handshakes failed, "
        f"{len(rotations)} rotations, {reloads} reloads",
    )

"""The webhook on a thread of its own answers while the controller's event loop is held."""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from gatekeeper.webhook import WebhookThread
from gatekeeper_lab.sandbox.pki import make_pki


@pytest.mark.anyio
async def test_a_review_is_answered_while_the_main_loop_is_blocked(tmp_path: Path) -> None:
    certs = make_pki(tmp_path / "pki").webhook_dir
    hook = await WebhookThread.start("127.0.0.1", 0, certs / "tls.crt", certs / "tls.key")
    port = hook.addresses[0][1]
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    pod = {"metadata": {"name": "p", "labels": {"lws-gatekeeper.io/pool": "a"}}, "spec": {"containers": []}}
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u1", "operation": "CREATE", "object": pod},
    }
    order: list[str] = []
    answers: list[dict[str, object]] = []

    def ask() -> None:
        req = urllib.request.Request(
            f"https://127.0.0.1:{port}/mutate-pods",
            data=json.dumps(review).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            answers.append(json.loads(resp.read()))
        order.append("answered")

    try:
        asker = threading.Thread(target=ask)
        asker.start()
        time.sleep(3)  # noqa: ASYNC251 -- the main event loop held (a long decode, a big relist)
        order.append("main loop free again")
        asker.join(10)
    finally:
        await hook.cleanup()
    assert order == ["answered", "main loop free again"]
    assert answers[0]["response"]["allowed"] is True  # type: ignore[index]
    assert "patch" in answers[0]["response"]  # type: ignore[operator]

"""A grant that reaches the hub's API server after its client gave up cannot over-commit.

Why this exists: the hub grants a claim with a status patch guarded by the claim's
resourceVersion. If that request times out at the client but is still on its way (held in
a network path or a queue), reading the claim back finds it Pending at the same version,
and the hub would give its room to another claim; then the held request lands and both are
Granted. The hub fences such a grant first (``core.reservation.unsure``): a guarded write
of its own moves the claim past that version, so the late grant fails its precondition.

Here the hub's gatekeeper reaches its API server through ``hold_proxy.HoldProxy``. A
Reservation of 2 GPUs; claim ``holder`` granted, claim ``a`` waiting behind it. The window
opens and ``holder`` goes: the hub's grant of ``a`` is held. ``urgent`` (priority 1000)
comes. The client gives up after 15 s; the hub reads ``a`` back and (with the fence) gives
the room to ``urgent``. Then the held grant lands: the Reservation must hold 2 GPUs
granted, never 4. (Without the fence this test fails: ``a`` and ``urgent`` both Granted.)
The second test kills the hub's gatekeeper while its grant is held and starts it again: the
new term knows nothing of that grant, and fences every Pending claim before its first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gatekeeper.core.kube.keys import GATEKEEPER_API_VERSION
from gatekeeper.core.reservation import CLUSTER_LABEL, heartbeat_body, member_namespace
from gatekeeper.core.reservation.unsure import FENCE_ANNOTATION
from gatekeeper_lab.sandbox.hub import GATEKEEPER, Hub

from .conftest import sandbox_base
from .hold_proxy import HoldProxy
from .hub_support import eventually

RESERVATION = "late-grant"
CLUSTER = "cluster-late"


def claim(name: str, *, priority: int = 0, created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {
        "apiVersion": GATEKEEPER_API_VERSION,
        "kind": "ReservationClaim",
        "metadata": {
            "name": name,
            "namespace": member_namespace(CLUSTER),
            "labels": {CLUSTER_LABEL: CLUSTER},
        },
        "spec": {
            "reservation": RESERVATION,
            "cluster": CLUSTER,
            "namespace": "team",
            "leaderWorkerSet": name,
            "leaderWorkerSetUID": f"uid-{name}",
            "groupIndex": 0,
            "groupCreated": created,
            "demand": {"nvidia.com/gpu": "2"},
            "priority": priority,
        },
    }


@pytest.fixture(scope="module")
def proxied_hub(request: pytest.FixtureRequest) -> Iterator[tuple[Hub, HoldProxy]]:
    """A hub of its own whose gatekeeper reaches its API server through a HoldProxy (no
    leader election: a held Lease renewal would only make it step down)."""
    hub = Hub(Path(f"{sandbox_base(request.config)}-late-hub"), say=lambda m: print(m, flush=True))
    try:
        hub.up(gatekeeper=False)
        proxy = HoldProxy(hub.state()["ports"]["apiserver"]).start()
        cfg = yaml.safe_load(hub.kubeconfig.read_text())
        for c in cfg["clusters"]:
            c["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
        proxied = hub.dir / "proxied.kubeconfig"
        proxied.write_text(yaml.safe_dump(cfg))
        hub.start_gatekeeper(args=(f"--kubeconfig={proxied}", "--no-leader-elect"))
    except Exception as exc:  # into the test's failure, never a skip
        hub.down(quiet=True)
        pytest.fail(f"the proxied hub could not start: {exc}", pytrace=False)
    try:
        yield hub, proxy
    finally:
        proxy.stop()
        if not request.config.getoption("--keep-sandbox"):
            hub.down()


def _claims(hub: Hub) -> dict[str, dict[str, Any]]:
    items = json.loads(hub.kubectl("get", "reservationclaims", "-A", "-o", "json").stdout)["items"]
    return {c["metadata"]["name"]: c for c in items}


def _state(hub: Hub, name: str) -> str:
    return str(_claims(hub).get(name, {}).get("status", {}).get("state", ""))


def _granted(hub: Hub) -> list[str]:
    return sorted(n for n, c in _claims(hub).items() if c.get("status", {}).get("state") == "Granted")


def _apply(hub: Hub, *objs: dict[str, Any]) -> None:
    hub.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objs))


def _hold_a_grant(hub: Hub, proxy: HoldProxy, tag: str) -> None:
    """``holder<tag>`` granted, ``a<tag>`` waiting behind it; then, the window open,
    ``holder<tag>`` goes and the hub's grant of ``a<tag>`` is held by the proxy."""
    beat = heartbeat_body(CLUSTER, "test", 3600, datetime.now(UTC))
    home = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": member_namespace(CLUSTER)}}
    reservation = {
        "apiVersion": GATEKEEPER_API_VERSION,
        "kind": "Reservation",
        "metadata": {"name": RESERVATION},
        "spec": {"capacity": {"nvidia.com/gpu": "2"}},
    }
    _apply(hub, home)
    _apply(hub, beat, reservation, claim(f"holder{tag}"))
    eventually(lambda: _state(hub, f"holder{tag}") == "Granted", 60, "holder granted")
    _apply(hub, claim(f"a{tag}", created="2026-01-02T00:00:00Z"))
    eventually(
        lambda: _claims(hub)[f"a{tag}"].get("status", {}).get("reason") == "WaitingForCapacity",
        60,
        "a to wait",
    )
    time.sleep(2)  # the hub's writes of this pass are answered: nothing of it is held below
    proxy.open_window()
    hub.kubectl("delete", "reservationclaim", f"holder{tag}", "-n", member_namespace(CLUSTER), "--wait=true")
    eventually(lambda: proxy.held_records > 0, 30, "the hub's grant of a held by the proxy")
    time.sleep(1.0)
    proxy.close_window()
    assert _state(hub, f"a{tag}") == "Pending", "the held grant has not reached the API server"


def _land_and_check(hub: Hub, proxy: HoldProxy, tag: str) -> None:
    assert proxy.land() > 0
    time.sleep(5)  # the held grant is answered (refused) by now
    granted = _granted(hub)
    assert granted == [f"urgent{tag}"], (
        f"granted after the held grant landed: {granted} (2 GPUs each, capacity 2)"
    )
    assert _state(hub, f"a{tag}") == "Pending"
    fence = _claims(hub)[f"a{tag}"]["metadata"].get("annotations", {}).get(FENCE_ANNOTATION)
    assert fence, "the hub fenced a before giving its room away"
    hub.kubectl("delete", "reservationclaims", "--all", "-A", "--wait=true")


def test_a_grant_that_lands_after_its_client_gave_up_is_refused(proxied_hub: tuple[Hub, HoldProxy]) -> None:
    hub, proxy = proxied_hub
    _hold_a_grant(hub, proxy, "")
    _apply(hub, claim("urgent", priority=1000, created="2026-01-03T00:00:00Z"))
    # The client gives up after 15 s; read back, "a" is Pending at the version decided on.
    took = eventually(
        lambda: _state(hub, "urgent") == "Granted", 90, "urgent granted once a's grant is settled"
    )
    print(f"urgent granted {took:.1f}s after it came; the proxy holds {proxy.held_records} records")
    assert _granted(hub) == ["urgent"]
    log = (hub.runner.log_dir / "hub-gatekeeper.log").read_text()
    assert "was fenced" in log, "the hub's log says what it did"
    _land_and_check(hub, proxy, "")


def test_a_grant_the_last_term_sent_is_fenced_by_the_next(proxied_hub: tuple[Hub, HoldProxy]) -> None:
    """The hub's gatekeeper is SIGKILLed with its grant of ``a2`` held, and started again: a
    new term, which knows nothing of that grant and lists ``a2`` Pending. It fences every
    Pending claim before its first grant, so the room goes to ``urgent2`` and the held
    grant, landing, is refused."""
    hub, proxy = proxied_hub
    _hold_a_grant(hub, proxy, "2")
    hub.stop(GATEKEEPER, kill=True)
    _apply(hub, claim("urgent2", priority=1000, created="2026-01-03T00:00:00Z"))
    hub.start_gatekeeper(args=(f"--kubeconfig={hub.dir / 'proxied.kubeconfig'}", "--no-leader-elect"))
    took = eventually(lambda: _state(hub, "urgent2") == "Granted", 90, "urgent2 granted by the new term")
    print(f"urgent2 granted {took:.1f}s after the new term's start was asked")
    assert _granted(hub) == ["urgent2"]
    _land_and_check(hub, proxy, "2")

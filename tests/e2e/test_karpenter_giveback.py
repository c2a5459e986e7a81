"""A group that cannot get all its nodes is given back, against the real Karpenter.

Why this exists: the give-back (``spec.admissionTimeout``) must be proved where the
cloud really runs out of nodes during a scale-up. A NodePool may buy 4 GPUs; an LWS of groups
of two one-GPU pods runs one group on 2 nodes Karpenter bought and is scaled to 2 through its
scale subresource. The gatekeeper admits group 1 (the NodePool can still launch 2 GPUs), and
then, before Karpenter acts on its pods, the offerings run out: Karpenter is held
(SIGSTOP), the NodePool's limit is lowered to 3 GPUs and Karpenter is started again, so it
buys one node of the two. Group 1 gets 1 of its 2 pods bound; after the Pool's 30 s
admission timeout it is given back whole: its record says why and when it is retried, a
Warning Event says the same, no pod of it stays bound (its LWS makes them again, gated), and
Karpenter removes the node that is left empty. Group 0 runs on throughout. The gatekeeper runs
as the chart's ServiceAccount with the chart's RBAC, so a give-back's pod deletes are allowed
by what a user installs, not by the sandbox's admin.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from gatekeeper.core.kube.keys import POOL_LABEL, SCHEDULING_GATE
from gatekeeper_lab.sandbox.cluster import Sandbox
from gatekeeper_lab.sandbox.karpenter import COMPONENT as KARPENTER
from tests.e2e.karpenter_support import (
    as_the_chart,
    node_claims,
    node_pool,
    pool_over,
    scene,
)
from tests.e2e.kueue_support import get, group_of, items, lws, records, wait

TIMEOUT_SECONDS = 30


@pytest.fixture
def tag(karpenter_sandbox: Sandbox) -> Iterator[str]:
    yield from scene(karpenter_sandbox, "kgive")


def _gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == SCHEDULING_GATE for g in pod["spec"].get("schedulingGates", []))


def _group(sb: Sandbox, ns: str, index: str) -> list[dict[str, Any]]:
    return [p for p in items(sb, "pods", "-n", ns) if group_of(p) == index]


def _running(pods: list[dict[str, Any]]) -> bool:
    return len(pods) == 2 and all(
        p["spec"].get("nodeName") and p.get("status", {}).get("phase") == "Running" for p in pods
    )


def _admitted(sb: Sandbox, ns: str, index: int) -> dict[str, Any]:
    rec = next((r for r in records(sb, ns) if r["spec"]["groupIndex"] == index), None)
    conds = (rec or {}).get("status", {}).get("conditions", [])
    return next((c for c in conds if c["type"] == "Admitted"), {})


@pytest.fixture
async def as_chart(karpenter_sandbox: Sandbox, tmp_path: Path) -> AsyncIterator[None]:
    """The gatekeeper as the chart installs it: a give-back deletes pods, which its RBAC must allow."""
    async with as_the_chart(karpenter_sandbox, tmp_path):
        yield


def test_a_group_that_gets_1_of_its_2_nodes_is_given_back_whole(
    karpenter_sandbox: Sandbox, tag: str, as_chart: None
) -> None:
    sb, ns, np_name, pool = karpenter_sandbox, f"kgive-{tag}", f"np-{tag}", f"pool-{tag}"
    sb.apply([node_pool(np_name, tag, gpu_limit=4)])
    sb.apply([pool_over(pool, tag, [np_name], admissionTimeout=f"{TIMEOUT_SECONDS}s")])
    sb.apply([lws("vllm", ns, {POOL_LABEL: pool}, replicas=1, size=2, gpus_per_pod=1)])
    wait("group 0 Running on nodes Karpenter bought", lambda: _running(_group(sb, ns, "0")), 120)
    assert len(node_claims(sb, np_name)) == 2

    sb.pause(KARPENTER)  # it must not act on group 1's pods before the offerings run out
    try:
        sb.kubectl("scale", "leaderworkersets.leaderworkerset.x-k8s.io", "vllm", "-n", ns, "--replicas=2")
        wait("group 1 admitted", lambda: _admitted(sb, ns, 1).get("status") == "True", 60)
        admitted = time.monotonic()
        sb.kubectl(
            "patch", "nodepools.karpenter.sh", np_name, "--type=merge",
            "-p", '{"spec":{"limits":{"nvidia.com/gpu":"3"}}}',
        )  # fmt: skip
    finally:
        sb.restart(KARPENTER, kill=True)  # started again, it reads the lowered limit

    def half_placed() -> list[dict[str, Any]] | None:
        pods = _group(sb, ns, "1")
        return pods if sum(1 for p in pods if p["spec"].get("nodeName")) == 1 else None

    wait("group 1 half-placed: Karpenter bought 1 of its 2 nodes", half_placed, 60)
    assert len(node_claims(sb, np_name)) == 3

    def given_back() -> dict[str, Any] | None:
        cond = _admitted(sb, ns, 1)
        return cond if cond.get("reason") == "AdmissionTimeout" else None

    cond = wait("group 1 given back", given_back, TIMEOUT_SECONDS + 40)
    took = time.monotonic() - admitted
    print(f"\ngroup 1 given back {took:.1f}s after its admission: {cond['message']}")
    assert cond["status"] == "False"
    assert cond["message"].startswith(
        f"group 1 got 1 of its 2 pods bound within {TIMEOUT_SECONDS} s of its admission"
    )
    assert "given back, retried in " in cond["message"]
    assert took >= TIMEOUT_SECONDS - 2  # the API server's times have one-second resolution
    rec = next(r for r in records(sb, ns) if r["spec"]["groupIndex"] == 1)
    assert rec["status"]["retries"] == 1 and rec["status"]["retryAt"]

    def none_bound() -> list[dict[str, Any]] | None:
        pods = _group(sb, ns, "1")
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        if any(p["spec"].get("nodeName") for p in pods) or not live:
            return None
        return live if all(_gated(p) for p in live) else None

    again = wait("group 1's pods made again, gated, none bound", none_bound, 60)
    print(f"group 1: {len(again)} pods made again, all gated; none bound")
    events = items(sb, "events", "-n", ns, "--field-selector=reason=AdmissionTimeout")
    assert any(e["type"] == "Warning" and "given back" in e["message"] for e in events)

    emptied = time.monotonic()
    wait("Karpenter removes the node left empty", lambda: len(node_claims(sb, np_name)) == 2, 180)
    print(f"Karpenter removed the empty node {time.monotonic() - emptied:.1f}s after the give-back")
    assert _running(_group(sb, ns, "0")), "group 0 runs on throughout"
    assert all(not p["spec"].get("nodeName") for p in _group(sb, ns, "1"))
    pool_obj = get(sb, "pools.lws-gatekeeper.io", pool)
    assert pool_obj["status"]["admittedGroups"] == 1

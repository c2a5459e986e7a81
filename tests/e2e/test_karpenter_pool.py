"""A Pool that knows its Karpenter NodePool: nodes are bought for whole groups only.

Why this exists: it is the seed's first case against the real Karpenter (v1.14.1, KWOK
provider) on a sandbox with no static nodes (``karpenter_sandbox``). A NodePool may buy at
most 4 GPUs; an LWS of groups of two one-GPU pods runs one group and is scaled to 3 through
its scale subresource, as the HPA would. The Pool names the NodePool (``spec.nodePools``),
so the gatekeeper admits a group only when all its pods fit free room plus what the
NodePool can still launch: exactly two whole groups run, the third stays gated and
Karpenter buys no node for it. It runs twice: with the sandbox's gatekeeper (the admin's
identity), and as the chart's ServiceAccount with the RBAC ``helm template --set-json
karpenter.instanceTypes=...`` makes, which proves that RBAC is enough (nothing refused).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from gatekeeper.core.kube.keys import POOL_LABEL, SCHEDULING_GATE
from gatekeeper_lab.sandbox.cluster import Sandbox
from tests.e2e.karpenter_support import (
    as_the_chart,
    node_claims,
    node_pool,
    pool_over,
    scene,
)
from tests.e2e.kueue_support import get, group_of, items, lws, records, wait

GPU = "nvidia.com/gpu"
#: How long the third group is watched for a NodeClaim that must not come.
QUIET_SECONDS = 20


@pytest.fixture
def tag(karpenter_sandbox: Sandbox) -> Iterator[str]:
    yield from scene(karpenter_sandbox, "kpool")


@pytest.fixture(params=["admin", "chart"])
async def identity(
    request: pytest.FixtureRequest, karpenter_sandbox: Sandbox, tmp_path: Path
) -> AsyncIterator[str]:
    """Who the gatekeeper runs as: the sandbox's admin, or the chart's ServiceAccount with the
    chart's RBAC for ``karpenter.instanceTypes`` (and the chart's flag checked)."""
    if request.param == "admin":
        yield "admin"
        return
    async with as_the_chart(karpenter_sandbox, tmp_path):
        yield "chart"


def _gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == SCHEDULING_GATE for g in pod["spec"].get("schedulingGates", []))


def _by_group(sb: Sandbox, ns: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for pod in items(sb, "pods", "-n", ns):
        out.setdefault(group_of(pod), []).append(pod)
    return out


def _running(pods: list[dict[str, Any]]) -> bool:
    return len(pods) == 2 and all(
        p["spec"].get("nodeName") and p.get("status", {}).get("phase") == "Running" for p in pods
    )


def test_node_pool_limit_of_4_gpus_runs_exactly_two_whole_groups(
    karpenter_sandbox: Sandbox, identity: str, tag: str
) -> None:
    sb, ns, np_name, pool = karpenter_sandbox, f"kpool-{tag}", f"np-{tag}", f"pool-{tag}"
    sb.apply([node_pool(np_name, tag, gpu_limit=4)])
    sb.apply([pool_over(pool, tag, [np_name])])
    start = time.monotonic()
    sb.apply([lws("vllm", ns, {POOL_LABEL: pool}, replicas=1, size=2, gpus_per_pod=1)])
    wait("group 0 Running on nodes Karpenter bought", lambda: _running(_by_group(sb, ns).get("0", [])), 120)
    print(
        f"\ngroup 0 Running after {time.monotonic() - start:.1f}s "
        f"on {len(node_claims(sb, np_name))} new nodes"
    )

    start = time.monotonic()
    sb.kubectl("scale", "leaderworkersets.leaderworkerset.x-k8s.io", "vllm", "-n", ns, "--replicas=3")
    wait("group 1 Running", lambda: _running(_by_group(sb, ns).get("1", [])), 120)
    print(f"group 1 Running {time.monotonic() - start:.1f}s after the scale to 3")

    def third_waits() -> list[dict[str, Any]] | None:
        pods = _by_group(sb, ns).get("2", [])
        return pods if len(pods) == 2 and all(_gated(p) for p in pods) else None

    wait("group 2's two pods, gated", third_waits, 60)
    quiet_from = time.monotonic()
    while time.monotonic() - quiet_from < QUIET_SECONDS:
        claims = node_claims(sb, np_name)
        assert len(claims) <= 4, f"Karpenter bought {len(claims)} nodes; the NodePool's limit holds 4"
        groups = _by_group(sb, ns)
        assert all(_gated(p) and not p["spec"].get("nodeName") for p in groups.get("2", [])), (
            "group 2 let through"
        )
        time.sleep(1)

    groups = _by_group(sb, ns)
    assert _running(groups["0"]) and _running(groups["1"])
    assert len(groups["2"]) == 2 and all(_gated(p) for p in groups["2"])
    claims = node_claims(sb, np_name)
    assert len(claims) == 4, [c["metadata"]["name"] for c in claims]
    nodes_of_groups = {p["spec"]["nodeName"] for g in ("0", "1") for p in groups[g]}
    assert len(nodes_of_groups) == 4, "each pod on a node of its own (one GPU each)"

    by_index = {int(r["spec"]["groupIndex"]): r for r in records(sb, ns)}
    cond = next(c for c in by_index[2]["status"]["conditions"] if c["type"] == "Admitted")
    print(f"group 2: {cond['reason']}: {cond['message']}")
    assert cond["status"] == "False"
    assert cond["reason"] == "WaitingForNodes"
    assert "NodePools can still launch" in cond["message"]

    def pool_status() -> dict[str, Any] | None:
        status: dict[str, Any] = get(sb, "pools.lws-gatekeeper.io", pool).get("status", {})
        return status if (status.get("admittedGroups"), status.get("waitingGroups")) == (2, 1) else None

    status = wait("the Pool's status: 2 groups admitted, 1 waiting", pool_status, 30)
    print(f"Pool status: {status.get('usedSummary')}, {status.get('nodes')} nodes")
    assert not status.get("strandedGroups"), "the admitted groups have their nodes"
    assert status["used"][GPU] == status["quota"][GPU] == "4", "4 GPUs: its nodes plus none left to launch"

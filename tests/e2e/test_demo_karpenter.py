"""The demo's Karpenter part (``lws-gatekeeper demo --karpenter``) run as a test.

Why this exists: the seed's first case is the demo's to show, so the demo itself must hold
what it claims, against the real Karpenter: a NodePool of 4 one-GPU nodes, an LWS of size 2
scaled from 1 to 3 replicas. Without the gatekeeper Karpenter buys the 2 nodes left for
the 2 new leaders and at least one new group is half-placed; with it exactly one more whole
group runs, the third waits gated with none of its pods bound, and no fifth node is bought.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gatekeeper_lab import demo_karpenter as demo
from gatekeeper_lab.sandbox.cluster import Sandbox
from tests.e2e.karpenter_support import delete_node_pool


@pytest.fixture
def demo_sandbox(karpenter_sandbox: Sandbox) -> Iterator[Sandbox]:
    yield karpenter_sandbox
    sb = karpenter_sandbox
    for ns in (demo.WITHOUT, demo.WITH):
        sb.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false")
    delete_node_pool(sb, demo.NODE_POOL)
    sb.kubectl("delete", "pools.lws-gatekeeper.io", demo.POOL, "--ignore-not-found")


def test_the_demo_replays_the_autoscaled_case(demo_sandbox: Sandbox) -> None:
    start = time.monotonic()
    without, with_gk = demo.run(demo_sandbox)
    print(f"demo --karpenter parts took {time.monotonic() - start:.1f}s (the sandbox already up)")
    assert without.nodes_bought == demo.GPU_LIMIT, "Karpenter buys up to the NodePool's limit"
    assert without.half_placed >= 1, "without the gatekeeper a new group is half-placed"
    assert (without.gated, without.waiting) == (0, 0)
    assert (with_gk.whole, with_gk.half_placed) == (2, 0), "exactly one more whole group, none half"
    assert (with_gk.waiting, with_gk.gated) == (1, 1), "the third group waits gated (its leader)"
    assert with_gk.nodes_bought == demo.GPU_LIMIT, "no node bought for the third group"

"""How long one admission planning pass takes at the scale the design promises.

Scenario: 5,000 GPU nodes with 1 to 8 GPUs each (some already partly used by other
pods), one pool over all of them, and 10,000 waiting LWS groups of size 4 whose pods
need 1, 2, 4 or 8 GPUs, with mixed priorities and ages. Prints the median wall time of
a few ``plan`` calls (and of turning the Node dicts into inputs), so a regression in
the decision core shows up as a number, not as a slow controller.

Run: ``.venv/bin/python benchmarks/bench_core.py``
"""

from __future__ import annotations

import random
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from gatekeeper.core.admission.queue import AdmittedGroup, WaitingGroup
from gatekeeper.core.backends.pools.planner import Plan, plan
from gatekeeper.core.model.demand import GroupDemand, group_demand
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.nodes import Node, parse_node
from gatekeeper.core.model.pool import parse_pool

NODES = 5_000
GROUPS = 10_000
SIZE = 4
RUNS = 5
GPU = "nvidia.com/gpu"


def node_dicts(rng: random.Random) -> list[dict[str, Any]]:
    return [
        {
            "metadata": {"name": f"gpu-{i:05d}", "labels": {"pool": "shared"}},
            "status": {
                "allocatable": {"cpu": "96", "memory": "1Ti", "pods": "110", GPU: str(rng.randint(1, 8))},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for i in range(NODES)
    ]


def lws(gpus: int) -> dict[str, Any]:
    container = {
        "name": "vllm",
        "resources": {"requests": {"cpu": "4", "memory": "32Gi"}, "limits": {GPU: gpus}},
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": f"vllm-{gpus}", "namespace": "bench"},
        "spec": {
            "leaderWorkerTemplate": {"size": SIZE, "workerTemplate": {"spec": {"containers": [container]}}}
        },
    }


def waiting_groups(rng: random.Random) -> list[WaitingGroup]:
    demands = {g: group_demand(lws(g)) for g in (1, 2, 4, 8)}
    start = datetime(2025, 1, 1, tzinfo=UTC)
    return [
        WaitingGroup(
            key=GroupKey("bench", f"lws-{k // 10:04d}", k % 10),
            pool="shared",
            demand=demands[rng.choice((1, 1, 2, 2, 4, 8))],
            created=start + timedelta(seconds=k // 10),
            priority=rng.choice((0, 0, 0, 100)),
        )
        for k in range(GROUPS)
    ]


def foreign_usage(nodes: list[Node], rng: random.Random) -> dict[str, dict[str, int]]:
    usage = {}
    for node in nodes:
        if rng.random() < 0.2:
            usage[node.name] = {GPU: 1, "cpu": 2000, "pods": 1}
    return usage


def main() -> None:
    rng = random.Random(42)
    raw_nodes = node_dicts(rng)
    pools = [
        parse_pool(
            {
                "metadata": {"name": "shared"},
                "spec": {"nodeSelector": {"pool": "shared"}, "namespaceSelector": {}},
            }
        )
    ]
    waiting = waiting_groups(rng)

    parse_times = []
    for _ in range(RUNS):
        began = time.perf_counter()
        nodes = [parse_node(n) for n in raw_nodes]
        parse_times.append(time.perf_counter() - began)
    usage = foreign_usage(nodes, rng)

    plan_times = []
    result: Plan | None = None
    for _ in range(RUNS):
        began = time.perf_counter()
        result = plan(pools, nodes, usage, [], waiting)
        plan_times.append(time.perf_counter() - began)
    assert result is not None
    status = result.pools["shared"]

    # Steady state: the first pass's admissions are recorded, their pods not bound yet
    # (the worst case: node room is held for every pod), the rest still waits.
    demands = {g.key: g.demand for g in waiting if isinstance(g.demand, GroupDemand)}
    admitted = [
        AdmittedGroup(a.key, a.pool, demands[a.key], nodes=dict(enumerate(a.nodes))) for a in result.admit
    ]
    still_waiting = [g for g in waiting if g.key not in {a.key for a in admitted}]
    steady_times = []
    for _ in range(RUNS):
        began = time.perf_counter()
        steady = plan(pools, nodes, usage, admitted, still_waiting)
        steady_times.append(time.perf_counter() - began)
    assert steady.admit == ()
    gpus = sum(n.allocatable[GPU] for n in nodes)
    print(f"{NODES} nodes ({gpus} GPUs), {GROUPS} waiting groups of size {SIZE}")
    print(f"parse_node x{NODES}: median {statistics.median(parse_times) * 1000:.0f} ms")
    print(f"plan, first pass: median {statistics.median(plan_times) * 1000:.0f} ms over {RUNS} runs")
    print(f"  admitted {len(result.admit)}, waiting {status.waiting}; {status.describe()}")
    print(
        f"plan, steady state ({len(admitted)} admitted holding node room, {len(still_waiting)} waiting): "
        f"median {statistics.median(steady_times) * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()

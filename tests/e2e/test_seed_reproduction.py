"""The LWS issue, reproduced without any gatekeeper: proof that the sandbox is real.

Four 1-GPU nodes, groups of 2 (leader + worker, one GPU each): capacity for exactly two
whole groups. The default scheduler places leaders first, so after scaling 0 -> 4 and
0 -> 10 leaders hold GPUs while their workers stay Pending, as the reporter saw.
"""

from __future__ import annotations

import kr8s.asyncio

from gatekeeper_lab.sandbox.replay import isolate, load_scenario, replay

from .conftest import MakeNodes

POOL_LABEL = "lws-gatekeeper.io/pool"


async def test_default_scheduler_strands_gpus_in_partial_groups(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes
) -> None:
    scenario = load_scenario()
    nodes = await fake_nodes(4, gpus=1, cpu="8", memory="32Gi")
    lws = isolate(scenario["lws"], nodes.selector, nodes.taint_key)
    # Without the gatekeeper: the LWS does not opt in.
    lws["metadata"]["labels"].pop(POOL_LABEL)

    steps = await replay(api, namespace, lws)
    for s in steps:
        print(f"{s.command}: {s.verdict.line(4)} ({s.seconds:.1f}s)")

    first = steps[0].verdict
    assert (first.whole_groups, first.gpus_stranded) == (2, 0), "two groups fit four GPUs"

    for step in (steps[2], steps[4]):  # after 0 -> 4 and 0 -> 10
        v = step.verdict
        assert v.gated_pods == 0, "no gate without the gatekeeper"
        assert v.gpus_held == 4, f"{step.command}: every GPU is taken"
        assert v.whole_groups < 2, f"{step.command}: fewer whole groups than capacity allows: {v.line()}"
        assert v.gpus_stranded >= 2, f"{step.command}: GPUs held by incomplete groups: {v.line()}"
        assert v.partial_groups >= 2
        pending = sum(g.pods - g.bound for g in v.groups.values())
        assert pending == step.replicas * 2 - 4, "every pod beyond the four GPUs waits Pending"

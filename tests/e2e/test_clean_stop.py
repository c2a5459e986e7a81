"""A gatekeeper stopped (SIGTERM) in the middle of a pass finishes that pass before it goes.

Why this exists: a pass writes its records first, lifts the groups' gates, and tells the
LWS last (its ``Admitted`` Events). A replica stopped by a rollout or a node drain was cut
off wherever its pass stood: a group's record said ``Admitted`` and its pods ran, but the
Event that announces it was never sent, and the next leader, which reads the record, had
nothing left to say. Here the sandbox's gatekeeper is stopped the moment the first record
of an LWS of eight groups turns ``Admitted``; it is then started again. Every group must be
announced admitted exactly once, and the stopped process's log must say it finished the
pass in flight.
"""

from __future__ import annotations

import anyio
import kr8s.asyncio

from gatekeeper_lab.sandbox import gatekeeper as gk
from gatekeeper_lab.sandbox.replay import settle

from .conftest import Cluster, MakeNodes, MakePool, admitted, records
from .test_admission import create_lws, lws_body
from .test_rolling_upgrade import admissions

GROUPS = 8


async def test_a_gatekeeper_stopped_mid_pass_announces_every_group_it_admitted(
    api: kr8s.asyncio.Api, cluster: Cluster, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    sb = cluster.sandbox
    assert sb is not None, "the test stops the sandbox's gatekeeper"
    nodes = await fake_nodes(GROUPS, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": GROUPS})
    log = sb.log_dir / f"{gk.COMPONENT}.log"
    start = log.stat().st_size if log.exists() else 0
    stopped = False
    try:
        await create_lws(api, namespace, lws_body("many", pool, nodes, size=1, replicas=GROUPS))
        with anyio.fail_after(90):
            while not any(admitted(r) for r in (await records(api, namespace, "many")).values()):
                await anyio.sleep(0.02)
        await anyio.to_thread.run_sync(lambda: sb.stop(gk.COMPONENT))
        stopped = True
        at_stop = sorted(i for i, r in (await records(api, namespace, "many")).items() if admitted(r))
        told_at_stop = await admissions(api, namespace, "many")
        print(f"admitted when stopped: {at_stop}; announced: {dict(told_at_stop)}")
        assert set(at_stop) <= set(told_at_stop), (
            f"admitted, never announced by the stopped gatekeeper: {set(at_stop) - set(told_at_stop)}"
        )
        text = log.read_bytes()[start:].decode(errors="replace")
        assert "stopping once the pass in flight is done" in text, text[-2000:]
    finally:
        if stopped:
            await anyio.to_thread.run_sync(sb.start_gatekeeper)
    v = await settle(api, namespace, "many", expected_pods=GROUPS, size=1, timeout=90)
    assert v.whole_groups == GROUPS, v
    announced = await admissions(api, namespace, "many")
    assert announced == dict.fromkeys(range(GROUPS), 1), f"each group announced admitted once: {announced}"

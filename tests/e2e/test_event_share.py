"""Events per namespace are held to a share of the minute, and nothing else waits for them.

Why this exists: the gatekeeper tells an LWS what became of its groups in Events, in the
tenant's namespace. A tenant that changes its LWSs without end, or scales them up and down,
would have the gatekeeper write Events as fast as it changes things. The gatekeeper here runs
with ``--max-events-per-namespace-per-minute=3``; the tenant (``edit`` in its namespace) makes
an LWS of 6 one-pod groups that all fit: every group is admitted and runs, its record says
so, and the gatekeeper posts at most 3 Events in the namespace in that minute.
"""

from __future__ import annotations

import json
from pathlib import Path

import kr8s.asyncio

from gatekeeper.core.kube.keys import EVENT_SOURCE
from gatekeeper_lab.sandbox.replay import list_raw, settle

from .attack_support import dev
from .conftest import Cluster, MakeNodes, MakePool, admitted, eventually, gatekeeper_running_as, records
from .test_admission import lws_body
from .test_policies import kubectl

GROUPS = 6
SHARE = 3


async def test_a_namespaces_events_are_held_to_their_share_and_every_group_still_runs(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    tmp_path: Path,
) -> None:
    assert cluster.sandbox is not None
    nodes = await fake_nodes(GROUPS, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": GROUPS})
    tenant = await dev(cluster, namespace, tmp_path)
    with gatekeeper_running_as(cluster.sandbox, args=[f"--max-events-per-namespace-per-minute={SHARE}"]):
        body = lws_body("many", pool, nodes, size=1, replicas=GROUPS)
        body["metadata"]["namespace"] = namespace
        code, _, err = await kubectl(cluster, "create", "-f", "-", kubeconfig=tenant, input=json.dumps(body))
        assert code == 0, err

        async def all_admitted() -> bool:
            recs = await records(api, namespace, "many")
            return len(recs) == GROUPS and all(admitted(r) for r in recs.values())

        await eventually(all_admitted, timeout=90, what="every group admitted")
        v = await settle(api, namespace, "many", expected_pods=GROUPS, size=1, timeout=90)
        assert v.whole_groups == GROUPS, v
        events = [
            e
            for e in await list_raw(api, "events", namespace=namespace)
            if (e.get("source") or {}).get("component") == EVENT_SOURCE
        ]
        print([(e.get("reason"), e.get("message")) for e in events])
        assert 1 <= len(events) <= SHARE, f"{len(events)} Events in the namespace within the minute"

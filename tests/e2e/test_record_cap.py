"""Group records per namespace are capped: a tenant's LWS cannot fill etcd with records.

Why this exists: every group gets a GroupAdmission record and every pass reads them all. One
LWS asks at most 10,000 groups, but a namespace may hold any number of LWSs. The gatekeeper
here runs with ``--max-records-per-namespace=3``; the tenant (``edit`` in its namespace)
makes an LWS of 5 groups: 3 get records and are admitted, the other 2 get none, hold nothing,
their pods stay gated, and the LWS gets a Warning Event saying why. (Once the sandbox's own
gatekeeper runs again, with the default cap, they get their records and are admitted.)
"""

from __future__ import annotations

import json
from pathlib import Path

import kr8s.asyncio

from gatekeeper.core.kube.keys import LWS_NAME_LABEL, SCHEDULING_GATE
from gatekeeper_lab.sandbox.replay import list_raw

from . import attack_table
from .attack_support import dev
from .conftest import Cluster, MakeNodes, MakePool, admitted, eventually, gatekeeper_running_as, records
from .test_admission import lws_body
from .test_policies import kubectl
from .watch import Watch


async def test_groups_past_the_namespaces_record_cap_wait_without_records(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    attack_watch: Watch,
    tmp_path: Path,
) -> None:
    assert cluster.sandbox is not None
    nodes = await fake_nodes(10, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 10})
    attack_watch.pool(nodes.selector, 10)
    tenant = await dev(cluster, namespace, tmp_path)
    with gatekeeper_running_as(cluster.sandbox, args=["--max-records-per-namespace=3"]):
        body = lws_body("many", pool, nodes, replicas=5)
        body["metadata"]["namespace"] = namespace
        code, _, err = await kubectl(cluster, "create", "-f", "-", kubeconfig=tenant, input=json.dumps(body))
        assert code == 0, err

        async def three_admitted() -> bool:
            recs = await records(api, namespace, "many")
            return sorted(recs) == [0, 1, 2] and all(admitted(r) for r in recs.values())

        async def told() -> list[str]:
            events = await list_raw(api, "events", namespace=namespace)
            return [e["message"] for e in events if e.get("reason") == "RecordLimitReached"]

        await eventually(three_admitted, timeout=90, what="groups 0-2 admitted, with records")

        async def any_told() -> bool:
            return bool(await told())

        await eventually(any_told, timeout=30, what="a RecordLimitReached Event on the LWS")
        [message] = await told()

        async def ten_pods() -> bool:
            return (
                len(await list_raw(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: "many"}))
                == 10
            )

        await eventually(ten_pods, timeout=60, what="the LWS's 10 pods")
        pods = await list_raw(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: "many"})
        gated = sorted(
            p["metadata"]["name"] for p in pods if SCHEDULING_GATE in str(p["spec"].get("schedulingGates"))
        )
        assert gated == ["many-3", "many-3-1", "many-4", "many-4-1"], gated
        assert sorted(await records(api, namespace, "many")) == [0, 1, 2], "no record past the cap"
        attack_table.add(
            "dev: an LWS of 5 groups in a namespace capped at 3 records", "bounded", f"3 admitted; {message}"
        )
    assert "namespace" in message and "3 group records" in message, message

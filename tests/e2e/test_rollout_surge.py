"""A rolling update with ``maxSurge: 1, maxUnavailable: 0`` on a full pool: the LWS controller
makes a surge group and deletes no old group before it is ready, and the surge group waits for
quota, so the update would wait for ever and say only "needs 2 nvidia.com/gpu; pool has 0
free". The gatekeeper names it: the surge group's record says it is the update's surge group
and what lets the update go on, its LWS gets one Warning Event ``RolloutStalled``, ``why`` says
it. Done as that says (``maxUnavailable: 1``), the update goes on and ends whole within the
quota; the old group runs untouched meanwhile."""

from __future__ import annotations

import kr8s.asyncio

from gatekeeper.core.kube.keys import REVISION_LABEL
from gatekeeper.core.model.rollout import ROLLOUT_STALLED
from gatekeeper_lab.sandbox.replay import settle

from .conftest import Cluster, MakeNodes, MakePool, admitted, condition, eventually, records
from .test_admission import create_lws, events_for, lws_body, lws_pods
from .test_why import why


async def test_a_rollout_stalled_by_its_surge_group_is_named_and_goes_on_as_told(
    api: kr8s.asyncio.Api, cluster: Cluster, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    gpu = "nvidia.com/gpu"
    nodes = await fake_nodes(2, gpus=1)
    pool = await make_pool(nodes, quota={gpu: 2})
    body = lws_body("roll", pool, nodes, replicas=1)
    body["spec"]["rolloutStrategy"] = {
        "type": "RollingUpdate",
        "rollingUpdateConfiguration": {"maxSurge": 1, "maxUnavailable": 0},
    }
    lws = await create_lws(api, namespace, body)
    await settle(api, namespace, "roll", expected_pods=2, size=2)
    [old] = {p["metadata"]["labels"][REVISION_LABEL] for p in await lws_pods(api, namespace, "roll")}

    worker = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    worker["spec"]["containers"][0]["env"] = [{"name": "MODEL", "value": "v2"}]
    await lws.patch({"spec": {"leaderWorkerTemplate": {"workerTemplate": worker}}})

    async def surge_waits() -> bool:
        recs = await records(api, namespace)
        return 1 in recs and not admitted(recs[1]) and "surge group" in condition(recs[1]).get("message", "")

    await eventually(surge_waits, timeout=90, what="the surge group 1 waiting, said to be the update's surge")
    said = condition((await records(api, namespace))[1])
    print(said["message"])
    assert said["reason"] == "WaitingForQuota"
    assert "group 1 is a surge group of LeaderWorkerSet roll's rolling update" in said["message"]
    assert "maxUnavailable of at least 1" in said["message"]

    async def warned() -> bool:
        return any(e.get("reason") == ROLLOUT_STALLED for e in await events_for(api, namespace, "roll"))

    await eventually(warned, what="a RolloutStalled Warning on the LWS")
    [event] = [e for e in await events_for(api, namespace, "roll") if e.get("reason") == ROLLOUT_STALLED]
    assert event["type"] == "Warning" and event.get("count", 1) == 1
    answer = why(cluster, "roll", "-n", namespace)
    assert (
        answer.returncode == 1
        and "is a surge group of LeaderWorkerSet roll's rolling update" in answer.stdout
    )
    running = [
        p for p in await lws_pods(api, namespace, "roll") if p["metadata"]["labels"][REVISION_LABEL] == old
    ]
    assert len(running) == 2 and all(p["spec"].get("nodeName") for p in running), "the old group runs on"

    # As the words say: one old group may go first.
    await lws.patch({"spec": {"rolloutStrategy": {"rollingUpdateConfiguration": {"maxUnavailable": 1}}}})

    async def updated() -> bool:
        pods = await lws_pods(api, namespace, "roll")
        new = [p for p in pods if p["metadata"]["labels"][REVISION_LABEL] != old]
        return (
            len(pods) == 2
            and len(new) == 2
            and all(p.get("status", {}).get("phase") == "Running" for p in new)
        )

    await eventually(updated, timeout=120, what="the update ended: group 0 at the new template, running")
    recs = await records(api, namespace)
    held = sum(int(r["status"]["demand"].get(gpu, "0")) for r in recs.values() if admitted(r))
    assert held <= 2, f"{held} GPUs admitted on a quota of 2"

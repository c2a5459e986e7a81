"""Whole groups admitted into a Pool, with the real scheduler, LWS controller and gatekeeper.

Every test makes its own fake nodes and a Pool over them, so the gatekeeper's decisions
in one test never depend on another's capacity. The session sandbox runs the gatekeeper
(webhook and admission loop) as a separate process, as a cluster would.
"""

from __future__ import annotations

import copy
from typing import Any

import anyio
import kr8s.asyncio
from kr8s.asyncio.objects import Pod
from prometheus_client.parser import text_string_to_metric_families

from gatekeeper.core.kube.keys import POOL_LABEL, REVISION_LABEL
from gatekeeper_lab.sandbox.observe import LWS_NAME_LABEL, summarize
from gatekeeper_lab.sandbox.replay import LeaderWorkerSet, isolate, list_raw, load_scenario, replay, settle

from .conftest import Cluster, MakeNodes, MakePool, NodeSet, Pool, admitted, condition, eventually, records


def lws_body(
    name: str,
    pool: str,
    nodes: NodeSet,
    *,
    size: int = 2,
    replicas: int = 1,
    leader: dict[str, Any] | None = None,
    worker: dict[str, Any] | None = None,
    startup: str | None = None,
    priority_class: str | None = None,
) -> dict[str, Any]:
    """An opted-in LWS whose pods only go to ``nodes``; ``leader``/``worker`` are container resources."""
    gpu = {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "1"}}

    def template(role: str, res: dict[str, Any]) -> dict[str, Any]:
        spec: dict[str, Any] = {"containers": [{"name": role, "image": "vllm", "resources": res}]}
        if priority_class:
            spec["priorityClassName"] = priority_class
        return {"metadata": {"labels": {"role": role}}, "spec": spec}

    lwt: dict[str, Any] = {
        "size": size,
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": template("leader", leader if leader is not None else gpu),
        "workerTemplate": template("worker", worker if worker is not None else gpu),
    }
    body: dict[str, Any] = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": {POOL_LABEL: pool}},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": lwt},
    }
    if startup:
        body["spec"]["startupPolicy"] = startup
    return isolate(body, nodes.selector, nodes.taint_key)


async def create_lws(api: kr8s.asyncio.Api, namespace: str, body: dict[str, Any]) -> Any:
    obj = copy.deepcopy(body)
    obj["metadata"]["namespace"] = namespace
    lws = await LeaderWorkerSet(obj, api=api)
    await lws.create()
    return lws


async def lws_pods(api: kr8s.asyncio.Api, namespace: str, name: str) -> list[dict[str, Any]]:
    return await list_raw(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: name})


async def events_for(api: kr8s.asyncio.Api, namespace: str, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in await list_raw(api, "events", namespace=namespace)
        if e.get("involvedObject", {}).get("name") == name
        and e.get("involvedObject", {}).get("kind") == "LeaderWorkerSet"
    ]


async def test_lws_issue_fixed_groups_0_and_1_run_the_rest_wait_whole(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    """The seed scenario with the gatekeeper: after 0 -> 4 and 0 -> 10, exactly groups 0 and 1 run."""
    scenario = load_scenario()
    nodes = await fake_nodes(4, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 4})
    lws = isolate(scenario["lws"], nodes.selector, nodes.taint_key)
    lws["metadata"]["labels"][POOL_LABEL] = pool

    steps = await replay(api, namespace, lws)
    for s in steps:
        print(f"{s.command}: {s.verdict.line(4)} ({s.seconds:.1f}s)")
    for step in steps:
        v = step.verdict
        if step.replicas == 0:
            continue
        whole = sorted(g.index for g in v.groups.values() if g.whole(2))
        assert whole == [0, 1], f"{step.command}: whole groups {whole}"
        assert v.gpus_stranded == 0 and v.partial_groups == 0, f"{step.command}: {v.line(4)}"
        assert v.gated_pods == 2 * (step.replicas - 2), f"{step.command}: every other pod is gated"
    recs = await records(api, namespace)
    assert sorted(i for i, r in recs.items() if admitted(r)) == [0, 1]
    waiting = condition(recs[3])
    assert waiting["reason"] == "WaitingForQuota"
    assert waiting["message"] == (
        f"group 3 needs 2 nvidia.com/gpu on 2 nodes; "
        f"pool {pool} has 0 free (4 of 4 held by 2 admitted groups)"
    )


async def test_leader_ready_counts_workers_before_they_exist(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    """startupPolicy LeaderReady: workers only appear after the leader runs; no deadlock, nothing held."""
    nodes = await fake_nodes(6, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 6})
    await create_lws(api, namespace, lws_body("lr", pool, nodes, size=3, replicas=3, startup="LeaderReady"))
    v = await settle(api, namespace, "lr", expected_pods=7, size=3, timeout=120)
    whole = sorted(g.index for g in v.groups.values() if g.whole(3))
    assert whole == [0, 1]
    waiting = v.groups[("lr", 2)]
    assert (waiting.pods, waiting.gated, waiting.bound) == (1, 1, 0), (
        "group 2: a gated leader, no workers yet"
    )
    assert v.gpus_held == 6 and v.gpus_stranded == 0


async def test_two_lws_compete_older_first_then_scale_down_releases(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    nodes = await fake_nodes(4, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 4})
    a = await create_lws(api, namespace, lws_body("first", pool, nodes, replicas=2))
    await settle(api, namespace, "first", expected_pods=4, size=2)
    await create_lws(api, namespace, lws_body("second", pool, nodes, replicas=2))
    v = await settle(api, namespace, "second", expected_pods=4, size=2)
    assert v.whole_groups == 0 and v.gated_pods == 4, "the pool is full: the second LWS waits whole"
    events = await events_for(api, namespace, "second")
    assert any(e["reason"] == "WaitingForQuota" for e in events), [e["reason"] for e in events]

    await a.scale(1)  # releases one group's two GPUs
    v = await settle(api, namespace, "second", expected_pods=4, size=2, timeout=60)
    assert v.whole_groups == 1 and v.gated_pods == 2
    assert sorted(g.index for g in v.groups.values() if g.whole(2)) == [0], "lowest index first"


async def test_cpu_only_leader_with_gpu_workers(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    nodes = await fake_nodes(4, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 4})
    cpu_only = {"requests": {"cpu": "2", "memory": "4Gi"}}
    await create_lws(api, namespace, lws_body("mixed", pool, nodes, size=3, replicas=3, leader=cpu_only))
    v = await settle(api, namespace, "mixed", expected_pods=9, size=3)
    assert sorted(g.index for g in v.groups.values() if g.whole(3)) == [0, 1], (
        "2 GPUs per group, 4 in the pool"
    )
    assert v.gated_pods == 3 and v.gpus_stranded == 0
    recs = await records(api, namespace)
    assert recs[0]["status"]["demand"]["nvidia.com/gpu"] == "2"


async def test_quota_fits_but_no_node_does_until_room_frees(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool, cluster: Cluster
) -> None:
    """4 GPUs of quota free, but spread 1+1 over two 2-GPU nodes: a pod needing 2 fits nowhere."""
    nodes = await fake_nodes(2, gpus=2)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 4})
    # Somebody else's pods (not ours, not in any LWS) hold one GPU on each node.
    for i, node in enumerate(nodes.names):
        squatter = await Pod(
            {
                "metadata": {"name": f"squatter-{i}", "namespace": namespace},
                "spec": {
                    "nodeName": node,
                    "tolerations": [{"key": nodes.taint_key, "operator": "Exists"}],
                    "containers": [
                        {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                    ],
                },
            },
            api=api,
        )
        await squatter.create()
    two = {"limits": {"nvidia.com/gpu": "2"}}
    await create_lws(api, namespace, lws_body("big", pool, nodes, size=1, replicas=1, leader=two, worker=two))

    async def waits_for_nodes() -> bool:
        recs = await records(api, namespace)
        return 0 in recs and condition(recs[0]).get("reason") == "WaitingForNodes"

    await eventually(waits_for_nodes, what="group 0 to wait for nodes")
    print(condition((await records(api, namespace))[0])["message"])
    await (await Pod.get("squatter-0", namespace=namespace, api=api)).delete()
    v = await settle(api, namespace, "big", expected_pods=1, size=1, timeout=60)
    assert v.whole_groups == 1, "room freed on one node: the group is admitted"


async def test_group_restart_keeps_its_reservation(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    """RecreateGroupOnPodRestart: the group comes back whole; the waiting group does not take its place."""
    nodes = await fake_nodes(2, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 2})
    await create_lws(api, namespace, lws_body("r", pool, nodes, replicas=2))
    await settle(api, namespace, "r", expected_pods=4, size=2)
    before = await records(api, namespace)
    assert admitted(before[0]) and not admitted(before[1])

    worker = next(p for p in await lws_pods(api, namespace, "r") if p["metadata"]["name"] == "r-0-1")
    await (await Pod(worker, api=api)).delete()

    async def restarted() -> bool:
        pods = {p["metadata"]["name"]: p for p in await lws_pods(api, namespace, "r")}
        return "r-0-1" in pods and pods["r-0-1"]["metadata"]["uid"] != worker["metadata"]["uid"]

    await eventually(restarted, what="the worker to be recreated")
    v = await settle(api, namespace, "r", expected_pods=4, size=2, timeout=60)
    assert sorted(g.index for g in v.groups.values() if g.whole(2)) == [0]
    after = await records(api, namespace)
    assert after[0]["metadata"]["uid"] == before[0]["metadata"]["uid"], "same reservation, never released"
    assert not admitted(after[1])


async def test_rolling_update_to_bigger_pods_is_admitted_again_within_quota(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    """Two groups of 2 x 1 GPU run; the LWS is changed to 2 x 2 GPUs with quota for 6.

    The LWS controller replaces one group at a time. The first replaced group is admitted
    again at 4 GPUs; the second waits whole (6 - 4 < 4) and says why; the admitted GPUs
    never pass the quota. With more quota the second runs too.
    """
    gpu = "nvidia.com/gpu"
    nodes = await fake_nodes(4, gpus=2)
    pool = await make_pool(nodes, quota={gpu: 6})
    lws = await create_lws(api, namespace, lws_body("grow", pool, nodes, replicas=2))
    await settle(api, namespace, "grow", expected_pods=4, size=2)
    before = await lws_pods(api, namespace, "grow")
    old_revisions = {p["metadata"]["labels"].get(REVISION_LABEL) for p in before}
    assert len(old_revisions) == 1 and None not in old_revisions

    peak = 0

    async def admitted_gpus() -> int:
        recs = await records(api, namespace)
        return sum(int(r["status"]["demand"].get(gpu, "0")) for r in recs.values() if admitted(r))

    async def watch_quota() -> None:
        nonlocal peak
        while True:
            peak = max(peak, await admitted_gpus())
            await anyio.sleep(0.1)

    two = {"limits": {gpu: "2"}, "requests": {"cpu": "1"}}
    bigger = lws_body("grow", pool, nodes, replicas=2, leader=two, worker=two)
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_quota)
        await lws.patch({"spec": {"leaderWorkerTemplate": bigger["spec"]["leaderWorkerTemplate"]}})

        async def one_readmitted_one_waiting() -> bool:
            recs = await records(api, namespace)
            if len(recs) != 2:
                return False
            states = sorted((admitted(r), r["status"].get("demand", {}).get(gpu)) for r in recs.values())
            waiting = [r for r in recs.values() if not admitted(r)]
            return states == [(False, "4"), (True, "4")] and "templates changed" in condition(waiting[0]).get(
                "message", ""
            )

        await eventually(one_readmitted_one_waiting, timeout=90, what="one group admitted again, one waiting")
        recs = await records(api, namespace)
        [waiting] = [i for i, r in recs.items() if not admitted(r)]
        said = condition(recs[waiting])
        print(f"group {waiting}: {said['reason']}: {said['message']}")
        assert said["reason"] == "WaitingForQuota"
        assert said["message"].endswith(
            "; it was admitted with 2 cpu, 2 nvidia.com/gpu before its LeaderWorkerSet's templates "
            "changed, and gave that back when its last old pod went"
        )
        v = await settle(api, namespace, "grow", expected_pods=4, size=2, timeout=60)
        by_group = {g.index: g for g in v.groups.values()}
        assert by_group[1 - waiting].whole(2), "the group admitted again runs whole"
        assert v.gated_pods == 2 and v.gpus_stranded == 0, "the other waits whole, holding nothing"
        for pod in await lws_pods(api, namespace, "grow"):
            assert pod["metadata"]["labels"][REVISION_LABEL] not in old_revisions, "every pod is new"

        await (await Pool.get(pool, api=api)).patch({"spec": {"quota": {gpu: 8}}})
        v = await settle(api, namespace, "grow", expected_pods=4, size=2, timeout=90)
        assert v.whole_groups == 2 and v.gated_pods == 0
        tg.cancel_scope.cancel()
    assert 0 < peak <= 8
    recs = await records(api, namespace)
    assert all(admitted(r) and r["status"]["demand"][gpu] == "4" for r in recs.values())
    assert all(r["status"].get("templateRevision") not in old_revisions for r in recs.values())


async def test_new_pods_wait_while_an_old_pod_of_their_group_remains(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    """A finalizer keeps an old worker terminating through a demand-changing update: the
    group keeps its old reservation, its new leader stays gated, the record says why; once
    the old pod is gone the group is admitted again at its new demand."""
    gpu = "nvidia.com/gpu"
    hold = "test.lws-gatekeeper.io/hold"
    nodes = await fake_nodes(2, gpus=2)
    pool = await make_pool(nodes, quota={gpu: 4})
    lws = await create_lws(api, namespace, lws_body("grow", pool, nodes, replicas=1))
    await settle(api, namespace, "grow", expected_pods=2, size=2)
    worker = await Pod.get("grow-0-1", namespace=namespace, api=api)
    await worker.patch({"metadata": {"finalizers": [hold]}})

    two = {"limits": {gpu: "2"}, "requests": {"cpu": "1"}}
    bigger = lws_body("grow", pool, nodes, replicas=1, leader=two, worker=two)
    await lws.patch({"spec": {"leaderWorkerTemplate": bigger["spec"]["leaderWorkerTemplate"]}})
    try:

        async def held() -> bool:
            rec = (await records(api, namespace)).get(0)
            pods = {p["metadata"]["name"]: p for p in await lws_pods(api, namespace, "grow")}
            leader = pods.get("grow-0", {})
            new_leader_gated = bool(leader.get("spec", {}).get("schedulingGates")) and not leader.get(
                "metadata", {}
            ).get("deletionTimestamp")
            return rec is not None and condition(rec).get("reason") == "TemplateChanged" and new_leader_gated

        await eventually(held, timeout=60, what="the record to say TemplateChanged and the new leader gated")
        rec = (await records(api, namespace))[0]
        said = condition(rec)
        print(said["message"])
        assert admitted(rec), "the reservation holds while the old pod remains"
        assert said["message"] == (
            "group 0's LeaderWorkerSet changed: it now needs 2 cpu, 4 nvidia.com/gpu for 2 pods (admitted "
            "with 2 cpu, 2 nvidia.com/gpu for 2); it keeps its admission while its 1 old pod remains, and "
            "its 1 new pod waits to be admitted again when they are gone"
        )
        reasons = {e["reason"] for e in await events_for(api, namespace, "grow")}
        assert "TemplateChanged" in reasons, reasons
    finally:
        await worker.patch({"metadata": {"finalizers": None}})

    v = await settle(api, namespace, "grow", expected_pods=2, size=2, timeout=90)
    assert v.whole_groups == 1
    rec = (await records(api, namespace))[0]
    assert admitted(rec) and condition(rec)["reason"] == "Admitted"
    assert rec["status"]["demand"][gpu] == "4"


async def test_rolling_update_of_the_image_keeps_the_reservation(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    """A new image, same demand: the group's pods are replaced on its reservation, and a
    waiting LWS does not slip into the gap while they are."""
    nodes = await fake_nodes(2, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 2})
    lws = await create_lws(api, namespace, lws_body("serve", pool, nodes, replicas=1))
    await settle(api, namespace, "serve", expected_pods=2, size=2)
    await create_lws(api, namespace, lws_body("late", pool, nodes, replicas=1))
    await settle(api, namespace, "late", expected_pods=2, size=2)
    before = (await records(api, namespace))[0]
    old = {p["metadata"]["labels"][REVISION_LABEL] for p in await lws_pods(api, namespace, "serve")}

    updated = lws_body("serve", pool, nodes, replicas=1)["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        updated[role]["spec"]["containers"][0]["image"] = "vllm:next"
    await lws.patch({"spec": {"leaderWorkerTemplate": updated}})

    async def replaced() -> bool:
        pods = await lws_pods(api, namespace, "serve")
        return len(pods) == 2 and all(
            p["metadata"]["labels"][REVISION_LABEL] not in old and p["status"].get("phase") == "Running"
            for p in pods
        )

    await eventually(replaced, timeout=90, what="both pods of serve replaced and Running")
    v = await settle(api, namespace, "serve", expected_pods=2, size=2)
    assert v.whole_groups == 1
    late = await settle(api, namespace, "late", expected_pods=2, size=2)
    assert late.gated_pods == 2, "the waiting LWS did not take the updating group's room"
    [new] = {p["metadata"]["labels"][REVISION_LABEL] for p in await lws_pods(api, namespace, "serve")}

    async def revision_recorded() -> bool:
        return (await records(api, namespace))[0]["status"].get("templateRevision") == new

    await eventually(revision_recorded, what="the record to follow the new revision")
    after = (await records(api, namespace))[0]
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["status"]["admittedAt"] == before["status"]["admittedAt"], "never admitted again"


async def test_autoscaled_pool_admits_on_quota_and_its_pods_wait_for_nodes(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    """nodeFit QuotaOnly, no node yet: an autoscaler only sees Pending pods, never gated ones.

    Two whole groups (the quota) are let through and wait Pending; the third stays gated.
    When nodes join the pool, the two run; the third still waits for quota.
    """
    nodes = await fake_nodes(0)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 4}, node_fit="QuotaOnly")
    await create_lws(api, namespace, lws_body("scale", pool, nodes, replicas=3))

    async def two_let_through() -> bool:
        pods = await lws_pods(api, namespace, "scale")
        v = summarize(pods, 2)
        pending = [p for p in pods if not p["spec"].get("schedulingGates") and not p["spec"].get("nodeName")]
        return len(pods) == 6 and v.gated_pods == 2 and len(pending) == 4

    await eventually(two_let_through, what="4 pods Pending for nodes, 2 gated")
    recs = await records(api, namespace)
    assert [i for i, r in sorted(recs.items()) if admitted(r)] == [0, 1]
    said = condition(recs[0])["message"]
    print(said)
    assert said.endswith("2 nvidia.com/gpu; 2 pods wait Pending for new nodes (nodeFit QuotaOnly)"), said
    assert condition(recs[2])["reason"] == "WaitingForQuota"

    await fake_nodes(4, gpus=1, join=nodes)  # the autoscaler's nodes
    v = await settle(api, namespace, "scale", expected_pods=6, size=2, timeout=60)
    assert sorted(g.index for g in v.groups.values() if g.whole(2)) == [0, 1]
    assert v.gated_pods == 2 and v.gpus_stranded == 0


async def test_bad_input_is_explained_and_holds_nothing(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    nodes = await fake_nodes(2, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 2})
    cases = {
        "nopool": (lws_body("nopool", "no-such-pool", nodes), "PoolNotFound"),
        "toobig": (lws_body("toobig", pool, nodes, size=3), "ExceedsQuota"),
        "tpu": (
            lws_body("tpu", pool, nodes, leader={"limits": {"google.com/tpu": "4"}}),
            "ResourceNotInQuota",
        ),
    }
    for body, _ in cases.values():
        await create_lws(api, namespace, body)
    await create_lws(api, namespace, lws_body("good", pool, nodes))

    async def explained() -> bool:
        recs = await list_raw(api, "groupadmissions.lws-gatekeeper.io", namespace=namespace)
        reasons = {r["spec"]["leaderWorkerSet"]: condition(r).get("reason") for r in recs}
        return all(reasons.get(name) == reason for name, (_, reason) in cases.items())

    await eventually(explained, what="every bad LWS to carry its reason")
    v = await settle(api, namespace, "good", expected_pods=2, size=2)
    assert v.whole_groups == 1, "other groups go on"
    for name in cases:
        pods = await lws_pods(api, namespace, name)
        assert pods and all(not p["spec"].get("nodeName") for p in pods), f"{name}: pods stay gated"
        assert any(e["type"] == "Warning" for e in await events_for(api, namespace, name)), name
    recs = await list_raw(api, "groupadmissions.lws-gatekeeper.io", namespace=namespace)
    msgs = {r["spec"]["leaderWorkerSet"]: condition(r)["message"] for r in recs}
    print(msgs)
    assert "no-such-pool" in msgs["nopool"]
    assert "google.com/tpu" in msgs["tpu"]


async def _refused_pool(api: kr8s.asyncio.Api, pool: dict[str, Any]) -> str:
    """Create ``pool``; the API server must refuse it (422). Its message."""
    async with api.call_api(
        "POST", version="lws-gatekeeper.io/v1alpha1", url="pools", json=pool, raise_for_status=False
    ) as resp:
        assert resp.status_code == 422, resp.text
        message = str(resp.json()["message"])
    print(message)
    return message


async def test_malformed_pool_is_refused_by_the_api_server(api: kr8s.asyncio.Api, cluster: Cluster) -> None:
    bad = {
        "apiVersion": "lws-gatekeeper.io/v1alpha1",
        "kind": "Pool",
        "metadata": {"name": "malformed"},
        "spec": {"nodeSelector": {}, "quota": {"nvidia.com/gpu": "lots"}, "queueingStrategy": "Random"},
    }
    message = await _refused_pool(api, bad)
    assert "spec.quota.nvidia.com/gpu" in message
    assert "spec.queueingStrategy" in message
    assert "spec.nodeSelector" in message

    autoscaled = {**bad, "spec": {"nodeSelector": {"pool": "auto"}, "nodeFit": "QuotaOnly"}}
    message = await _refused_pool(api, autoscaled)
    assert "spec.quota is required when spec.nodeFit is QuotaOnly" in message


async def test_controller_restart_mid_burst_admits_nothing_twice(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool, cluster: Cluster
) -> None:
    assert cluster.sandbox is not None, "restarting the controller needs the sandbox"
    nodes = await fake_nodes(12, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 12})
    lws = await create_lws(api, namespace, lws_body("burst", pool, nodes, replicas=0))
    await lws.scale(12)  # 12 groups of 2 GPUs, room for 6
    await anyio.sleep(0.7)
    cluster.sandbox.stop("gatekeeper", kill=True)  # a crash, mid burst
    await anyio.sleep(2)
    await anyio.to_thread.run_sync(cluster.sandbox.start_gatekeeper)
    v = await settle(api, namespace, "burst", expected_pods=24, size=2, timeout=180)
    recs = await records(api, namespace)
    assert sum(admitted(r) for r in recs.values()) == 6
    assert v.whole_groups == 6 and v.gpus_held == 12 and v.gpus_stranded == 0
    assert sorted(g.index for g in v.groups.values() if g.whole(2)) == [0, 1, 2, 3, 4, 5]


async def test_two_replicas_one_leader_and_failover(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool, cluster: Cluster
) -> None:
    sb = cluster.sandbox
    assert sb is not None, "starting replicas needs the sandbox"
    await anyio.to_thread.run_sync(lambda: sb.start_gatekeeper("gatekeeper-2"))
    try:
        lease = await list_raw(api, "leases", namespace="lws-gatekeeper-system")
        holder = lease[0]["spec"]["holderIdentity"]
        assert holder == "gatekeeper", "the first replica still leads"
        sb.stop("gatekeeper")  # clean stop: it gives the lease up

        async def taken_over() -> bool:
            leases = await list_raw(api, "leases", namespace="lws-gatekeeper-system")
            return bool(leases[0]["spec"].get("holderIdentity") == "gatekeeper-2")

        await eventually(taken_over, timeout=30, what="the second replica to take the lease")
        # The second replica admits (the webhook is served by... nobody now: restart the first).
        await anyio.to_thread.run_sync(sb.start_gatekeeper)
        nodes = await fake_nodes(2, gpus=1)
        pool = await make_pool(nodes, quota={"nvidia.com/gpu": 2})
        await create_lws(api, namespace, lws_body("ha", pool, nodes, replicas=2))
        v = await settle(api, namespace, "ha", expected_pods=4, size=2, timeout=60)
        assert v.whole_groups == 1
        leases = await list_raw(api, "leases", namespace="lws-gatekeeper-system")
        assert leases[0]["spec"]["holderIdentity"] == "gatekeeper-2"
    finally:
        sb.stop("gatekeeper-2")


async def test_metrics_and_pool_status(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool, cluster: Cluster
) -> None:
    assert cluster.sandbox is not None
    nodes = await fake_nodes(2, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 2})
    await create_lws(api, namespace, lws_body("m", pool, nodes, replicas=3))
    await settle(api, namespace, "m", expected_pods=6, size=2)

    async def status_written() -> bool:
        objs = await list_raw(api, "pools.lws-gatekeeper.io")
        st = next(o for o in objs if o["metadata"]["name"] == pool).get("status", {})
        return st.get("admittedGroups") == 1 and st.get("waitingGroups") == 2

    await eventually(status_written, what="the pool's status")
    table = cluster.kubectl("get", "pool", pool)
    print(table)
    assert "2/2 nvidia.com/gpu" in table
    text = await anyio.to_thread.run_sync(cluster.sandbox.metrics)
    assert f'lws_gatekeeper_admissions_total{{backend="pools",pool="{pool}"}}' in text
    assert f'lws_gatekeeper_waiting_groups{{backend="pools",pool="{pool}"}} 2.0' in text
    assert "lws_gatekeeper_admission_wait_seconds_bucket" in text
    assert "lws_gatekeeper_api_requests_total" in text
    assert "lws_gatekeeper_leader 1.0" in text
    families = text_string_to_metric_families(text)
    [info] = [s for f in families if f.name == "lws_gatekeeper_build_info" for s in f.samples]
    assert info.value == 1 and info.labels["backend"] == "pools" and info.labels["role"] == "member", info
    assert info.labels["version"] and info.labels["python_version"].startswith("3."), info
    pods = await lws_pods(api, namespace, "m")
    assert summarize(pods, 2).gated_pods == 4


async def test_a_deleted_pools_gauges_leave_the_metrics(
    fake_nodes: MakeNodes, make_pool: MakePool, cluster: Cluster
) -> None:
    """A scrape shows only what is: once a Pool is deleted, its waiting, quota and used series go."""
    assert cluster.sandbox is not None
    sandbox = cluster.sandbox
    nodes = await fake_nodes(1, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 1})
    series = f'lws_gatekeeper_pool_quota{{pool="{pool}",resource="nvidia.com/gpu"}} 1.0'

    async def shown(present: bool) -> bool:
        text = await anyio.to_thread.run_sync(sandbox.metrics)
        if present:
            return series in text
        return not any(
            f'pool="{pool}"' in line for line in text.splitlines() if "_pool_" in line or "waiting" in line
        )

    await eventually(lambda: shown(True), what="the pool's quota series")
    cluster.kubectl("delete", "pool", pool)
    await eventually(lambda: shown(False), what="the deleted pool's gauge series gone")

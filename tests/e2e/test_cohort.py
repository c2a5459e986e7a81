"""Borrowing between the Pools of one cohort, and a lender taking its room back, in the sandbox.

Why this exists: two teams' Pools of two 1-GPU nodes each share a ``spec.cohort``. A research
team (its own namespace, ``edit`` there) runs a batch of two groups in its pool: one runs on
its own nodes, the other on the serving team's idle nodes, on a loan its record names. The
serving team's own LWS then comes (same priority): its pool reclaims its room
(``reclaimWithinCohort: Any``), the borrower's group is evicted whole and waits gated, the
serving group runs. When the serving LWS goes, the batch borrows again. Both teams act as their
own tenants (``--as`` their ServiceAccounts); a sampler holds every pool's bound GPUs to its
quota and ``attack_watch`` finds no group half-placed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kr8s.asyncio
from kr8s.asyncio.objects import Namespace

from gatekeeper.core.kube.keys import LWS_NAME_LABEL
from gatekeeper_lab.sandbox.replay import list_raw

from .attack_support import two_teams
from .conftest import Cluster, MakeNodes, admitted, condition, eventually, records
from .test_admission import events_for, lws_body
from .test_policies import kubectl, ok
from .test_preemption import _all_gated
from .watch import Watch

GPU = "nvidia.com/gpu"


def _bound_on(pods: list[dict[str, Any]], nodes: set[str]) -> int:
    """GPUs of live pods bound on ``nodes`` (each test pod asks one)."""
    return sum(
        1
        for p in pods
        if p["spec"].get("nodeName") in nodes and p["status"].get("phase") not in ("Succeeded", "Failed")
    )


@contextlib.asynccontextmanager
async def _sampled(
    api: kr8s.asyncio.Api, sides: dict[str, set[str]], most: int
) -> AsyncIterator[dict[str, int]]:
    """Every half second, the GPUs bound on each side's nodes, in any namespace; the most seen."""
    seen = dict.fromkeys(sides, 0)

    async def sample() -> None:
        while True:
            pods = await list_raw(api, "pods", namespace=kr8s.ALL)
            for side, nodes in sides.items():
                seen[side] = max(seen[side], _bound_on(pods, nodes))
            await asyncio.sleep(0.5)

    task = asyncio.create_task(sample())
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert all(v <= most for v in seen.values()), f"bound GPUs per pool at most {seen}, quota {most}"
    assert all(v == most for v in seen.values()), f"the sampler saw every pool full at some point: {seen}"


async def _pods(api: kr8s.asyncio.Api, namespace: str, name: str) -> list[dict[str, Any]]:
    return await list_raw(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: name})


def _running_on(pods: list[dict[str, Any]], nodes: set[str]) -> int:
    return sum(
        1
        for p in pods
        if p["status"].get("phase") == "Running"
        and p["spec"].get("nodeName") in nodes
        and not p["metadata"].get("deletionTimestamp")
    )


async def test_a_pool_lends_its_idle_room_and_takes_it_back_whole(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    attack_watch: Watch,
    tmp_path: Path,
) -> None:
    nodes = await fake_nodes(2, gpus=1, labels={"side": "research"})
    research_nodes = set(nodes.names)
    await fake_nodes(2, gpus=1, labels={"side": "serving"}, join=nodes)
    serving_nodes = set(nodes.names) - research_nodes
    attack_watch.pool(nodes.selector, 4)
    cohort, lab = f"c{nodes.id}", f"lab-{uuid.uuid4().hex[:6]}"
    pool_of = {side: f"{side}-{nodes.id}" for side in ("research", "serving")}
    pools = [
        {
            "apiVersion": "lws-gatekeeper.io/v1alpha1",
            "kind": "Pool",
            "metadata": {"name": pool_of[side]},
            "spec": {
                "nodeSelector": {**nodes.selector, "side": side},
                "namespaceSelector": {},
                "quota": {GPU: 2},
                "cohort": cohort,
                **({"preemption": {"reclaimWithinCohort": "Any"}} if side == "serving" else {}),
            },
        }
        for side in ("research", "serving")
    ]
    await ok(
        cluster, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": pools})
    )
    await (await Namespace({"metadata": {"name": lab}}, api=api)).create()
    try:
        serving, research = await two_teams(cluster, namespace, lab, tmp_path)
        sides = {"research": research_nodes, "serving": serving_nodes}
        async with _sampled(api, sides, 2) as most:
            batch = lws_body("batch", pool_of["research"], nodes, replicas=2)
            batch["metadata"]["namespace"] = lab
            await ok(cluster, "create", "-f", "-", kubeconfig=research, input=json.dumps(batch))

            async def borrowing() -> bool:
                pods = await _pods(api, lab, "batch")
                return _running_on(pods, research_nodes) == 2 and _running_on(pods, serving_nodes) == 2

            await eventually(
                borrowing, timeout=90, what="batch's 2 groups running, one on the serving pool's nodes"
            )
            recs = await records(api, lab, "batch")
            lent = [i for i, r in recs.items() if r["status"].get("borrowedFrom") == pool_of["serving"]]
            assert len(lent) == 1 and all(admitted(r) for r in recs.values()), [
                r["status"] for r in recs.values()
            ]
            [loan] = lent
            assert "(borrowed from pool" in condition(recs[loan])["message"]
            assert all(r["status"]["pool"] == pool_of["research"] for r in recs.values())
            status = await list_raw(api, "pools.lws-gatekeeper.io")
            by_name = {p["metadata"]["name"]: p.get("status", {}) for p in status}
            for p in status:  # every condition the gatekeeper writes observes the object's generation
                if p["metadata"]["name"] in pool_of.values():
                    [valid] = p["status"]["conditions"]
                    assert valid["observedGeneration"] == p["metadata"]["generation"], p["status"]
            for r in recs.values():
                [said] = r["status"]["conditions"]
                assert said["observedGeneration"] == r["metadata"]["generation"] == 1, r["status"]
            lent_by, borrowed_by = by_name[pool_of["serving"]], by_name[pool_of["research"]]
            assert lent_by.get("lent", {}).get(GPU) == "2" and lent_by.get("borrowed") == {}, lent_by
            assert borrowed_by.get("borrowed", {}).get(GPU) == "2", borrowed_by

            code, _, _ = await kubectl(
                cluster, "patch", "groupadmission", recs[loan]["metadata"]["name"], "-n", lab,
                "--subresource=status", "--type=merge", "-p", json.dumps({"status": {"borrowedFrom": None}}),
                kubeconfig=research,
            )  # fmt: skip
            assert code != 0, "a tenant may not rewrite where its group holds its admission"

            started = time.monotonic()
            owner = lws_body("owner", pool_of["serving"], nodes)
            owner["metadata"]["namespace"] = namespace
            await ok(cluster, "create", "-f", "-", kubeconfig=serving, input=json.dumps(owner))

            async def reclaimed() -> bool:
                return _running_on(await _pods(api, namespace, "owner"), serving_nodes) == 2

            await eventually(reclaimed, timeout=90, what="the serving pool's own group running on its nodes")
            took = time.monotonic() - started
            r = (await records(api, lab, "batch"))[loan]
            said = condition(r)
            assert not admitted(r) and said["reason"] in ("Preempted", "WaitingForQuota"), r["status"]

            async def loan_gated() -> bool:
                pods = [
                    p
                    for p in await _pods(api, lab, "batch")
                    if p["metadata"]["labels"].get("leaderworkerset.sigs.k8s.io/group-index") == str(loan)
                ]
                return _all_gated(pods, 2)

            await eventually(loan_gated, timeout=60, what="the borrower's group back, gated, unbound")
            assert _running_on(await _pods(api, lab, "batch"), research_nodes) == 2, "its own group runs on"
            told = {e.get("reason"): e.get("message", "") for e in await events_for(api, lab, "batch")}
            assert (
                "Preempted" in told and "lent it room from its cohort and took it back" in told["Preempted"]
            ), told
            assert "owner" not in told["Preempted"], "another namespace's LWS is not named"
            owner_told = [
                e for e in await events_for(api, namespace, "owner") if e.get("reason") == "Preempting"
            ]
            assert owner_told and "borrowing its room" in owner_told[0]["message"], owner_told

            await ok(cluster, "delete", "lws", "owner", "-n", namespace, kubeconfig=serving)
            await eventually(
                borrowing, timeout=90, what="batch's second group borrowing again once the room is free"
            )
        print(
            f"\nreclaimed: the owner's group Running {took:.1f} s after its LWS was made; "
            f"bound GPUs at most per pool: {most} (quota 2 each)"
        )
    finally:
        await ok(cluster, "delete", "lws", "--all", "-n", lab, "--wait=false")
        await (await Namespace.get(lab, api=api)).delete()
        await kubectl(cluster, "delete", "pool", *pool_of.values(), "--ignore-not-found", "--wait=false")

"""An upgrade of the gatekeeper rolls both replicas while groups run and others wait: nothing is
admitted twice, nothing lost, the quota holds, the waiting groups are admitted after.

Why this exists: ``helm upgrade`` with a new image replaces the Deployment's two pods the way
a RollingUpdate does (the chart's defaults: one pod more, none fewer): a new pod starts and
campaigns for the Lease, then an old one stops, and again, until the leader itself goes and a
new replica takes the Lease with caches of its own. Whatever the new replica decides comes
from the cluster's records alone. This test plays that sequence on the sandbox's processes
(the image itself is proved by ``test_image.py`` and ``test_registry_install.py``), with
groups moving mid-roll: a running LWS shrinks while the old leader leads and while the
Lease changes hands, so that waiting groups are admitted by whichever replica leads.

What is checked, from the cluster: the groups running before the roll keep the same
records, the same admission (its condition's transition time) and the same pods; no group
is announced admitted twice (its ``Admitted`` Events); the GPUs bound on the pool's nodes
never pass its quota (``attack_watch``, which also has another tenant's group run at the
end); the Lease is held by a new replica afterwards; and the groups that waited are admitted.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import Any

import anyio
import kr8s.asyncio

from gatekeeper.core.kube.keys import POOL_LABEL
from gatekeeper_lab.sandbox.cluster import Sandbox
from gatekeeper_lab.sandbox.observe import GROUP_INDEX_LABEL
from gatekeeper_lab.sandbox.replay import list_raw, settle

from . import kueue_support as ks
from .conftest import Cluster, MakeNodes, MakePool, admitted, condition, eventually
from .test_admission import create_lws, events_for, lws_body, lws_pods
from .watch import Watch

GATEKEEPER_NAMESPACE = "lws-gatekeeper-system"
OLD = ("gatekeeper", "gatekeeper-2")
"""The two replicas before the upgrade (the first serves the sandbox's webhook)."""
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
NEW = "gatekeeper-new"
"""The first new replica; the second is the first old one's replacement, of its name."""


async def _records(api: kr8s.asyncio.Api, namespace: str) -> dict[tuple[str, int], dict[str, Any]]:
    objs = await list_raw(api, "groupadmissions.lws-gatekeeper.io", namespace=namespace)
    return {(o["spec"]["leaderWorkerSet"], int(o["spec"]["groupIndex"])): o for o in objs}


async def _holder(api: kr8s.asyncio.Api) -> str:
    leases = await list_raw(api, "leases", namespace=GATEKEEPER_NAMESPACE)
    return str(leases[0]["spec"].get("holderIdentity") or "") if leases else ""


async def _admitted(api: kr8s.asyncio.Api, namespace: str, lws: str, index: int) -> bool:
    return admitted((await _records(api, namespace)).get((lws, index), {}))


async def _running(api: kr8s.asyncio.Api, namespace: str, lws: str, index: int) -> tuple[Any, ...]:
    """What shows a group was neither lost nor admitted again: its record (by UID), when its
    admission began, and its pods (by UID)."""
    record = (await _records(api, namespace))[(lws, index)]
    assert admitted(record), f"{lws} group {index} is not admitted: {condition(record)}"
    pods = sorted(
        p["metadata"]["uid"]
        for p in await lws_pods(api, namespace, lws)
        if p["metadata"]["labels"].get(GROUP_INDEX_LABEL) == str(index)
    )
    return record["metadata"]["uid"], condition(record)["lastTransitionTime"], tuple(pods)


def groups_told(message: str) -> list[int]:
    """The groups an ``Admitted`` Event names: one pass's admissions of an LWS are one Event,
    its parts joined by "; " (``core.writes.plan.merge_events``), each "group N admitted ...";
    the other parts (what a group's message adds, "and N more") name none."""
    return [int(part.split()[1]) for part in message.split("; ") if re.match(r"group \d+ admitted", part)]


async def admissions(api: kr8s.asyncio.Api, namespace: str, lws: str) -> Counter[int]:
    """How many times each group of ``lws`` was announced admitted (its ``Admitted`` Events)."""
    seen: Counter[int] = Counter()
    for e in await events_for(api, namespace, lws):
        if e.get("reason") == "Admitted":
            for index in groups_told(str(e.get("message") or "")):
                seen[index] += int(e.get("count") or 1)
    return seen


async def test_a_rolling_upgrade_of_both_replicas_admits_nothing_twice_and_loses_nothing(
    api: kr8s.asyncio.Api,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    cluster: Cluster,
    attack_watch: Watch,
) -> None:
    sb = cluster.sandbox
    assert sb is not None, "the roll restarts the sandbox's gatekeeper"
    nodes = await fake_nodes(6, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 4})
    attack_watch.pool(nodes.selector, 4)
    await anyio.to_thread.run_sync(lambda: sb.start_gatekeeper(OLD[1]))
    started = [OLD[1]]
    try:
        # Before: two groups of "serve" run (4 of 4 GPUs); "next" waits with two groups.
        await create_lws(api, namespace, lws_body("serve", pool, nodes, replicas=2))
        await settle(api, namespace, "serve", expected_pods=4, size=2, timeout=90)
        await create_lws(api, namespace, lws_body("next", pool, nodes, replicas=2))
        await settle(api, namespace, "next", expected_pods=4, size=2, timeout=90)
        before = await _records(api, namespace)
        assert [k for k, r in sorted(before.items()) if admitted(r)] == [("serve", 0), ("serve", 1)]
        serve_zero = await _running(api, namespace, "serve", 0)
        assert await _holder(api) == OLD[0]

        # The roll: a new replica first, then an old one goes.
        await anyio.to_thread.run_sync(lambda: sb.start_gatekeeper(NEW))
        started.append(NEW)
        sb.stop(OLD[1])
        started.remove(OLD[1])
        # Mid-roll, the old leader still leading: "serve" shrinks, "next" group 0 goes in.
        cluster.kubectl("scale", "leaderworkerset", "serve", "-n", namespace, "--replicas=1")
        await eventually(
            lambda: _admitted(api, namespace, "next", 0), timeout=60, what="next's group 0 admitted"
        )
        next_zero = await _running(api, namespace, "next", 0)
        # The leader goes; the new replica takes the Lease with caches of its own; the old
        # leader's pod is replaced by a new one (it serves the sandbox's webhook).
        sb.stop(OLD[0])

        async def new_leader() -> bool:
            return await _holder(api) == NEW

        await eventually(new_leader, timeout=60, what="the new replica to take the Lease")
        await anyio.to_thread.run_sync(sb.start_gatekeeper)
        # Nothing running was lost or admitted again, and "next" group 1 still waits: the
        # quota is full (serve 0 and next 0).
        await anyio.sleep(5)  # several passes of the new leader
        assert await _running(api, namespace, "serve", 0) == serve_zero
        assert await _running(api, namespace, "next", 0) == next_zero
        waiting = (await _records(api, namespace))[("next", 1)]
        assert not admitted(waiting) and condition(waiting)["reason"] == "WaitingForQuota", condition(waiting)

        # After the roll: "serve" goes, and the new leader admits "next" group 1.
        cluster.kubectl("scale", "leaderworkerset", "serve", "-n", namespace, "--replicas=0")
        await eventually(
            lambda: _admitted(api, namespace, "next", 1), timeout=90, what="next's group 1 admitted"
        )
        v = await settle(api, namespace, "next", expected_pods=4, size=2, timeout=90)
        assert v.whole_groups == 2 and v.gpus_stranded == 0, v
        assert await _running(api, namespace, "next", 0) == next_zero
        for lws in ("serve", "next"):
            announced = await admissions(api, namespace, lws)
            assert announced == {0: 1, 1: 1}, f"{lws}: each group announced admitted once: {announced}"
    finally:
        for name in started:
            sb.stop(name)


# ----- the same roll with the kueue backend ---------------------------------------------------


def _kueue_records(sb: Sandbox, ns: str) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["spec"]["leaderWorkerSet"], int(r["spec"]["groupIndex"])): r for r in ks.records(sb, ns)}


def _kueue_running(sb: Sandbox, ns: str, lws: str, index: int) -> tuple[Any, ...]:
    """A group neither lost nor admitted again: its record, when its admission began, its
    Workload (by UID) and its pods (by UID)."""
    record = _kueue_records(sb, ns)[(lws, index)]
    assert admitted(record), f"{lws} group {index} is not admitted: {condition(record)}"
    workload = ks.get(sb, "workloads.kueue.x-k8s.io", record["status"]["workload"], "-n", ns)
    pods = sorted(
        p["metadata"]["uid"]
        for p in ks.pods(sb, ns)
        if p["metadata"]["labels"].get(LWS_NAME) == lws and ks.group_of(p) == str(index)
    )
    return (
        record["metadata"]["uid"],
        condition(record)["lastTransitionTime"],
        workload["metadata"]["uid"],
        tuple(pods),
    )


def _kueue_announced(sb: Sandbox, ns: str, lws: str) -> Counter[int]:
    seen: Counter[int] = Counter()
    for e in ks.items(sb, "events", "-n", ns):
        if e.get("involvedObject", {}).get("name") == lws and e.get("reason") == "Admitted":
            for index in groups_told(str(e.get("message") or "")):
                seen[index] += int(e.get("count") or 1)
    return seen


def _kueue_holder(sb: Sandbox) -> str:
    leases = ks.items(sb, "leases", "-n", GATEKEEPER_NAMESPACE)
    return str(leases[0]["spec"].get("holderIdentity") or "") if leases else ""


def test_a_rolling_upgrade_on_kueue_keeps_every_workload_and_admits_nothing_twice(
    kueue_sandbox: Sandbox, kueue_attack_watch: Watch
) -> None:
    sb = kueue_sandbox
    q = ks.make_queue(sb, gpus=4, nodes=6, gpus_per_node=1, managed=False)
    kueue_attack_watch.pool(q.labels, 4)
    ns, opted = q.namespace, {POOL_LABEL: q.local_queue}
    sb.start_gatekeeper(OLD[1])
    started = [OLD[1]]
    try:
        sb.apply([ks.lws("serve", ns, opted, replicas=2, size=2, gpus_per_pod=1)])
        ks.wait(
            "serve: 2 groups Running",
            lambda: ks.settled(sb, ns, running=2, gated=0, size=2, lws_name="serve"),
        )
        sb.apply([ks.lws("next", ns, opted, replicas=2, size=2, gpus_per_pod=1)])
        ks.wait(
            "next: 2 groups gated", lambda: ks.settled(sb, ns, running=0, gated=2, size=2, lws_name="next")
        )
        serve_zero = _kueue_running(sb, ns, "serve", 0)
        assert _kueue_holder(sb) == OLD[0]

        sb.start_gatekeeper(NEW)
        started.append(NEW)
        sb.stop(OLD[1])
        started.remove(OLD[1])
        sb.kubectl("scale", "leaderworkerset", "serve", "-n", ns, "--replicas=1")
        ks.wait("next's group 0 admitted", lambda: admitted(_kueue_records(sb, ns).get(("next", 0), {})))
        next_zero = _kueue_running(sb, ns, "next", 0)
        sb.stop(OLD[0])
        ks.wait("the new replica to take the Lease", lambda: _kueue_holder(sb) == NEW or None, timeout=60)
        sb.start_gatekeeper()
        time.sleep(5)  # several passes of the new leader
        assert _kueue_running(sb, ns, "serve", 0) == serve_zero
        assert _kueue_running(sb, ns, "next", 0) == next_zero
        assert not admitted(_kueue_records(sb, ns)[("next", 1)])

        sb.kubectl("scale", "leaderworkerset", "serve", "-n", ns, "--replicas=0")
        ks.wait(
            "next: 2 groups Running",
            lambda: ks.settled(sb, ns, running=2, gated=0, size=2, lws_name="next"),
            timeout=120,
        )
        assert _kueue_running(sb, ns, "next", 0) == next_zero
        per_group = Counter(
            ks.group_of(w) for w in ks.workloads(sb, ns) if w["metadata"]["labels"].get(LWS_NAME) == "next"
        )
        assert per_group == {"0": 1, "1": 1}, per_group
        for lws in ("serve", "next"):
            announced = _kueue_announced(sb, ns, lws)
            assert announced == {0: 1, 1: 1}, f"{lws}: each group announced admitted once: {announced}"
    finally:
        for name in started:
            sb.stop(name)

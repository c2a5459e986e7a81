"""Whole-group preemption in a Pool (``spec.preemption.withinPool: LowerPriority``), in the sandbox.

Why this exists: the seed's HPA case on a shared pool. A team's experiment (low priority, its own
namespace) holds most of the pool; the serving team's production LWS (high priority) is scaled
up as its HPA would. Production's new groups must run whole, the experiment's groups must be
evicted whole (records first: their pods come back gated and wait), the GPUs bound on the pool
never above its quota and none stranded in a half-placed group at any sample
(``attack_watch``). Each team acts as its own tenant (``--as`` its ServiceAccount, ``edit``).
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import kr8s.asyncio
from kr8s.asyncio.objects import Namespace

from gatekeeper.core.kube.keys import EXCLUSIVE_TOPOLOGY_ANNOTATION, LWS_NAME_LABEL, SCHEDULING_GATE
from gatekeeper_lab.sandbox.replay import list_raw

from .attack_support import two_teams
from .conftest import Cluster, MakeNodes, MakePool, admitted, condition, eventually, records
from .record_watch import conditions_seen
from .test_admission import events_for, lws_body
from .test_policies import kubectl, ok
from .watch import Watch


@contextlib.asynccontextmanager
async def _priority_classes(cluster: Cluster, suffix: str) -> AsyncIterator[None]:
    """The test's PriorityClasses ``experiment-<suffix>`` (10) and ``production-<suffix>`` (100000),
    deleted after it."""
    names = {f"experiment-{suffix}": 10, f"production-{suffix}": 100000}
    items = [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": v}
        for n, v in names.items()
    ]
    await ok(
        cluster, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )
    try:
        yield
    finally:
        await kubectl(cluster, "delete", "priorityclass", *names, "--ignore-not-found")


async def _pods(api: kr8s.asyncio.Api, namespace: str, name: str) -> list[dict[str, Any]]:
    return await list_raw(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: name})


def _all_gated(pods: list[dict[str, Any]], at_least: int) -> bool:
    """At least ``at_least`` live pods, every one gated by the gatekeeper, none bound."""
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    gated = [p for p in live if SCHEDULING_GATE in {g["name"] for g in p["spec"].get("schedulingGates", [])}]
    return (
        len(live) >= at_least and len(gated) == len(live) and not any(p["spec"].get("nodeName") for p in live)
    )


def _running(pods: list[dict[str, Any]]) -> int:
    return sum(
        1
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    )


async def test_production_scaled_up_preempts_the_experiment_whole(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    attack_watch: Watch,
    tmp_path: Path,
) -> None:
    """Six 1-GPU nodes, quota 6. ``experiment`` (class experiment, namespace lab) runs two groups
    of 2; ``production`` (class production, the test's namespace) one. Production is scaled
    1 -> 3: both experiment groups are preempted whole, production's three groups run, the
    experiment's pods wait gated, and each LWS is told by an Event."""
    nodes = await fake_nodes(6, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 6})
    await ok(
        cluster, "patch", "pool", pool, "--type=merge",
        "-p", json.dumps({"spec": {"preemption": {"withinPool": "LowerPriority"}}}),
    )  # fmt: skip
    attack_watch.pool(nodes.selector, 6)
    suffix = nodes.id
    lab = f"lab-{uuid.uuid4().hex[:6]}"
    await (await Namespace({"metadata": {"name": lab}}, api=api)).create()
    async with _priority_classes(cluster, suffix):
        try:
            serving, research = await two_teams(cluster, namespace, lab, tmp_path)

            async def make(name: str, ns: str, klass: str, replicas: int, who: Path) -> None:
                body = lws_body(name, pool, nodes, replicas=replicas, priority_class=f"{klass}-{suffix}")
                body["metadata"]["namespace"] = ns
                await ok(cluster, "create", "-f", "-", kubeconfig=who, input=json.dumps(body))

            await make("experiment", lab, "experiment", 2, research)
            await make("production", namespace, "production", 1, serving)

            async def settled() -> bool:
                exp, prod = await _pods(api, lab, "experiment"), await _pods(api, namespace, "production")
                return _running(exp) == 4 and _running(prod) == 2

            await eventually(settled, timeout=90, what="the experiment's 2 groups and production's 1 running")

            assert cluster.sandbox is not None
            with conditions_seen(cluster.sandbox, lab) as seen:
                started = time.monotonic()
                await ok(
                    cluster, "scale", "lws", "production", "--replicas=3", "-n", namespace, kubeconfig=serving
                )

                async def production_whole() -> bool:
                    return _running(await _pods(api, namespace, "production")) == 6

                await eventually(production_whole, timeout=120, what="production's 3 groups running")
                took = time.monotonic() - started
                print(f"\nproduction 1 -> 3: all 6 pods Running {took:.1f} s after the scale")

            preempted = {c["groupIndex"]: c for c in seen if c.get("reason") == "Preempted"}
            assert sorted(preempted) == [0, 1], seen
            for c in preempted.values():
                assert c["status"] == "False"
                assert "by a group of another namespace of priority 100000" in c["message"], c["message"]
                assert "production" not in c["message"], "another namespace's LWS is not named"

            async def experiment_gated() -> bool:
                return _all_gated(await _pods(api, lab, "experiment"), 2)

            await eventually(experiment_gated, timeout=60, what="the experiment's pods back, gated, unbound")
            for r in (await records(api, lab, "experiment")).values():
                assert not admitted(r) and condition(r)["reason"] in ("Preempted", "WaitingForQuota"), r[
                    "status"
                ]

            told_lab = {e.get("reason") for e in await events_for(api, lab, "experiment")}
            told_prod = [
                e for e in await events_for(api, namespace, "production") if e.get("reason") == "Preempting"
            ]
            assert "Preempted" in told_lab, told_lab
            scraped = await anyio.to_thread.run_sync(cluster.sandbox.metrics)
            counted = (
                f'lws_gatekeeper_give_backs_total{{backend="pools",pool="{pool}",reason="Preempted"}} 2.0'
            )
            assert counted in scraped, "the two groups given back are counted, by backend, pool and reason"
            assert told_prod, "production's LWS is told it preempted"
            assert (
                "of other namespaces" in told_prod[0]["message"]
                and "experiment" not in told_prod[0]["message"]
            )

            code, _, _ = await kubectl(
                cluster, "patch", "pool", pool, "--type=merge", "-p", '{"spec": {}}', kubeconfig=research
            )
            assert code != 0, "a tenant may not change the Pool's preemption"
        finally:
            await ok(cluster, "delete", "lws", "--all", "-n", lab, "--wait=false")
            await (await Namespace.get(lab, api=api)).delete()


async def test_the_schedulers_own_preemption_leaves_no_half_group(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    attack_watch: Watch,
) -> None:
    """Two 1-GPU nodes, an open pool (no taint of its own), quota 2. ``exp`` (low priority) runs
    one group of 2. A pod the gatekeeper never saw, of higher priority, asks for a GPU there: the
    default scheduler preempts one of exp's pods, the LWS makes the group again, one pod binds,
    the other finds no room. The group is given back whole (``Stranded``) within seconds rather
    than holding a node for nothing, and waits gated; ``attack_watch`` samples that no group is
    half-placed for 15 s and that no more than 2 GPUs are bound."""
    nodes = await fake_nodes(2, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 2})
    attack_watch.pool(nodes.selector, 2)
    suffix = nodes.id
    async with _priority_classes(cluster, suffix):
        body = lws_body("exp", pool, nodes, priority_class=f"experiment-{suffix}")
        body["metadata"]["namespace"] = namespace
        await ok(cluster, "create", "-f", "-", input=json.dumps(body))

        async def placed() -> bool:
            r = (await records(api, namespace, "exp")).get(0, {})
            return admitted(r) and bool(r.get("status", {}).get("placedAt"))

        await eventually(placed, timeout=90, what="exp's group placed whole")
        urgent = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "urgent", "namespace": namespace},
            "spec": {
                "priorityClassName": f"production-{suffix}",
                "nodeSelector": nodes.selector,
                "tolerations": [{"key": nodes.taint_key, "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            },
        }
        assert cluster.sandbox is not None
        with conditions_seen(cluster.sandbox, namespace) as seen:
            await ok(cluster, "create", "-f", "-", input=json.dumps(urgent))

            async def urgent_runs() -> bool:
                pods = await list_raw(api, "pods", namespace=namespace)
                return any(
                    p["metadata"]["name"] == "urgent" and p["status"].get("phase") == "Running" for p in pods
                )

            await eventually(
                urgent_runs, timeout=90, what="the urgent pod running, by the scheduler's preemption"
            )

            async def given_back() -> bool:
                return any(c.get("reason") == "Stranded" for c in seen)

            await eventually(given_back, timeout=60, what="exp's record to say Stranded")

            async def exp_waits_gated() -> bool:
                return _all_gated(await _pods(api, namespace, "exp"), 1)

            await eventually(exp_waits_gated, timeout=60, what="exp's pods back, gated, none bound")
        [stranded] = [c for c in seen if c.get("reason") == "Stranded"][:1]
        assert "no node of pool" in stranded["message"] and "given back whole" in stranded["message"]
        r = (await records(api, namespace, "exp"))[0]
        assert not admitted(r), r["status"]
        await kubectl(cluster, "delete", "pod", "urgent", "-n", namespace, "--wait=false")


async def test_min_run_seconds_keeps_a_young_group_then_lets_it_go(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    attack_watch: Watch,
) -> None:
    """Thrash protection: a Pool with ``spec.minRunSeconds: 20``. ``exp`` (low) has just been
    admitted when ``prod`` (high) comes: prod's record says it preempts nothing yet and until
    when; once exp has held its admission 20 s, it is preempted whole and prod runs, with no
    change in the cluster to wake the gatekeeper but the time."""
    nodes = await fake_nodes(2, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 2})
    patch = {"spec": {"preemption": {"withinPool": "LowerPriority"}, "minRunSeconds": 20}}
    await ok(cluster, "patch", "pool", pool, "--type=merge", "-p", json.dumps(patch))
    attack_watch.pool(nodes.selector, 2)
    suffix = nodes.id
    async with _priority_classes(cluster, suffix):
        for name, klass in (("exp", "experiment"), ("prod", "production")):
            body = lws_body(name, pool, nodes, priority_class=f"{klass}-{suffix}")
            body["metadata"]["namespace"] = namespace
            await ok(cluster, "create", "-f", "-", input=json.dumps(body))
            if name == "exp":

                async def exp_admitted() -> bool:
                    return admitted((await records(api, namespace, "exp")).get(0, {}))

                await eventually(exp_admitted, timeout=60, what="exp admitted")
                admitted_at = time.monotonic()
                stamp = (await records(api, namespace, "exp"))[0]["status"]["admittedAt"]

        async def prod_told() -> bool:
            said = condition((await records(api, namespace, "prod")).get(0, {}))
            return "preempts nothing yet" in str(said.get("message"))

        await eventually(prod_told, timeout=30, what="prod's record to say it preempts nothing yet")
        message = condition((await records(api, namespace, "prod"))[0])["message"]
        assert "spec.minRunSeconds (20 s)" in message, message
        assert time.monotonic() - admitted_at < 20, "told before exp could be preempted"

        async def prod_runs() -> bool:
            return _running(await _pods(api, namespace, "prod")) == 2

        await eventually(prod_runs, timeout=90, what="prod running once exp has run 20 s")
        print(f"\nprod ran {time.monotonic() - admitted_at:.1f} s after exp's admission (minRunSeconds 20)")
        gone = condition((await records(api, namespace, "exp"))[0])
        assert gone["status"] == "False", gone
        held = datetime.fromisoformat(gone["lastTransitionTime"]) - datetime.fromisoformat(stamp)
        assert held.total_seconds() >= 20, f"exp was preempted {held} after its admission, before 20 s"


async def test_an_exclusive_group_of_higher_priority_takes_a_rack_whole(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    attack_watch: Watch,
) -> None:
    """Exclusive placement (``leaderworkerset.sigs.k8s.io/exclusive-topology`` on a rack label):
    two racks of two 1-GPU nodes, quota 4, each rack held by a group of ``exp`` (low). ``prod``
    (high, exclusive too) fits only in a rack of its own: the preemption's simulation frees a
    victim's rack, so one exp group is evicted whole and prod runs alone in its rack."""
    rack = "topology.example.com/rack"
    nodes = await fake_nodes(2, gpus=1, labels={rack: "r1"})
    await fake_nodes(2, gpus=1, labels={rack: "r2"}, join=nodes)
    rack_of = {name: ("r1" if i < 2 else "r2") for i, name in enumerate(nodes.names)}
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 4})
    patch = {"spec": {"preemption": {"withinPool": "LowerPriority"}}}
    await ok(cluster, "patch", "pool", pool, "--type=merge", "-p", json.dumps(patch))
    attack_watch.pool(nodes.selector, 4)
    suffix = nodes.id
    async with _priority_classes(cluster, suffix):
        for name, klass, replicas in (("exp", "experiment", 2), ("prod", "production", 1)):
            body = lws_body(name, pool, nodes, replicas=replicas, priority_class=f"{klass}-{suffix}")
            body["metadata"]["namespace"] = namespace
            body["metadata"]["annotations"] = {EXCLUSIVE_TOPOLOGY_ANNOTATION: rack}
            await ok(cluster, "create", "-f", "-", input=json.dumps(body))
            if name == "exp":

                async def exp_runs() -> bool:
                    return _running(await _pods(api, namespace, "exp")) == 4

                await eventually(exp_runs, timeout=90, what="exp's two groups running, a rack each")

        async def prod_runs() -> bool:
            return _running(await _pods(api, namespace, "prod")) == 2

        await eventually(prod_runs, timeout=120, what="prod running in a rack freed for it")
        prod = [p for p in await _pods(api, namespace, "prod") if p["spec"].get("nodeName")]
        exp = [
            p
            for p in await _pods(api, namespace, "exp")
            if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
        ]
        prod_racks = {rack_of[p["spec"]["nodeName"]] for p in prod}
        exp_racks = {rack_of[p["spec"]["nodeName"]] for p in exp}
        assert len(prod_racks) == 1 and len(exp) == 2 and exp_racks.isdisjoint(prod_racks), (
            prod_racks,
            exp_racks,
        )
        recs = await records(api, namespace, "exp")
        assert sorted(admitted(r) for r in recs.values()) == [False, True], [
            r["status"] for r in recs.values()
        ]

"""A group is what its LWS said: a tenant who scales an admitted group's worker StatefulSet
past the LWS's ``size``, or edits its template, gets no more than the group's reservation.

With the StatefulSet guard on, the change is refused and the message says to change the
LWS (``core/model/owned.py``). With the guard off, the LWS's own chain makes the extra workers
(the worker StatefulSet, controlled by the group's leader pod), so the owner chain alone
would let them through. The gatekeeper holds a group to ``size`` pods
(``core/admission/members.py``) and to what its role asks (``core/admission/conformance.py``): the others stay
gated, born so by the webhook (its pass-through table knows the size) and never lifted by
a pass, and the record and a Warning Event say why. The tenant is
``system:serviceaccount:<ns>:dev`` with ``edit`` and the LWS editor role; GPUs bound on
the pool's nodes are sampled every second.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import anyio
import kr8s.asyncio
import pytest

from gatekeeper.core.kube.keys import SCHEDULING_GATE
from gatekeeper_lab.sandbox.replay import list_raw

from . import attack_table
from .attack_support import dev, guard_off
from .conftest import Cluster, MakeNodes, MakePool, admitted, condition, eventually, records
from .test_policies import kubectl
from .test_tenant_pools import create, plain_lws, pods_of, tolerate
from .watch import Watch

QUOTA = 2
HELD_METRIC = 'lws_gatekeeper_groups_holding_pods{reason="BeyondGroupSize"}'


def gpus_bound(pods: list[dict[str, Any]], nodes: list[str]) -> int:
    """GPUs asked by the live pods bound on ``nodes``."""
    total = 0
    for pod in pods:
        if pod["spec"].get("nodeName") not in nodes or pod.get("status", {}).get("phase") in (
            "Succeeded",
            "Failed",
        ):
            continue
        for c in pod["spec"].get("containers", []):
            total += int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
    return total


def gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == SCHEDULING_GATE for g in pod["spec"].get("schedulingGates", []))


def refused_by_the_guard(code: int, err: str, what: str) -> str:
    """The guard's answer, checked: refused, naming the LWS to change instead."""
    assert code != 0, f"the guard let {what} through"
    assert 'admission webhook "statefulsets' in err and "change LeaderWorkerSet lws instead" in err, err
    return err.strip().splitlines()[-1]


GUARD = pytest.mark.parametrize("guard", ["guard", "no-guard"])
"""Each attack with the StatefulSet guard on, and off (the gatekeeper's own check alone)."""


@GUARD
async def test_workers_past_the_lws_size_stay_gated(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    tmp_path: Path,
    guard: str,
    attack_watch: Watch,
) -> None:
    nodes = await fake_nodes(6, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": QUOTA}, tolerations=tolerate(nodes.id))
    attack_watch.pool(nodes.selector, QUOTA)
    others = await fake_nodes(2, gpus=1)
    other_pool = await make_pool(others, tolerations=tolerate(others.id))
    await create(api, namespace, plain_lws("lws", pool, size=2, replicas=1))

    async def whole() -> bool:
        return gpus_bound(await pods_of(api, namespace, "lws"), nodes.names) == QUOTA

    await eventually(whole, timeout=90, what="group 0 bound whole")
    kubeconfig = await dev(cluster, namespace, tmp_path)
    peak = 0
    extra: dict[str, dict[str, Any]] = {}
    async with guard_off(cluster) if guard == "no-guard" else contextlib.nullcontext():
        code, out, err = await kubectl(
            cluster, "scale", "sts/lws-0", "--replicas=3", "-n", namespace, kubeconfig=kubeconfig
        )
        answered = (out or err).strip().splitlines()[0] if (out or err).strip() else f"exit {code}"
        for _ in range(15):  # a sample a second; the extra workers are made within it
            pods = await pods_of(api, namespace, "lws")
            peak = max(peak, gpus_bound(pods, nodes.names))
            extra.update(
                {p["metadata"]["name"]: p for p in pods if p["metadata"]["name"] in ("lws-0-2", "lws-0-3")}
            )
            await anyio.sleep(1)
    assert peak <= QUOTA, f"{peak} GPUs bound on a pool of quota {QUOTA}"
    if guard == "guard":
        seen = refused_by_the_guard(code, err, "a scale of the worker StatefulSet")
        assert not extra, f"the refused scale made {sorted(extra)}"
    else:  # the scale went through: the extra workers are made, and held
        assert code == 0, err
        assert sorted(extra) == ["lws-0-2", "lws-0-3"], f"the scaled worker StatefulSet made {sorted(extra)}"
        now = {p["metadata"]["name"]: p for p in await pods_of(api, namespace, "lws")}
        for name in ("lws-0-2", "lws-0-3"):
            if name in now:
                assert gated(now[name]) and not now[name]["spec"].get("nodeName"), f"{name} was let through"

        async def said() -> bool:
            rec = (await records(api, namespace)).get(0, {})
            return condition(rec).get("reason") == "BeyondGroupSize"

        await eventually(said, what="the record's reason BeyondGroupSize")
        record = (await records(api, namespace))[0]
        assert admitted(record), "the group keeps its admission"
        message = condition(record)["message"]
        assert "beyond the group's size 2" in message and "change the LeaderWorkerSet" in message, message
        events = await list_raw(api, "events", namespace=namespace)
        warned = [
            e
            for e in events
            if e.get("reason") == "BeyondGroupSize" and e["involvedObject"].get("name") == "lws"
        ]
        assert warned and warned[0]["type"] == "Warning", [e.get("reason") for e in events]
        assert cluster.sandbox is not None
        metrics = await anyio.to_thread.run_sync(cluster.sandbox.metrics)
        held = [line for line in metrics.splitlines() if line.startswith(HELD_METRIC)]
        assert held and float(held[0].split()[-1]) >= 1, held  # this group (others' may linger)
        seen = f"{answered}; record: {message}"
    # Other groups go on: an LWS of another pool, made after the attack, runs whole.
    await create(api, namespace, plain_lws("other", other_pool, size=2, replicas=1))

    async def other_whole() -> bool:
        return gpus_bound(await pods_of(api, namespace, "other"), others.names) == 2

    await eventually(other_whole, timeout=90, what="another pool's group bound whole")
    attack_table.add(
        f"dev: kubectl scale sts/lws-0 --replicas=3 (size 2; {guard}; peak {peak} of {QUOTA} GPUs)",
        "refused" if guard == "guard" else "contained",
        seen,
    )


@GUARD
async def test_pods_of_a_hand_edited_worker_statefulset_stay_gated(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    tmp_path: Path,
    guard: str,
    attack_watch: Watch,
) -> None:
    """The tenant edits the admitted group's worker StatefulSet to ask 2 GPUs a pod (its
    template's revision label kept) and deletes the worker: the StatefulSet controller makes
    it again from the edited template, through the LWS's own chain (the LWS controller
    (v0.9.0) makes a worker StatefulSet only when it is missing, and never puts its template
    back; its LWS says ``restartPolicy: None``, so the group is not restarted as the pod goes).

    With the guard off, the pod of 2 GPUs is made and stays gated. Its leader, bound, would
    then hold its GPU for a group that cannot be whole, so the group is given back a few
    seconds later (``NotAsAdmitted``), made again from the LWS, and admitted whole."""
    nodes = await fake_nodes(4, gpus=2)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": QUOTA}, tolerations=tolerate(nodes.id))
    attack_watch.pool(nodes.selector, QUOTA)
    body = plain_lws("lws", pool, size=2, replicas=1)
    # The tenant's own LWS, made to keep a group whose pod is replaced: with the default
    # RecreateGroupOnPodRestart the LWS controller restarts the group when a pod goes, and
    # the edited worker StatefulSet goes with its leader.
    body["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "None"
    await create(api, namespace, body)

    async def whole() -> bool:
        pods = await pods_of(api, namespace, "lws")
        return gpus_bound(pods, nodes.names) == QUOTA and not any(asks_two(p) for p in pods)

    await eventually(whole, timeout=90, what="group 0 bound whole")
    [leader_uid] = [
        p["metadata"]["uid"] for p in await pods_of(api, namespace, "lws") if p["metadata"]["name"] == "lws-0"
    ]
    kubeconfig = await dev(cluster, namespace, tmp_path)
    limit = "/spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu"
    patch = json.dumps([{"op": "replace", "path": limit, "value": "2"}])
    peak = 0
    asked_two: dict[str, Any] = {}
    said: dict[str, str] = {}
    """The record's reasons seen while sampling, with their message."""
    async with guard_off(cluster) if guard == "no-guard" else contextlib.nullcontext():
        code, out, err = await kubectl(
            cluster,
            "patch",
            "sts/lws-0",
            "--type=json",
            "-p",
            patch,
            "-n",
            namespace,
            kubeconfig=kubeconfig,
        )
        answered = (out or err).strip().splitlines()[0] if (out or err).strip() else f"exit {code}"
        await kubectl(
            cluster, "delete", "pod", "lws-0-1", "-n", namespace, "--wait=false", kubeconfig=kubeconfig
        )
        for second in range(90):
            pods = await pods_of(api, namespace, "lws")
            peak = max(peak, gpus_bound(pods, nodes.names))
            asked_two.update({p["metadata"]["name"]: p for p in pods if asks_two(p)})
            now = condition((await records(api, namespace)).get(0, {}))
            said.setdefault(str(now.get("reason")), str(now.get("message")))
            if (guard == "guard" and second >= 14) or now.get("status") == "False":
                break  # 15 samples, or given back
            await anyio.sleep(1)
    assert peak <= QUOTA, f"{peak} GPUs bound on a pool of quota {QUOTA}"
    for name, p in asked_two.items():
        assert gated(p) and not p["spec"].get("nodeName"), f"{name} was let through"
    if guard == "guard":
        seen = refused_by_the_guard(code, err, "an edit of the worker StatefulSet's template")
        assert not asked_two, f"the refused edit made {sorted(asked_two)}"
        attack_table.add(
            f"dev: worker StatefulSet's template edited to 2 GPUs, its pod deleted ({guard}; "
            f"peak {peak} of {QUOTA} GPUs)",
            "refused",
            f"{seen}; the deleted worker made again with 1 GPU",
        )
        return
    assert code == 0, err
    assert "lws-0-1" in asked_two, f"no pod of 2 GPUs was made from the edited template: {said}"
    # The group was given back: its record says why, its leader was deleted (the worker
    # StatefulSet went with it), and an Event told the tenant.
    record = (await records(api, namespace))[0]
    cond = condition(record)
    assert (cond.get("status"), cond.get("reason")) == ("False", "NotAsAdmitted"), cond
    message = str(cond.get("message"))
    assert message.startswith("group 0 was given back, retried in "), message
    assert "pod lws-0-1 asks " in message, message
    assert "more than its role (worker) was admitted with" in message, message
    events = await list_raw(api, "events", namespace=namespace)
    warned = [
        e for e in events if e.get("reason") == "NotAsAdmitted" and e["involvedObject"].get("name") == "lws"
    ]
    assert any(e["type"] == "Warning" and "given back" in e.get("message", "") for e in warned), warned

    # Made again from the LWS's templates (1 GPU a pod), it is admitted whole after its retry.
    async def again() -> bool:
        pods = {p["metadata"]["name"]: p for p in await pods_of(api, namespace, "lws")}
        leader = pods.get("lws-0")
        return (
            leader is not None
            and leader["metadata"]["uid"] != leader_uid
            and gpus_bound(list(pods.values()), nodes.names) == QUOTA
            and not any(asks_two(p) for p in pods.values())
        )

    await eventually(again, timeout=150, what="the group made again and admitted whole after its retry")
    assert admitted((await records(api, namespace))[0])
    attack_table.add(
        f"dev: worker StatefulSet's template edited to 2 GPUs, its pod deleted ({guard}; "
        f"peak {peak} of {QUOTA} GPUs)",
        "contained",
        f"{answered}; a pod of 2 GPUs made, gated; record: {message}; made again from the LWS, "
        "admitted whole after its retry",
    )


def asks_two(pod: dict[str, Any]) -> bool:
    """Does a live pod ask 2 GPUs (made from the edited template)?"""
    limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
    return str(limits.get("nvidia.com/gpu")) == "2" and not pod["metadata"].get("deletionTimestamp")


async def test_a_given_back_group_holds_its_quota_while_its_pods_terminate(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    tmp_path: Path,
    attack_watch: Watch,
) -> None:
    """The tenant holds its leader with a finalizer of its own (as a long termination grace
    period would), then has its group given back (its worker StatefulSet edited to 2 GPUs,
    the guard off): the leader terminates but holds its GPU, and another group of the pool
    waits for the quota until the leader is gone."""
    nodes = await fake_nodes(4, gpus=2)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": QUOTA}, tolerations=tolerate(nodes.id))
    attack_watch.pool(nodes.selector, QUOTA)
    body = plain_lws("lws", pool, size=2, replicas=1)
    body["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "None"
    await create(api, namespace, body)

    async def whole(name: str) -> bool:
        return gpus_bound(await pods_of(api, namespace, name), nodes.names) == QUOTA

    await eventually(lambda: whole("lws"), timeout=90, what="group 0 bound whole")
    kubeconfig = await dev(cluster, namespace, tmp_path)
    hold = json.dumps({"metadata": {"finalizers": ["example.com/hold"]}})
    await kubectl(cluster, "patch", "pod", "lws-0", "-p", hold, "-n", namespace, kubeconfig=kubeconfig)
    await create(api, namespace, plain_lws("other", pool, size=2, replicas=1))
    limit = "/spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu"
    patch = json.dumps([{"op": "replace", "path": limit, "value": "2"}])
    async with guard_off(cluster):
        code, _, err = await kubectl(
            cluster, "patch", "sts/lws-0", "--type=json", "-p", patch, "-n", namespace, kubeconfig=kubeconfig
        )
        assert code == 0, err

        async def given_back() -> bool:
            objs = await list_raw(api, "groupadmissions.lws-gatekeeper.io", namespace=namespace)
            ours = [o for o in objs if o["spec"]["leaderWorkerSet"] == "lws"]
            cond = condition(ours[0]) if ours else {}
            return cond.get("status") == "False" and cond.get("reason") == "NotAsAdmitted"

        await eventually(given_back, timeout=90, what="group 0 given back")
    leader = [p for p in await pods_of(api, namespace, "lws") if p["metadata"]["name"] == "lws-0"]
    assert leader and leader[0]["metadata"].get("deletionTimestamp"), (
        "the leader is deleted, held by its finalizer"
    )
    assert leader[0]["spec"].get("nodeName") in nodes.names
    bound_other = 0
    for _ in range(8):  # the leader terminates, still bound: the other group waits for the quota
        bound_other = max(bound_other, gpus_bound(await pods_of(api, namespace, "other"), nodes.names))
        await anyio.sleep(1)
    assert bound_other == 0, f"another group got {bound_other} GPUs while the given-back leader held its own"
    let_go = json.dumps([{"op": "remove", "path": "/metadata/finalizers"}])
    await kubectl(
        cluster, "patch", "pod", "lws-0", "--type=json", "-p", let_go, "-n", namespace, kubeconfig=kubeconfig
    )
    await eventually(
        lambda: whole("other"), timeout=90, what="the other group bound whole once the leader was gone"
    )
    attack_table.add(
        f"dev: finalizer on its leader, then its group given back (worker StatefulSet edited, "
        f"no-guard; peak of {QUOTA} GPUs in the watch)",
        "contained",
        "the terminating leader kept its group's charge: another group of the pool waited "
        "8 s and more, admitted once the leader was gone",
    )

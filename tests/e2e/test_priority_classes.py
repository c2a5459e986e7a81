"""A Pool's ``spec.allowedPriorityClasses``: a tenant cannot buy its way up the queue.

Why this exists: a group's place in its Pool's queue (and on the scheduler's, once let
through) is its pods' priority, and the PriorityClass is named in the LWS's templates by
whoever writes the LWS. Without a bound, a tenant with ``edit`` in its namespace names the
cluster's highest class and is admitted ahead of every older group. A Pool that lists the
classes its groups may use holds that: the policy refuses, at create, an LWS into the Pool
whose templates name another class (the message names the allowed ones), and a group that got
in anyway (made before the Pool listed them) is never admitted (``PriorityClassNotAllowed``).
The tenant here holds ``edit`` in its namespace and makes every LWS itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kr8s.asyncio

from gatekeeper.core.kube.keys import LWS_NAME_LABEL, SCHEDULING_GATE
from gatekeeper_lab.sandbox.replay import list_raw

from . import attack_table
from .attack_support import dev
from .conftest import Cluster, MakeNodes, MakePool, admitted, condition, eventually, records
from .test_admission import lws_body
from .test_policies import kubectl
from .watch import Watch


def _classes(low: str, high: str) -> str:
    def one(name: str, value: int) -> dict[str, object]:
        return {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }

    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [one(low, 10), one(high, 100000)]})


async def test_a_class_the_pool_does_not_allow_is_refused_and_never_jumps_the_queue(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    attack_watch: Watch,
    tmp_path: Path,
) -> None:
    """Pool of 2 GPUs held by ``first`` (class low); ``older`` (low) waits; ``jumper`` (high),
    made before the Pool listed its classes, waits too. The Pool then allows only low: the
    jumper's record says ``PriorityClassNotAllowed``, a second high LWS is refused at create,
    and when ``first`` goes, ``older`` is admitted, not the jumper."""
    nodes = await fake_nodes(2, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 2})
    attack_watch.pool(nodes.selector, 2)
    low, high = f"low-{nodes.id}", f"high-{nodes.id}"
    cluster.kubectl("apply", "-f", "-", input=_classes(low, high))
    tenant = await dev(cluster, namespace, tmp_path)

    async def as_tenant(name: str, klass: str) -> tuple[int, str]:
        body = lws_body(name, pool, nodes, priority_class=klass)
        body["metadata"]["namespace"] = namespace
        code, _, err = await kubectl(cluster, "create", "-f", "-", kubeconfig=tenant, input=json.dumps(body))
        return code, err

    try:
        assert (await as_tenant("first", low))[0] == 0

        async def first_admitted() -> bool:
            return admitted((await records(api, namespace, "first")).get(0, {}))

        await eventually(first_admitted, what="first's group admitted")
        for name, klass in (("older", low), ("jumper", high)):
            code, err = await as_tenant(name, klass)
            assert code == 0, err

        async def both_wait() -> bool:
            older = condition((await records(api, namespace, "older")).get(0, {})).get("reason")
            jumper = condition((await records(api, namespace, "jumper")).get(0, {})).get("reason")
            return older == jumper == "WaitingForQuota"

        await eventually(both_wait, what="older and jumper wait for quota")
        cluster.kubectl(
            "patch",
            "pool",
            pool,
            "--type=merge",
            "-p",
            json.dumps({"spec": {"allowedPriorityClasses": [low]}}),
        )

        async def jumper_not_allowed() -> bool:
            said = condition((await records(api, namespace, "jumper")).get(0, {}))
            return said.get("reason") == "PriorityClassNotAllowed"

        await eventually(jumper_not_allowed, what="jumper's record to say PriorityClassNotAllowed")
        message = condition((await records(api, namespace, "jumper"))[0])["message"]
        assert high in message and low in message, message

        code, _, said = await kubectl(
            cluster, "label", "lws", "jumper", "-n", namespace, "touched=yes", kubeconfig=tenant
        )
        assert code == 0, f"an update that keeps the pool and classes goes through: {said}"
        code, err = await as_tenant("jumper-2", high)
        assert code != 0, "an LWS naming a class its Pool does not allow is refused at create"
        assert f"PriorityClass {high}" in err and low in err, err

        await kubectl(cluster, "delete", "lws", "first", "-n", namespace, "--wait=false", kubeconfig=tenant)

        async def older_admitted() -> bool:
            return admitted((await records(api, namespace, "older")).get(0, {}))

        await eventually(older_admitted, timeout=90, what="older admitted once first is gone")
        jumper = (await records(api, namespace, "jumper"))[0]
        assert not admitted(jumper) and condition(jumper)["reason"] == "PriorityClassNotAllowed"

        async def jumper_pods() -> list[dict[str, Any]]:
            return await list_raw(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: "jumper"})

        async def made() -> bool:
            return len(await jumper_pods()) == 2

        # The StatefulSet controller retries its pods until the API server's priority
        # admission has seen the new classes: the gatekeeper decides on the LWS meanwhile.
        await eventually(made, timeout=90, what="the jumper's 2 pods")
        gates = [[g["name"] for g in p["spec"].get("schedulingGates") or []] for p in await jumper_pods()]
        assert all(SCHEDULING_GATE in g for g in gates), "the jumper's pods stay gated"
        attack_table.add(
            "dev: an LWS naming a PriorityClass its Pool does not allow",
            "refused",
            f"refused at create ({err.strip().split('denied request: ')[-1]}); one made before the Pool "
            f"listed its classes waits: {message}; the older group was admitted first",
        )
    finally:
        cluster.kubectl("delete", "priorityclass", low, high, "--ignore-not-found")

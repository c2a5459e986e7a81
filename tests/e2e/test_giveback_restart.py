"""A group that restarts is not given back: a Pool's ``spec.admissionTimeout`` counts only until
the group first has all its pods bound.

Why this exists: the timeout exists for a group that cannot get all its nodes. A group that
had them and restarts (a pod deleted: the LWS makes the whole group again, let through on
its kept reservation, bound a moment later) is not such a group, as Kueue's
``waitForPodsReady`` leaves a workload that was once ready. On the sandbox: a Pool of 2
one-GPU nodes with a 5 s timeout, one group of 2 pods admitted and whole (its record gets
``status.placedAt``); past the timeout a pod of it is deleted; for 20 s its record stays
``Admitted`` (reason ``Admitted``, never ``AdmissionTimeout``) and the group runs whole again.
"""

from __future__ import annotations

import json

import anyio
import kr8s.asyncio

from gatekeeper.core.kube.keys import LWS_NAME_LABEL
from gatekeeper_lab.sandbox.replay import list_raw

from .conftest import Cluster, MakeNodes, MakePool, condition, eventually, records
from .test_admission import create_lws, lws_body
from .test_policies import ok

TIMEOUT = "5s"


async def test_a_group_that_restarts_past_the_admission_timeout_keeps_its_admission(
    api: kr8s.asyncio.Api, cluster: Cluster, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    nodes = await fake_nodes(2, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 2})
    timeout = json.dumps({"spec": {"admissionTimeout": TIMEOUT}})
    await ok(cluster, "patch", "pool", pool, "--type=merge", "-p", timeout)
    await create_lws(api, namespace, lws_body("vllm", pool, nodes, replicas=1))

    async def bound() -> int:
        pods = await list_raw(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: "vllm"})
        return sum(
            1 for p in pods if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
        )

    async def placed() -> bool:
        record = (await records(api, namespace)).get(0, {})
        return bool(record.get("status", {}).get("placedAt")) and await bound() == 2

    await eventually(placed, timeout=90, what="group 0 whole, its record placed")
    admitted_at = (await records(api, namespace))[0]["status"]["admittedAt"]
    await anyio.sleep(6)  # past the timeout
    await ok(cluster, "delete", "pod", "vllm-0-1", "-n", namespace, "--wait=false")
    reasons: set[str] = set()
    for _ in range(20):
        said = condition((await records(api, namespace))[0])
        reasons.add(f"{said.get('status')} {said.get('reason')}")
        await anyio.sleep(1)
    assert reasons == {"True Admitted"}, f"the record said {reasons} while the group restarted"

    async def whole_again() -> bool:
        return await bound() == 2

    await eventually(whole_again, timeout=60, what="group 0 whole again")
    assert (await records(api, namespace))[0]["status"]["admittedAt"] == admitted_at, "one admission"

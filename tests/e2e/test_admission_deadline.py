"""Every admission has a deadline: a group whose pods cannot start gives its quota back, a
group whose leader loads its model for longer keeps it.

Why this exists: a group is admitted on its LWS's spec, before its pods exist. If they can
never be made (here: a ServiceAccount that does not exist, so the API server refuses every
pod its StatefulSet makes), the group held its quota for ever unless its Pool set
``spec.admissionTimeout``. Every Pool now has one (the CRD defaults it to ``10m``); a Pool
here sets 20 s so the test need not wait ten minutes. Under ``startupPolicy: LeaderReady``
the LWS makes the workers only once the leader is Ready, which for a large model is often
longer than any timeout: the workers' time counts from the leader turning Ready, so such a
group is not given back. The tenant holds ``edit`` in its namespace and makes both LWSs.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import kr8s.asyncio

from gatekeeper.core.kube.keys import LWS_NAME_LABEL
from gatekeeper_lab.sandbox.kwok import READY_DELAY_ANNOTATION
from gatekeeper_lab.sandbox.replay import list_raw

from . import attack_table
from .attack_support import dev
from .conftest import Cluster, MakeNodes, MakePool, admitted, condition, eventually, records
from .test_admission import lws_body
from .test_policies import kubectl, ok
from .watch import Watch

TIMEOUT = "20s"
LOADING = "45s"
"""How long the slow group's leader takes to turn Ready: longer than ``TIMEOUT``."""


async def test_a_group_that_cannot_start_is_given_back_and_a_loading_leader_is_not(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    attack_watch: Watch,
    tmp_path: Path,
) -> None:
    nodes = await fake_nodes(4, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 4})
    attack_watch.pool(nodes.selector, 4)
    said = await ok(cluster, "get", "pool", pool, "-o", "jsonpath={.spec.admissionTimeout}")
    assert said == "10m", f"a Pool that says nothing reads back the default: {said!r}"
    await ok(
        cluster,
        "patch",
        "pool",
        pool,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"admissionTimeout": TIMEOUT}}),
    )
    tenant = await dev(cluster, namespace, tmp_path)

    broken = lws_body("broken", pool, nodes)
    for role in ("leaderTemplate", "workerTemplate"):
        broken["spec"]["leaderWorkerTemplate"][role]["spec"]["serviceAccountName"] = "missing"
    slow = lws_body("slow", pool, nodes, startup="LeaderReady")
    leader = slow["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    leader["metadata"]["annotations"] = {READY_DELAY_ANNOTATION: LOADING}
    for body in (broken, slow):
        body["metadata"]["namespace"] = namespace
        code, _, err = await kubectl(cluster, "create", "-f", "-", kubeconfig=tenant, input=json.dumps(body))
        assert code == 0, err

    async def both_admitted() -> bool:
        recs = [(await records(api, namespace, n)).get(0, {}) for n in ("broken", "slow")]
        return all(admitted(r) for r in recs)

    await eventually(both_admitted, what="both groups admitted (the pool has room for both)")
    seen: dict[str, set[str]] = {"broken": set(), "slow": set()}

    async def look() -> None:
        for name, reasons in seen.items():
            reasons.add(str(condition((await records(api, namespace, name)).get(0, {})).get("reason")))

    async def broken_given_back() -> bool:
        await look()
        return "AdmissionTimeout" in seen["broken"]

    await eventually(broken_given_back, timeout=60, what="the broken group given back")
    message = condition((await records(api, namespace, "broken"))[0])["message"]
    assert "got 0 of its 2 pods bound within 20 s of its admission" in message, message

    async def slow_whole() -> bool:
        await look()
        pods = await list_raw(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: "slow"})
        return len([p for p in pods if p["spec"].get("nodeName")]) == 2

    await eventually(slow_whole, timeout=120, what="the slow group whole once its leader is Ready")
    for _ in range(5):  # and it stays so
        await look()
        await anyio.sleep(1)
    assert seen["slow"] == {"Admitted"}, f"the slow group's record said {seen['slow']}"
    slow_record = (await records(api, namespace, "slow"))[0]
    assert slow_record["status"].get("placedAt"), "placed: the deadline no longer applies"
    attack_table.add(
        "dev: an LWS whose pods can never be made (a ServiceAccount that does not exist)",
        "bounded",
        f"admitted, then given back: {message}; a LeaderReady group whose leader loads for "
        f"{LOADING} (past the {TIMEOUT} timeout) kept its admission and ran whole",
    )

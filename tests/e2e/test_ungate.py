"""``lws-gatekeeper ungate``: the pods a gatekeeper gone for good left gated are freed, and only those.

Why this exists: after ``helm uninstall`` a pod still waiting for admission keeps the gate
``lws-gatekeeper.io/admission`` for ever; docs/install.md's uninstall ends with this one
command. On the sandbox: an LWS of two groups on room for one (group 1 waits gated) and a
pod that also carries another scheduler's gate. While the gatekeeper runs the command
refuses and changes nothing. With the gatekeeper stopped and the namespace's policies off
(as an uninstall leaves a cluster), it frees group 1's pods and removes only our gate from
the other pod; group 0 is untouched.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import anyio
import kr8s.asyncio

from gatekeeper.core.kube.keys import POOL_LABEL, SCHEDULING_GATE
from gatekeeper_lab.sandbox import gatekeeper as gk
from gatekeeper_lab.sandbox.cluster import POLICIES_LABEL, POLICIES_OFF
from gatekeeper_lab.sandbox.replay import list_raw, settle

from .conftest import Cluster, MakeNodes, MakePool
from .test_admission import create_lws, lws_body
from .test_policies import ok, pod

OTHER_GATE = "example.com/other-scheduler"


def _gates(p: dict[str, Any]) -> list[str]:
    return [g["name"] for g in p["spec"].get("schedulingGates") or []]


async def test_ungate_frees_the_pods_a_gone_gatekeeper_left_gated_and_nothing_else(
    api: kr8s.asyncio.Api, cluster: Cluster, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    sb = cluster.sandbox
    assert sb is not None, "the gatekeeper is stopped and started in the sandbox"
    nodes = await fake_nodes(2, gpus=1)
    pool = await make_pool(nodes)
    await create_lws(api, namespace, lws_body("vllm", pool, nodes, replicas=2))
    verdict = await settle(api, namespace, "vllm", expected_pods=4, size=2, timeout=120)
    assert sorted(g.index for g in verdict.groups.values() if g.whole(2)) == [0]
    theirs = pod("theirs", labels={POOL_LABEL: pool}, gates=[OTHER_GATE])
    await ok(cluster, "create", "-n", namespace, "-f", "-", input=json.dumps(theirs))

    def ungate(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [
            sys.executable,
            "-m",
            "gatekeeper",
            "ungate",
            "-n",
            namespace,
            f"--kubeconfig={sb.kubeconfig}",
        ]
        return subprocess.run([*argv, *args], capture_output=True, text=True, check=False)

    async def by_name() -> dict[str, dict[str, Any]]:
        return {p["metadata"]["name"]: p for p in await list_raw(api, "pods", namespace=namespace)}

    before = await by_name()
    assert _gates(before["theirs"]) == [OTHER_GATE, SCHEDULING_GATE], "the webhook gated it too"
    refused = ungate()
    assert refused.returncode == 1 and "still renews its Lease" in refused.stderr, refused
    assert await by_name() == before, "refused: nothing changed"

    sb.stop(gk.COMPONENT)
    try:
        await ok(cluster, "label", "namespace", namespace, f"{POLICIES_LABEL}={POLICIES_OFF}")
        deadline = time.monotonic() + 40  # the stopped gatekeeper's Lease lapses
        while (res := ungate()).returncode != 0 and time.monotonic() < deadline:
            assert "still renews its Lease" in res.stderr, res.stderr
            await anyio.sleep(2)
        assert res.returncode == 0, res.stderr
        print(res.stdout)
        assert res.stdout.splitlines()[0] == "freed 3 pod(s)", res.stdout
        after = await by_name()
        assert {n: _gates(p) for n, p in after.items()} == {
            "vllm-0": [], "vllm-0-1": [], "vllm-1": [], "vllm-1-1": [], "theirs": [OTHER_GATE],
        }  # fmt: skip
        again = ungate()
        assert again.returncode == 0 and again.stdout.startswith("freed 0 pod(s)"), again
    finally:
        sb.start_gatekeeper()

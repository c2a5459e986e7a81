"""``kubectl lws-gatekeeper why`` against the sandbox: the answer an operator gets.

Runs the installed kubectl plugin (``kubectl-lws_gatekeeper``, found by kubectl on the
PATH) as a user would, on an LWS of three groups of two in a pool with room for two,
and a second LWS behind it in the queue. The kueue backend's answer is checked in
``test_kueue_backend.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import kr8s.asyncio

from .conftest import Cluster, MakeNodes, MakePool, admitted, eventually, records
from .test_tenant_pools import create, plain_lws, tolerate


def run_why(kubeconfig: Path, bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``kubectl lws-gatekeeper why ARGS`` with the sandbox's kubectl and this Python's plugin."""
    plugin_dir = Path(sys.executable).parent
    assert (plugin_dir / "kubectl-lws_gatekeeper").exists(), "the package installs the kubectl plugin"
    env = {**os.environ, "PATH": f"{plugin_dir}:{bin_dir}:{os.environ.get('PATH', '')}"}
    return subprocess.run(
        ["kubectl", "lws-gatekeeper", "why", *args, f"--kubeconfig={kubeconfig}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def why(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    assert cluster.sandbox is not None, "runs the sandbox's kubectl"
    return run_why(cluster.kubeconfig, cluster.sandbox.bin_dir, *args)


async def test_why_says_which_groups_wait_who_holds_the_pool_and_what_must_free_up(
    api: kr8s.asyncio.Api, cluster: Cluster, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool
) -> None:
    nodes = await fake_nodes(4, gpus=1)
    pool = await make_pool(nodes, tolerations=tolerate(nodes.id))
    await create(api, namespace, plain_lws("vllm", pool, replicas=3))

    async def two_admitted_one_waits() -> bool:
        recs = await records(api, namespace)
        return len(recs) == 3 and [admitted(recs[i]) for i in range(3)] == [True, True, False]

    await eventually(two_admitted_one_waits, what="groups 0 and 1 admitted, group 2 waiting")
    await anyio.sleep(1.5)  # created a second later: queued after vllm (ties go by name)
    await create(api, namespace, plain_lws("later", pool, replicas=1))

    async def settled() -> bool:
        pool_out = why(cluster, "pool/" + pool, "-o", "json")
        lws_out = why(cluster, "vllm", "-n", namespace, "-o", "json")
        if (pool_out.returncode, lws_out.returncode) != (1, 1):  # a group waits: exit 1
            return False
        pods = [g["pods"] for g in json.loads(lws_out.stdout)["groups"]]
        every_pod = all(sum(p.values()) == 2 for p in pods)
        return len(json.loads(pool_out.stdout)["waiting"]) == 2 and pods[2] == {"gated": 2} and every_pod

    await eventually(settled, what="the pool lists 2 waiting groups, and every pod of vllm is there")

    text = why(cluster, "lws/vllm", "-n", namespace)
    assert text.returncode == 1, text.stderr  # group 2 waits
    print(text.stdout)
    lines = text.stdout.splitlines()
    assert lines[0] == f"LeaderWorkerSet {namespace}/vllm: 3 groups of 2 pods, lws-gatekeeper.io/pool={pool}"
    assert any(line.startswith("  group 0: admitted (Admitted)") for line in lines), text.stdout
    assert any(
        line.startswith("  group 2: waiting (WaitingForQuota)") and "2 gated" in line for line in lines
    )
    assert f"Pool {pool}: quota 32 cpu, 128Gi memory, 4 nvidia.com/gpu, 440 pods;" in text.stdout
    assert (
        f"    {namespace}/vllm group 0: 2 nvidia.com/gpu" in lines
        and f"    {namespace}/vllm group 1: 2 nvidia.com/gpu" in lines
    )
    assert lines[-1].startswith("next: group 2 needs 2 nvidia.com/gpu; pool ")
    assert "0 nvidia.com/gpu free: 2 nvidia.com/gpu must be freed" in lines[-1], lines[-1]

    later: dict[str, Any] = json.loads(why(cluster, "later", "-n", namespace, "-o", "json").stdout)
    assert [(g["group"], g["state"], g["reason"]) for g in later["groups"]] == [
        (0, "waiting", "WaitingForQuota")
    ]
    assert later["next_group"].endswith("; 1 waiting group ahead of it"), later["next_group"]
    pool_view = later["pool_view"]
    assert [(w["lws"], w["group"]) for w in pool_view["waiting"]] == [("vllm", 2), ("later", 0)]
    assert (pool_view["kind"], pool_view["free"]["nvidia.com/gpu"]) == ("Pool", "0")

    missing = why(cluster, "lws/nothing", "-n", namespace)
    assert missing.returncode == 2 and f"LeaderWorkerSet {namespace}/nothing not found" in missing.stderr

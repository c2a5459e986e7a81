"""The files of ``examples/`` are what a user copies: each is proved against the components it
is for, so that none drifts from the APIs.

* ``pools/pool.yaml`` and ``lws/vllm.yaml`` together on the main sandbox, as the quick start
  applies them (the Pool pointed at this test's nodes, the namespace labelled as the Pool
  asks): on a Pool of 16 GPUs the LWS's two groups of 2 x 8 GPUs get one whole group
  running and the other waiting whole, and ``why`` says so;
* the cohort of two pools, the kueue, volcano, Karpenter and hub files pass a server-side dry run (every field
  checked by the API server, admission included) on the sandbox that serves their APIs.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kr8s.asyncio
import pytest
import yaml

from gatekeeper.core.kube.keys import POOL_LABEL
from gatekeeper.core.model.pool import parse_pool
from gatekeeper_lab.sandbox.cluster import Sandbox
from gatekeeper_lab.sandbox.replay import isolate

from .conftest import Cluster, MakeNodes, SharedHub, admitted, eventually, records
from .test_admission import create_lws, lws_pods
from .test_policies import ok, suffix
from .test_why import why

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(path: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((EXAMPLES / path).read_text()) if doc]


def dry_run(sb: Sandbox, objects: list[dict[str, Any]], namespace: str | None = None) -> None:
    """``kubectl apply --dry-run=server``: the API server checks every field and admission runs."""
    docs = copy.deepcopy(objects)
    for doc in docs:
        if namespace is not None and "namespace" in doc["metadata"]:
            doc["metadata"]["namespace"] = namespace
    sb.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(docs))


async def test_the_pool_and_vllm_examples_run_one_whole_group_and_hold_the_other_whole(
    api: kr8s.asyncio.Api, cluster: Cluster, namespace: str, fake_nodes: MakeNodes
) -> None:
    nodes = await fake_nodes(4, gpus=8, cpu="64", memory="1Ti")
    [pool] = example("pools/pool.yaml")
    pool["metadata"]["name"] = name = f"on-demand-{nodes.id}"
    pool["spec"]["nodeSelector"] = nodes.selector
    pool["spec"]["tolerations"] = [{"key": nodes.taint_key, "operator": "Exists", "effect": "NoSchedule"}]
    await ok(cluster, "label", "namespace", namespace, "team=inference")
    await ok(cluster, "apply", "-f", "-", input=yaml.safe_dump(pool))
    try:
        [vllm] = example("lws/vllm.yaml")
        vllm["metadata"]["labels"][POOL_LABEL] = name
        await create_lws(api, namespace, isolate(vllm, nodes.selector, nodes.taint_key))

        async def one_runs_one_waits() -> bool:
            recs = await records(api, namespace)
            pods = await lws_pods(api, namespace, "vllm")
            running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
            return sorted(admitted(r) for r in recs.values()) == [False, True] and len(running) == 2

        await eventually(one_runs_one_waits, timeout=120, what="one group of 2 x 8 GPUs running, one waiting")
        recs = await records(api, namespace)
        [waiting] = [i for i, r in recs.items() if not admitted(r)]
        pods = {p["metadata"]["name"]: p for p in await lws_pods(api, namespace, "vllm")}
        held = [p for n, p in pods.items() if n.startswith(f"vllm-{waiting}")]
        assert held and all(p["spec"].get("schedulingGates") for p in held), "the other group waits whole"
        answer = why(cluster, "vllm", "-n", namespace)
        assert answer.returncode == 1, answer.stderr
        assert f"group {waiting}: waiting (WaitingForQuota)" in answer.stdout, answer.stdout
    finally:
        await ok(cluster, "delete", "pool", name, "--ignore-not-found")


def test_the_cohort_example_is_what_the_pool_crd_and_the_gatekeeper_take(cluster: Cluster) -> None:
    objects = example("pools/cohort.yaml")
    assert [o["kind"] for o in objects] == ["Pool", "Pool"]
    parsed = [parse_pool(o) for o in objects]
    assert {p.cohort for p in parsed} == {"gpu-east"} and parsed[0].lending_limit == {"nvidia.com/gpu": 16}
    assert cluster.sandbox is not None
    dry_run(cluster.sandbox, objects)


def test_the_kueue_example_is_what_kueue_takes(kueue_sandbox: Sandbox) -> None:
    ns = f"examples-{suffix()}"
    kueue_sandbox.kubectl("create", "namespace", ns)
    try:
        objects = example("kueue/queues.yaml")
        assert [o["kind"] for o in objects] == ["ResourceFlavor", "ClusterQueue", "LocalQueue"]
        dry_run(kueue_sandbox, objects, namespace=ns)
    finally:
        kueue_sandbox.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_the_volcano_example_is_what_volcano_takes(volcano_sandbox: Sandbox) -> None:
    objects = example("volcano/queue.yaml")
    assert [o["kind"] for o in objects] == ["Queue"]
    dry_run(volcano_sandbox, objects)


def test_the_karpenter_example_is_what_karpenter_and_the_pool_take(karpenter_sandbox: Sandbox) -> None:
    objects = example("karpenter/pool.yaml")
    assert [o["kind"] for o in objects] == ["Pool", "NodePool"]
    dry_run(karpenter_sandbox, objects)


def test_the_hub_examples_are_what_the_hub_and_a_member_take(shared_hub: SharedHub) -> None:
    [reservation] = example("hub/reservation.yaml")
    shared_hub.hub.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(reservation))
    member = next(iter(shared_hub.members.values()))
    dry_run(member, example("hub/member-pool.yaml"))


@pytest.mark.parametrize("path", sorted(str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.yaml")))
def test_every_example_is_proved_here(path: str) -> None:
    """A new file under examples/ needs its proof in this module."""
    proved = {
        "pools/pool.yaml", "pools/cohort.yaml", "lws/vllm.yaml", "kueue/queues.yaml", "volcano/queue.yaml",
        "karpenter/pool.yaml", "hub/reservation.yaml", "hub/member-pool.yaml",
        "pools.yaml",  # the render input: tests/unit/test_render.py, tests/e2e/test_image.py
    }  # fmt: skip
    assert path in proved, f"examples/{path} is proved nowhere"

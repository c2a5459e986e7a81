"""``lws-gatekeeper render --backend kueue`` output on the real Kueue: it admits work, whole groups.

Why this exists: rendered Kueue objects once passed a dry run and admitted nothing. The
ClusterQueue covered only the GPUs, every LWS pod also asks cpu and memory, and Kueue
then says "couldn't assign flavors to pod set leader: resource memory unavailable in
ClusterQueue" forever. A dry run cannot see that; here the rendered objects are applied
in the session's Kueue sandbox (``kueue_sandbox``: the gatekeeper on its ``kueue``
backend with the node-fit AdmissionCheck controller) and real LWSs run through them:

- a pool without ``cpu``/``memory`` (the GPUs alone decide) that requires the node-fit
  AdmissionCheck: whole groups Running up to its GPU quota, the rest gated;
- a pool with a ``cpu`` quota tighter than its GPUs: the cpu quota decides.

The pools description, its nodes (fake, under a random label), namespaces and the
AdmissionCheck are all made here. What they observe is printed (run with ``-s``).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from gatekeeper.core.kube.keys import POOL_LABEL
from gatekeeper.render.cli import render_cmd
from gatekeeper_lab.sandbox.cluster import Sandbox, fake_node
from tests.e2e.kueue_support import (
    check_state,
    condition,
    get,
    group_states,
    is_true,
    lws,
    make_namespace,
    make_node_fit_check,
    new_tag,
    pods,
    records,
    settled,
    wait,
    workloads,
)

GPU = "nvidia.com/gpu"
NODE_LABEL = "render-test-pool"


def _show(sb: Sandbox, *namespaces: str) -> None:
    for ns in namespaces:
        print(
            sb.kubectl("get", "workloads.kueue.x-k8s.io,groupadmissions,pods", "-n", ns, "-o", "wide").stdout
        )


def _render(tmp_path: Path, description: str) -> str:
    pools_file = tmp_path / "pools.yaml"
    pools_file.write_text(description)
    result = CliRunner().invoke(render_cmd, [str(pools_file), "--backend", "kueue"])
    assert result.exit_code == 0, result.output
    return result.stdout


def _active(sb: Sandbox, *args: str) -> bool:
    return is_true(get(sb, *args), "Active")


def _quota_said(sb: Sandbox, ns: str, resource: str) -> dict[str, Any] | None:
    """A waiting record whose reason is Kueue's "insufficient unused quota" for ``resource``."""
    for r in records(sb, ns):
        message = condition(r, "Admitted").get("message", "")
        if not is_true(r, "Admitted") and "insufficient unused quota" in message and resource in message:
            return r
    return None


def _flavors(workload: dict[str, Any]) -> list[dict[str, str]]:
    """Per pod set, the flavor Kueue assigned to each resource."""
    assignments = workload.get("status", {}).get("admission", {}).get("podSetAssignments", [])
    return [dict(a.get("flavors", {})) for a in assignments]


def test_rendered_kueue_objects_admit_whole_groups_up_to_the_quota(
    kueue_sandbox: Sandbox, tmp_path: Path
) -> None:
    sb = kueue_sandbox
    tag = new_tag()
    gpus_pool, cpu_pool = f"render-{tag}", f"render-cpu-{tag}"
    ns_a, ns_b = f"render-a-{tag}", f"render-b-{tag}"
    check = f"node-fit-{tag}"
    # gpus_pool: 4 one-GPU nodes, quota 4 GPUs, cpu and memory not given (no limit).
    # cpu_pool: 2 two-GPU nodes, quota 4 GPUs but 2 cpu: one group of two 1-cpu pods.
    sb.create_nodes(
        [fake_node(f"rk-{tag}-{i}", gpus=1, labels={NODE_LABEL: gpus_pool}) for i in range(4)]
        + [fake_node(f"rkc-{tag}-{i}", gpus=2, labels={NODE_LABEL: cpu_pool}) for i in range(2)]
    )
    for ns in (ns_a, ns_b):
        make_namespace(sb, ns, managed=False)
    make_node_fit_check(sb, check)
    stream = _render(
        tmp_path,
        f"""\
pools:
  - name: {gpus_pool}
    nodeLabels: {{{NODE_LABEL}: {gpus_pool}}}
    gpus: 4
    namespaces: [{ns_a}, {ns_b}]
    admissionChecks: [{check}]
  - name: {cpu_pool}
    nodeLabels: {{{NODE_LABEL}: {cpu_pool}}}
    gpus: 4
    cpu: 2
    memory: 64Gi
    namespaces: [{ns_b}]
""",
    )
    print(stream)
    sb.apply(stream)

    # gpus_pool's ClusterQueue is Active only once the gatekeeper marks the node-fit check Active.
    for cq in (gpus_pool, cpu_pool):
        wait(f"ClusterQueue {cq} Active", partial(_active, sb, "clusterqueues.kueue.x-k8s.io", cq))
    for lq, ns in ((gpus_pool, ns_a), (gpus_pool, ns_b), (cpu_pool, ns_b)):
        wait(
            f"LocalQueue {lq} in {ns} Active",
            partial(_active, sb, "localqueues.kueue.x-k8s.io", lq, "-n", ns),
        )
    cq = get(sb, "clusterqueues.kueue.x-k8s.io", gpus_pool)
    assert cq["spec"]["resourceGroups"][0]["coveredResources"] == ["cpu", "memory", GPU]
    assert cq["spec"]["admissionChecksStrategy"]["admissionChecks"] == [{"name": check}]

    # The bug's case: pods ask 1 cpu, 1Gi and 1 GPU; 3 groups of 2 over a 4-GPU quota.
    sb.apply(
        [
            lws("vllm", ns_a, {POOL_LABEL: gpus_pool}, replicas=3, size=2, gpus_per_pod=1),
            lws("cpu-bound", ns_b, {POOL_LABEL: cpu_pool}, replicas=2, size=2, gpus_per_pod=1),
        ]
    )
    try:
        wait(
            "pool of GPUs: 2 whole groups Running, 1 gated",
            lambda: settled(sb, ns_a, running=2, gated=1, size=2),
        )
        wait(
            "pool with cpu quota: 1 whole group Running, 1 gated",
            lambda: settled(sb, ns_b, running=1, gated=1, size=2),
        )
    finally:
        _show(sb, ns_a, ns_b)

    wls = workloads(sb, ns_a)
    assert len(wls) == 3
    admitted = [w for w in wls if is_true(w, "Admitted")]
    assert len(admitted) == 2
    for wl in admitted:
        assert _flavors(wl) == [{"cpu": gpus_pool, "memory": gpus_pool, GPU: gpus_pool}] * 2
        assert check_state(wl, check)["state"] == "Ready", "the node-fit check passed them"
    running = {g for g, c in group_states(sb, ns_a).items() if c["running"]}
    assert {w["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"] for w in admitted} == running
    for pod in pods(sb, ns_a):
        node = pod["spec"].get("nodeName")
        if node:
            assert get(sb, "node", node)["metadata"]["labels"][NODE_LABEL] == gpus_pool, "on the pool's nodes"

    for ns, resource in ((ns_a, GPU), (ns_b, "cpu")):
        rec = wait(f"a waiting record in {ns} to name {resource}", partial(_quota_said, sb, ns, resource))
        print(ns, condition(rec, "Admitted")["message"])
    [wl] = [w for w in workloads(sb, ns_b) if is_true(w, "Admitted")]
    assert _flavors(wl) == [{"cpu": cpu_pool, "memory": cpu_pool, GPU: cpu_pool}] * 2

"""An in-place resize cannot make a pod let through ask more than its group was admitted with.

The tenant (``system:serviceaccount:<ns>:dev``, ``edit`` and the LWS editor role) may not
resize pods at all: ``edit`` does not grant ``pods/resize``. Given ``patch`` on it (as a team
that tunes its pods in place may be), it resizes a pod of its admitted group (let through,
Pending on an autoscaled pool): raising its CPU request, or adding a memory request, is
refused by the policy lws-gatekeeper-member-resize, and with the namespace's policies
turned off by the gatekeeper's validating webhook; lowering it is allowed. A pod never let
through by the gatekeeper is not held by either.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kr8s.asyncio

from gatekeeper_lab.sandbox.cluster import POLICIES_LABEL, POLICIES_OFF
from gatekeeper_lab.sandbox.replay import list_raw

from . import attack_table
from .attack_support import dev
from .conftest import Cluster, MakeNodes, MakePool, eventually
from .test_policies import kubectl, ok
from .test_tenant_pools import plain_lws, tolerate
from .watch import Watch

RESIZER = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "Role",
    "metadata": {"name": "pod-resizer"},
    "rules": [{"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["get", "patch", "update"]}],
}


def requests(cpu: str, memory: str | None = None) -> str:
    asked = {"cpu": cpu, **({"memory": memory} if memory else {})}
    return json.dumps({"spec": {"containers": [{"name": "c", "resources": {"requests": asked}}]}})


async def test_a_resize_of_a_pod_let_through_may_lower_its_requests_not_raise_them(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    tmp_path: Path,
    attack_watch: Watch,
) -> None:
    # An autoscaled pool (QuotaOnly) whose one node has no GPU: the admitted group's pods are let
    # through and stay Pending. (The API server resizes a running pod only when its kubelet
    # reports container resources, which KWOK's does not: a pending pod is resized either way.)
    nodes = await fake_nodes(1, gpus=0)
    pool = await make_pool(
        nodes, quota={"nvidia.com/gpu": 2, "cpu": "2"}, tolerations=tolerate(nodes.id), node_fit="QuotaOnly"
    )
    attack_watch.pool(nodes.selector, 2)
    kubeconfig = await dev(cluster, namespace, tmp_path)
    body: dict[str, Any] = plain_lws("lws", pool, size=2)
    container = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    container["resources"]["requests"] = {"cpu": "1"}
    await ok(cluster, "apply", "-n", namespace, "-f", "-", kubeconfig=kubeconfig, input=json.dumps(body))

    async def let_through() -> bool:
        found = await list_raw(api, "pods", namespace=namespace)
        return len(found) == 2 and not any(p["spec"].get("schedulingGates") for p in found)

    await eventually(let_through, timeout=90, what="the group let through")

    async def resize(pod: str, patch: str) -> tuple[int, str]:
        code, out, err = await kubectl(
            cluster, "patch", "pod", pod, "--subresource=resize", "-p", patch,
            "-n", namespace, kubeconfig=kubeconfig,
        )  # fmt: skip
        return code, (err if code else out).strip()

    # The built-in edit role does not grant pods/resize at all.
    code, rbac = await resize("lws-0-1", requests("2"))
    assert code != 0 and 'cannot get resource "pods/resize"' in rbac, rbac
    await ok(cluster, "apply", "-n", namespace, "-f", "-", input=json.dumps(RESIZER))
    await ok(cluster, "create", "rolebinding", "dev-resize", "--role=pod-resizer",
             f"--serviceaccount={namespace}:dev", "-n", namespace)  # fmt: skip
    code, raised = await resize("lws-0-1", requests("2"))
    assert code != 0 and "a resize may lower them, not raise them (containers c)" in raised, raised
    code, added = await resize("lws-0-1", requests("1", memory="64Gi"))
    assert code != 0 and "not raise them" in added, added
    # The gatekeeper's own check (its validating webhook) holds with the policies turned off.
    await ok(cluster, "label", "namespace", namespace, f"{POLICIES_LABEL}={POLICIES_OFF}")
    code, unpolicied = await resize("lws-0-1", requests("2"))
    assert code != 0 and 'admission webhook "pods-resize.lws-gatekeeper.io" denied' in unpolicied, unpolicied
    assert "a resize may lower its requests, not raise them (2 cpu asked)" in unpolicied, unpolicied
    await ok(cluster, "label", "namespace", namespace, f"{POLICIES_LABEL}-")
    code, lowered = await resize("lws-0-1", requests("500m"))
    assert code == 0, lowered
    pod = json.loads(await ok(cluster, "get", "pod", "lws-0-1", "-n", namespace, "-o", "json"))
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "500m"
    # A pod the gatekeeper never let through is not its to hold.
    plain = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain"},
        "spec": {
            "nodeSelector": {"none": "none"},
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
        },
    }
    await ok(cluster, "create", "-n", namespace, "-f", "-", kubeconfig=kubeconfig, input=json.dumps(plain))
    code, said = await resize("plain", requests("2"))
    assert code == 0, said
    attack_table.add("dev (edit only): pods/resize of a pod let through", "refused", rbac.splitlines()[-1])
    attack_table.add("dev + pods/resize: a pod let through resized to 2 CPUs (1 admitted)", "refused",
                     raised.splitlines()[-1])  # fmt: skip
    attack_table.add("dev: in-place resize adding a memory request to an admitted pod", "refused",
                     added.splitlines()[-1])  # fmt: skip
    attack_table.add("dev: the same resize to 2 CPUs, policies off", "refused", unpolicied.splitlines()[-1])

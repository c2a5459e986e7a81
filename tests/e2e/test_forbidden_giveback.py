"""A give-back the gatekeeper is not allowed to carry out is said, counted, and frees nothing.

Why this exists: a group given back (here its Pool's ``spec.admissionTimeout``) has its
let-through pods deleted. If the gatekeeper's RBAC lacks ``delete`` on pods (a ClusterRole
trimmed by hand, an older chart), the API server answers 403. That answer used to be taken
for a conflict (and a delete's conflicts are "already gone"), so nothing said why the pods
ran on. Now the 403 of RBAC is permanent: logged as an error, counted in
``lws_gatekeeper_api_forbidden_total``; the pods run on, so the quota stays held (another group
waits), and the record says its pods were not stopped, with a Warning Event.

On the sandbox: the chart's RBAC without ``delete`` on pods, the gatekeeper run with the
chart's ServiceAccount; a Pool of 2 one-GPU nodes, quota 2, ``admissionTimeout: 5s``; a
group whose worker has a required pod affinity nothing satisfies (the gatekeeper does not
model pod affinity, so it admits; the scheduler never places the worker): its leader binds,
its worker stays Pending; the Pool is then given ``admissionTimeout: 5s``, so the group is
given back at once, and its pods cannot be deleted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import kr8s.asyncio

from gatekeeper_lab.sandbox.cluster import GATEKEEPER_NAMESPACE
from gatekeeper_lab.sandbox.replay import list_raw

from .conftest import (
    Cluster,
    MakeNodes,
    MakePool,
    admitted,
    condition,
    eventually,
    gatekeeper_running_as,
    records,
)
from .test_admission import create_lws, events_for, lws_body, lws_pods
from .test_chart import gatekeepers, installed, sandbox, template
from .test_chart import helm as helm  # the module fixture
from .test_policies import kubectl, ok, user_kubeconfig

DELETE_PODS = 'cannot delete resource "pods"'


def _without_pod_deletes(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for obj in objects:
        if obj["kind"] == "ClusterRole":
            for rule in obj["rules"]:
                if rule.get("resources") == ["pods"] and rule.get("apiGroups") == [""]:
                    rule["verbs"] = [v for v in rule["verbs"] if v != "delete"]
        out.append(obj)
    return out


def _unsatisfiable_worker(body: dict[str, Any]) -> dict[str, Any]:
    affinity = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"never": "there"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["affinity"] = affinity
    return body


def _forbidden_deletes(metrics: str) -> float:
    for line in metrics.splitlines():
        if (
            line.startswith("lws_gatekeeper_api_forbidden_total{")
            and 'verb="delete"' in line
            and 'resource="pods"' in line
        ):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_a_give_back_refused_by_rbac_is_said_counted_and_frees_no_quota(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    helm: Path,
    tmp_path: Path,
) -> None:
    sb = sandbox(cluster)
    rbac = _without_pod_deletes(gatekeepers(template(helm, "lws-gatekeeper", GATEKEEPER_NAMESPACE)))
    nodes = await fake_nodes(2, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 2})
    await ok(
        cluster, "patch", "pool", pool, "--type=merge", "-p", json.dumps({"spec": {"admissionTimeout": "5s"}})
    )
    with installed(cluster, rbac):
        identity = await user_kubeconfig(cluster, GATEKEEPER_NAMESPACE, "lws-gatekeeper", tmp_path)
        _, may, _ = await kubectl(
            cluster, "auth", "can-i", "delete", "pods", "-n", namespace, kubeconfig=identity
        )
        assert may.strip() == "no", f"the trimmed RBAC still lets the gatekeeper delete pods: {may}"
        with gatekeeper_running_as(sb, kubeconfig=identity, refused=DELETE_PODS):
            await create_lws(api, namespace, _unsatisfiable_worker(lws_body("stuck", pool, nodes)))

            async def leader_bound() -> bool:
                pods = {p["metadata"]["name"]: p for p in await lws_pods(api, namespace, "stuck")}
                leader, worker = pods.get("stuck-0", {}), pods.get("stuck-0-1", {})
                return (
                    bool(leader.get("spec", {}).get("nodeName"))
                    and worker.get("status", {}).get("phase") == "Pending"
                    and not worker["spec"].get("schedulingGates")
                )

            await eventually(
                leader_bound, timeout=90, what="group 0 admitted, its leader bound, its worker Pending"
            )
            # Only now the Pool times admissions out: group 0's is past it at once.
            timeout = json.dumps({"spec": {"admissionTimeout": "5s"}})
            await ok(cluster, "patch", "pool", pool, "--type=merge", "-p", timeout)

            async def given_back() -> bool:
                said = condition((await records(api, namespace)).get(0, {}))
                return said.get("reason") == "AdmissionTimeout"

            await eventually(given_back, timeout=90, what="group 0 given back on its admission timeout")
            await create_lws(api, namespace, lws_body("next", pool, nodes))

            async def said_not_stopped() -> bool:
                said = condition((await records(api, namespace)).get(0, {}))
                return "still run after the gatekeeper deleted them" in str(said.get("message"))

            await eventually(said_not_stopped, timeout=60, what="the record to say its pods were not stopped")
            await anyio.sleep(5)  # passes go on: nothing frees the quota while the pods run
            recs = {
                (r["spec"]["leaderWorkerSet"], r["spec"]["groupIndex"]): r
                for r in (await list_raw(api, "groupadmissions.lws-gatekeeper.io", namespace=namespace))
            }
            stuck, waiting = recs[("stuck", 0)], recs[("next", 0)]
            message = condition(stuck)["message"]
            print(message)
            assert condition(stuck)["reason"] == "AdmissionTimeout" and "pods stuck-0, stuck-0-1" in message
            assert not admitted(waiting) and condition(waiting)["reason"] == "WaitingForQuota", condition(
                waiting
            )
            running = [
                p
                for p in await lws_pods(api, namespace, "stuck")
                if not p["metadata"].get("deletionTimestamp")
            ]
            assert len(running) == 2, "the pods the gatekeeper may not delete run on"
            warned = [e for e in await events_for(api, namespace, "stuck") if e["reason"] == "PodsNotStopped"]
            assert warned and warned[0]["type"] == "Warning"
            assert _forbidden_deletes(await anyio.to_thread.run_sync(sb.metrics)) >= 1
            log = (sb.log_dir / "gatekeeper.log").read_text(errors="replace")
            assert "write not allowed by the gatekeeper's RBAC, not retried" in log and DELETE_PODS in log

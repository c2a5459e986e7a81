"""A tenant's malformed LeaderWorkerSets stop nobody: they are refused with a reason, the
gatekeeper keeps running, and a good LWS beside them is admitted whole.

The API server and the LWS webhook accept every one of these objects (seen in the
sandbox); before the bounds, the first ended the controller with a ``ValueError`` and the
second made it allocate a list of two billion workers (11.8 GB in 25 s).
"""

from __future__ import annotations

import copy
from typing import Any

import kr8s.asyncio

from gatekeeper_lab.sandbox.replay import list_raw, settle

from .conftest import Cluster, MakeNodes, MakePool, admitted, condition, eventually
from .test_admission import create_lws, lws_body


def _limits(body: dict[str, Any], value: str) -> dict[str, Any]:
    bad = copy.deepcopy(body)
    for role in ("leaderTemplate", "workerTemplate"):
        bad["spec"]["leaderWorkerTemplate"][role]["spec"]["containers"][0]["resources"] = {
            "limits": {"nvidia.com/gpu": value}
        }
    return bad


async def test_malformed_lwss_get_invalid_spec_and_a_good_one_beside_them_runs(
    api: kr8s.asyncio.Api, namespace: str, fake_nodes: MakeNodes, make_pool: MakePool, cluster: Cluster
) -> None:
    assert cluster.sandbox is not None, "needs the sandbox: the gatekeeper's process is watched"
    pid = cluster.sandbox.state()["processes"]["gatekeeper"]["pid"]
    nodes = await fake_nodes(2, gpus=1)
    pool = await make_pool(nodes, quota={"nvidia.com/gpu": 2})
    digits = _limits(lws_body("digits", pool, nodes), "9" * 4300)
    # LeaderReady: the LWS controller makes the workers only once the leader is Ready, and its
    # leader stays gated; with LeaderCreated the StatefulSet controller would try to make two
    # billion worker pods (seen: kube-controller-manager at 22 GB), the sandbox's undoing.
    huge = lws_body("huge", pool, nodes, startup="LeaderReady")
    huge["spec"]["leaderWorkerTemplate"]["size"] = 2147483647
    for body in (digits, huge):
        await create_lws(api, namespace, body)
    await create_lws(api, namespace, lws_body("good", pool, nodes, replicas=1))

    verdict = await settle(api, namespace, "good", expected_pods=2, size=2, timeout=120)
    assert verdict.groups[("good", 0)].whole(2)

    found: dict[str, dict[str, Any]] = {}

    async def refused() -> bool:
        objs = await list_raw(api, "groupadmissions.lws-gatekeeper.io", namespace=namespace)
        found.update({o["spec"]["leaderWorkerSet"]: o for o in objs})
        return all(condition(found.get(n, {})).get("reason") == "InvalidSpec" for n in ("digits", "huge"))

    await eventually(refused, timeout=60, what="both bad LWSs' records to say InvalidSpec")
    for name, words in (("digits", "more than 40 digits"), ("huge", "at most 1000 pods per group")):
        said = condition(found[name])
        assert not admitted(found[name])
        assert said["reason"] == "InvalidSpec", said
        assert words in said["message"], said
    assert cluster.sandbox.state()["processes"]["gatekeeper"]["pid"] == pid, "the gatekeeper never restarted"
    assert cluster.sandbox.running()["gatekeeper"]

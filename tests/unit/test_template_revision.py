"""A group admitted before its pods exist says the template revision they will be made from.

A scale-up admits most groups before LWS makes their pods; the record's
``templateRevision`` then came from the pods a pass later, one more write per group. The
leader StatefulSet's revision label says it at admission (``leader_template_revision``),
except during a rolling update, when a pod below the partition is made from the old one."""

from __future__ import annotations

from typing import Any

import pytest
from core_builders import gpu_nodes, lws, lws_pod, lws_statefulsets, pool, read_pools, record

from gatekeeper.core.backends.pools import Snapshot, decide
from gatekeeper.core.kube.keys import REVISION_LABEL
from gatekeeper.core.model.groups import DemandMemo
from gatekeeper.core.model.owned import leader_template_revision

NS = "default"


def vllm(**status: Any) -> dict[str, Any]:
    obj = lws("vllm").pool("p").uid("u-1").size(2).replicas(2).worker(gpu_limit=1).obj()
    if status:
        obj["status"] = status
    return obj


def leader_sts(obj: dict[str, Any], revision: Any = "rev-2", owner: str = "u-1") -> dict[str, Any]:
    sts = lws_statefulsets([obj], [])[0]
    sts["metadata"]["ownerReferences"][0]["uid"] = owner
    if revision is not None:
        sts["metadata"]["labels"][REVISION_LABEL] = revision
    return sts


def by_key(*objs: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["metadata"].get("namespace", NS), o["metadata"]["name"]): o for o in objs}


UPDATING = {"conditions": [{"type": "UpdateInProgress", "status": "True"}]}
UPDATED = {"conditions": [{"type": "UpdateInProgress", "status": "False"}]}

CASES: dict[str, tuple[dict[str, Any], dict[tuple[str, str], dict[str, Any]], str]] = {
    "its-leader-statefulset-says-it": (vllm(), by_key(leader_sts(vllm())), "rev-2"),
    "a-rolling-update-in-progress": (vllm(**UPDATING), by_key(leader_sts(vllm())), ""),
    "a-rolling-update-done": (vllm(**UPDATED), by_key(leader_sts(vllm())), "rev-2"),
    "no-leader-statefulset-yet": (vllm(), {}, ""),
    "a-statefulset-of-that-name-not-its-own": (vllm(), by_key(leader_sts(vllm(), owner="u-other")), ""),
    "no-revision-label": (vllm(), by_key(leader_sts(vllm(), revision=None)), ""),
    "a-label-that-is-no-string": (vllm(), by_key(leader_sts(vllm(), revision=7)), ""),
}


@pytest.mark.parametrize("case", CASES)
def test_the_revision_a_group_without_pods_will_be_made_from(case: str) -> None:
    obj, statefulsets, expected = CASES[case]
    assert leader_template_revision(obj, statefulsets) == expected


def snapshot(obj: dict[str, Any], pods: list[dict[str, Any]], records: list[dict[str, Any]]) -> Snapshot:
    statefulsets = lws_statefulsets([obj], pods)
    statefulsets[0]["metadata"]["labels"][REVISION_LABEL] = "rev-2"
    return Snapshot(
        lwss=[obj],
        pods=pods,
        bound_pods=[],
        nodes=gpu_nodes(4, pool="p"),
        pools=read_pools([pool("p").selector(pool="p").quota(gpu=4).obj()]),
        records=records,
        statefulsets=statefulsets,
    )


def test_a_group_admitted_before_its_pods_exist_is_admitted_at_its_leader_statefulsets_revision() -> None:
    obj = vllm()
    actions = decide(snapshot(obj, [], []), DemandMemo())
    assert [(a.group.key.index, a.group.revision) for a in actions.admit] == [(0, "rev-2"), (1, "rev-2")]
    # Its pods come, made at that revision: the record already says it, nothing more to write.
    pods = [lws_pod("vllm", i, w, pool="p", revision="rev-2") for i in (0, 1) for w in (0, 1)]
    records = [
        record(obj, i, admitted=True, demand={"nvidia.com/gpu": "2"}, pods=2, revision="rev-2")
        for i in (0, 1)
    ]
    assert decide(snapshot(obj, pods, records), DemandMemo()).revisions == ()


def test_during_a_rolling_update_the_revision_comes_from_the_pods_as_before() -> None:
    obj = vllm(**UPDATING)
    snap = snapshot(obj, [], [])
    actions = decide(snap, DemandMemo())
    assert [a.group.revision for a in actions.admit] == ["", ""]
    pods = [lws_pod("vllm", 0, w, pool="p", revision="rev-1") for w in (0, 1)]
    records = [record(obj, 0, admitted=True, demand={"nvidia.com/gpu": "2"}, pods=2)]
    later = decide(snapshot(obj, pods, records), DemandMemo())
    assert [(ns, rev) for ns, _, rev in later.revisions] == [(NS, "rev-1")]

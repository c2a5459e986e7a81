"""``core.plugin.explain``: the answer of ``lws-gatekeeper why``, from plain objects.

Table tests; the command against a real cluster is in ``tests/e2e/test_why.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from core_builders import lws, lws_pod, pool, record

from gatekeeper.core.backends.kueue.view import kueue_pool_view
from gatekeeper.core.backends.volcano.view import volcano_queue_view
from gatekeeper.core.plugin.explain import (
    MAX_LISTED,
    PoolView,
    explain_lws,
    explain_pool,
    lines_for_lws,
    lines_for_pool,
)


def _rec(obj: dict[str, Any], index: int, admitted: bool, gpus: int = 2, **kw: Any) -> dict[str, Any]:
    r = record(obj, index, admitted=admitted, demand={"nvidia.com/gpu": str(gpus)}, pods=2, **kw)
    r["status"]["demandSummary"] = f"{gpus} nvidia.com/gpu"
    r["status"]["conditions"][0]["message"] = f"group {index} {'admitted' if admitted else 'waits'}"
    if admitted:
        r["status"]["admittedAt"] = f"2026-12-01T00:00:0{index}Z"
    return r


def _pool(free: int, used: int, quota: int = 4) -> dict[str, Any]:
    obj = pool("a").quota(**{"nvidia.com/gpu": quota}).obj()
    obj["status"] = {
        "quota": {"nvidia.com/gpu": str(quota)},
        "used": {"nvidia.com/gpu": str(used)},
        "free": {"nvidia.com/gpu": str(free)},
    }
    return obj


VLLM = lws("vllm").uid("u-1").pool("a").replicas(3).size(2).obj()


def test_each_group_says_its_state_its_reason_and_its_pods() -> None:
    records = [_rec(VLLM, 0, True), _rec(VLLM, 1, False)]
    pods = [
        lws_pod("vllm", 0, 0, gated=False, node_name="n0", phase="Running"),
        lws_pod("vllm", 0, 1, gated=False, node_name="n1"),
        lws_pod("vllm", 1, 0),
        lws_pod("vllm", 1, 1),
        lws_pod("other", 0, 0),  # another LWS's pod: not counted
    ]
    answer = explain_lws(VLLM, records, pods, None)
    assert [(g.group, g.state, g.reason, g.pods) for g in answer.groups] == [
        (0, "admitted", "Admitted", {"running": 1, "bound": 1}),
        (1, "waiting", "WaitingForQuota", {"gated": 2}),
        (2, "unrecorded", "", {}),
    ]
    assert answer.groups[1].message == "group 1 waits"


def test_a_record_of_an_earlier_lws_of_the_same_name_is_not_this_lws_group() -> None:
    old = _rec(VLLM, 0, True, uid="u-old")
    assert explain_lws(VLLM, [old], [], None).groups[0].state == "unrecorded"


@pytest.mark.parametrize(
    ("free", "says"),
    [
        (0, "pool a has 0 nvidia.com/gpu free: 2 nvidia.com/gpu must be freed"),
        (1, "pool a has 1 nvidia.com/gpu free: 1 nvidia.com/gpu must be freed"),
        (2, "within what pool a has free (2 nvidia.com/gpu); it waits for: group 1 waits"),
    ],
)
def test_the_next_group_says_what_must_free_up(free: int, says: str) -> None:
    records = [_rec(VLLM, 0, True), _rec(VLLM, 1, False)]
    view = explain_pool(_pool(free=free, used=4 - free), "a", records, [VLLM])
    answer = explain_lws(VLLM, records, [], view)
    assert answer.next_group.startswith("group 1 needs 2 nvidia.com/gpu")
    assert says in answer.next_group, answer.next_group
    assert "ahead of it" not in answer.next_group


def test_groups_ahead_in_the_queue_are_counted() -> None:
    older = lws("old").uid("u-0").pool("a").replicas(1).size(2).age(-3600).obj()
    records = [_rec(VLLM, 0, True), _rec(VLLM, 1, False), _rec(older, 0, False)]
    view = explain_pool(_pool(free=0, used=4), "a", records, [VLLM, older])
    assert [(w.lws, w.group) for w in view.waiting] == [("old", 0), ("vllm", 1)]
    assert explain_lws(VLLM, records, [], view).next_group.endswith("; 1 waiting group ahead of it")


def test_higher_priority_is_served_first_whatever_its_age() -> None:
    young = lws("young").uid("u-2").pool("a").replicas(1).size(2).obj()
    young["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["priorityClassName"] = "high"
    old = lws("old").uid("u-0").pool("a").replicas(1).size(2).age(-3600).obj()
    records = [_rec(old, 0, False), _rec(young, 0, False)]
    view = explain_pool(_pool(free=0, used=4), "a", records, [old, young], {"high": 1000})
    assert [w.lws for w in view.waiting] == ["young", "old"]


def test_a_pool_lists_holders_by_admission_time_and_skips_other_pools() -> None:
    records = [_rec(VLLM, 1, True), _rec(VLLM, 0, True), _rec(VLLM, 2, False, pool="b")]
    view = explain_pool(_pool(free=0, used=4), "a", records, [VLLM])
    assert [h.group for h in view.admitted] == [0, 1]
    assert view.waiting == ()
    assert lines_for_pool(view)[0] == (
        "Pool a: quota 4 nvidia.com/gpu; used 4 nvidia.com/gpu; free 0 nvidia.com/gpu; 2 admitted, 0 waiting"
    )


def test_a_pool_lists_the_groups_of_its_cohort_that_borrow_its_room_not_its_own_on_loan() -> None:
    """``why pool/X`` says who holds X's room: a group of pool b borrowing it is listed under a,
    a group of a borrowing b's is listed under b; a waiting group is its own pool's."""
    other = lws("batch").uid("u-2").pool("b").replicas(2).size(2).obj()
    borrower = _rec(other, 0, True, pool="b")
    borrower["status"]["borrowedFrom"] = "a"
    away = _rec(VLLM, 1, True)
    away["status"]["borrowedFrom"] = "b"
    records = [_rec(VLLM, 0, True), away, borrower, _rec(other, 1, False, pool="b")]
    view = explain_pool(_pool(free=0, used=4), "a", records, [VLLM, other])
    assert [(h.lws, h.group) for h in view.admitted] == [("batch", 0), ("vllm", 0)]
    in_b = explain_pool(_pool(free=0, used=2), "b", records, [VLLM, other])
    assert [(h.lws, h.group) for h in in_b.admitted] == [("vllm", 1)]
    assert [(h.lws, h.group) for h in in_b.waiting] == [("batch", 1)]


def test_a_pool_that_is_not_there_says_so() -> None:
    view = explain_pool(None, "gone", [_rec(VLLM, 0, False, pool="gone")], [VLLM])
    assert view.kind == "missing"
    assert lines_for_pool(view, kinds=("Pool", "ClusterQueue", "Volcano Queue")) == [
        "pool gone: not found (no Pool, ClusterQueue or Volcano Queue of that name)"
    ]
    answer = explain_lws(VLLM, [_rec(VLLM, 0, False, pool="gone")], [], view)
    assert answer.next_group == "group 0 waits: group 0 waits"


def test_a_long_queue_is_cut_in_text_and_whole_in_json() -> None:
    many = [lws(f"l{i}").uid(f"u{i}").pool("a").replicas(1).size(2).obj() for i in range(MAX_LISTED + 5)]
    records = [_rec(o, 0, False) for o in many]
    view = explain_pool(_pool(free=0, used=4), "a", records, many)
    assert len(view.waiting) == MAX_LISTED + 5
    text = lines_for_pool(view)
    assert text[-1] == "    ... and 5 more (-o json lists them all)"


def test_the_kueue_pool_is_the_cluster_queue_summed_over_flavors() -> None:
    cq = {
        "metadata": {"name": "cq"},
        "spec": {
            "resourceGroups": [
                {
                    "flavors": [
                        {"name": "f1", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}]},
                        {"name": "f2", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "2"}]},
                    ]
                }
            ]
        },
        "status": {"flavorsUsage": [{"name": "f1", "resources": [{"name": "nvidia.com/gpu", "total": "4"}]}]},
    }
    admitted, waiting = _rec(VLLM, 0, True), _rec(VLLM, 1, False)
    for r in (admitted, waiting):
        r["status"]["workload"] = r["metadata"]["name"]
    wl0 = {"metadata": dict(admitted["metadata"]), "status": {"admission": {"clusterQueue": "cq"}}}
    wl1 = {"metadata": dict(waiting["metadata"]), "status": {}}
    view = kueue_pool_view(cq, "cq", [wl0, wl1], [admitted, waiting], ("default", "a"))
    assert (view.kind, dict(view.quota), dict(view.used), dict(view.free)) == (
        "ClusterQueue",
        {"nvidia.com/gpu": "6"},
        {"nvidia.com/gpu": "4"},
        {"nvidia.com/gpu": "2"},
    )
    assert [h.group for h in view.admitted] == [0] and [h.group for h in view.waiting] == [1]
    # A group waiting for its Workload (offered to Kueue a few at a time) waits in its LocalQueue.
    later = _rec(VLLM, 2, False)
    elsewhere = _rec(lws("other", "team-b").uid("u-b").pool("q").obj(), 0, False)
    elsewhere["status"]["workload"] = elsewhere["metadata"]["name"]  # another LocalQueue's
    view = kueue_pool_view(cq, "cq", [wl0, wl1], [admitted, waiting, later, elsewhere], ("default", "a"))
    assert [h.group for h in view.waiting] == [1, 2]
    assert kueue_pool_view(None, "cq", [], []) == PoolView("cq", "missing")


def test_the_text_answer_reads_as_a_story() -> None:
    records = [_rec(VLLM, 0, True), _rec(VLLM, 1, False), _rec(VLLM, 2, False)]
    view = explain_pool(_pool(free=0, used=4), "a", records, [VLLM])
    text = "\n".join(lines_for_lws(explain_lws(VLLM, records, [], view)))
    assert text.startswith("LeaderWorkerSet default/vllm: 3 groups of 2 pods, lws-gatekeeper.io/pool=a\n")
    assert "  group 1: waiting (WaitingForQuota); 2 nvidia.com/gpu; no pods\n    group 1 waits\n" in text
    assert "  held by:\n    default/vllm group 0: 2 nvidia.com/gpu\n" in text
    assert text.endswith("(a group that holds it scales away or ends, or the quota grows)")


def test_an_lws_whose_groups_are_all_admitted_says_so() -> None:
    one = lws("one").uid("u-9").pool("a").replicas(1).size(2).obj()
    assert lines_for_lws(explain_lws(one, [_rec(one, 0, True)], [], None))[-1] == "every group is admitted"


def test_an_unreadable_replica_count_lists_only_the_groups_that_exist() -> None:
    huge = lws("huge").uid("u-h").pool("a").replicas(2**31 - 1).size(2).obj()
    answer = explain_lws(huge, [_rec(huge, 0, True)], [], None)
    assert answer.replicas == 0 and [g.group for g in answer.groups] == [0]


def _queue(capability: dict[str, str] | None, allocated: dict[str, str]) -> dict[str, Any]:
    spec: dict[str, Any] = {"weight": 1}
    if capability is not None:
        spec["capability"] = capability
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "a"},
        "spec": spec,
        "status": {"state": "Open", "allocated": allocated},
    }


def test_the_volcano_pool_is_the_queue_its_capability_and_what_volcano_reports_allocated() -> None:
    chat = lws("chat").uid("u-9").pool("a").replicas(1).size(2).obj()
    chat["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["priorityClassName"] = "high"
    records = [
        _rec(VLLM, 1, True),
        _rec(VLLM, 0, True),
        _rec(VLLM, 2, False),
        _rec(chat, 0, False),
        _rec(VLLM, 3, False, pool="b"),  # another Queue's
    ]
    allocated = {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "4", "pods": "4"}
    view = volcano_queue_view(
        _queue({"nvidia.com/gpu": "4"}, allocated), "a", records, [VLLM, chat], {"high": 10}
    )
    assert (view.kind, view.quota, view.used, view.free) == (
        "Queue", {"nvidia.com/gpu": "4"}, {"nvidia.com/gpu": "4"}, {"nvidia.com/gpu": "0"}
    )  # fmt: skip
    assert [h.group for h in view.admitted] == [0, 1]
    assert [(w.lws, w.group) for w in view.waiting] == [("chat", 0), ("vllm", 2)], "highest priority first"
    assert lines_for_pool(view)[:2] == [
        "Queue a: quota 4 nvidia.com/gpu; used 4 nvidia.com/gpu; free 0 nvidia.com/gpu; "
        "2 admitted, 2 waiting",
        "  held by:",
    ]
    assert "  waiting, in the order they are served:" in lines_for_pool(view)
    answer = explain_lws(VLLM, records, [], view)
    assert answer.next_group == (
        "group 2 needs 2 nvidia.com/gpu; queue a has 0 nvidia.com/gpu free: 2 nvidia.com/gpu must be freed "
        "(a group that holds it scales away or ends, or the quota grows); 1 waiting group ahead of it"
    )
    unbounded = volcano_queue_view(_queue(None, allocated), "a", records, [VLLM])
    assert (unbounded.quota, unbounded.free) == ({}, {})
    assert unbounded.used["nvidia.com/gpu"] == "4", "no capability: all that Volcano reports"

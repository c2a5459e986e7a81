"""``core.backends.kueue.pass_through``: the groups whose new pods the webhook makes as the
``kueue`` backend's pass lets their gated pods through, each role onto its flavor.

Table tests on plain dicts; the webhook with the real API server and Kueue is in
``tests/e2e/test_kueue_pass_through.py``.
"""

from __future__ import annotations

import copy
from typing import Any

from core_builders import lws_pod, lws_statefulsets
from test_backend_kueue import ADMITTED, EVICTED, FLAVOR, LQ, decide, rec, vllm, workload

from gatekeeper.core.admission.pass_through import patch_for
from gatekeeper.core.backends.kueue import KueueSnapshot, decide_kueue
from gatekeeper.core.kube.keys import KUEUE_API_VERSION
from gatekeeper.core.kube.objects import as_map
from gatekeeper.core.model.charge import charge_toleration

A100 = {
    "apiVersion": KUEUE_API_VERSION,
    "kind": "ResourceFlavor",
    "metadata": {"name": "a100"},
    "spec": {"nodeLabels": {"pool": "a100"}},
}


def _new(group: int, worker: int, **kw: Any) -> dict[str, Any]:
    """A pod as the StatefulSet controller sends it to the webhook: not gated yet."""
    return lws_pod("vllm", group, worker, pool=LQ, gated=False, **kw)


def _patched(pod: dict[str, Any], table: Any, pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``pod`` as the webhook would make it, or None when it is born gated."""
    obj = vllm(replicas=1, size=3)
    by = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in lws_statefulsets([obj], pods)}
    live = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
    ops = patch_for(pod, "default", table, lambda ns, n: by.get((ns, n)), lambda ns, n: live.get((ns, n)))
    if ops is None:
        return None
    spec = copy.deepcopy(as_map(pod["spec"]))
    for op in ops:
        if op["path"] == "/spec/nodeSelector":
            spec["nodeSelector"] = op["value"]
        elif op["path"] == "/spec/tolerations":
            spec["tolerations"] = op["value"]
        elif op["path"] == "/spec/tolerations/-":
            spec.setdefault("tolerations", []).append(op["value"])
        elif op["path"].startswith("/spec/nodeSelector/"):
            spec.setdefault("nodeSelector", {})[op["path"].rsplit("/", 1)[1].replace("~1", "/")] = op["value"]
    return spec


def test_an_admitted_groups_new_workers_are_made_onto_their_own_flavor() -> None:
    obj = vllm(replicas=1, size=3)
    leader = lws_pod("vllm", 0, 0, pool=LQ, gated=False, node_name="n1", phase="Running")
    wl = workload(obj, 0, conditions=ADMITTED, flavors={"leader": "h100", "worker": "a100"})
    made = lws_statefulsets([obj], [leader])
    acts = decide_kueue(
        KueueSnapshot([obj], [leader], [rec(obj, 0, admitted=True)], [wl], [FLAVOR, A100], statefulsets=made)
    )
    [(key, group)] = acts.passable
    assert key == ("default", "vllm", 0)
    mark = charge_toleration(obj["metadata"]["uid"], 0)
    assert group.steering(True).node_selector == {"pool": "h100", "example.com/zone": "a"}
    assert group.steering(True).tolerations == (*FLAVOR["spec"]["tolerations"], mark)  # type: ignore[index]
    assert group.steering(False).node_selector == {"pool": "a100"}
    assert group.steering(False).tolerations == (mark,)
    spec = _patched(_new(0, 1), dict(acts.passable), [leader])
    assert spec is not None and spec["nodeSelector"]["pool"] == "a100"
    assert mark in spec["tolerations"]
    assert "schedulingGates" not in spec or not spec["schedulingGates"]


def test_no_entry_while_kueue_has_not_admitted_or_has_evicted_the_workload() -> None:
    obj = vllm(replicas=1, size=2)
    pods = [lws_pod("vllm", 0, w, pool=LQ) for w in range(2)]
    flavors = {"leader": "h100", "worker": "h100"}
    waiting = workload(obj, 0, conditions=[], flavors=None)
    assert decide([obj], pods, [rec(obj, 0, admitted=False)], [waiting]).passable == ()
    evicted = workload(obj, 0, conditions=EVICTED, flavors=flavors)
    assert decide([obj], pods, [rec(obj, 0, admitted=True)], [evicted]).passable == ()
    admitted = workload(obj, 0, conditions=ADMITTED, flavors=flavors)
    assert [k for k, _ in decide([obj], pods, [rec(obj, 0, admitted=False)], [admitted]).passable] == [
        ("default", "vllm", 0)
    ]


def test_no_entry_for_a_group_with_a_pod_not_as_admitted_and_a_pod_asking_more_is_born_gated() -> None:
    obj = vllm(replicas=1, size=2)
    flavors = {"leader": "h100", "worker": "h100"}
    wl = workload(obj, 0, conditions=ADMITTED, flavors=flavors)
    leader = lws_pod("vllm", 0, 0, pool=LQ, gated=False, node_name="n1", phase="Running")
    acts = decide([obj], [leader], [rec(obj, 0, admitted=True)], [wl])
    table = dict(acts.passable)
    assert _patched(_new(0, 1), table, [leader]) is not None
    assert _patched(_new(0, 1, gpu_limit=4), table, [leader]) is None, "asks more than admitted"
    forged = _new(0, 1)
    forged["metadata"]["ownerReferences"] = []
    assert _patched(forged, table, [leader]) is None, "not made by the group's StatefulSet"
    assert _patched(_new(0, 2), table, [leader]) is None, "beyond the group's size"
    # A pod of the group that asks more than admitted: the group is not passable while it is there.
    greedy = lws_pod("vllm", 0, 1, pool=LQ, gpu_limit=4)
    assert decide([obj], [leader, greedy], [rec(obj, 0, admitted=True)], [wl]).passable == ()

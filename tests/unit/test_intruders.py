"""``core.admission.intruders``: pods on a closed pool's nodes without an admission are held
against its quota.

A closed pool's nodes are tainted ``lws-gatekeeper.io/pool``. A pod that tolerates that taint
by itself (the policy lws-gatekeeper-closed-pools turned off, say) and binds there takes
what the pool's quota was to give to admitted groups: it is counted as held, and the Pool's
status names it, so the pool admits only what is left.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from core_builders import bound_pod, lws, lws_pod, lws_statefulsets, node, pool, read_pools, record

from gatekeeper.core.admission.intruders import Intruders, intruders
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools.decide import Snapshot, decide
from gatekeeper.core.backends.pools.writes import pool_status_patch
from gatekeeper.core.kube.keys import POOL_TAINT_KEY
from gatekeeper.core.model.charge import charge_toleration
from gatekeeper.core.model.nodes import bound_pod_view

CLOSED = {"key": POOL_TAINT_KEY, "operator": "Equal", "value": "a", "effect": "NoSchedule"}


def _nodes() -> list[Any]:
    closed = [
        node(f"n{i}").labels(pool="a").alloc(gpu=1).taint(POOL_TAINT_KEY, "a").parsed() for i in range(3)
    ]
    return [*closed, node("open").labels(pool="b").alloc(gpu=1).parsed()]


def _on(node_name: str, *tolerations: dict[str, Any], namespace: str = "team-a", **kw: Any) -> dict[str, Any]:
    pod = bound_pod(f"p-{node_name}", node_name, namespace=namespace, gpu=1, **kw)
    pod["metadata"]["uid"] = f"uid-{node_name}-{namespace}"
    pod["spec"]["tolerations"] = list(tolerations)
    return pod


POOLS = [pool("a").selector(pool="a").quota(gpu=2).parsed(), pool("b").selector(pool="b").parsed()]


@pytest.mark.parametrize(
    ("pod", "found"),
    [
        (_on("n0", CLOSED), ("team-a/p-n0",)),
        (_on("n0", {"operator": "Exists"}), ("team-a/p-n0",)),  # tolerates every taint
        (_on("n0", CLOSED, charge_toleration("u", 0)), ()),  # let through by the gatekeeper
        (_on("n0", CLOSED, namespace="kube-system"), ()),  # an exempt namespace (a DaemonSet's)
        (_on("n0"), ()),  # bound before the node was tainted: it opens nothing
        (_on("n0", CLOSED, phase="Succeeded"), ()),
        (_on("open", {"operator": "Exists"}), ()),  # an open pool's node
    ],
    ids=["tolerates-the-taint", "tolerates-everything", "charged", "exempt", "no-toleration", "done", "open"],
)
def test_who_is_an_intruder(pod: dict[str, Any], found: tuple[str, ...]) -> None:
    got = intruders(POOLS, _nodes(), [bound_pod_view(pod)], {"kube-system"})
    assert got.get("a", Intruders()).pods == found
    if found:
        assert got["a"].requests == {"nvidia.com/gpu": 1, "pods": 1}
    assert "b" not in got


def test_an_intruder_on_the_nodes_of_two_pools_is_held_by_both() -> None:
    wide = pool("wide").selector(pool="a").parsed()
    got = intruders([*POOLS, wide], _nodes(), [_on("n1", CLOSED)], ())
    assert sorted(got) == ["a", "wide"]


LWS = lws("vllm").pool("a").uid("u-1").size(2).replicas(1).worker(gpu_limit=1).obj()


def _snap(bound: list[dict[str, Any]]) -> Snapshot:
    pods = [lws_pod("vllm", 0, w) for w in (0, 1)]
    return Snapshot(
        lwss=[LWS],
        pods=pods,
        bound_pods=[bound_pod_view(p) for p in bound],
        nodes=_nodes(),
        pools=read_pools([pool("a").selector(pool="a").quota(gpu=2).tolerations(CLOSED).obj()]),
        records=[record(LWS, 0, admitted=False)],
        statefulsets=lws_statefulsets([LWS], pods),
    )


def test_a_pool_admits_only_what_its_intruders_leave_of_its_quota() -> None:
    """3 closed nodes of 1 GPU, quota 2: one intruder on n0, a group of 2 would fit n1 and n2,
    but 1 + 2 would be more than the quota: it waits, and the status says who holds what."""
    assert [a.group.key.index for a in decide(_snap([])).admit] == [0]
    actions = decide(_snap([_on("n0", CLOSED)]))
    assert not actions.admit
    (waiting,) = actions.waiting
    assert waiting.reason is Reason.WAITING_FOR_QUOTA
    assert (
        "pool a has 1 free (1 of 2 held by 0 admitted groups and 1 pod on its nodes "
        "without an admission)" in waiting.message
    ), waiting.message
    status = actions.pools["a"]
    assert status.intruders == ("team-a/p-n0",)
    assert status.used["nvidia.com/gpu"] == 1
    patch = pool_status_patch(None, status, None, "2026-01-01T00:00:00Z")
    assert patch is not None and patch["intruders"] == ["team-a/p-n0"]
    message = patch["conditions"][0]["message"]
    assert "1 pod on its closed nodes without an admission, held against its quota: team-a/p-n0" in message


def test_the_pools_status_names_at_most_twenty_intruders() -> None:
    many = []
    for i in range(25):
        pod = copy.deepcopy(_on("n0", CLOSED))
        pod["metadata"]["name"], pod["metadata"]["uid"] = f"x{i:02}", f"u{i}"
        pod["spec"]["containers"][0]["resources"] = {}
        many.append(pod)
    status = decide(_snap(many)).pools["a"]
    assert len(status.intruders) == 25
    patch = pool_status_patch(None, status, None, "2026-01-01T00:00:00Z")
    assert patch is not None and len(patch["intruders"]) == 20
    assert "and 5 more" in patch["conditions"][0]["message"]

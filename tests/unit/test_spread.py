"""Hard topology spread constraints in the node fit: a group is admitted only where the
kube-scheduler's PodTopologySpread filter lets every pod bind, or waits with the reason.

Table tests on plain dicts (``core.model.spread``, ``core.admission.skew``); the real
scheduler agrees in ``tests/e2e/test_topology.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from core_builders import bound_pod, ctr, lws, node, pod_spec, pool, waiting

from gatekeeper.core.admission.fit import Misfit, NodeTable
from gatekeeper.core.admission.messages import cannot_place, waits_for_nodes
from gatekeeper.core.admission.queue import AdmittedGroup
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools.planner import plan
from gatekeeper.core.kube.keys import GROUP_KEY_LABEL, LWS_NAME_LABEL
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.nodes import Node, node_usage
from gatekeeper.core.model.pool import parse_pool
from gatekeeper.core.model.spread import MAX_SPREADS, BoundPods, parse_spreads

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
MINE = {"matchLabels": {LWS_NAME_LABEL: "m"}}


def spread(key: str = ZONE, skew: int = 1, selector: Any = MINE, **more: Any) -> dict[str, Any]:
    return {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": selector, **more}  # fmt: skip


def spread_group(pods: int, gpus: int, *rules: dict[str, Any]) -> GroupDemand:
    spec = pod_spec(ctr(gpu_limit=gpus))
    spec["topologySpreadConstraints"] = list(rules)
    return lws("m").size(pods).worker(spec).demand()


def zones(*shape: tuple[str, int, int]) -> list[Node]:
    """Nodes of pool ``a``: (zone, nodes, GPUs each), named ``<zone>-<i>``."""
    return [
        node(f"{zone}-{i}")
        .labels(pool="a")
        .label(ZONE, zone)
        .label(HOST, f"{zone}-{i}")
        .alloc(gpu=gpus)
        .parsed()
        for zone, count, gpus in shape
        for i in range(count)
    ]


def placed_zones(nodes: tuple[str, ...]) -> list[str]:
    return sorted(n.rsplit("-", 1)[0] for n in nodes)


# ----- reading the constraints ---------------------------------------------------------


def test_only_do_not_schedule_constraints_are_read_with_their_policies() -> None:
    spec = {"topologySpreadConstraints": [
        spread(),
        {**spread(HOST), "whenUnsatisfiable": "ScheduleAnyway"},  # scoring, not a filter
        spread(HOST, 2, minDomains=3, nodeAffinityPolicy="Ignore", nodeTaintsPolicy="Honor",
               matchLabelKeys=[GROUP_KEY_LABEL]),
    ]}  # fmt: skip
    first, second = parse_spreads(spec, "ns", {LWS_NAME_LABEL: "m"})
    assert (first.key, first.max_skew, first.min_domains, first.own, first.group_only) == (
        ZONE,
        1,
        1,
        True,
        False,
    )
    assert (first.honor_affinity, first.honor_taints) == (True, False)  # the scheduler's defaults
    assert (second.key, second.max_skew, second.min_domains, second.group_only) == (HOST, 2, 3, True)
    assert (second.honor_affinity, second.honor_taints) == (False, True)


def test_match_label_keys_pin_the_pods_own_value_and_a_missing_selector_counts_no_pod() -> None:
    spec = {"topologySpreadConstraints": [spread(matchLabelKeys=["app", "absent"]), spread(selector=None)]}
    pinned, nothing = parse_spreads(spec, "ns", {LWS_NAME_LABEL: "m", "app": "vllm"})
    assert pinned.selector is not None
    assert dict(pinned.selector.match_labels) == {LWS_NAME_LABEL: "m", "app": "vllm"}
    assert (nothing.selector, nothing.own) == (None, False)


@pytest.mark.parametrize(
    ("rule", "words"),
    [
        (spread(skew=0), "maxSkew"),
        (spread(skew="1"), "maxSkew"),
        (spread(skew=10**9), "maxSkew"),
        (spread(minDomains=0), "minDomains"),
        (spread(key="not a key!"), "topologyKey"),
        (spread(nodeAffinityPolicy="Sometimes"), "nodeAffinityPolicy"),
        (spread(matchLabelKeys=["bad key!"]), "matchLabelKeys"),
        (spread(selector={"matchLabels": {"a": 1}}), "matchLabels"),
    ],
)
def test_a_constraint_the_api_server_would_refuse_is_refused(rule: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_spreads({"topologySpreadConstraints": [rule]}, "ns", {})


def test_more_constraints_than_the_bound_are_refused() -> None:
    many = [spread(f"k{i}") for i in range(MAX_SPREADS + 1)]
    with pytest.raises(ValueError, match="more than"):
        parse_spreads({"topologySpreadConstraints": many}, "ns", {})


def test_a_bad_constraint_makes_the_lws_demand_invalid() -> None:
    with pytest.raises(ValueError, match=r"workerTemplate\.spec\.topologySpreadConstraints\[0\]\.maxSkew"):
        spread_group(2, 1, spread(skew=-1))


# ----- placing -------------------------------------------------------------------------


def test_a_group_spread_over_zones_is_placed_as_the_scheduler_would_bind_it() -> None:
    """Best fit alone would pack all four pods into zone a's two nodes; maxSkew 1 over zones
    puts two in each."""
    nodes = zones(("a", 2, 8), ("b", 2, 8))
    table = NodeTable(nodes)
    table.add_view("a", lambda n: True)
    plain = table.place("a", lws("m").size(4).worker(gpu_limit=4).demand().pods, keep=False)
    assert not isinstance(plain, Misfit) and placed_zones(plain) == ["a", "a", "a", "a"]
    spread_out = table.place("a", spread_group(4, 4, spread()).pods, keep=False)
    assert not isinstance(spread_out, Misfit) and placed_zones(spread_out) == ["a", "a", "b", "b"]


def test_bound_matching_pods_count_and_other_namespaces_do_not() -> None:
    """Two pods of the LWS already run in zone a: with maxSkew 1 the next two go to zone b.
    Another namespace's pods there do not count: one pod in each zone (best fit puts the first
    in a, the fuller)."""
    nodes = zones(("a", 2, 8), ("b", 2, 8))
    mine = [bound_pod(f"p{i}", "a-0", namespace="default", gpu=1) for i in range(2)]
    for pod in mine:
        pod["metadata"]["labels"] = {LWS_NAME_LABEL: "m"}
    elsewhere = [{**pod, "metadata": {**pod["metadata"], "namespace": "other"}} for pod in mine]
    for bound, expected in ((mine, ["b", "b"]), (elsewhere, ["a", "b"])):
        table = NodeTable(nodes, node_usage(bound), bound=BoundPods(bound))
        table.add_view("a", lambda n: True)
        found = table.place("a", spread_group(2, 1, spread()).pods)
        assert not isinstance(found, Misfit) and placed_zones(found) == expected


def test_a_group_the_rule_cannot_place_waits_with_the_rule_named() -> None:
    """Three pods, one a host (maxSkew 1, minDomains 3), on two hosts with room for all: the
    third pod has room only where the rule forbids it. Never on these nodes, even empty."""
    nodes = zones(("a", 2, 8))
    rule = spread(HOST, minDomains=3, matchLabelKeys=[GROUP_KEY_LABEL])
    result = plan(
        [pool("a").quota(gpu=16).parsed()], nodes, {}, [], [waiting("m", 0, spread_group(3, 1, rule))]
    )
    assert result.admit == ()
    [held] = result.waiting
    assert held.reason is Reason.NODES_TOO_SMALL
    assert f"topologySpreadConstraints (maxSkew 1 over {HOST}) leave it no node of pool a" in held.message


def test_placed_groups_count_for_the_groups_after_them_in_the_pass() -> None:
    """Zone b is full (another namespace's pod): the first one-pod group goes to zone a; the
    second may not follow it there (skew 2 over b's 0) and waits with the rule named."""
    nodes = zones(("a", 1, 8), ("b", 1, 1))
    full = [bound_pod("x", "b-0", namespace="other", gpu=1)]
    demand = spread_group(1, 1, spread())
    table = NodeTable(nodes, node_usage(full), bound=BoundPods(full))
    table.add_view("a", lambda n: True)
    first = table.place("a", demand.pods)
    assert not isinstance(first, Misfit) and placed_zones(first) == ["a"]
    second = table.place("a", demand.pods, keep=False)
    assert isinstance(second, Misfit) and second.skew == f"maxSkew 1 over {ZONE}"
    assert "finds room only on nodes its topologySpreadConstraints (maxSkew 1 over" in waits_for_nodes(
        "a", second
    )
    assert "even on empty nodes" in cannot_place("a", second)


def test_unplace_gives_the_count_back() -> None:
    nodes = zones(("a", 1, 8), ("b", 1, 8))
    demand = spread_group(2, 1, spread())
    table = NodeTable(nodes)
    table.add_view("a", lambda n: True)
    first = table.place("a", demand.pods)
    assert not isinstance(first, Misfit)
    table.unplace("a", demand.pods, first)
    again = table.place("a", spread_group(1, 1, spread()).pods + spread_group(1, 1, spread()).pods)
    assert not isinstance(again, Misfit) and placed_zones(again) == ["a", "b"]


def test_nodes_without_the_key_or_outside_the_pods_selector_are_no_domain() -> None:
    """A node lacking the key takes no pod with the rule; with nodeAffinityPolicy Honor a zone
    the pod's selector excludes is no domain (it does not hold the minimum at 0)."""
    nodes = [*zones(("a", 1, 8), ("b", 1, 8)), node("bare").labels(pool="a").alloc(gpu=8).parsed()]
    spec = pod_spec(ctr(gpu_limit=1), node_selector={ZONE: "a"})
    spec["topologySpreadConstraints"] = [spread(skew=2)]
    demand = lws("m").size(2).worker(spec).demand()
    table = NodeTable(nodes)
    table.add_view("a", lambda n: True)
    found = table.place("a", demand.pods)
    assert not isinstance(found, Misfit) and found == ("a-0", "a-0")
    bare = table.place("a", spread_group(1, 1, spread(key="missing")).pods, keep=False)
    assert isinstance(bare, Misfit) and bare.skew == "maxSkew 1 over missing"


def test_a_spread_demand_is_not_answered_from_a_plain_demands_memo() -> None:
    """The pass memoizes by demand (misfits, steered and pinned demands): a demand with spread
    rules is not the same demand as one without."""
    nodes = zones(("a", 1, 2), ("b", 1, 2))
    spread_one, plain = spread_group(2, 2, spread("missing")), lws("m").size(2).worker(gpu_limit=2).demand()
    assert spread_one != plain
    result = plan([pool("a").quota(gpu=16).parsed()], nodes, {}, [],
                  [waiting("m", 0, spread_one, age=0), waiting("p", 0, plain, age=1)])  # fmt: skip
    assert [a.key.name for a in result.admit] == ["p"]
    assert [w.key.name for w in result.waiting] == ["m"]


# ----- as the scheduler counts: found by review, each shown failing before its fix --------


def test_a_karpenter_or_quota_only_pool_keeps_no_spread_rule() -> None:
    """Nodes bought later are not there to count on: the rule is left to the scheduler and
    Karpenter (which spreads what it buys), as topology levels are."""
    demand = spread_group(2, 1, spread())
    bought = pool("k").obj()
    bought["spec"]["nodePools"] = ["np"]
    quota_only = pool("q").quota(gpu=8).obj()
    quota_only["spec"]["nodeFit"] = "QuotaOnly"
    for obj in (bought, quota_only):
        steered = parse_pool(obj).steer(demand)
        assert all(p.spreads == () and p.counted_in == () for p in steered.pods)
    kept = pool("a").parsed().steer(demand)
    assert all(p.spreads for p in kept.pods)


def test_an_admitted_groups_pods_not_bound_yet_count_where_they_hold_room() -> None:
    """h1 and h2 with 2 GPUs each, h3 full (another namespace). Group m/0 is admitted on h1 and
    h2, not bound yet; m/1 must not be put there too (h1 and h2 at 2, h3 at 0: skew 2)."""
    nodes = [node(h).labels(pool="a").label(HOST, h).alloc(gpu=2).parsed() for h in ("h1", "h2", "h3")]
    full = [bound_pod("x", "h3", namespace="other", gpu=2)]
    demand = spread_group(2, 1, spread(HOST))
    held = AdmittedGroup(GroupKey("default", "m", 0), "a", demand, nodes={0: "h1", 1: "h2"})
    result = plan(
        [pool("a").quota(gpu=16).parsed()], nodes, node_usage(full), [held], [waiting("m", 1, demand)],
        bound=BoundPods(full),
    )  # fmt: skip
    assert result.admit == ()
    assert "topologySpreadConstraints" in result.waiting[0].message


def test_a_leader_without_the_rule_counts_for_its_workers_rule() -> None:
    """The leader has no constraint; the worker spreads over hosts by the LWS's name and group
    key. h1 has room for both, h2 for none: the worker may not join the leader on h1."""
    worker = pod_spec(ctr(gpu_limit=1))
    worker["topologySpreadConstraints"] = [spread(HOST, matchLabelKeys=[GROUP_KEY_LABEL])]
    demand = lws("m").size(2).leader(pod_spec(ctr(gpu_limit=1))).worker(worker).demand()
    assert demand.pods[0].spreads == () and demand.pods[0].counted_in == demand.pods[1].spreads
    nodes = [node("h1").labels(pool="a").label(HOST, "h1").alloc(gpu=3).parsed(),
             node("h2").labels(pool="a").label(HOST, "h2").alloc(gpu=0).parsed()]  # fmt: skip
    table = NodeTable(nodes)
    table.add_view("a", lambda n: True)
    found = table.place("a", demand.pods, keep=False)
    assert isinstance(found, Misfit) and found.skew == f"maxSkew 1 over {HOST}"


def test_a_cordoned_node_is_a_domain_the_scheduler_counts() -> None:
    """h1 and h2 with 2 GPUs each and a cordoned h3: with the default nodeTaintsPolicy the
    scheduler counts h3 (empty), so one pod a host at most: four pods cannot be placed."""
    nodes = [
        *(node(h).labels(pool="a").label(HOST, h).alloc(gpu=2).parsed() for h in ("h1", "h2")),
        node("h3").labels(pool="a").label(HOST, "h3").alloc(gpu=2).cordon().parsed(),
    ]
    table = NodeTable(nodes)
    table.add_view("a", lambda n: True)
    four = table.place(
        "a", spread_group(4, 1, spread(HOST, matchLabelKeys=[GROUP_KEY_LABEL])).pods, keep=False
    )
    assert isinstance(four, Misfit) and four.skew
    two = table.place(
        "a", spread_group(2, 1, spread(HOST, matchLabelKeys=[GROUP_KEY_LABEL])).pods, keep=False
    )
    assert not isinstance(two, Misfit) and sorted(two) == ["h1", "h2"]

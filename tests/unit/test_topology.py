"""Topology levels on a Pool: a group whose LWS requires (or prefers) one domain of a level is
admitted only into one domain of that level that holds all its pods, best fit, and its pods are
pinned there; otherwise it waits gated with the reason."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from core_builders import (
    bound_pod,
    ctr,
    lws,
    lws_pod,
    lws_statefulsets,
    node,
    pod_spec,
    pool,
    read_pools,
    record,
    waiting,
)

from gatekeeper.core.admission.queue import AdmittedGroup
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.admission.topology import pin
from gatekeeper.core.backends.pools import PassInputs, Snapshot, decide, plan_writes
from gatekeeper.core.backends.pools.pass_through import index
from gatekeeper.core.backends.pools.planner import Plan, Waiting, plan
from gatekeeper.core.kube.keys import (
    EXCLUSIVE_TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
)
from gatekeeper.core.model.demand import GroupDemand, group_demand
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.lws import TopologyRequest, topology_request
from gatekeeper.core.model.nodes import Node, node_usage
from gatekeeper.core.model.pool import parse_pool
from gatekeeper.core.model.record import recorded_domain
from gatekeeper.core.writes.plan import Memory, walk

BLOCK, RACK, HOST = "topology.example.com/block", "topology.example.com/rack", "kubernetes.io/hostname"
LEVELS = (BLOCK, RACK, HOST)
REQUIRE_RACK = TopologyRequest(RACK, required=True)
PREFER_RACK = TopologyRequest(RACK, required=False)


def cluster(*shape: tuple[str, str, int, int]) -> list[Node]:
    """Nodes of pool ``a``: (block, rack, nodes, GPUs each); named ``<block>-<rack>-<i>``."""
    out = []
    for block, rack, count, gpus in shape:
        for i in range(count):
            name = f"{block}-{rack}-{i}"
            labels = {BLOCK: block, RACK: rack, HOST: name}
            built = node(name).labels(pool="a").alloc(gpu=gpus)
            for key, value in labels.items():
                built.label(key, value)
            out.append(built.parsed())
    return out


def group(pods: int, gpus: int) -> GroupDemand:
    return lws("m").size(pods).worker(gpu_limit=gpus).demand()


def run(
    nodes: list[Node],
    groups: list[Any],
    *,
    bound: Sequence[dict[str, Any]] = (),
    admitted: Sequence[AdmittedGroup] = (),
    levels: Sequence[str] = LEVELS,
    quota: int = 256,
) -> Plan:
    pools = [pool("a").quota(gpu=quota).levels(*levels).parsed()]
    return plan(pools, nodes, node_usage(bound), admitted, groups)


def racks_of(result: Plan) -> list[set[str]]:
    return [{n.rsplit("-", 1)[0] for n in a.nodes} for a in result.admit]


def waits(result: Plan) -> dict[int, Waiting]:
    return {w.key.index: w for w in result.waiting}


def test_a_required_group_goes_whole_into_one_rack_and_is_pinned_with_its_block() -> None:
    nodes = cluster(("b1", "r1", 2, 8), ("b1", "r2", 2, 8))
    result = run(nodes, [waiting("m", 0, group(2, 8), topology=REQUIRE_RACK)])
    (admitted,) = result.admit
    assert len(racks_of(result)[0]) == 1
    rack = admitted.nodes[0].split("-")[1]
    assert admitted.domain == ((BLOCK, "b1"), (RACK, rack))


def test_fragmented_racks_the_gpus_add_up_yet_the_group_waits_with_the_freest_rack_named() -> None:
    """Each rack has 6 of 16 GPUs free (one node full, the other with 6 free): 18 free in the
    pool, so two pods of 6 GPUs fit the pool but no rack."""
    nodes = cluster(("b1", "r1", 2, 8), ("b1", "r2", 2, 8), ("b2", "r3", 2, 8))
    bound = [bound_pod(f"x{i}", n.name, gpu=8 if n.name.endswith("-0") else 2) for i, n in enumerate(nodes)]
    result = run(nodes, [waiting("m", 0, group(2, 6), topology=REQUIRE_RACK)], bound=bound)
    (only,) = result.waiting
    assert only.reason is Reason.WAITING_FOR_NODES
    assert (
        "no topology.example.com/rack domain has room for the whole group (topology-required)" in only.message
    )
    assert "it needs 12 nvidia.com/gpu in one; the freest of the 3 domains" in only.message
    assert "has 6 nvidia.com/gpu free" in only.message
    flat = run(nodes, [waiting("m", 0, group(2, 6))], bound=bound)
    assert [a.key.index for a in flat.admit] == [0], (
        "without topology the same group is admitted across racks"
    )


def test_best_fit_keeps_the_large_rack_whole_for_a_large_group() -> None:
    nodes = cluster(("b1", "big", 4, 8), ("b1", "small", 1, 8))
    groups = [
        waiting("small-one", 0, group(1, 8), topology=REQUIRE_RACK, age=0),
        waiting("large", 0, group(4, 8), topology=REQUIRE_RACK, age=1),
    ]
    result = run(nodes, groups)
    assert {a.key.name: a.domain[-1][1] for a in result.admit} == {"small-one": "small", "large": "big"}


def test_a_rack_is_named_by_its_block_too_two_r1_racks_are_two_domains() -> None:
    nodes = cluster(("b1", "r1", 1, 8), ("b2", "r1", 1, 8))
    result = run(nodes, [waiting("m", 0, group(2, 8), topology=REQUIRE_RACK)])
    (only,) = result.waiting
    assert only.reason is Reason.NODES_TOO_SMALL
    assert "the largest of pool a's 2 domains has 8 nvidia.com/gpu" in only.message


def test_a_preferred_group_falls_back_to_a_block_then_to_the_whole_pool() -> None:
    nodes = cluster(("b1", "r1", 1, 8), ("b1", "r2", 1, 8), ("b2", "r3", 1, 8))
    block = run(nodes, [waiting("m", 0, group(2, 8), topology=PREFER_RACK)])
    assert block.admit[0].domain == ((BLOCK, "b1"),)
    anywhere = run(nodes, [waiting("m", 0, group(3, 8), topology=PREFER_RACK)])
    assert anywhere.admit[0].domain == ()
    too_big = run(nodes, [waiting("m", 0, group(4, 8), topology=PREFER_RACK)])
    assert too_big.waiting[0].reason is Reason.NODES_TOO_SMALL


@pytest.mark.parametrize(
    ("levels", "words"),
    [
        pytest.param((BLOCK, HOST), "it is not one of pool a's spec.topology.levels", id="not-a-level"),
        pytest.param((), "pool a has no spec.topology.levels", id="no-levels"),
    ],
)
def test_a_level_the_pool_does_not_have_is_a_permanent_reason(levels: Sequence[str], words: str) -> None:
    nodes = cluster(("b1", "r1", 2, 8))
    result = run(nodes, [waiting("m", 0, group(1, 1), topology=REQUIRE_RACK)], levels=levels)
    (only,) = result.waiting
    assert only.reason is Reason.TOPOLOGY_NOT_IN_POOL and only.reason.permanent
    assert words in only.message
    assert only.position == 0


def test_nodes_without_the_levels_labels_are_in_no_domain() -> None:
    nodes = [node(f"n{i}").labels(pool="a").alloc(gpu=8).parsed() for i in range(2)]
    result = run(nodes, [waiting("m", 0, group(1, 1), topology=REQUIRE_RACK)])
    (only,) = result.waiting
    assert only.reason is Reason.NODES_TOO_SMALL
    assert "no node of pool a carries that label" in only.message


def test_an_admitted_pinned_groups_unbound_pods_hold_room_in_its_rack() -> None:
    """Group 0 is admitted into r1 and not bound: its room in r1 is held there (not anywhere in
    the pool), so the next group goes to r2."""
    nodes = cluster(("b1", "r1", 2, 8), ("b1", "r2", 2, 8))
    held = AdmittedGroup(GroupKey("default", "m", 0), "a", group(2, 8), domain=((BLOCK, "b1"), (RACK, "r1")))
    result = run(nodes, [waiting("m", 1, group(2, 8), topology=REQUIRE_RACK)], admitted=[held])
    assert result.admit[0].domain == ((BLOCK, "b1"), (RACK, "r2"))


def test_an_admitted_group_whose_rack_has_no_room_any_more_is_stranded() -> None:
    """A node of its rack gone (or taken): the recreated pods do not fit its rack, though they
    would fit another: it is stranded (given back when due), not counted elsewhere."""
    nodes = cluster(("b1", "r1", 1, 8), ("b1", "r2", 2, 8))
    held = AdmittedGroup(GroupKey("default", "m", 0), "a", group(2, 8), domain=((BLOCK, "b1"), (RACK, "r1")))
    result = run(nodes, [], admitted=[held])
    assert result.pools["a"].stranded == (GroupKey("default", "m", 0),)


def test_an_exclusive_group_is_pinned_to_the_domain_of_its_key() -> None:
    nodes = cluster(("b1", "r1", 2, 8), ("b1", "r2", 1, 8))
    result = run(nodes, [waiting("m", 0, group(1, 8), exclusive=RACK)])
    assert result.admit[0].domain == ((RACK, "r2"),)


def test_equal_groups_that_found_no_rack_are_all_told_why() -> None:
    nodes = cluster(("b1", "r1", 1, 8), ("b1", "r2", 1, 8))
    result = run(
        nodes,
        [waiting("m", i, group(2, 4), topology=REQUIRE_RACK) for i in range(2)]
        + [waiting("n", 0, group(3, 8), topology=REQUIRE_RACK, age=5)],
    )
    assert [a.key.index for a in result.admit] == [0, 1]
    assert waits(result)[0].reason is Reason.NODES_TOO_SMALL


def test_pin_adds_the_domain_and_keeps_what_a_pod_selects_itself() -> None:
    spec = pod_spec(ctr(gpu_limit=1))
    spec["nodeSelector"] = {RACK: "mine"}
    demand = lws("m").size(2).worker(spec).demand()
    pinned = pin(demand, ((BLOCK, "b1"), (RACK, "r9")))
    for pod in pinned.pods:
        assert dict(pod.constraints.node_selector) == {BLOCK: "b1", RACK: "mine"}


# ----- what an LWS and a Pool say ----------------------------------------------------------


def _lws(annotations: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "m", "annotations": annotations}}


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({}, None, id="none"),
        pytest.param({TOPOLOGY_REQUIRED_ANNOTATION: RACK}, REQUIRE_RACK, id="required"),
        pytest.param({TOPOLOGY_PREFERRED_ANNOTATION: RACK}, PREFER_RACK, id="preferred"),
        pytest.param(
            {TOPOLOGY_REQUIRED_ANNOTATION: RACK, EXCLUSIVE_TOPOLOGY_ANNOTATION: RACK},
            REQUIRE_RACK,
            id="same-as-exclusive",
        ),
        pytest.param(
            {TOPOLOGY_PREFERRED_ANNOTATION: BLOCK, EXCLUSIVE_TOPOLOGY_ANNOTATION: RACK},
            TopologyRequest(BLOCK, required=False),
            id="preferred-beside-exclusive",
        ),
        pytest.param({TOPOLOGY_REQUIRED_ANNOTATION: "not a key!"}, "not a node label key", id="bad-key"),
        pytest.param({TOPOLOGY_REQUIRED_ANNOTATION: 7}, "not a node label key", id="not-a-string"),
        pytest.param(
            {TOPOLOGY_REQUIRED_ANNOTATION: RACK, TOPOLOGY_PREFERRED_ANNOTATION: RACK},
            "set one, not both",
            id="both",
        ),
        pytest.param(
            {TOPOLOGY_REQUIRED_ANNOTATION: BLOCK, EXCLUSIVE_TOPOLOGY_ANNOTATION: RACK},
            "one domain of one key",
            id="required-against-exclusive",
        ),
    ],
)
def test_topology_request(annotations: dict[str, Any], expected: Any) -> None:
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=expected):
            topology_request(_lws(annotations))
    else:
        assert topology_request(_lws(annotations)) == expected


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        pytest.param({"topology": {"levels": [BLOCK, RACK]}}, None, id="ok"),
        pytest.param({"topology": {"levels": [RACK, RACK]}}, "named twice", id="twice"),
        pytest.param({"topology": {"levels": ["a b"]}}, "not a node label key", id="bad-key"),
        pytest.param({"topology": {"levels": [f"k{i}" for i in range(17)]}}, "at most 16", id="too-many"),
        pytest.param({"topology": {"levels": "rack"}}, "spec.topology.levels", id="not-a-list"),
        pytest.param(
            {"topology": {"levels": [RACK]}, "nodeFit": "QuotaOnly", "quota": {"cpu": 1}},
            "nodes are there to be placed on",
            id="quota-only",
        ),
        pytest.param(
            {"topology": {"levels": [RACK]}, "nodePools": ["np"]}, "not with spec.nodePools", id="karpenter"
        ),
    ],
)
def test_pool_topology_levels(spec: dict[str, Any], error: str | None) -> None:
    obj = pool("a").obj()
    obj["spec"].update(spec)
    if error is None:
        assert parse_pool(obj).levels == (BLOCK, RACK)
    else:
        with pytest.raises(ValueError, match=error):
            parse_pool(obj)


@pytest.mark.parametrize(
    ("domain", "expected"),
    [
        pytest.param({RACK: "r1", BLOCK: "b1"}, ((RACK, "r1"), (BLOCK, "b1")), id="labels"),
        pytest.param(None, (), id="none"),
        pytest.param({RACK: 1}, (), id="not-strings"),
        pytest.param({f"k{i}": "v" for i in range(18)}, (), id="too-many"),
    ],
)
def test_recorded_domain(domain: Any, expected: Any) -> None:
    assert recorded_domain({"status": {"domain": domain}}) == expected


# ----- through a whole pass: the record, the lifting write, the webhook's table -------------

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


def _snapshot(admitted: bool) -> Snapshot:
    """An LWS requiring one rack, 1 group of 2 one-GPU pods gated, two racks of two nodes; with
    ``admitted`` its record says it was admitted into b1/r2."""
    obj = lws("m").pool("a").uid("u-m").size(2).worker(gpu_limit=1).obj()
    obj["metadata"]["annotations"] = {TOPOLOGY_REQUIRED_ANNOTATION: RACK}
    pods = [lws_pod("m", 0, w, gated=True, gpu_limit=1) for w in range(2)]
    records = []
    if admitted:
        r = record(obj, 0, admitted=True, pool="a")
        r["metadata"]["resourceVersion"] = "1"
        r["status"]["conditions"][0]["reason"] = "Admitted"
        r["status"].update(admittedAt=NOW.isoformat(), demand={"nvidia.com/gpu": "2"}, pods=2)
        r["status"]["domain"] = {BLOCK: "b1", RACK: "r2"}
        records.append(r)
    nodes = cluster(("b1", "r1", 2, 1), ("b1", "r2", 2, 1))
    return Snapshot(
        lwss=[obj],
        pods=pods,
        bound_pods=[],
        nodes=nodes,
        pools=read_pools([pool("a").quota(gpu=4).levels(*LEVELS).obj()]),
        records=records,
        statefulsets=lws_statefulsets([obj], pods),
        now=NOW,
    )


def test_a_pass_records_the_domain_and_lifts_the_gates_with_it() -> None:
    snap = _snapshot(admitted=False)
    actions = decide(snap)
    [admit] = actions.admit
    domain = dict(admit.domain)
    assert set(domain) == {BLOCK, RACK}
    for name in ("m-0", "m-0-1"):
        assert actions.steer[("default", name)].node_selector == {"pool": "a", **domain}
    writes = list(walk(plan_writes(actions, PassInputs(snap, Memory(), NOW, 0.0))))
    body = next(w.body for w in writes if w.tag == "admit")
    assert body["domain"] == domain
    rack = domain[RACK]
    assert f"admitted into pool a in {BLOCK}=b1, {RACK}={rack}:" in body["conditions"][0]["message"]


def test_an_admitted_groups_pods_are_pinned_to_its_recorded_domain() -> None:
    """Its pods seen gated on a later pass (and made later, through the webhook's table) are
    steered into the rack its record names, not anywhere in the pool."""
    snap = _snapshot(admitted=True)
    actions = decide(snap)
    assert actions.steer[("default", "m-0")].node_selector == {"pool": "a", BLOCK: "b1", RACK: "r2"}
    idx = index(snap.lwss, snap.pods, snap.statefulsets, snap.pools.ok, group_demand)
    found = idx.entry(snap.records[0])
    assert found is not None and found[1].node_selector == {"pool": "a", BLOCK: "b1", RACK: "r2"}

"""Table tests of ``core.backends.pools.provisioning`` and of the planner on pools with Karpenter NodePools.

The shapes are those Karpenter v1.14.1 writes and reads (NodePool and NodeClaim
``karpenter.sh/v1``, the KWOK provider's instance-type file); the end-to-end test
``tests/e2e/test_karpenter_pool.py`` checks the same decisions against the real Karpenter.
"""

from __future__ import annotations

from typing import Any

import pytest
from core_builders import ctr, lws, node, pod_spec, pool, waiting

from gatekeeper.core.admission.queue import AdmittedGroup
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools.planner import plan
from gatekeeper.core.backends.pools.provisioning import (
    InstanceType,
    Launcher,
    NodeClaim,
    coming_up,
    parse_instance_types,
    parse_node_claim,
    parse_node_pool,
)
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.nodes import Node, parse_node
from gatekeeper.core.model.pool import Pool, parse_pool

GPU = "nvidia.com/gpu"
GI = 1024**3


def offering(
    capacity_type: str, price: float, *, available: bool = True, zone: str = "z-a"
) -> dict[str, Any]:
    return {
        "Price": price,
        "Available": available,
        "Requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity_type]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]},
        ],
    }


#: What Karpenter's KWOK provider keeps on each node, as the sandbox's file states it.
KWOK_OVERHEAD = {"cpu": "100m", "memory": "10Mi"}


def itype(name: str, gpus: int, cpu: int, memory: str, *offerings: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "offerings": list(offerings) or [offering("on-demand", gpus * 1.0), offering("spot", gpus * 0.4)],
        "architecture": "amd64",
        "operatingSystems": ["linux"],
        "resources": {"cpu": str(cpu), "memory": memory, GPU: str(gpus)},
        "overhead": KWOK_OVERHEAD,
    }


SMALL = itype("g4dn.xlarge", 1, 4, "16Gi")
BIG = itype("g4dn.metal", 8, 96, "384Gi")
TYPES = parse_instance_types([SMALL, BIG])


def node_pool(
    name: str = "np",
    *,
    gpus: int | None = 4,
    labels: dict[str, str] | None = None,
    requirements: list[dict[str, Any]] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"labels": labels if labels is not None else {"pool": "a"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                "requirements": requirements
                if requirements is not None
                else [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                "taints": taints or [],
            },
        }
    }
    if gpus is not None:
        spec["limits"] = {GPU: str(gpus)}
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def claim(
    name: str,
    *,
    pool_name: str = "np",
    gpus: int = 1,
    node_name: str = "",
    deleting: bool = False,
    launched: bool = True,
    registered: bool = True,
) -> dict[str, Any]:
    """A NodeClaim; ``launched``: it has its capacity and provider ID; ``registered``: and its
    node's name (Karpenter writes that only once it registered the node)."""
    meta: dict[str, Any] = {"name": name, "labels": {"karpenter.sh/nodepool": pool_name, "pool": "a"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    obj: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": meta,
        "spec": {
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g4dn.xlarge"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            ],
            "resources": {"requests": {"cpu": "1", "memory": "1Gi", GPU: str(gpus), "pods": "1"}},
        },
    }
    if launched:
        obj["status"] = {
            "providerID": f"kwok://{name}-node",
            "capacity": {"cpu": "1", "memory": "1Gi", GPU: str(gpus), "pods": "1"},
            "allocatable": {"cpu": "3900m", "memory": "16374Mi", GPU: str(gpus), "pods": "110"},
        }
        if registered:
            obj["status"]["nodeName"] = node_name or f"{name}-node"
    return obj


def launcher(
    pools: list[dict[str, Any]] | None = None,
    claims: list[dict[str, Any]] | None = None,
    types: tuple[InstanceType, ...] = TYPES,
) -> Launcher:
    return Launcher(
        [parse_node_pool(p) for p in (pools if pools is not None else [node_pool()])],
        [parse_node_claim(c) for c in claims or []],
        types,
    )


def pods(count: int, gpus: int = 1, **extra: Any) -> GroupDemand:
    """``count`` pods of ``gpus`` GPUs, steered into pool ``a`` (its nodeSelector)."""
    demand = lws("vllm").size(count).worker(pod_spec(ctr(gpu_limit=gpus), **extra)).demand()
    return karpenter_pool().steer(demand)


def karpenter_pool(name: str = "a", node_pools: tuple[str, ...] = ("np",), **spec: Any) -> Pool:
    obj = pool(name).obj()
    obj["spec"]["nodePools"] = list(node_pools)
    obj["spec"].update(spec)
    return parse_pool(obj)


def accepts_all(_node: Node) -> bool:
    return True


# ----- parsing ------------------------------------------------------------------------


def test_instance_types_are_read_as_the_kwok_provider_reads_them() -> None:
    small, big = TYPES
    assert small.capacity == {"cpu": 4000, "memory": 16 * GI, GPU: 1, "pods": 110}
    assert small.allocatable == {"cpu": 3900, "memory": 16 * GI - 10 * 1024**2, GPU: 1, "pods": 110}
    assert small.labels == {
        "node.kubernetes.io/instance-type": "g4dn.xlarge",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
    }
    assert [(o.capacity_type, o.zone, o.available) for o in big.offerings] == [
        ("on-demand", "z-a", True),
        ("spot", "z-a", True),
    ]


def test_an_instance_type_without_overhead_is_read_as_its_whole_capacity_and_said_so() -> None:
    """The file's word is its capacity; the planner then estimates what the node keeps
    (``tests/unit/test_kubelet.py``)."""
    bare = {k: v for k, v in SMALL.items() if k != "overhead"}
    (parsed,) = parse_instance_types([bare])
    assert parsed.allocatable == parsed.capacity == {"cpu": 4000, "memory": 16 * GI, GPU: 1, "pods": 110}
    assert not parsed.overhead_given and TYPES[0].overhead_given


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([{"name": "x", "resources": {GPU: "1" * 4400}}], "resources"),
        ([{"name": "", "resources": {}}], "name"),
        ([{"name": "x", "offerings": [{"Price": "cheap"}]}], "Price"),
        ([{"name": f"t{i}"} for i in range(1001)], "at most 1000"),
        ([{"name": "x", "offerings": [offering("spot", 1.0)] * 101}], "at most 100"),
        ([{"name": "x", "overhead": {"cpu": "-1"}}], r"overhead\[cpu\]"),
        ([{"name": "x", "overhead": ["cpu"]}], "overhead"),
    ],
)
def test_bad_instance_types_are_refused_with_the_field(data: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_instance_types(data)


def test_node_pool_and_claim_are_parsed_with_their_limits_labels_and_taints() -> None:
    np = parse_node_pool(node_pool(taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]))
    assert np.limits == {GPU: 4}
    assert np.labels == {"pool": "a"}
    assert [t.key for t in np.taints] == ["gpu"]
    assert parse_node_pool(node_pool(gpus=None)).limits is None
    c = parse_node_claim(claim("c1"))
    assert (c.node_pool, c.capacity[GPU], c.allocatable[GPU], c.node_name) == ("np", 1, 1, "c1-node")
    assert c.labels["node.kubernetes.io/instance-type"] == "g4dn.xlarge", "single-valued requirements"
    unlaunched = parse_node_claim(claim("c2", launched=False))
    assert unlaunched.capacity[GPU] == 1, "before launch it holds what it asked for"
    with pytest.raises(ValueError, match=r"NodePool np: spec\.limits"):
        parse_node_pool({**node_pool(), "spec": {**node_pool()["spec"], "limits": {GPU: "-1"}}})
    bad_req = node_pool(requirements=[{"key": "k", "operator": "Near", "values": []}])
    with pytest.raises(ValueError, match="operator"):
        parse_node_pool(bad_req)


def test_pool_node_pools_are_bounded_and_not_with_quota_only() -> None:
    assert karpenter_pool(node_pools=("np", "np-spot")).node_pools == ("np", "np-spot")
    with pytest.raises(ValueError, match="at most 16"):
        karpenter_pool(node_pools=tuple(f"np{i}" for i in range(17)))
    with pytest.raises(ValueError, match="QuotaOnly"):
        karpenter_pool(nodeFit="QuotaOnly", quota={GPU: "4"})
    obj = pool("a").obj()
    obj["spec"]["nodePools"] = [7]
    with pytest.raises(ValueError, match=r"spec.nodePools\[0\]"):
        parse_pool(obj)


# ----- what can be launched --------------------------------------------------------------


@pytest.mark.parametrize(
    ("claims", "group", "launched"),
    [
        ([], 4, ["g4dn.xlarge"] * 4),  # limit 4: four one-GPU nodes; never the 8-GPU type
        ([], 5, None),  # a fifth GPU is over the limit
        ([claim("c1"), claim("c2")], 2, ["g4dn.xlarge"] * 2),  # 2 of 4 held by claims
        ([claim("c1"), claim("c2")], 3, None),
        ([claim("c1"), claim("c2", launched=False)], 3, None),  # not launched yet: still held
    ],
)
def test_launch_counts_limits_minus_what_the_node_claims_hold(
    claims: list[dict[str, Any]], group: int, launched: list[str] | None
) -> None:
    got = launcher(claims=claims).launch(["np"], pods(group).pods, accepts_all)
    if launched is None:
        assert not isinstance(got, tuple)
    else:
        assert isinstance(got, tuple)
        assert [launch.instance_type for launch in got] == launched


def test_a_type_whose_capacity_exceeds_what_is_left_is_never_launched() -> None:
    # Two GPUs per pod: only the 8-GPU type holds one, and 8 > the limit of 4.
    assert not isinstance(launcher().launch(["np"], pods(1, gpus=2).pods, accepts_all), tuple)
    roomy = launcher([node_pool(gpus=16)]).launch(["np"], pods(2, gpus=2).pods, accepts_all)
    assert isinstance(roomy, tuple)
    assert [launch.instance_type for launch in roomy] == ["g4dn.metal"] * 2
    assert roomy[0] is roomy[1], "the second pod goes on the node opened for the first"


def test_keep_counts_the_launches_for_the_rest_of_the_pass() -> None:
    karp = launcher()
    assert isinstance(karp.launch(["np"], pods(2).pods, accepts_all, keep=False), tuple)
    assert isinstance(karp.launch(["np"], pods(2).pods, accepts_all), tuple)
    assert isinstance(karp.launch(["np"], pods(2).pods, accepts_all), tuple)
    assert not isinstance(karp.launch(["np"], pods(1).pods, accepts_all), tuple), "4 of 4 taken"
    assert "np: 0 nvidia.com/gpu left of 4" in karp.describe(["np"])
    fresh = karp.launch(["np"], pods(4).pods, accepts_all, keep=False, fresh=True)
    assert isinstance(fresh, tuple), "fresh: as if the NodePool held nothing"


@pytest.mark.parametrize(
    ("requirements", "types", "expected"),
    [
        # The NodePool allows spot only: the spot offering.
        ([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}], None, "spot"),
        # No instance type the NodePool allows holds a GPU.
        (
            [{"key": "node.kubernetes.io/instance-type", "operator": "NotIn", "values": ["g4dn.xlarge"]}],
            None,
            None,
        ),
        # The only offering the NodePool allows is not available.
        (
            [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
            [itype("g4dn.xlarge", 1, 4, "16Gi", offering("on-demand", 0.5, available=False))],
            None,
        ),
        # A zone the NodePool does not allow.
        (
            [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z-b"]}],
            None,
            None,
        ),
        # Both capacity types allowed: the cheaper (spot).
        ([{"key": "karpenter.sh/capacity-type", "operator": "Exists", "values": []}], None, "spot"),
    ],
)
def test_only_allowed_available_offerings_are_launched(
    requirements: list[dict[str, Any]], types: list[dict[str, Any]] | None, expected: str | None
) -> None:
    parsed = parse_instance_types(types) if types is not None else TYPES
    got = launcher([node_pool(requirements=requirements)], types=parsed).launch(
        ["np"], pods(1).pods, accepts_all
    )
    if expected is None:
        assert not isinstance(got, tuple)
    else:
        assert isinstance(got, tuple)
        assert got[0].offering.capacity_type == expected
        assert got[0].node.labels["karpenter.sh/capacity-type"] == expected


def test_pods_must_tolerate_the_node_pools_taints_and_match_its_labels() -> None:
    tainted = [node_pool(taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}])]
    assert not isinstance(launcher(tainted).launch(["np"], pods(1).pods, accepts_all), tuple)
    tolerant = pods(1, tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}])
    assert isinstance(launcher(tainted).launch(["np"], tolerant.pods, accepts_all), tuple)
    # Nodes the pool does not select (its nodeSelector) are no room of it.
    other = launcher([node_pool(labels={"pool": "b"})])
    assert not isinstance(other.launch(["np"], pods(1).pods, karpenter_pool().selects), tuple)
    spot = pods(1, node_selector={"karpenter.sh/capacity-type": "spot"})
    both = [node_pool(requirements=[])]
    got = launcher(both).launch(["np"], spot.pods, accepts_all)
    assert isinstance(got, tuple) and got[0].offering.capacity_type == "spot"
    assert not isinstance(launcher().launch(["np"], spot.pods, accepts_all), tuple), "on-demand only"


def test_an_unknown_node_pool_launches_nothing() -> None:
    assert not isinstance(launcher().launch(["missing"], pods(1).pods, accepts_all), tuple)
    assert launcher().describe(["missing"]) == "missing: no such NodePool"


def test_claims_stand_for_their_nodes_until_those_take_pods() -> None:
    claims = [
        parse_node_claim(c)
        for c in (claim("up"), claim("new"), claim("tainted"), claim("gone", deleting=True))
    ]
    ready = {"type": "Ready", "status": "True"}
    nodes = [
        parse_node(
            {
                "metadata": {"name": "up-node"},
                "status": {"allocatable": {GPU: "1"}, "conditions": [ready]},
            }
        ),
        parse_node(
            {
                "metadata": {"name": "tainted-node"},
                "spec": {"taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]},
                "status": {"allocatable": {GPU: "1"}, "conditions": [ready]},
            }
        ),
    ]
    up = coming_up(claims, nodes)
    assert [n.name for n in up] == ["new (launching)", "tainted (launching)"]
    assert up[0].allocatable[GPU] == 1 and up[0].labels["pool"] == "a"
    assert not any(t.key == "karpenter.sh/unregistered" for n in up for t in n.taints)


def test_a_claim_whose_node_takes_pods_is_that_node_even_before_it_names_it() -> None:
    """Karpenter removes the node's unregistered taint, then writes the claim's nodeName: in
    between (longer when the informers lag) the node takes pods and the claim names no node.
    It is the node with the claim's provider ID: its room is counted once."""
    ready = {"type": "Ready", "status": "True"}
    node = parse_node(
        {
            "metadata": {"name": "b-node"},
            "spec": {"providerID": "kwok://b-node"},
            "status": {"allocatable": {GPU: "1"}, "conditions": [ready]},
        }
    )
    assert node.provider_id == "kwok://b-node"
    claims = [parse_node_claim(claim("b", registered=False)), parse_node_claim(claim("c", registered=False))]
    assert claims[0].provider_id == "kwok://b-node" and claims[0].node_name == ""
    assert [n.name for n in coming_up(claims, [node])] == ["c (launching)"]


def test_nodes_taking_pods_before_their_claims_name_them_admit_no_third_group() -> None:
    """NodePool limit 4 GPUs: group 0 runs on two nodes, group 1 was admitted and Karpenter's
    two nodes for it just took pods, their claims not yet naming them (CI saw a third group
    admitted then: each of those nodes was counted twice, as a node and as a claim)."""
    ready = {"type": "Ready", "status": "True"}
    names = ["a0", "a1", "b0", "b1"]
    nodes = [
        parse_node(
            {
                "metadata": {"name": f"{n}-node", "labels": {"pool": "a", "karpenter.sh/nodepool": "np"}},
                "spec": {"providerID": f"kwok://{n}-node"},
                "status": {
                    "allocatable": {GPU: "1", "cpu": "4", "memory": "16Gi", "pods": "110"},
                    "conditions": [ready],
                },
            }
        )
        for n in names
    ]
    claims = [claim(n, registered=n.startswith("a")) for n in names]
    demand = lws("vllm").size(2).worker(gpu_limit=1).demand()
    held = [
        AdmittedGroup(
            GroupKey("default", "vllm", 0),
            "a",
            demand,
            nodes={0: "a0-node", 1: "a1-node"},
            bound=frozenset({0, 1}),
        ),
        AdmittedGroup(GroupKey("default", "vllm", 1), "a", demand),
    ]
    parsed = [parse_node_claim(c) for c in claims]
    karp = Launcher([parse_node_pool(node_pool(gpus=4))], parsed, TYPES)
    result = plan(
        [karpenter_pool()],
        [*nodes, *coming_up(parsed, nodes)],
        {"a0-node": {GPU: 1}, "a1-node": {GPU: 1}},
        held,
        [waiting("vllm", 2, demand)],
        launcher=karp,
    )
    assert result.admit == ()
    [third] = result.waiting
    assert third.key.index == 2


# ----- the planner ------------------------------------------------------------------------


def run(
    claims: list[dict[str, Any]],
    waiting_groups: int,
    *,
    admitted: list[AdmittedGroup] | None = None,
    nodes: list[Node] | None = None,
    gpus: int = 1,
    pool_limit: int = 4,
) -> Any:
    parsed: list[NodeClaim] = [parse_node_claim(c) for c in claims]
    existing = nodes or []
    karp = Launcher([parse_node_pool(node_pool(gpus=pool_limit))], parsed, TYPES)
    demand = lws("vllm").size(2).worker(gpu_limit=gpus).demand()
    return plan(
        [karpenter_pool()],
        [*existing, *coming_up(parsed, existing)],
        {},
        admitted or [],
        [waiting("vllm", i, demand) for i in range(waiting_groups)],
        launcher=karp,
    )


def test_the_seed_case_two_whole_groups_are_admitted_the_third_waits() -> None:
    """NodePool limit 4 GPUs, no node yet, groups of two one-GPU pods scaled to 3."""
    result = run([], 3)
    assert [a.key.index for a in result.admit] == [0, 1]
    assert all(a.nodes == ("", "") for a in result.admit), "both pods' nodes are still to be bought"
    [third] = result.waiting
    assert third.reason is Reason.WAITING_FOR_NODES
    assert "np: 0 nvidia.com/gpu left of 4" in third.message
    assert "no node is bought for part of it" in third.message
    assert result.pools["a"].stranded == ()
    assert result.pools["a"].describe() == "pool a: 4/4 nvidia.com/gpu held; 2 admitted, 1 waiting"


def test_nodes_coming_up_for_admitted_groups_are_theirs() -> None:
    """Groups 0 and 1 admitted, none of their pods bound; two nodes are launching (their
    claims hold 2 of the 4 GPUs). Group 0's pods hold the two nodes coming up, group 1's the
    2 GPUs left to launch: group 2 gets nothing, and no admitted group is stranded."""
    demand = lws("vllm").size(2).worker(gpu_limit=1).demand()
    admitted = [AdmittedGroup(GroupKey("default", "vllm", i), "a", demand) for i in range(2)]
    result = run([claim("c0"), claim("c1")], 3, admitted=admitted)
    assert result.admit == ()
    assert [(w.key.index, w.reason) for w in result.waiting] == [(2, Reason.WAITING_FOR_NODES)]
    assert result.pools["a"].stranded == ()
    # Once the four nodes are bought (claims hold all 4 GPUs) the admitted groups hold them.
    four = [claim(f"c{i}") for i in range(4)]
    assert run(four, 3, admitted=admitted).pools["a"].stranded == ()
    assert [w.key.index for w in run(four, 3, admitted=admitted).waiting] == [2]


def test_existing_free_room_is_used_before_anything_is_bought() -> None:
    ready = node("k1").labels(pool="a").alloc(gpu=1).parsed()
    result = run([claim("k1c", node_name="k1")], 3, nodes=[ready])
    # 1 GPU on the existing node (whose claim holds 1 of the limit) + 3 left to launch: 2 groups.
    assert [a.key.index for a in result.admit] == [0, 1]
    assert sorted(result.admit[0].nodes) == ["", "k1"]


def test_a_group_no_node_pool_could_ever_hold_is_refused_for_good() -> None:
    result = run([], 1, gpus=2)
    [only] = result.waiting
    assert only.reason is Reason.NODES_TOO_SMALL
    assert "NodePool np" in only.message
    assert run([], 1, gpus=2, pool_limit=16).admit, "with room for the 8-GPU type it fits"

"""What a node Karpenter buys keeps for itself (``core.backends.pools.kubelet``): the room a
Karpenter-backed Pool plans on, by the NodeClaims' word, the file's, or a safe estimate.

The real Karpenter and DaemonSets are in ``tests/e2e/test_karpenter_daemons.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_core_provisioning import GPU, SMALL, claim, karpenter_pool, launcher, pods, waiting

from gatekeeper.core.backends.pools.kubelet import estimated_overhead, observed_allocatable, planned_room
from gatekeeper.core.backends.pools.planner import plan
from gatekeeper.core.backends.pools.provisioning import parse_instance_types, parse_node_claim

MI, GI = 1024**2, 1024**3


@pytest.mark.parametrize(
    ("cpu", "memory", "pods", "expected_cpu", "expected_memory"),
    [
        # 4 cores: 6% of 1 + 1% of 1 + 0.5% of 2 = 80m. 16Gi: GKE 1 + 0.8 + 0.8 = 2.6Gi (more than
        # EKS's 255Mi + 110 x 11Mi = 1465Mi), plus 100Mi eviction.
        (4000, 16 * GI, 110, 80, int(2.6 * GI) + 100 * MI),
        # 96 cores: 80m + 0.25% of 92 = 310m. 384Gi: GKE 1 + 0.8 + 0.8 + 6.72 + 2% of 256 = 14.44Gi.
        (96000, 384 * GI, 110, 310, int(14.44 * GI) + 100 * MI),
        # a small node: EKS's formula is the larger (255Mi + 11Mi x 30 pods over GKE's 512Mi)
        (2000, 2 * GI, 30, 70, 255 * MI + 11 * 30 * MI + 100 * MI),
        # under 1Gi GKE keeps 255Mi; EKS 255Mi + 4 x 11Mi
        (1000, 512 * MI, 4, 60, 299 * MI + 100 * MI),
        # never more than the node has
        (1000, 256 * MI, 110, 60, 256 * MI),
    ],
)
def test_the_estimate_is_the_larger_of_gkes_and_eks_reservations(
    cpu: int, memory: int, pods: int, expected_cpu: int, expected_memory: int
) -> None:
    kept = estimated_overhead({"cpu": cpu, "memory": memory, "pods": pods, GPU: 8})
    assert kept["cpu"] == expected_cpu
    assert abs(kept["memory"] - expected_memory) <= 1  # rounding up of the tiers
    assert GPU not in kept  # devices are not reserved


def _typed_claim(name: str, kind: str, allocatable: dict[str, str] | None) -> Any:
    obj = claim(name, launched=allocatable is not None)
    obj["metadata"]["labels"]["node.kubernetes.io/instance-type"] = kind
    if allocatable is not None:
        obj["status"]["allocatable"] = allocatable
    return parse_node_claim(obj)


def test_the_claims_of_a_type_say_the_least_allocatable_they_saw() -> None:
    seen = observed_allocatable(
        [
            _typed_claim("a", "g4dn.xlarge", {"cpu": "3800m", "memory": "15Gi", GPU: "1"}),
            _typed_claim("b", "g4dn.xlarge", {"cpu": "3700m", "memory": "15500Mi", GPU: "1"}),
            _typed_claim("c", "g4dn.xlarge", None),  # not launched: says nothing
            parse_node_claim(claim("d")),  # no type label: says nothing
        ]
    )
    assert seen == {"g4dn.xlarge": {"cpu": 3700, "memory": 15 * GI, GPU: 1, "pods": 110}}


def test_the_room_is_the_claims_word_then_the_files_then_the_estimate() -> None:
    given, bare = parse_instance_types([SMALL, {k: v for k, v in SMALL.items() if k != "overhead"}])
    assert planned_room(given, None) == (dict(given.allocatable), "")
    room, note = planned_room(given, {"cpu": 3500, "memory": 20 * GI})  # more memory than planned: kept
    assert room == {**given.allocatable, "cpu": 3500}
    assert note == (
        "instance type g4dn.xlarge: planned on the allocatable its NodeClaims show (3500m cpu), "
        "less than its file gives"
    )
    room, note = planned_room(bare, None)
    assert room["cpu"] == 4000 - 80 and room[GPU] == 1
    assert note.startswith(
        "instance type g4dn.xlarge gives no overhead: planned on its capacity less an estimate"
    )
    assert planned_room(bare, {"cpu": 3900})[0]["cpu"] == 3900  # a claim's word ends the estimate


def test_a_group_that_fits_a_type_only_on_its_whole_capacity_is_not_bought_for() -> None:
    """A pod asking all 4 cores of the type: the file gives no overhead, so the type is planned
    on 3.92 cores, and the group waits gated rather than a node being bought it cannot use."""
    bare = parse_instance_types([{k: v for k, v in SMALL.items() if k != "overhead"}])
    whole = pods(1, 1, resources={"limits": {"cpu": "4", GPU: "1"}})
    ours = karpenter_pool()
    result = plan([ours], [], {}, [], [waiting("vllm", 0, whole)], launcher=launcher(types=bare))
    assert result.admit == ()
    status = result.pools["a"]
    assert status.notes and "gives no overhead" in status.notes[0]
    told = plan([ours], [], {}, [], [waiting("vllm", 0, pods(1, 1))], launcher=launcher(types=bare))
    assert len(told.admit) == 1 and told.pools["a"].notes == status.notes

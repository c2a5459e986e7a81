"""Kueue's Topology Aware Scheduling with the ``kueue`` backend: the request written into a
group's Workload, and the domain Kueue assigned applied to its pods.

Table tests on plain dicts; the real Kueue places a group in one rack in
``tests/e2e/test_kueue_topology.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from core_builders import lws_pod
from test_backend_kueue import ADMITTED, FLAVOR, LQ, decide, rec, vllm, workload

from gatekeeper.core.admission.pass_through import Owners
from gatekeeper.core.backends.kueue import new_workload
from gatekeeper.core.backends.kueue.pass_through import passable as kueue_passable
from gatekeeper.core.backends.kueue.topology import (
    MAX_ASSIGNED_DOMAINS,
    assigned_domain,
    assigned_domains,
    request,
)
from gatekeeper.core.kube.keys import (
    KUEUE_PODSET_GROUP_ANNOTATION,
    KUEUE_PREFERRED_TOPOLOGY_ANNOTATION,
    KUEUE_REQUIRED_TOPOLOGY_ANNOTATION,
    KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION,
    KUEUE_SLICE_SIZE_ANNOTATION,
    KUEUE_UNCONSTRAINED_TOPOLOGY_ANNOTATION,
    TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION,
)
from gatekeeper.core.model.demand import group_demand
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.lws import TopologyRequest

RACK = "topology.example.com/rack"
BLOCK = "topology.example.com/block"
HOST = "kubernetes.io/hostname"
SLICE, SIZE = KUEUE_SLICE_REQUIRED_TOPOLOGY_ANNOTATION, KUEUE_SLICE_SIZE_ANNOTATION


def template(**notes: str) -> dict[str, Any]:
    return {"metadata": {"annotations": notes}, "spec": {}}


@pytest.mark.parametrize(
    ("topology", "notes", "count", "expected"),
    [
        (None, {}, 3, None),
        (None, {KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: RACK}, 3, {"required": RACK}),
        (None, {KUEUE_PREFERRED_TOPOLOGY_ANNOTATION: BLOCK}, 3, {"preferred": BLOCK}),
        # required wins over preferred, as in Kueue's NewPodSetTopologyRequest
        (None, {KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: RACK, KUEUE_PREFERRED_TOPOLOGY_ANNOTATION: BLOCK}, 3,
         {"required": RACK}),
        (None, {KUEUE_UNCONSTRAINED_TOPOLOGY_ANNOTATION: "true"}, 3, {"unconstrained": True}),
        (None, {KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: RACK, KUEUE_PODSET_GROUP_ANNOTATION: "g"}, 3,
         {"required": RACK, "podSetGroupName": "g"}),
        # a group name alone asks nothing (Kueue drops it without required or preferred)
        (None, {KUEUE_PODSET_GROUP_ANNOTATION: "g"}, 3, None),
        (None, {SLICE: HOST, SIZE: "2", KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: RACK}, 4,
         {"required": RACK, "podSetSliceRequiredTopology": HOST, "podSetSliceSize": 2}),
    ],
)  # fmt: skip
def test_the_pod_set_request_is_read_as_kueues_lws_integration_reads_it(
    topology: TopologyRequest | None, notes: dict[str, str], count: int, expected: dict[str, Any] | None
) -> None:
    assert request(topology, template(**notes), count) == expected


@pytest.mark.parametrize(
    ("topology", "notes", "count", "words"),
    [
        # the pools backend's annotation: Kueue would count the group's bound pods twice
        (TopologyRequest(RACK, True), {}, 2, f"{TOPOLOGY_REQUIRED_ANNOTATION} is the pools backend's"),
        (TopologyRequest(RACK, False), {KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: RACK}, 2, "write kueue"),
        (None, {KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: "not a key!"}, 2, "not a node label key"),
        (None, {KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: "a" * 64}, 2, "63 characters"),
        (None, {KUEUE_UNCONSTRAINED_TOPOLOGY_ANNOTATION: "yes"}, 2, "true or false"),
        (None, {SLICE: HOST}, 2, "needs"),
        (None, {SLICE: HOST, SIZE: "3"}, 2, "1 to 2"),
        (None, {SLICE: HOST, SIZE: "-1"}, 2, "1 to 2"),
        (None, {SLICE: HOST, SIZE: "9" * 99}, 2, "1 to"),
        (None, {KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: RACK, KUEUE_PODSET_GROUP_ANNOTATION: "g" * 257}, 2,
         "256"),
    ],
)  # fmt: skip
def test_a_request_kueue_would_refuse_is_refused_here_with_the_reason(
    topology: TopologyRequest | None, notes: dict[str, str], count: int, words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        request(topology, template(**notes), count)


def slices(*per_slice: tuple[int, list[Any]]) -> list[dict[str, Any]]:
    return [
        {"domainCount": n, "valuesPerLevel": levels, "podCounts": {"universal": 1}} for n, levels in per_slice
    ]


@pytest.mark.parametrize(
    ("rank", "expected"),
    [(0, {RACK: "r1", HOST: "h1"}), (1, {RACK: "r1", HOST: "h1"}), (2, {RACK: "r1", HOST: "h2"}),
     (3, {RACK: "r2", HOST: "h7"}), (4, {RACK: "r1"}), (None, {})],
)  # fmt: skip
def test_each_pod_of_a_pod_set_has_the_domain_its_rank_falls_in(
    rank: int | None, expected: dict[str, str]
) -> None:
    """Two pods on h1, one on h2 (r1), one on h7 (r2); past the last pod: what all share."""
    assignment = {
        "levels": [RACK, HOST],
        "slices": [
            {"domainCount": 2,
             "valuesPerLevel": [{"universal": "r1"}, {"individual": {"prefix": "h", "roots": ["1", "2"]}}],
             "podCounts": {"individual": [2, 1]}},
            {"domainCount": 1, "valuesPerLevel": [{"universal": "r2"}, {"universal": "h7"}],
             "podCounts": {"universal": 1}},
        ],
    }  # fmt: skip
    if rank == 4:
        assignment["slices"] = assignment["slices"][:1]
        rank = 3
    assert assigned_domain(assignment, rank) == expected
    # read once for every rank (the webhook's table), the same places
    assert assigned_domains(assignment, 6) == [assigned_domain(assignment, r) for r in range(6)]


@pytest.mark.parametrize(
    ("assignment", "expected"),
    [
        ({}, {}),
        # one pod on one host: pinned to the host
        ({"levels": [RACK, HOST], "slices": slices((1, [{"universal": "r2"}, {"universal": "h3"}]))},
         {RACK: "r2", HOST: "h3"}),
        # spread over two hosts of one rack: pinned to the rack
        ({"levels": [BLOCK, RACK, HOST],
          "slices": slices((2, [{"universal": "b1"}, {"universal": "r2"},
                                {"individual": {"prefix": "h", "roots": ["3", "4"]}}]))},
         {BLOCK: "b1", RACK: "r2"}),
        # two slices in two racks of one block: pinned to the block
        ({"levels": [BLOCK, RACK],
          "slices": slices((1, [{"universal": "b1"}, {"universal": "r1"}]),
                           (1, [{"universal": "b1"}, {"universal": "r2"}]))},
         {BLOCK: "b1"}),
        # suffix and prefix make the values
        ({"levels": [RACK],
          "slices": slices((2, [{"individual": {"prefix": "r", "suffix": "-x", "roots": ["1", "1"]}}]))},
         {RACK: "r1-x"}),
        # v1beta1's domains
        ({"levels": [RACK, HOST],
          "domains": [{"values": ["r1", "h1"], "count": 1}, {"values": ["r1", "h2"], "count": 1}]},
         {RACK: "r1"}),
        # unreadable: pins nothing
        ({"levels": [RACK], "slices": slices((2, [{"individual": {"roots": ["r1"]}}]))}, {}),
        ({"levels": [RACK], "slices": slices((1, [{"universal": "r1"}, {"universal": "x"}]))}, {}),
        ({"levels": ["not a key!"], "slices": slices((1, [{"universal": "r1"}]))}, {}),
        ({"levels": [RACK] * 17, "slices": []}, {}),
        ({"levels": [RACK], "slices": slices((MAX_ASSIGNED_DOMAINS + 1, [{"universal": "r1"}]))}, {}),
        ({"levels": [RACK], "slices": [{"domainCount": "1", "valuesPerLevel": [{"universal": "r1"}]}]}, {}),
        ({"levels": [RACK], "domains": [{"values": [7]}]}, {}),
    ],
)  # fmt: skip
def test_the_assigned_domain_is_the_narrowest_that_holds_every_pod_of_the_pod_set(
    assignment: dict[str, Any], expected: dict[str, str]
) -> None:
    assert assigned_domain(assignment) == expected


def test_kueues_own_template_annotations_go_into_each_pod_set() -> None:
    obj = vllm(replicas=1, size=3)
    tmpl = obj["spec"]["leaderWorkerTemplate"]
    for part in ("leaderTemplate", "workerTemplate"):
        tmpl[part].setdefault("metadata", {}).setdefault("annotations", {})[
            KUEUE_PREFERRED_TOPOLOGY_ANNOTATION
        ] = RACK
    acts = decide([obj], records=[rec(obj, 0)])
    [(group, _)] = acts.create_workloads
    asked = [ps.get("topologyRequest") for ps in new_workload(group, obj, "u")["spec"]["podSets"]]
    assert asked == [{"preferred": RACK}] * 2


def test_the_pools_backends_annotation_gets_no_workload_and_says_what_to_write() -> None:
    obj = vllm(replicas=1, size=2)
    obj["metadata"].setdefault("annotations", {})[TOPOLOGY_PREFERRED_ANNOTATION] = RACK
    obj["spec"]["leaderWorkerTemplate"]["workerTemplate"].setdefault("metadata", {})["annotations"] = {
        KUEUE_REQUIRED_TOPOLOGY_ANNOTATION: RACK
    }
    acts = decide([obj], records=[rec(obj, 0)])
    assert acts.create_workloads == ()
    [st] = acts.statuses
    assert (st.reason, st.warning) == ("InvalidSpec", True)
    assert f"write {KUEUE_REQUIRED_TOPOLOGY_ANNOTATION}" in st.message


def test_an_admitted_group_is_pinned_to_the_domain_kueue_assigned_each_pod_set() -> None:
    obj = vllm(replicas=1, size=3)
    pods = [lws_pod("vllm", 0, w, pool=LQ) for w in range(3)]
    wl = workload(obj, 0, conditions=ADMITTED, flavors={"leader": "h100", "worker": "h100"})
    one_host = {"universal": "h1"}
    two_hosts = {"individual": {"prefix": "h", "roots": ["1", "2"]}}
    for psa, host in zip(wl["status"]["admission"]["podSetAssignments"], (one_host, two_hosts), strict=True):
        psa["topologyAssignment"] = {
            "levels": [RACK, HOST],
            "slices": [{"domainCount": 1 if host is one_host else 2,
                        "valuesPerLevel": [{"universal": "r2"}, host], "podCounts": {"universal": 1}}],
        }  # fmt: skip
    acts = decide([obj], pods, [rec(obj, 0, admitted=False)], [wl])
    selectors = {u.pod: u.node_selector for u in acts.ungate}
    flavor = {"pool": "h100", "example.com/zone": "a"}
    assert selectors == {  # each pod on the host Kueue counted it on, in the worker index's order
        "vllm-0": {**flavor, RACK: "r2", HOST: "h1"},
        "vllm-0-1": {**flavor, RACK: "r2", HOST: "h1"},
        "vllm-0-2": {**flavor, RACK: "r2", HOST: "h2"},
    }
    [st] = acts.statuses
    assert st.admitted
    assert f"ClusterQueue cq-gpu, flavor h100 in {RACK}=r2" in st.message  # what ``why`` shows
    # Pods made later (a worker made again) are let through by the webhook to the same place.
    entry = kueue_passable(
        GroupKey("default", "vllm", 0), obj, group_demand(obj), wl, {"h100": FLAVOR}, Owners({}, {})
    )
    assert entry is not None
    table_entry = entry[1]
    assert table_entry.steering(False, 2).node_selector == {
        **flavor,
        RACK: "r2",
        HOST: "h2",
    }  # a worker made again
    assert table_entry.steering(True).node_selector == {**flavor, RACK: "r2", HOST: "h1"}

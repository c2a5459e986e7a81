"""A RuntimeClass's pod overhead in a group's demand (``core.model.overhead``), as the
RuntimeClass admission plugin gives it to a pod at creation, and in the check of a gated pod
against its role (``core.admission.conformance``)."""

from __future__ import annotations

from typing import Any

import pytest
from core_builders import ctr, lws, lws_pod, pod_spec

from gatekeeper.core.admission.conformance import departure
from gatekeeper.core.model.demand import GroupDemand, group_demand
from gatekeeper.core.model.groups import DemandMemo
from gatekeeper.core.model.lws import GroupPod
from gatekeeper.core.model.overhead import runtime_overheads


def _rc(name: str, fixed: Any = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": name}, "handler": "runc"}
    if fixed is not None:
        obj["overhead"] = {"podFixed": fixed}
    return obj


@pytest.mark.parametrize(
    ("classes", "read"),
    [
        ([], {}),
        ([_rc("kata", {"cpu": "250m", "memory": "120Mi"})], {"kata": {"cpu": "250m", "memory": "120Mi"}}),
        ([_rc("runc")], {}),  # no overhead: nothing to add
        ([_rc("kata", {"cpu": "lots"})], {}),  # unreadable: the API server refuses its pods anyway
        ([_rc("kata", "cpu")], {}),
        ([{"overhead": {"podFixed": {"cpu": "1"}}}], {}),  # no name
    ],
)
def test_runtime_overheads_reads_each_classes_pod_fixed(
    classes: list[dict[str, Any]], read: dict[str, Any]
) -> None:
    assert runtime_overheads(classes) == read


def _vllm(runtime: str | None = "kata") -> dict[str, Any]:
    obj = (
        lws("vllm", "team")
        .size(2)
        .worker(pod_spec(ctr(cpu="1", gpu_limit=1), runtime_class=runtime))
        .uid("u")
        .obj()
    )
    obj["metadata"]["generation"] = 1
    return obj


def test_every_pod_of_the_group_carries_its_runtime_classes_overhead() -> None:
    demand = group_demand(_vllm(), runtime_class_overhead={"kata": {"cpu": "500m"}})
    assert [p.requests["cpu"] for p in demand.pods] == [1500, 1500]
    assert demand.total["cpu"] == 3000 and demand.total["nvidia.com/gpu"] == 2


def test_the_memo_computes_again_when_a_named_runtime_classes_overhead_changes() -> None:
    memo = DemandMemo()

    def cpu(obj: dict[str, Any]) -> int:
        demand = memo.demand(obj)
        assert isinstance(demand, GroupDemand)
        return demand.total.get("cpu", 0)

    obj = _vllm()
    memo.use_cluster([], [])
    assert cpu(obj) == 2000
    memo.use_cluster([], [_rc("kata", {"cpu": "1"})])
    assert cpu(obj) == 4000
    memo.use_cluster([], [_rc("kata", {"cpu": "2"}), _rc("other", {"cpu": "9"})])
    assert cpu(obj) == 6000
    assert cpu(_vllm(runtime=None)) == 2000, "a template that names no RuntimeClass gets no overhead"


@pytest.mark.parametrize(
    ("containers_cpu", "departs"),
    [("1", False), ("500m", False), ("2", True)],
)
def test_a_gated_pod_is_judged_with_its_overhead_against_its_roles(
    containers_cpu: str, departs: bool
) -> None:
    """Role: 1 cpu + 1 cpu overhead. A pod whose containers ask 2 cpu asks 3 with its overhead:
    judged without the overhead it would pass as 2 (what the role was admitted with)."""
    obj = _vllm()
    demand = group_demand(obj, runtime_class_overhead={"kata": {"cpu": "1"}})
    pod = lws_pod("vllm", 0, 1, gpu_limit=1)
    pod["metadata"]["namespace"] = "team"
    pod["spec"].update(
        containers=[ctr(cpu=containers_cpu, gpu_limit=1)], runtimeClassName="kata", overhead={"cpu": "1"}
    )
    got = departure(GroupPod.read(pod, pod["metadata"]["name"]), obj, demand)
    assert (got is not None) is departs, got
    assert got is None or "asks 3 cpu" in got, got

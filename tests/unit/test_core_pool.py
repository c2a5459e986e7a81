"""Pools, nodes, bound-pod usage and quota fit (Kueue ClusterQueue semantics)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from core_builders import GPU, bound_pod, lws, node, pool

from gatekeeper.core.admission.quota import check_quota, is_basic_resource
from gatekeeper.core.kube.selectors import Taint
from gatekeeper.core.model.demand import GroupDemand, PodDemand
from gatekeeper.core.model.nodes import RequestsMemo, node_usage, parse_node
from gatekeeper.core.model.pool import NodeFit, Pool, QueueingStrategy, parse_pool, pool_capacity

GiB = 2**30


def test_parse_pool_defaults() -> None:
    parsed = parse_pool({"metadata": {"name": "p"}, "spec": {"nodeSelector": {"pool": "p"}}})
    # Without spec.namespaceSelector no namespace may use the pool (a Kueue ClusterQueue's rule).
    assert parsed == Pool(name="p", node_selector={"pool": "p"}, namespace_selector=None)
    assert parsed.quota is None
    assert parsed.queueing_strategy is QueueingStrategy.BEST_EFFORT_FIFO


def test_parse_pool_full() -> None:
    parsed = pool("on-demand").quota(gpu=4, cpu="64", memory="512Gi").strict().parsed()
    assert parsed.quota == {GPU: 4, "cpu": 64000, "memory": 512 * GiB}
    assert parsed.queueing_strategy is QueueingStrategy.STRICT_FIFO
    assert parsed.node_selector == {"pool": "on-demand"}


def test_parse_pool_node_fit() -> None:
    assert pool("p").parsed().node_fit is NodeFit.REQUIRED
    assert pool("p").quota(gpu=8).quota_only().parsed().node_fit is NodeFit.QUOTA_ONLY


def test_pool_without_selector_selects_every_node() -> None:
    parsed = parse_pool({"metadata": {"name": "all"}})
    assert parsed.selects(node("x").parsed())


def _pool(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "lws-gatekeeper.io/v1alpha1",
        "kind": "Pool",
        "metadata": {"name": "p"},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("obj", "match"),
    [
        (
            _pool(queueingStrategy="Fifo"),
            r"Pool p: spec\.queueingStrategy: 'Fifo' is not one of BestEffortFIFO",
        ),
        (
            _pool(quota={GPU: "four"}),
            r"Pool p: spec\.quota\[nvidia.com/gpu\]: 'four' is not a Kubernetes quantity",
        ),
        (_pool(quota={GPU: "-1"}), r"Pool p: spec\.quota\[nvidia.com/gpu\]: '-1' is negative"),
        (_pool(quota=[GPU]), r"Pool p: spec\.quota: expected an object"),
        (_pool(nodeSelector={"pool": 1}), r"Pool p: spec\.nodeSelector: expected string keys and values"),
        (_pool(nodeSelector="pool=a"), r"Pool p: spec\.nodeSelector: expected an object"),
        ({"metadata": {}, "spec": {}}, r"^Pool: metadata\.name: missing"),
        (
            {**_pool(), "apiVersion": "lws-gatekeeper.io/v1"},
            r"Pool p: apiVersion: expected lws-gatekeeper.io/v1alpha1",
        ),
        ({**_pool(), "kind": "Queue"}, r"Pool p: kind: expected Pool"),
        ({**_pool(), "spec": "x"}, r"Pool p: spec: expected an object"),
        (
            _pool(nodeFit="Autoscaled"),
            r"Pool p: spec\.nodeFit: 'Autoscaled' is not one of Required, QuotaOnly",
        ),
        (
            _pool(nodeFit="QuotaOnly"),
            r"Pool p: spec\.quota: required when spec\.nodeFit is QuotaOnly \(the pool's nodes come and go",
        ),
    ],
)
def test_parse_pool_errors(obj: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_pool(obj)


def test_parse_node() -> None:
    parsed = (
        node("n1")
        .labels(pool="a")
        .alloc(gpu=8, cpu="95500m")
        .taint("nvidia.com/gpu", "present", "NoSchedule")
        .parsed()
    )
    assert parsed.name == "n1"
    assert parsed.labels == {"pool": "a"}
    assert parsed.allocatable == {"cpu": 95500, "memory": 256 * GiB, "pods": 110, GPU: 8}
    assert parsed.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    assert parsed.schedulable


@pytest.mark.parametrize(
    ("ready", "cordon", "schedulable"),
    [("True", False, True), ("False", False, False), ("Unknown", False, True), ("True", True, False)],
)
def test_node_schedulable(ready: str, cordon: bool, schedulable: bool) -> None:
    builder = node("n").ready(ready)
    if cordon:
        builder.cordon()
    assert builder.parsed().schedulable is schedulable


def test_parse_node_falls_back_to_capacity_and_no_conditions_is_unknown() -> None:
    parsed = parse_node({"metadata": {"name": "n"}, "status": {"capacity": {GPU: "2"}}})
    assert parsed.allocatable == {GPU: 2}
    assert parsed.ready is None
    assert parsed.schedulable


@pytest.mark.parametrize(
    ("obj", "match"),
    [
        (
            {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "lots"}}},
            r"Node n: status\.allocatable\[cpu\]",
        ),
        ({"metadata": {}}, r"metadata\.name: missing"),
        ({"metadata": {"name": "n"}, "spec": {"taints": {}}}, r"Node n: spec\.taints: expected a list"),
    ],
)
def test_parse_node_errors(obj: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_node(obj)


def test_node_usage_counts_every_bound_live_pod() -> None:
    pods = [
        bound_pod("a", "n1", gpu=1, cpu="1"),
        bound_pod("b", "n1", namespace="kube-system", cpu="500m"),
        bound_pod("c", "n2", gpu=2, phase="Pending"),
        bound_pod("done", "n1", gpu=4, phase="Succeeded"),
        bound_pod("failed", "n2", gpu=4, phase="Failed"),
        {
            "metadata": {"name": "gated"},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Pending"},
        },
    ]
    assert node_usage(pods) == {
        "n1": {GPU: 1, "cpu": 1500, "pods": 2},
        "n2": {GPU: 2, "pods": 1},
    }


def test_node_usage_reads_a_pod_version_once_and_a_new_version_afresh() -> None:
    """Requests are remembered by (uid, resourceVersion): an in-place resize is a new version."""
    memo = RequestsMemo()
    pod = bound_pod("a", "n1", gpu=1)
    pod["metadata"] |= {"uid": "u-resize", "resourceVersion": "10"}
    assert node_usage([pod], memo)["n1"][GPU] == 1
    same_version = copy.deepcopy(pod)
    same_version["spec"]["containers"][0]["resources"]["requests"][GPU] = "3"
    assert node_usage([same_version], memo)["n1"][GPU] == 1, "same version: read once"
    same_version["metadata"]["resourceVersion"] = "11"
    assert node_usage([same_version], memo)["n1"][GPU] == 3
    unversioned = bound_pod("b", "n1", gpu=1)
    assert node_usage([unversioned], memo)["n1"][GPU] == 1
    unversioned["spec"]["containers"][0]["resources"]["requests"][GPU] = "2"
    assert node_usage([unversioned], memo)["n1"][GPU] == 2, "no version: never remembered"


def test_the_requests_memo_forgets_versions_no_pass_reads_any_more() -> None:
    """Every status update of a bound pod is a new version: 100 pods over 50 passes are 5,000
    versions, but only the 100 of the last pass are worth keeping (the memo once held up
    to 200,000 entries whatever the cluster's size)."""
    memo = RequestsMemo()
    pods = [bound_pod(f"p{i}", "n1", gpu=1) for i in range(100)]
    for version in range(50):
        for i, pod in enumerate(pods):
            pod["metadata"] |= {"uid": f"u{i}", "resourceVersion": str(version)}
        assert node_usage(pods, memo)["n1"][GPU] == 100
    assert len(memo) <= 2 * len(pods)


def test_node_usage_names_a_broken_pod() -> None:
    with pytest.raises(ValueError, match=r"Pod other/x: spec\.containers\[0\]\.resources\.requests\[cpu\]"):
        node_usage([bound_pod("x", "n1", cpu="zz")])


def test_pool_capacity() -> None:
    nodes = [
        node("a").labels(pool="p").alloc(gpu=4).parsed(),
        node("b").labels(pool="p").alloc(gpu=2).cordon().parsed(),
        node("c").labels(pool="p").alloc(gpu=2).ready("False").parsed(),
        node("d").labels(pool="p").alloc(gpu=1).ready("Unknown").parsed(),
        node("e").labels(pool="q").alloc(gpu=8).parsed(),
    ]
    implicit = pool("p").parsed()
    assert pool_capacity(implicit, nodes)[GPU] == 5
    assert pool_capacity(pool("p").quota(gpu=3).parsed(), nodes) == {GPU: 3}


def _demand(*pods: dict[str, int]) -> GroupDemand:
    return GroupDemand(tuple(PodDemand("worker", requests) for requests in pods))


@pytest.mark.parametrize(
    ("demand", "quota", "used", "fits", "uncovered", "too_large", "short"),
    [
        pytest.param(_demand({GPU: 1}, {GPU: 1}), {GPU: 4}, {GPU: 2}, True, (), (), (), id="fits-exactly"),
        pytest.param(_demand({GPU: 1}, {GPU: 1}), {GPU: 4}, {GPU: 3}, False, (), (), (GPU,), id="short"),
        pytest.param(
            _demand({GPU: 4}, {GPU: 4}), {GPU: 4}, {}, False, (), (GPU,), (), id="larger-than-quota"
        ),
        pytest.param(
            _demand({"amd.com/gpu": 1}),
            {GPU: 4},
            {},
            False,
            ("amd.com/gpu",),
            (),
            (),
            id="resource-not-in-quota",
        ),
        pytest.param(
            _demand({GPU: 1, "cpu": 64000, "memory": GiB, "ephemeral-storage": 1, "hugepages-2Mi": 2**21}),
            {GPU: 4},
            {},
            True,
            (),
            (),
            (),
            id="basic-resources-unlimited-when-not-listed",
        ),
        pytest.param(
            _demand({GPU: 1, "cpu": 4000}, {GPU: 1, "cpu": 4000}),
            {GPU: 4, "cpu": 10000},
            {"cpu": 4000},
            False,
            (),
            (),
            ("cpu",),
            id="listed-cpu-is-limited",
        ),
        pytest.param(
            _demand({GPU: 1}, {GPU: 1}, {GPU: 1}),
            {"pods": 2, GPU: 8},
            {},
            False,
            (),
            ("pods",),
            (),
            id="pods",
        ),
        pytest.param(_demand({GPU: 1}), {"pods": 2, GPU: 8}, {"pods": 1}, True, (), (), (), id="pods-fit"),
    ],
)
def test_check_quota(
    demand: GroupDemand,
    quota: dict[str, int],
    used: dict[str, int],
    fits: bool,
    uncovered: tuple[str, ...],
    too_large: tuple[str, ...],
    short: tuple[str, ...],
) -> None:
    result = check_quota(demand, quota, used)
    assert (result.fits, result.uncovered, result.too_large, result.short) == (
        fits,
        uncovered,
        too_large,
        short,
    )
    assert result.never == bool(uncovered or too_large)


def test_check_quota_ceiling_separates_never_from_wait() -> None:
    demand = lws("x").size(2).worker(gpu_limit=2).demand()
    # Schedulable nodes hold 2 GPUs now, all nodes (incl. cordoned) 4: the group waits.
    result = check_quota(demand, {GPU: 2}, {}, ceiling={GPU: 4})
    assert result.short == (GPU,)
    assert not result.never
    # A resource the nodes have none of at all is uncovered, whatever is schedulable now.
    assert check_quota(demand, {}, {}, ceiling={"cpu": 8000}).uncovered == (GPU,)


@pytest.mark.parametrize(
    ("resource", "basic"),
    [
        ("cpu", True),
        ("memory", True),
        ("pods", True),
        ("ephemeral-storage", True),
        ("hugepages-1Gi", True),
        (GPU, False),
        ("example.com/fpga", False),
    ],
)
def test_basic_resources(resource: str, basic: bool) -> None:
    assert is_basic_resource(resource) is basic

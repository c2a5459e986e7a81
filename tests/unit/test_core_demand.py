"""Effective pod requests and LWS group demand, by Kubernetes' own rules."""

from __future__ import annotations

from typing import Any

import pytest
from core_builders import GPU, ctr, lws, pod_spec

from gatekeeper.core.kube.selectors import NodeConstraints, Toleration
from gatekeeper.core.model.demand import GroupDemand, PodDemand, group_demand, pod_requests

GiB = 2**30


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(pod_spec(ctr(gpu_limit=1)), {GPU: 1}, id="extended-resource-limit-counts-as-request"),
        pytest.param(
            pod_spec(ctr(limits={"cpu": "2", "memory": "1Gi"})), {"cpu": 2000, "memory": GiB}, id="cpu-limit"
        ),
        pytest.param(
            pod_spec(ctr(cpu="1", limits={"cpu": "2"})), {"cpu": 1000}, id="request-wins-over-limit"
        ),
        pytest.param(
            pod_spec(ctr(cpu="1", limits={"memory": "2Gi"})),
            {"cpu": 1000, "memory": 2 * GiB},
            id="limit-fills-only-the-missing-resource",
        ),
        pytest.param(pod_spec(ctr(cpu="500m"), ctr("b", cpu="1500m")), {"cpu": 2000}, id="containers-sum"),
        pytest.param(pod_spec(ctr()), {}, id="no-requests"),
        pytest.param(pod_spec(ctr(cpu="0", gpu=0)), {}, id="zero-dropped"),
        pytest.param(
            pod_spec(ctr(cpu="1"), init=[ctr("i", cpu="4")]), {"cpu": 4000}, id="init-larger-than-containers"
        ),
        pytest.param(
            pod_spec(ctr(cpu="3"), init=[ctr("i", cpu="1"), ctr("j", cpu="2")]),
            {"cpu": 3000},
            id="init-smaller-than-containers",
        ),
        pytest.param(
            pod_spec(ctr(cpu="1"), init=[ctr("i", cpu="2"), ctr("j", memory="4Gi")]),
            {"cpu": 2000, "memory": 4 * GiB},
            id="init-max-per-resource",
        ),
        pytest.param(
            pod_spec(ctr(cpu="2"), init=[ctr("s", cpu="1", restart="Always")]),
            {"cpu": 3000},
            id="sidecar-adds",
        ),
        pytest.param(
            pod_spec(ctr(cpu="1"), init=[ctr("s", cpu="1", restart="Always"), ctr("i", cpu="3")]),
            {"cpu": 4000},
            id="init-after-sidecar-runs-beside-it",
        ),
        pytest.param(
            pod_spec(ctr(cpu="1"), init=[ctr("i", cpu="3"), ctr("s", cpu="1", restart="Always")]),
            {"cpu": 3000},
            id="init-before-sidecar-runs-alone",
        ),
        pytest.param(
            # KEP-753 example shape: two sidecars, an init between them, a big init at the end.
            pod_spec(
                ctr(cpu="1"),
                init=[
                    ctr("s1", cpu="1", restart="Always"),
                    ctr("i1", cpu="5"),
                    ctr("s2", cpu="2", restart="Always"),
                    ctr("i2", cpu="3"),
                ],
            ),
            {"cpu": 6000},
            id="sidecars-accumulate-before-each-init",
        ),
        pytest.param(
            pod_spec(ctr(gpu_limit=1), init=[ctr("s", gpu_limit=1, restart="Always")]),
            {GPU: 2},
            id="sidecar-limit-as-request",
        ),
        pytest.param(
            pod_spec(ctr(cpu="1"), overhead={"cpu": "250m", "memory": "120Mi"}),
            {"cpu": 1250, "memory": 120 * 2**20},
            id="overhead-added",
        ),
        pytest.param(
            pod_spec(ctr(cpu="1"), init=[ctr("i", cpu="4")], overhead={"cpu": "250m"}),
            {"cpu": 4250},
            id="overhead-added-after-init-max",
        ),
        pytest.param(
            pod_spec(ctr(cpu="1", gpu_limit=1), resources={"requests": {"cpu": "3"}}),
            {"cpu": 3000, GPU: 1},
            id="pod-level-request-overrides-cpu",
        ),
        pytest.param(
            pod_spec(ctr(gpu_limit=1), resources={"limits": {"cpu": "4", "memory": "8Gi"}}),
            {"cpu": 4000, "memory": 8 * GiB, GPU: 1},
            id="pod-level-limit-stands-in-when-no-container-requests",
        ),
        pytest.param(
            pod_spec(ctr(cpu="1"), resources={"limits": {"cpu": "4"}}),
            {"cpu": 1000},
            id="pod-level-limit-ignored-when-containers-request",
        ),
        pytest.param(
            pod_spec(ctr(gpu_limit=1), resources={"requests": {GPU: "4", "hugepages-2Mi": "4Mi"}}),
            {GPU: 1, "hugepages-2Mi": 4 * 2**20},
            id="pod-level-only-for-cpu-memory-hugepages",
        ),
        pytest.param(
            pod_spec(ctr(cpu="1"), resources={"requests": {"cpu": "2"}}, overhead={"cpu": "100m"}),
            {"cpu": 2100},
            id="overhead-on-top-of-pod-level",
        ),
        pytest.param(pod_spec(ctr(cpu="100u")), {"cpu": 1}, id="rounded-up-to-millicores"),
    ],
)
def test_pod_requests(spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert pod_requests(spec) == expected


def test_runtime_class_overhead_applies_only_without_spec_overhead() -> None:
    spec = pod_spec(ctr(cpu="1"), runtime_class="kata")
    assert pod_requests(spec, overhead={"cpu": "500m"}) == {"cpu": 1500}
    spec["overhead"] = {"cpu": "100m"}
    assert pod_requests(spec, overhead={"cpu": "500m"}) == {"cpu": 1100}


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (pod_spec(ctr(cpu="two")), r"spec\.containers\[0\]\.resources\.requests\[cpu\]: 'two' is not"),
        (
            pod_spec(ctr(limits={GPU: "-1"})),
            r"spec\.containers\[0\]\.resources\.limits\[nvidia.com/gpu\]: '-1' is neg",
        ),
        (
            pod_spec(ctr(), init=[ctr(memory="1Q")]),
            r"spec\.initContainers\[0\]\.resources\.requests\[memory\]",
        ),
        ({"containers": "x"}, r"spec\.containers: expected a list"),
        ({"containers": [{"resources": []}]}, r"spec\.containers\[0\]\.resources: expected an object"),
        (pod_spec(ctr(), overhead={"cpu": "x"}), r"spec\.overhead\[cpu\]"),
    ],
)
def test_pod_requests_errors_name_the_field(spec: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        pod_requests(spec)


def test_group_of_leader_and_workers() -> None:
    demand = (
        lws("vllm").size(4).leader(cpu="2", memory="8Gi", gpu_limit=1).worker(cpu="4", gpu_limit=2).demand()
    )
    assert demand.pod_count == 4
    assert [p.role for p in demand.pods] == ["leader", "worker", "worker", "worker"]
    assert demand.pods[0].requests == {"cpu": 2000, "memory": 8 * GiB, GPU: 1}
    assert demand.pods[1].requests == {"cpu": 4000, GPU: 2}
    assert demand.total == {"cpu": 14000, "memory": 8 * GiB, GPU: 7}
    assert demand.pods_needing(GPU) == 4
    assert demand.pods_needing("memory") == 1


def test_missing_leader_template_means_leader_uses_worker_template() -> None:
    demand = lws("vllm").size(2).worker(gpu_limit=1).demand()
    assert [p.requests for p in demand.pods] == [{GPU: 1}, {GPU: 1}]
    assert demand.pods[0].role == "leader"
    assert demand.total == {GPU: 2}


@pytest.mark.parametrize("size", [1, None])
def test_size_one_or_default_is_just_the_leader(size: int | None) -> None:
    builder = lws("solo").leader(gpu_limit=8).worker(gpu_limit=1)
    if size is not None:
        builder.size(size)
    demand = builder.demand()
    assert demand.pod_count == 1
    assert demand.total == {GPU: 8}


def test_sub_group_policy_does_not_change_demand() -> None:
    plain = lws("a").size(4).worker(gpu_limit=2).demand()
    sub = lws("a").size(4).worker(gpu_limit=2).set("subGroupPolicy", {"subGroupSize": 2}).demand()
    assert sub == plain
    assert sub.total == plain.total


def test_runtime_class_overhead_per_template() -> None:
    obj = lws("k").size(2).worker(spec=pod_spec(ctr(cpu="1"), runtime_class="kata")).obj()
    demand = group_demand(obj, runtime_class_overhead={"kata": {"cpu": "250m"}})
    assert demand.total == {"cpu": 2500}


def test_node_constraints_come_from_templates() -> None:
    spec = pod_spec(
        ctr(gpu_limit=1),
        node_selector={"pool": "a"},
        tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    demand = lws("x").size(2).worker(spec=spec).demand()
    constraints = demand.pods[1].constraints
    assert constraints.node_selector == (("pool", "a"),)
    assert constraints.tolerations == (Toleration(key="gpu", operator="Exists", effect="NoSchedule"),)
    assert constraints.affinity is None


def test_demands_are_values() -> None:
    a = lws("a").size(2).worker(gpu_limit=1).demand()
    b = lws("b").size(2).worker(gpu_limit=1).demand()
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    other = GroupDemand((PodDemand("leader", {GPU: 2}, NodeConstraints()),))
    assert other != a


def test_group_needs_a_pod() -> None:
    with pytest.raises(ValueError, match="at least one pod"):
        GroupDemand(())


def _broken(mutate: Any) -> dict[str, Any]:
    obj = lws("bad", "team").size(2).worker(gpu_limit=1).obj()
    mutate(obj)
    return obj


@pytest.mark.parametrize(
    ("obj", "match"),
    [
        (_broken(lambda o: o["spec"]["leaderWorkerTemplate"].update(size=0)), r"size: must be at least 1"),
        (_broken(lambda o: o["spec"]["leaderWorkerTemplate"].update(size="2")), r"size: expected an integer"),
        (
            _broken(lambda o: o["spec"]["leaderWorkerTemplate"].update(size=True)),
            r"size: expected an integer",
        ),
        (
            _broken(lambda o: o["spec"]["leaderWorkerTemplate"].pop("workerTemplate")),
            r"workerTemplate: missing",
        ),
        (_broken(lambda o: o["spec"].pop("leaderWorkerTemplate")), r"spec\.leaderWorkerTemplate: missing"),
        (_broken(lambda o: o.update(spec=[])), r"spec: expected an object"),
        (_broken(lambda o: o.update(apiVersion="leaderworkerset.x-k8s.io/v2")), r"apiVersion: expected"),
        (
            _broken(
                lambda o: o["spec"]["leaderWorkerTemplate"]["workerTemplate"].update(spec={"containers": []})
            ),
            r"workerTemplate\.spec\.containers: a pod needs at least one container",
        ),
        (
            _broken(lambda o: o["spec"]["leaderWorkerTemplate"]["workerTemplate"].pop("spec")),
            r"workerTemplate\.spec: missing",
        ),
        (
            _broken(
                lambda o: o["spec"]["leaderWorkerTemplate"].update(
                    leaderTemplate={"spec": pod_spec(ctr(cpu="1x"))}
                )
            ),
            r"leaderTemplate\.spec\.containers\[0\]\.resources\.requests\[cpu\]: "
            r"'1x' is not a Kubernetes quantity",
        ),
        (
            _broken(
                lambda o: o["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"].update(
                    nodeSelector={"a": 1}
                )
            ),
            r"workerTemplate\.spec\.nodeSelector: expected string keys and values",
        ),
        (
            _broken(
                lambda o: o["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"].update(
                    affinity={
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {"matchExpressions": [{"key": "a", "operator": "Near"}]}
                                ]
                            }
                        }
                    }
                )
            ),
            r"matchExpressions\[0\]\.operator: unsupported operator 'Near'",
        ),
    ],
)
def test_group_demand_errors_name_the_lws_and_field(obj: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        group_demand(obj)
    assert str(err.value).startswith("LeaderWorkerSet team/bad: ")

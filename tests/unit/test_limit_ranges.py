"""A namespace's LimitRange defaults in a group's demand (``core.model.limits``), as the API
server's LimitRanger gives them to a container at pod creation."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from core_builders import ctr, lws, pod_spec

from gatekeeper.core.model.demand import GroupDemand, group_demand, pod_requests
from gatekeeper.core.model.groups import DemandMemo
from gatekeeper.core.model.limits import MAX_LIMIT_RANGES, container_defaults


def _lr(name: str, *items: dict[str, Any], namespace: str = "team") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"limits": list(items)}}


def _item(kind: str = "Container", **fields: dict[str, str]) -> dict[str, Any]:
    key = {"default_request": "defaultRequest"}
    return {"type": kind, **{key.get(k, k): v for k, v in fields.items()}}


@pytest.mark.parametrize(
    ("ranges", "defaults"),
    [
        ([], {}),
        ([_lr("a", _item(default={"cpu": "1"}))], {"cpu": Fraction(1)}),
        ([_lr("a", _item(default={"cpu": "1"}, default_request={"cpu": "250m"}))], {"cpu": Fraction(1, 4)}),
        ([_lr("a", _item(max={"memory": "1Gi"}))], {"memory": Fraction(2**30)}),  # max -> default -> request
        ([_lr("a", _item(min={"cpu": "100m"}))], {"cpu": Fraction(1, 10)}),
        ([_lr("a", _item(min={"cpu": "100m"}, max={"cpu": "2"}))], {"cpu": Fraction(2)}),  # the default wins
        ([_lr("a", _item("Pod", default={"cpu": "1"}))], {}),  # a Pod item only bounds
        ([_lr("a", _item(default={"cpu": "1"}), _item(default={"cpu": "2"}))], {"cpu": Fraction(2)}),
        (
            [_lr("b", _item(default={"cpu": "2"})), _lr("a", _item(default={"cpu": "1"}))],
            {"cpu": Fraction(1)},
        ),
        ([_lr("a", _item(default={"cpu": "x", "memory": "1Mi"}))], {"memory": Fraction(2**20)}),
    ],
    ids=[
        "none",
        "a default limit is the default request",
        "a default request",
        "max",
        "min",
        "min and max",
        "pod item",
        "later item of one LimitRange",
        "first LimitRange by name",
        "an unreadable quantity gives nothing",
    ],
)
def test_what_a_container_that_names_nothing_gets(
    ranges: list[dict[str, Any]], defaults: dict[str, Fraction]
) -> None:
    assert container_defaults(ranges).get("team", {}) == defaults


def test_only_the_first_limit_ranges_of_a_namespace_are_read() -> None:
    many = [_lr(f"lr{i:03d}", _item(default={f"example.com/r{i}": "1"})) for i in range(MAX_LIMIT_RANGES + 5)]
    assert len(container_defaults(many)["team"]) == MAX_LIMIT_RANGES


@pytest.mark.parametrize(
    ("resources", "cpu"),
    [
        ({}, 1000),  # names nothing: the default
        ({"requests": {"cpu": "250m"}}, 250),  # its own request stays
        ({"limits": {"cpu": "2"}}, 2000),  # its limit is its request, before the LimitRanger
        ({"requests": {"memory": "1Gi"}}, 1000),  # another resource named: cpu still defaulted
    ],
)
def test_a_containers_own_request_or_limit_is_never_replaced(resources: dict[str, Any], cpu: int) -> None:
    spec = {"containers": [{"name": "c", "resources": resources}]}
    assert pod_requests(spec, defaults={"cpu": Fraction(1)})["cpu"] == cpu


def test_init_containers_get_the_defaults_too() -> None:
    spec = {
        "initContainers": [{"name": "i", "resources": {}}],
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
    }
    # the init container runs alone first at 1 cpu; the pod needs the larger of 1 and 0.1
    assert pod_requests(spec, defaults={"cpu": Fraction(1)})["cpu"] == 1000


def test_the_group_demand_counts_the_defaults_per_pod() -> None:
    obj = lws("x", "team").size(4).worker(gpu_limit=1).obj()
    plain = group_demand(obj)
    given = group_demand(obj, container_defaults={"cpu": Fraction(1), "memory": Fraction(2**30)})
    assert "cpu" not in plain.total
    assert given.total["cpu"] == 4000 and given.total["memory"] == 4 * 2**30
    assert given.total["nvidia.com/gpu"] == 4


def test_the_memo_computes_again_when_the_namespaces_defaults_change() -> None:
    obj = lws("x", "team").size(2).worker(pod_spec(ctr(gpu_limit=1))).uid("u").obj()
    obj["metadata"]["generation"] = 1
    memo = DemandMemo()

    def cpu() -> int:
        demand = memo.demand(obj)
        assert isinstance(demand, GroupDemand)
        return demand.total.get("cpu", 0)

    memo.use_cluster([])
    assert cpu() == 0
    memo.use_cluster([_lr("a", _item(default={"cpu": "1"}))])
    assert cpu() == 2000
    memo.use_cluster([_lr("a", _item(default={"cpu": "1"}), namespace="other")])
    assert cpu() == 0, "another namespace's LimitRange is not this one's"

"""``core.model.claims`` and ``core.model.devices``: devices asked through DRA claims are counted as
the resource their DeviceClass names, or refused with why; never taken as nothing.

A tenant writes the ResourceClaimTemplates its pods name, and may swap one after its group
is admitted; an admin writes the DeviceClasses. The demand counts the templates; a made pod
is judged by the claims made for it; node room counts the devices the slices publish.
"""

from __future__ import annotations

from typing import Any

import pytest
from core_builders import lws, lws_pod, node

from gatekeeper.core.admission.conformance import conforming, departure, over_record
from gatekeeper.core.model.claims import (
    ClaimBook,
    Unmade,
    claim_counts,
    made_claims,
    pod_counts,
    read_claim_book,
    template_counts,
)
from gatekeeper.core.model.demand import GroupDemand, group_demand
from gatekeeper.core.model.devices import (
    claim_view,
    class_view,
    device_room,
    slice_view,
    template_view,
    with_devices,
)
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.groups import DemandMemo, GroupState
from gatekeeper.core.model.lws import GroupPod
from gatekeeper.core.model.nodes import parse_node

GPU = "nvidia.com/gpu"
SAME = 'device.driver=="gpu.example.com"'
SCHEDULERS = "resource.kubernetes.io/extended-resource-claim"
DRIVER = "gpu.example.com"


def device_class(name: str = "gpu", resource: str = GPU, selectors: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selectors": selectors
        if selectors is not None
        else [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]
    }
    if resource:
        spec["extendedResourceName"] = resource
    return {"metadata": {"name": name}, "spec": spec}


def request(cls: str = "gpu", **exactly: Any) -> dict[str, Any]:
    return {"name": "r", "exactly": {"deviceClassName": cls, **exactly}}


def claim_spec(*requests: dict[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": list(requests)}}


def template(
    name: str = "one-gpu", *requests: dict[str, Any], ns: str = "default", rv: str = "1"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"t-{name}", "resourceVersion": rv},
        "spec": {"spec": claim_spec(*(requests or (request(),)))},
    }


def claim(name: str, *requests: dict[str, Any], ns: str = "default", results: Any = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": ns},
        "spec": claim_spec(*(requests or (request(),))),
    }
    if results is not None:
        obj["status"] = {"allocation": {"devices": {"results": results}}}
    return obj


BOOK = read_claim_book([device_class(), device_class("plain", resource="")], [template()])
USES = {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}


@pytest.mark.parametrize(
    ("spec", "counted", "refused"),
    [
        (claim_spec(request()), {GPU: 1}, None),
        (claim_spec(request(count=4)), {GPU: 4}, None),
        (claim_spec(request(), request(count=2)), {GPU: 3}, None),
        (claim_spec(request(allocationMode="ExactCount", count=2)), {GPU: 2}, None),
        (claim_spec(), {}, None),
        (claim_spec(request(allocationMode="All")), None, r"allocationMode: All asks as many devices"),
        (claim_spec({"name": "r", "firstAvailable": [{"deviceClassName": "gpu"}]}), None, "firstAvail"),
        (claim_spec(request("plain")), None, r"DeviceClass plain names no spec.extendedResourceName"),
        (claim_spec(request("nope")), None, r"DeviceClass nope does not exist"),
        (claim_spec(request(count=0)), None, r"count: must be 1 to 1024, got 0"),
        (claim_spec(request(count=10**9)), None, r"count: must be 1 to 1024"),
        (claim_spec(request(count="4")), None, r"count: must be 1 to 1024, got '4'"),
        (claim_spec(request(count=True)), None, r"count: must be 1 to 1024, got True"),
    ],
)  # fmt: skip
def test_a_claim_counts_as_its_class_names_or_is_refused_with_why(
    spec: dict[str, Any], counted: dict[str, int] | None, refused: str | None
) -> None:
    if refused is None:
        assert claim_counts(spec, BOOK.classes, "spec") == counted
    else:
        with pytest.raises(ValueError, match=refused):
            claim_counts(spec, BOOK.classes, "spec")


@pytest.mark.parametrize(
    ("entries", "counted", "refused"),
    [
        ([USES], {GPU: 1}, None),
        ([USES, {"name": "b", "resourceClaimTemplateName": "one-gpu"}], {GPU: 2}, None),
        ([{"name": "gpu", "resourceClaimName": "shared"}], None, r"claim shared is shared by name"),
        ([{"name": "g", "resourceClaimTemplateName": "gone"}], None, r"gone is not in namespace default"),
        ([], {}, None),
    ],
)  # fmt: skip
def test_a_template_counts_the_claims_its_resource_claim_templates_make(
    entries: list[dict[str, Any]], counted: dict[str, int] | None, refused: str | None
) -> None:
    spec = {"containers": [{"name": "c"}], "resourceClaims": entries}
    if refused is None:
        assert template_counts("default", spec, BOOK, "spec") == counted
    else:
        with pytest.raises(ValueError, match=refused):
            template_counts("default", spec, BOOK, "spec")
    # the same template in another namespace is not the tenant's
    if entries:
        with pytest.raises(ValueError, match=r"(not in namespace other|shared by name)"):
            template_counts("other", spec, BOOK, "spec")


def test_a_container_naming_a_claim_the_pod_does_not_list_is_refused() -> None:
    spec = {"containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}]}
    with pytest.raises(ValueError, match="names a claim the pod does not list"):
        template_counts("default", spec, BOOK, "spec")


def _claimed_lws(size: int = 2) -> dict[str, Any]:
    obj = lws("vllm").pool("a").uid("u-1").size(size).replicas(1).worker(gpu_limit=0).obj()
    spec = obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    spec["resourceClaims"] = [USES]
    spec["containers"][0]["resources"] = {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}
    return obj


def test_a_group_demand_counts_each_pods_claims_and_the_memo_follows_the_template() -> None:
    obj = _claimed_lws(size=3)
    demand = group_demand(obj, claim_book=BOOK)
    assert [p.requests.get(GPU) for p in demand.pods] == [1, 1, 1]
    assert demand.total[GPU] == 3
    memo = DemandMemo()
    memo.use_cluster(claim_book=BOOK)
    assert memo.demand(obj) == demand
    # the tenant replaces its template with one that asks 4: a new demand, not the memo's
    bigger = read_claim_book([device_class()], [template("one-gpu", request(count=4), rv="2")])
    memo.use_cluster(claim_book=bigger)
    again = memo.demand(obj)
    assert isinstance(again, GroupDemand) and again.total[GPU] == 12
    # and without it the group cannot be counted: refused, with why
    memo.use_cluster(claim_book=read_claim_book([device_class()]))
    assert "ResourceClaimTemplate one-gpu is not in namespace default" in str(memo.demand(obj))


def _gated(worker: int, made: dict[str, str | None] | None, gpu_limit: int = 0) -> GroupPod:
    pod = lws_pod("vllm", 0, worker, gpu_limit=gpu_limit)
    pod["spec"]["resourceClaims"] = [USES]
    if made is not None:
        pod["status"] = {
            "resourceClaimStatuses": [{"name": k, "resourceClaimName": v} for k, v in made.items()]
        }
    return GroupPod.read(pod, pod["metadata"]["name"])


def test_a_made_pod_is_judged_by_the_claims_made_for_it_not_by_the_template_now() -> None:
    obj = _claimed_lws()
    demand = group_demand(obj, claim_book=BOOK)
    # the template was swapped after the admission: this pod's claim asks 4
    book = read_claim_book(
        [device_class()],
        [template()],
        [claim("vllm-0-1-gpu-a"), claim("vllm-0-1-gpu-b", request(count=4))],
    )
    fair = _gated(1, {"gpu": "vllm-0-1-gpu-a"})
    assert departure(fair, obj, demand, claim_book=book) is None
    greedy = _gated(1, {"gpu": "vllm-0-1-gpu-b"})
    said = departure(greedy, obj, demand, claim_book=book)
    assert said is not None and "asks 4 nvidia.com/gpu" in said and "more than its role (worker)" in said
    # a pod whose claim is not made (or not read) yet can be said nothing of: it waits
    for unmade in (_gated(1, None), _gated(1, {"gpu": "not-read-yet"})):
        with pytest.raises(Unmade):
            departure(unmade, obj, demand, claim_book=book)
    # a claim Kubernetes needed not make holds nothing
    assert departure(_gated(1, {"gpu": None}), obj, demand, claim_book=book) is None
    assert made_claims({"status": {"resourceClaimStatuses": [{"name": "gpu"}]}}) == {"gpu": None}


def test_a_pod_waiting_for_its_claim_stays_gated_and_is_no_stranger() -> None:
    obj = _claimed_lws()
    demand = group_demand(obj, claim_book=BOOK)
    pods = [_gated(0, {"gpu": "c0"}), _gated(1, None)]
    state = GroupState(
        GroupKey("default", "vllm", 0),
        "u-1",
        "a",
        "vllm-0",
        demand,
        ("vllm-0", "vllm-0-1"),
        ("vllm-0", "vllm-0-1"),
    )
    book = read_claim_book([device_class()], [template()], [claim("c0")])
    got, strangers = conforming(state, pods, obj, demand, claim_book=book)
    assert got.gated == ("vllm-0",) and strangers == []


def test_pod_counts_refuses_a_claim_shared_by_name() -> None:
    spec = {"resourceClaims": [{"name": "gpu", "resourceClaimName": "shared"}]}
    with pytest.raises(ValueError, match="shared by name"):
        pod_counts("default", spec, {}, BOOK)


def _slice(
    node_name: str, devices: int, pool: str = "", generation: int = 1, driver: str = DRIVER
) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node_name}-{driver}-{generation}"},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": pool or node_name, "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {"name": f"gpu-{i}", "attributes": {"model": {"string": "x" * 100}}} for i in range(devices)
            ],
        },
    }


def _result(node_name: str, device: int, **more: Any) -> dict[str, Any]:
    return {"request": "r", "driver": DRIVER, "pool": node_name, "device": f"gpu-{device}", **more}


def test_node_room_counts_the_devices_slices_publish_less_those_claims_hold() -> None:
    classes = [device_class()]
    slices = [
        _slice("n1", 4),
        _slice("n2", 2),
        _slice("n2", 8, generation=0),
        _slice("n3", 9, driver="other"),
    ]
    claims = [
        claim("a", results=[_result("n1", 0), _result("n1", 1)]),
        claim("b", results=[_result("n2", 0, adminAccess=True)]),  # admin access holds no device
        # the scheduler's claim for a pod asking the extended resource: its requests count it
        {**claim("c", results=[_result("n2", 1)]), "metadata": {"annotations": {SCHEDULERS: "true"}}},
        claim("d", results=[_result("gone", 0)]),  # a device no slice publishes now
    ]  # fmt: skip
    room = device_room(classes, slices, claims)
    assert room.capacity == {"n1": {GPU: 4}, "n2": {GPU: 2}}  # n2's older generation is not counted
    assert room.used == {"n1": {GPU: 2}}
    nodes = [parse_node(node(n).alloc(gpu=0).obj()) for n in ("n1", "n2", "n3")]
    got_nodes, usage = with_devices(nodes, {"n1": {"cpu": 100}}, room)
    assert [n.allocatable.get(GPU, 0) for n in got_nodes] == [4, 2, 0]
    assert usage == {"n1": {"cpu": 100, GPU: 2}}
    # the same through the views the informers keep
    viewed = device_room(
        [class_view(c) for c in classes], [slice_view(s) for s in slices], [claim_view(c) for c in claims]
    )
    assert viewed == room


@pytest.mark.parametrize(
    ("selectors", "modelled"),
    [
        ([{"cel": {"expression": f"device.driver == '{DRIVER}'"}}], True),
        ([{"cel": {"expression": f'device.driver == "{DRIVER}"'}}, {"cel": {"expression": SAME}}], True),
        ([{"cel": {"expression": f'device.driver == "{DRIVER}" && device.attributes["x"].y == "a"'}}], False),
        ([], False),  # a class of every device: which are its cannot be told
    ],
)  # fmt: skip
def test_only_a_class_that_selects_one_driver_gives_node_room(selectors: Any, modelled: bool) -> None:
    room = device_room([device_class(selectors=selectors)], [_slice("n1", 2)], [])
    assert room.capacity == ({"n1": {GPU: 2}} if modelled else {})


def test_the_views_keep_only_what_is_counted_not_what_a_tenant_writes_at_any_size() -> None:
    big = {"cel": {"expression": "x" * 100_000}}
    t = template("t", {"name": "r", "exactly": {"deviceClassName": "gpu", "count": 2, "selectors": [big]}})
    t["spec"]["spec"]["devices"]["config"] = [
        {"opaque": {"driver": DRIVER, "parameters": {"x": "y" * 100_000}}}
    ]
    t["metadata"]["annotations"] = {"a": "z" * 100_000}
    viewed = template_view(t)
    assert len(repr(viewed)) < 500
    book = ClaimBook(BOOK.classes, {("default", "t"): viewed})
    assert template_counts(
        "default", {"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}]}, book, "s"
    ) == {GPU: 2}
    first = {"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": "gpu", "selectors": [big]}]}
    with pytest.raises(ValueError, match="firstAvailable"):
        claim_counts(claim_view(claim("c", first))["spec"], BOOK.classes, "spec")
    assert len(repr(slice_view(_slice("n1", 3)))) < 400


@pytest.mark.parametrize(
    ("pods", "going", "off"),
    [
        # made from the template as it was: what the record holds, let through
        ([("vllm-0", 1, True), ("vllm-0-1", 1, True)], ["vllm-0", "vllm-0-1"], []),
        ([("vllm-0", 1, False), ("vllm-0-1", 1, True)], ["vllm-0-1"], []),
        # the template swapped between the admission and the pods: they ask more than it holds
        ([("vllm-0", 2, True), ("vllm-0-1", 2, True)], [], ["vllm-0", "vllm-0-1"]),
        ([("vllm-0", 2, False), ("vllm-0-1", 1, True)], [], ["vllm-0-1"]),
    ],
)
def test_pods_let_through_on_a_changed_groups_record_hold_no_more_than_it(
    pods: list[tuple[str, int, bool]], going: list[str], off: list[str]
) -> None:
    """While an admitted group's LWS asks another demand (here: its ResourceClaimTemplate swapped,
    no new revision), its old-revision pods go on its record only while all of them ask no more
    than the record holds (2 GPUs)."""
    demand = group_demand(_claimed_lws(), claim_book=BOOK)
    book = read_claim_book([device_class()], [template()], [claim("c1"), claim("c2", request(count=2))])
    read = []
    for name, devices, gated in pods:
        worker = 0 if name == "vllm-0" else 1
        pod = lws_pod("vllm", 0, worker, gpu_limit=0, gated=gated)
        pod["spec"]["resourceClaims"] = [USES]
        pod["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"c{devices}"}]}
        read.append(GroupPod.read(pod, name))
    state = GroupState(GroupKey("default", "vllm", 0), "u-1", "a", "vllm-0", demand, (), ())
    let_through = [p.name for p in read if p.gated]
    got, strangers = over_record(state, read, let_through, {GPU: 2}, book)
    assert got == going
    assert [s.pod for s in strangers] == off
    assert all("more than its record holds (2 nvidia.com/gpu)" in s.why for s in strangers)


def test_nothing_goes_beside_a_pod_let_through_whose_claims_cannot_be_read() -> None:
    demand = group_demand(_claimed_lws(), claim_book=BOOK)
    book = read_claim_book([device_class()], [template()], [claim("c1")])
    holding = lws_pod("vllm", 0, 0, gpu_limit=0, gated=False)
    waiting = lws_pod("vllm", 0, 1, gpu_limit=0)
    for pod, made in ((holding, "gone"), (waiting, "c1")):
        pod["spec"]["resourceClaims"] = [USES]
        pod["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": made}]}
    read = [GroupPod.read(holding, "vllm-0"), GroupPod.read(waiting, "vllm-0-1")]
    state = GroupState(GroupKey("default", "vllm", 0), "u-1", "a", "vllm-0", demand, (), ())
    assert over_record(state, read, ["vllm-0-1"], {GPU: 2}, book) == ([], [])

"""``core.admission.conformance``: a gated pod goes through only asking what its role was admitted with.

A tenant with ``edit`` may change the group's StatefulSets: a worker StatefulSet's template
edited to ask more GPUs, another RuntimeClass or PriorityClass, its revision label kept.
Its pods are made through the LWS's own chain; they stay gated, under either backend.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from core_builders import lws, lws_pod, lws_statefulsets, node, pool, read_pools, record
from test_tenant_pools import assert_held

from gatekeeper.core.admission.conformance import departure
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.kueue import KueueSnapshot, decide_kueue
from gatekeeper.core.backends.pools import Snapshot, decide
from gatekeeper.core.model.demand import group_demand
from gatekeeper.core.model.lws import GroupPod

CLOSED = {"key": "lws-gatekeeper.io/pool", "operator": "Equal", "value": "a", "effect": "NoSchedule"}


def _vllm(**worker: Any) -> dict[str, Any]:
    obj = lws("vllm").pool("a").uid("u-1").size(2).replicas(1).worker(gpu_limit=1).obj()
    obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"].update(worker)
    return obj


def _ctr(gpu: str, cpu: str = "", cpu_request: str = "", fpga: str = "") -> dict[str, Any]:
    limits = {
        "nvidia.com/gpu": gpu,
        **({"cpu": cpu} if cpu else {}),
        **({"example.com/fpga": fpga} if fpga else {}),
    }
    resources: dict[str, Any] = {"limits": limits}
    if cpu_request:
        resources["requests"] = {"cpu": cpu_request}
    return {"name": "c", "image": "vllm", "resources": resources}


def _pod(worker: int = 1, gpus: Any = 1, **spec: Any) -> dict[str, Any]:
    pod = lws_pod("vllm", 0, worker, gpu_limit=gpus)
    pod["spec"].update(spec)
    return pod


@pytest.mark.parametrize(
    ("template", "pod", "said"),
    [
        ({}, _pod(), None),
        ({}, _pod(gpus=2), "asks 2 nvidia.com/gpu, more than its role (worker) was admitted with (1"),
        ({}, _pod(gpus=0), None),  # less is no harm to the quota
        # a LimitRange's defaults: CPU and memory the template does not ask are not judged
        ({}, _pod(containers=[_ctr(gpu="1", cpu_request="1")]), None),
        ({"containers": [_ctr(gpu="1", cpu="1")]}, _pod(containers=[_ctr(gpu="1", cpu="2")]), "asks 2 cpu"),
        ({}, _pod(containers=[_ctr(gpu="1", fpga="1")]), "example.com/fpga"),
        ({}, _pod(overhead={"cpu": "250m"}), None),  # a RuntimeClass's overhead is not the pod's ask
        ({}, _pod(runtimeClassName="kata"), "RuntimeClass kata where its LeaderWorkerSet's worker"),
        ({"runtimeClassName": "kata"}, _pod(runtimeClassName="kata"), None),
        ({"runtimeClassName": "kata"}, _pod(), "RuntimeClass (none) where its Leader"),
        ({"priorityClassName": "low"}, _pod(priorityClassName="low"), None),
        ({"priorityClassName": "low"}, _pod(priorityClassName="high"), "PriorityClass high where its"),
        ({}, _pod(priorityClassName="cluster-default"), None),  # the API server may give the default class
        ({}, _pod(priorityClassName="cluster-default", priority=0), None),  # no higher than the default
        ({}, _pod(priorityClassName="high", priority=1000), "has priority 1000 (PriorityClass high) where"),
        ({}, _pod(worker=0, gpus=2), "pod vllm-0 asks 2 nvidia.com/gpu, more than its role (leader)"),
        # a closed pool's taint is tolerated only by what the gatekeeper adds as it lifts the gate
        ({}, _pod(tolerations=[CLOSED]), "lws-gatekeeper.io/pool=a:NoSchedule tolerates the taint"),
        ({"tolerations": [CLOSED]}, _pod(tolerations=[CLOSED]), "remove it from the LeaderWorkerSet's"),
        ({}, _pod(tolerations=[{"operator": "Exists"}]), "every taint (operator Exists, no key)"),
        ({}, _pod(tolerations=[{"key": "lws-gatekeeper.io/pool", "operator": "Exists"}]), "(operator Exis"),
        ({}, _pod(tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]), None),
    ],
)  # fmt: skip
def test_a_gated_pod_departs_from_its_role_in_requests_runtime_or_priority(
    template: dict[str, Any], pod: dict[str, Any], said: str | None
) -> None:
    obj = _vllm(**template)
    got = departure(GroupPod.read(pod, pod["metadata"]["name"]), obj, group_demand(obj))
    assert (got is None) is (said is None), got
    assert said is None or (got is not None and said in got and got.startswith("pod vllm-0")), got


@pytest.mark.parametrize(
    ("priority", "default", "departs"), [(100, 100, False), (101, 100, True), (-5, 0, False)]
)
def test_where_the_template_names_no_class_a_pod_may_be_no_higher_than_the_clusters_default(
    priority: int, default: int, departs: bool
) -> None:
    obj = _vllm()
    pod = _pod(priorityClassName="some-class", priority=priority)
    got = departure(GroupPod.read(pod, "vllm-0-1"), obj, group_demand(obj), default)
    assert (got is not None) is departs, got
    assert got is None or f"gives it at most {default} (the cluster's default)" in got


def test_a_pod_let_through_is_not_judged_again() -> None:
    obj = _vllm()
    pod = lws_pod("vllm", 0, 1, gpu_limit=2, gated=False)
    assert departure(GroupPod.read(pod, "vllm-0-1"), obj, group_demand(obj)) is None


def _admitted() -> dict[str, Any]:
    rec = record(_vllm(), 0, admitted=True, pods=2, demand={"nvidia.com/gpu": "2"})
    rec["metadata"]["resourceVersion"] = "7"
    return rec


def _snap(pods: list[dict[str, Any]], records: list[dict[str, Any]]) -> Snapshot:
    obj = _vllm()
    return Snapshot(
        lwss=[obj],
        pods=pods,
        bound_pods=[],
        nodes=[node(f"n{i}").labels(pool="a").alloc(gpu=2).parsed() for i in range(2)],
        pools=read_pools([pool("a").obj()]),
        records=records,
        statefulsets=lws_statefulsets([obj], pods),
    )


def test_an_admitted_groups_worker_from_an_edited_statefulset_stays_gated_and_is_reported() -> None:
    leader = lws_pod("vllm", 0, 0, gated=False, node_name="n0", phase="Running")
    assert_held(
        _snap([leader, _pod(gpus=2)], [_admitted()]),
        Reason.NOT_AS_ADMITTED,
        "group 0 holds its admission into pool a: 2 nvidia.com/gpu; pod vllm-0-1 asks 2 nvidia.com/gpu, "
        "more than its role (worker) was admitted with (1 nvidia.com/gpu), and stays gated: change the "
        "LeaderWorkerSet, not its StatefulSets or pods",
    )


def test_a_new_group_is_admitted_and_its_pod_that_asks_more_stays_gated() -> None:
    actions = decide(_snap([lws_pod("vllm", 0, 0), _pod(gpus=2)], []))
    [admit] = actions.admit
    assert admit.group.gated == ("vllm-0",) and sorted(actions.steer) == [("default", "vllm-0")]


def test_the_kueue_backend_holds_such_a_pod_too() -> None:
    from test_backend_kueue import ADMITTED, FLAVOR, LQ, rec, vllm, workload

    obj = vllm(replicas=1, size=2)
    leader = lws_pod("vllm", 0, 0, pool=LQ, gated=False, node_name="n0", phase="Running")
    pods = [leader, lws_pod("vllm", 0, 1, pool=LQ, gpu_limit=2)]
    wl = workload(obj, 0, conditions=ADMITTED, flavors={"leader": "h100", "worker": "h100"})
    snap = KueueSnapshot([obj], pods, [rec(obj, 0, admitted=True)], [wl], [FLAVOR],
                         statefulsets=lws_statefulsets([obj], pods))  # fmt: skip
    acts = decide_kueue(snap)
    assert acts.ungate == ()
    [st] = acts.statuses
    assert (st.admitted, st.reason, st.warning) == (True, "NotAsAdmitted", True)
    assert "pod vllm-0-1 asks 2 nvidia.com/gpu, more than its role (worker)" in st.message


# ----- a group whose own pod stays not as admitted is given back (kueue) -----------------

_NOW = datetime(2026, 12, 1, 10, tzinfo=UTC)


def _kueue(
    made_ago: float, *, given_back: bool = False, leader: bool = True, workload_kept: bool = True
) -> Any:
    """Group 0 of vllm admitted by Kueue, its leader let through and bound; its worker made
    ``made_ago`` seconds before the pass from a worker StatefulSet edited to ask 2 GPUs.
    ``given_back``: its record says so (retry in 60 s); ``leader``: the leader still runs."""
    from test_backend_kueue import ADMITTED, FLAVOR, LQ, rec, vllm, workload

    obj = vllm(replicas=1, size=2)
    pods = [lws_pod("vllm", 0, 0, pool=LQ, gated=False, node_name="n0", phase="Running")] if leader else []
    worker = lws_pod("vllm", 0, 1, pool=LQ, gpu_limit=2)
    worker["metadata"]["creationTimestamp"] = (_NOW - timedelta(seconds=made_ago)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    pods.append(worker)
    record = rec(obj, 0, admitted=not given_back)
    if given_back:
        record["status"]["conditions"][0].update(reason="NotAsAdmitted", message="group 0 was given back")
        record["status"]["retryAt"] = "2026-12-01T10:01:00Z"
        record["status"]["retries"] = 1
    wl = (
        [workload(obj, 0, conditions=ADMITTED, flavors={"leader": "h100", "worker": "h100"})]
        if workload_kept
        else []
    )
    return KueueSnapshot(
        [obj], pods, [record], wl, [FLAVOR], statefulsets=lws_statefulsets([obj], pods), now=_NOW
    )


def test_kueue_within_the_grace_the_group_keeps_its_admission_and_the_pass_looks_again() -> None:
    acts = decide_kueue(_kueue(made_ago=2))
    [st] = acts.statuses
    assert (st.admitted, st.reason) == (True, "NotAsAdmitted")
    assert acts.stop == () and acts.ungate == ()
    assert acts.look_again == _NOW + timedelta(seconds=3)


def test_kueue_past_the_grace_the_group_is_given_back_its_pods_stopped_first() -> None:
    acts = decide_kueue(_kueue(made_ago=6))
    [st] = acts.statuses
    assert (st.admitted, st.reason, st.warning, st.retries) == (False, "NotAsAdmitted", True, 1)
    assert st.retry_at == "2026-12-01T10:01:00Z"
    assert st.message.startswith(
        "group 0 was given back, retried in 60 s: pod vllm-0-1 asks 2 nvidia.com/gpu"
    )
    assert acts.stop == (("default", "vllm-0"),)
    assert acts.delete_workloads == (), "Kueue's quota stays while its pods run"


@pytest.mark.parametrize(
    ("leader", "workload_kept", "stop", "delete"),
    [(True, True, True, False), (False, True, False, True), (False, False, False, False)],
    ids=["its-leader-runs", "none-left-its-workload-goes", "workload-gone-waits-its-retry"],
)
def test_kueue_a_given_back_group_stops_its_pods_then_gives_its_workload_back(
    leader: bool, workload_kept: bool, stop: bool, delete: bool
) -> None:
    acts = decide_kueue(_kueue(made_ago=30, given_back=True, leader=leader, workload_kept=workload_kept))
    assert bool(acts.stop) is stop and bool(acts.delete_workloads) is delete
    assert acts.ungate == () and acts.create_workloads == ()
    [st] = acts.statuses
    assert (st.admitted, st.reason, st.message) == (False, "NotAsAdmitted", "group 0 was given back")


def test_kueue_a_given_back_group_gets_a_new_workload_after_its_retry() -> None:
    snap = _kueue(made_ago=90, given_back=True, leader=False, workload_kept=False)
    acts = decide_kueue(replace(snap, now=_NOW + timedelta(seconds=61)))
    assert [g.key.index for g, _ in acts.create_workloads] == [0]

"""How long an admitted group may lack its pods before it is given back (``pools``): every
Pool has a deadline (10 minutes unless it says), pods never made count as missing, and
under ``LeaderReady`` the workers' time counts from the leader turning Ready."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from core_builders import lws, lws_pod, lws_statefulsets, node, pool, read_pools, record

from gatekeeper.core.backends.pools import Snapshot, decide
from gatekeeper.core.backends.pools.giveback import Deadline, deadline
from gatekeeper.core.model.lws import GroupPod

NS = "team"
T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _record(*, placed: bool = False, admitted_at: datetime | None = T) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if admitted_at is not None:
        status["admittedAt"] = _stamp(admitted_at)
    if placed:
        status["placedAt"] = _stamp(T + timedelta(seconds=5))
    return {"status": status}


def _leader(*, bound: bool = True, ready_after: float | None = None, live: bool = True) -> GroupPod:
    ready = _stamp(T + timedelta(seconds=ready_after)) if ready_after is not None and bound else ""
    return GroupPod("vllm-0", live, False, not bound, bound, 0, "v1", ready_since=ready)


@pytest.mark.parametrize(
    ("record_", "pods", "leader_first", "expected"),
    [
        (_record(), [], False, Deadline(T + timedelta(seconds=600), from_leader=False)),
        (_record(), [], True, Deadline(T + timedelta(seconds=600), from_leader=False)),  # never made
        (_record(), [_leader(bound=False)], True, Deadline(T + timedelta(seconds=600), from_leader=False)),
        (_record(), [_leader()], True, None),  # bound, loading its model: no deadline
        (_record(), [_leader()], False, Deadline(T + timedelta(seconds=600), from_leader=False)),
        (
            _record(),
            [_leader(ready_after=3600)],
            True,
            Deadline(T + timedelta(seconds=4200), from_leader=True),
        ),
        (
            _record(),
            [_leader(ready_after=-60)],
            True,
            Deadline(T + timedelta(seconds=600), from_leader=False),
        ),
        (
            _record(),
            [_leader(ready_after=30, live=False)],
            True,
            Deadline(T + timedelta(seconds=600), from_leader=False),
        ),
        (_record(placed=True), [], True, None),  # whole once since its admission
        (_record(admitted_at=None), [], False, None),
    ],
    ids=[
        "counted-from-admission",
        "leader-ready-no-pods",
        "leader-ready-leader-unbound",
        "leader-ready-leader-loading",
        "leader-created-leader-loading",
        "leader-ready-from-ready",
        "ready-before-admission",
        "leader-finished",
        "placed",
        "no-admission-time",
    ],
)
def test_the_deadline(
    record_: dict[str, Any], pods: list[GroupPod], leader_first: bool, expected: Deadline | None
) -> None:
    assert deadline(record_, pods, 600, leader_first=leader_first) == expected


def test_a_bound_leaders_ready_time_is_read_from_its_condition() -> None:
    pod = lws_pod("vllm", 0, 0, namespace=NS, pool="a", gated=False, node_name="n0", phase="Running")
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-01T12:00:01Z"},
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T12:30:00Z"},
    ]
    assert GroupPod.read(pod, "vllm-0").ready_since == "2026-12-01T12:30:00Z"
    pod["status"]["conditions"][1]["status"] = "False"
    assert GroupPod.read(pod, "vllm-0").ready_since == ""
    worker = lws_pod("vllm", 0, 1, namespace=NS, pool="a", gated=False, node_name="n1", phase="Running")
    worker["status"]["conditions"] = pod["status"]["conditions"]
    assert GroupPod.read(worker, "vllm-0-1").ready_since == "", "only the leader's is read"


def _scene(*, after: float, leader: str, startup: str | None, timeout: str | None = None) -> Snapshot:
    """vllm: 1 group of 2 one-GPU pods admitted at T into pool a (4 nodes). ``leader``: "none"
    (never made), "unbound", "loading" (bound, not Ready), "ready" (Ready at T + 3600 s);
    its worker is never made. The pass runs ``after`` seconds after T."""
    vllm = lws("vllm", NS).pool("a").uid("u-1").size(2).replicas(1).worker(gpu_limit=1).obj()
    if startup:
        vllm["spec"]["startupPolicy"] = startup
    p = pool("a").quota(gpu=4).obj()
    if timeout is not None:
        p["spec"]["admissionTimeout"] = timeout
    pods = []
    if leader != "none":
        pod = lws_pod(
            "vllm", 0, 0, namespace=NS, pool="a", gated=False, node_name=None if leader == "unbound" else "n0"
        )
        if leader == "ready":
            pod["status"]["conditions"] = [
                {"type": "Ready", "status": "True", "lastTransitionTime": _stamp(T + timedelta(seconds=3600))}
            ]
        pods.append(pod)
    rec = record(vllm, 0, admitted=True, pool="a", placement={"0": "n0", "1": "n1"}, version="5")
    rec["status"].update(admittedAt=_stamp(T), demand={"nvidia.com/gpu": "2"}, pods=2)
    return Snapshot(
        lwss=[vllm],
        pods=pods,
        bound_pods=[q for q in pods if q["spec"].get("nodeName")],
        nodes=[node(f"n{i}").labels(pool="a").alloc(gpu=1).parsed() for i in range(4)],
        pools=read_pools([p]),
        records=[rec],
        statefulsets=lws_statefulsets([vllm], pods),
        now=T + timedelta(seconds=after),
        retry_seconds=60,
    )


@pytest.mark.parametrize(
    ("after", "leader", "startup", "given_back", "words"),
    [
        (599, "none", None, False, ""),
        (601, "none", None, True, "got 0 of its 2 pods bound within 600 s of its admission"),
        (601, "unbound", "LeaderReady", True, "got 0 of its 2 pods bound within 600 s of its admission"),
        (7200, "loading", "LeaderReady", False, ""),  # two hours loading its model: kept
        (601, "loading", None, True, "got 1 of its 2 pods bound within 600 s of its admission"),
        (4199, "ready", "LeaderReady", False, ""),
        (
            4201,
            "ready",
            "LeaderReady",
            True,
            "got 1 of its 2 pods bound within 600 s of its leader turning Ready",
        ),
    ],
)
def test_a_group_that_cannot_start_is_given_back_by_default_and_a_loading_leader_is_not(
    after: float, leader: str, startup: str | None, given_back: bool, words: str
) -> None:
    actions = decide(_scene(after=after, leader=leader, startup=startup))
    assert bool(actions.give_back) is given_back
    if given_back:
        assert words in actions.give_back[0].message, actions.give_back[0].message


def test_the_pass_looks_again_when_the_workers_are_due() -> None:
    actions = decide(_scene(after=3700, leader="ready", startup="LeaderReady"))
    assert actions.look_again == T + timedelta(seconds=4200)
    assert decide(_scene(after=3000, leader="loading", startup="LeaderReady")).look_again is None

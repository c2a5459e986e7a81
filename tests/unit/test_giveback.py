"""A group that cannot get all its nodes is given back: the Pool's ``spec.admissionTimeout``,
the pure decision (which groups time out, which wait for their retry, which stray pods are
stopped) and the writes that carry it out (record first, then the pods by UID)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from core_builders import lws, lws_pod, lws_statefulsets, node, pool, read_pools, record

from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools import Actions, PassInputs, Snapshot, decide, plan_writes
from gatekeeper.core.backends.pools.giveback import (
    GIVE_BACK_RETRY_MAX_SECONDS,
    give_back_status,
    retry_delay,
)
from gatekeeper.core.model.pool import DEFAULT_ADMISSION_TIMEOUT, parse_duration, parse_pool
from gatekeeper.core.writes.plan import Memory, Op, walk

ROOT = Path(__file__).resolve().parents[2]

NS = "team"
ADMITTED_AT = datetime(2026, 12, 1, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("120s", 120), ("2m", 120), ("1h30m", 5400), ("1m30s", 90), ("1s", 1), ("24h", 86400)],
)
def test_admission_timeout_is_a_bounded_duration(raw: str, seconds: int) -> None:
    assert parse_duration(raw, "spec.admissionTimeout") == seconds
    obj = pool("a").obj()
    obj["spec"]["admissionTimeout"] = raw
    assert parse_pool(obj).admission_timeout == seconds


@pytest.mark.parametrize("raw", ["0s", "25h", "86401s", "", "2 m", "120", "abc", "1d", 120, None, "-1s"])
def test_an_unreadable_or_unbounded_admission_timeout_is_refused(raw: Any) -> None:
    with pytest.raises(ValueError, match=r"spec\.admissionTimeout"):
        parse_duration(raw, "spec.admissionTimeout")


def test_a_pool_without_admission_timeout_gives_back_after_the_default() -> None:
    """The core's default is the CRD's: an admin reading the Pool sees what holds."""
    assert parse_pool(pool("a").obj()).admission_timeout == DEFAULT_ADMISSION_TIMEOUT == 600
    crd = yaml.safe_load((ROOT / "gatekeeper" / "crds" / "pools.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert parse_duration(spec["properties"]["admissionTimeout"]["default"], "x") == DEFAULT_ADMISSION_TIMEOUT
    obj = pool("a").obj()
    obj["spec"]["admissionTimeout"] = "0s"
    with pytest.raises(ValueError, match=r"Pool a: spec.admissionTimeout: '0s' is 0 s"):
        parse_pool(obj)


@pytest.mark.parametrize(
    ("retries", "base", "delay"),
    [(1, 60, 60), (2, 60, 120), (3, 60, 240), (6, 60, 1800), (1000, 60, 1800), (0, 60, 60), (1, 0, 1)],
)
def test_retry_delay_doubles_up_to_thirty_minutes(retries: int, base: int, delay: int) -> None:
    assert retry_delay(retries, base) == delay
    assert retry_delay(retries, base) <= GIVE_BACK_RETRY_MAX_SECONDS


# ----- the decision -----------------------------------------------------------------------


def _scene(
    *,
    after: float,
    bound: int = 1,
    timeout: str | None = "120s",
    reason: str = "Admitted",
    retries: int | None = None,
    gated_worker: bool = False,
) -> tuple[Snapshot, dict[str, Any]]:
    """vllm: 2 groups of 2 one-GPU pods, on a pool of 4 one-GPU nodes (quota 4). Group 0 is
    whole; group 1 was admitted at ADMITTED_AT and ``bound`` of its pods are bound; the pass
    runs ``after`` seconds later."""
    vllm = lws("vllm", NS).pool("a").uid("u-1").size(2).replicas(2).worker(gpu_limit=1).obj()
    p = pool("a").quota(gpu=4).obj()
    if timeout is not None:
        p["spec"]["admissionTimeout"] = timeout
    pods = [
        lws_pod("vllm", 0, 0, namespace=NS, pool="a", gated=False, node_name="n0", phase="Running"),
        lws_pod("vllm", 0, 1, namespace=NS, pool="a", gated=False, node_name="n1", phase="Running"),
        lws_pod("vllm", 1, 0, namespace=NS, pool="a", gated=False, node_name="n2" if bound >= 1 else None),
        lws_pod(
            "vllm",
            1,
            1,
            namespace=NS,
            pool="a",
            gated=gated_worker,
            node_name="n3" if bound >= 2 else None,
        ),
    ]
    records = [
        record(vllm, 0, admitted=True, pool="a", placement={"0": "n0", "1": "n1"}, version="5"),
        record(vllm, 1, admitted=True, pool="a", placement={"0": "n2", "1": "n3"}, version="7"),
    ]
    for r in records:
        r["status"]["admittedAt"] = ADMITTED_AT.strftime("%Y-%m-%dT%H:%M:%SZ")
        r["status"]["demand"] = {"nvidia.com/gpu": "2"}
        r["status"]["pods"] = 2
    records[1]["status"]["conditions"][0]["reason"] = reason
    if retries is not None:
        records[1]["status"]["retries"] = retries
    snap = Snapshot(
        lwss=[vllm],
        pods=pods,
        bound_pods=[q for q in pods if q["spec"].get("nodeName")],
        nodes=[node(f"n{i}").labels(pool="a").alloc(gpu=1).parsed() for i in range(4)],
        pools=read_pools([p]),
        records=records,
        statefulsets=lws_statefulsets([vllm], pods),
        now=ADMITTED_AT + timedelta(seconds=after),
        retry_seconds=60,
    )
    return snap, records[1]


def test_a_group_not_all_bound_within_the_timeout_is_given_back() -> None:
    snap, _ = _scene(after=121)
    actions = decide(snap)
    [give] = actions.give_back
    assert (give.group.key.index, give.pods, give.retries) == (1, ("vllm-1", "vllm-1-1"), 1)
    assert (
        give.message
        == "group 1 got 1 of its 2 pods bound within 120 s of its admission; given back, retried in 60 s"
    )
    assert snap.now is not None and give.retry_at == snap.now + timedelta(seconds=60)
    # Not ungated, not admitted, not planned; its charge is held until its pods are gone.
    assert actions.ungate == () and actions.admit == () and actions.waiting == ()
    assert actions.pools["a"].admitted == 2 and actions.pools["a"].free == {"nvidia.com/gpu": 0}


@pytest.mark.parametrize(
    ("after", "bound", "timeout", "reason"),
    [
        (119, 1, "120s", "Admitted"),  # time left
        (121, 2, "120s", "Admitted"),  # whole
        (599, 1, None, "Admitted"),  # no timeout on the pool: the default, 10 minutes
        (121, 1, "120s", "TemplateChanged"),  # waits for its old pods, not for nodes
        (121, 1, "120s", "NotMadeByLeaderWorkerSet"),
    ],
)
def test_no_give_back(after: float, bound: int, timeout: str | None, reason: str) -> None:
    snap, _ = _scene(after=after, bound=bound, timeout=timeout, reason=reason)
    assert decide(snap).give_back == ()


def test_no_give_back_without_the_time_of_the_pass() -> None:
    snap, _ = _scene(after=10_000)
    assert decide(replace(snap, now=None)).give_back == ()


def test_a_second_give_back_doubles_the_delay_and_names_what_is_left() -> None:
    snap, _ = _scene(after=300, bound=0, retries=2)
    [give] = decide(snap).give_back
    assert give.retries == 3
    assert (
        give.message
        == "group 1 got 0 of its 2 pods bound within 120 s of its admission; given back, retried in 240 s"
    )


def test_only_ungated_pods_are_deleted() -> None:
    snap, _ = _scene(after=121, gated_worker=True)
    [give] = decide(snap).give_back
    assert give.pods == ("vllm-1",)


def _given_back(snap: Snapshot, retry_in: float, stray: bool = False) -> Snapshot:
    """The pass after the give-back: group 1's record says so, its pods are new and gated
    (``stray``: its leader made ungated by a webhook whose table still had it)."""
    status = give_back_status(decide(snap).give_back[0], snap.records[1]["status"], "t")
    records = [snap.records[0], {**snap.records[1], "status": {**snap.records[1]["status"], **status}}]
    now = snap.now or ADMITTED_AT
    records[1]["status"]["retryAt"] = (now + timedelta(seconds=retry_in)).strftime("%Y-%m-%dT%H:%M:%SZ")
    pods = [
        *snap.pods[:2],
        lws_pod("vllm", 1, 0, namespace=NS, pool="a", gated=not stray),
        lws_pod("vllm", 1, 1, namespace=NS, pool="a"),
    ]
    return replace(
        snap,
        records=records,
        pods=pods,
        bound_pods=pods[:2],
        statefulsets=lws_statefulsets(list(snap.lwss), pods),
    )


def test_a_given_back_group_is_not_planned_before_its_retry() -> None:
    snap, _ = _scene(after=121)
    later = _given_back(snap, retry_in=30)
    actions = decide(later)
    assert actions.admit == () and actions.waiting == () and actions.ungate == ()
    assert actions.give_back == () and actions.stop == ()


def test_a_given_back_group_is_planned_again_once_its_retry_is_due() -> None:
    snap, _ = _scene(after=121)
    later = _given_back(snap, retry_in=-1)
    actions = decide(later)
    assert [a.group.key.index for a in actions.admit] == [1]


def test_a_pod_of_a_given_back_group_made_ungated_is_deleted() -> None:
    snap, _ = _scene(after=121)
    actions = decide(_given_back(snap, retry_in=30, stray=True))
    assert actions.stop == ((NS, "vllm-1"),)


def test_retries_are_cleared_and_the_group_placed_once_it_is_whole() -> None:
    snap, _ = _scene(after=10, bound=2, retries=3)
    actions = decide(snap)
    names = [r["metadata"]["name"] for r in snap.records]
    assert actions.settled == ((NS, names[0]), (NS, names[1])), "both whole: placed from now"
    snap, _ = _scene(after=10, bound=1, retries=3)
    assert decide(snap).settled == ((NS, names[0]),), "group 1 is not whole yet"
    snap, _ = _scene(after=10, bound=2, timeout=None)
    assert decide(snap).settled == ((NS, names[0]), (NS, names[1])), "the default timeout holds too"


def _restarting(placed_at: datetime | None) -> Snapshot:
    """Group 0, admitted at ADMITTED_AT on a pool with a 120 s timeout, a day later: its worker
    made again (a restart), let through on the kept reservation, not bound yet."""
    snap, _ = _scene(after=86_400, bound=2)
    pods = []
    for p in snap.pods:
        if p["metadata"]["name"] == "vllm-0-1":
            spec = {k: v for k, v in p["spec"].items() if k != "nodeName"}
            p = {**p, "spec": spec, "status": {"phase": "Pending"}}
        pods.append(p)
    if placed_at is not None:
        snap.records[0]["status"]["placedAt"] = placed_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return replace(snap, pods=pods, bound_pods=[q for q in pods if q["spec"].get("nodeName")])


def test_a_group_placed_once_is_not_given_back_when_it_restarts() -> None:
    assert decide(_restarting(ADMITTED_AT + timedelta(seconds=30))).give_back == ()
    # Placed under an earlier admission only, or never: the timeout still counts from admission.
    [give] = decide(_restarting(ADMITTED_AT - timedelta(seconds=30))).give_back
    assert give.group.key.index == 0
    assert [g.group.key.index for g in decide(_restarting(None)).give_back] == [0]


# ----- the writes -------------------------------------------------------------------------


def _plan(snap: Snapshot) -> tuple[Actions, Any]:
    actions = decide(snap)
    return actions, plan_writes(actions, PassInputs(snap, Memory(), snap.now or ADMITTED_AT, 100.0))


def test_the_record_is_given_back_first_then_its_pods_are_deleted_by_uid() -> None:
    snap, rec = _scene(after=121)
    _, plan = _plan(snap)
    [write] = [w for w in walk(plan) if w.tag == "give-back"]
    assert write.op is Op.MERGE_STATUS and write.name == rec["metadata"]["name"]
    assert write.guard == "7"  # the version the decision was made on
    cond = write.body["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", str(Reason.ADMISSION_TIMEOUT))
    assert cond["message"].startswith("group 1 got 1 of its 2 pods bound within 120 s of its admission")
    assert write.body["retryAt"] == "2026-12-01T10:03:01Z"
    assert (write.body["retries"], write.body["placement"], write.body["admittedAt"]) == (1, None, None)
    assert write.body["placedAt"] is None
    deletes = [w for w in write.then if w.op is Op.DELETE]
    assert [(w.name, w.uid) for w in deletes] == [
        ("vllm-1", f"pod/{NS}/vllm-1"),
        ("vllm-1-1", f"pod/{NS}/vllm-1-1"),
    ]
    events = [w for w in write.then if w.op is Op.EVENT]
    assert [(e.body.reason, e.body.warning) for e in events] == [("AdmissionTimeout", True)]
    # No pod is deleted except after the record's write.
    top = [w for stage in plan for w in stage]
    assert not any(w.op is Op.DELETE for w in top)


def test_admission_clears_retry_at_and_keeps_retries() -> None:
    snap, _ = _scene(after=121)
    later = _given_back(snap, retry_in=-1)
    _, plan = _plan(later)
    [admit] = [w for w in walk(plan) if w.tag == "admit"]
    assert admit.body["retryAt"] is None and admit.body["placedAt"] is None
    assert "retries" not in admit.body


def test_the_pass_through_table_drops_a_given_back_group() -> None:
    from gatekeeper.core.backends.pools import pass_through

    snap, _ = _scene(after=121)
    later = _given_back(snap, retry_in=30)
    idx = pass_through.index(later.lwss, later.pods, later.statefulsets, later.pools.ok, _demand)
    assert idx.entry(later.records[1]) is None
    assert idx.entry(later.records[0]) is not None  # the whole group stays in the table


def _demand(obj: Any) -> object:
    from gatekeeper.core.model.groups import DemandMemo

    return DemandMemo().demand(obj)


def test_a_whole_group_is_marked_placed_at_the_time_of_the_pass() -> None:
    snap, _ = _scene(after=10, bound=2)
    _, plan = _plan(snap)
    settled = [w for w in walk(plan) if w.tag == "settled"]
    assert [w.body for w in settled] == [{"retries": None, "placedAt": "2026-12-01T10:00:10Z"}] * 2


# ----- a group whose own pod is not as admitted --------------------------------------------


def _departed(*, made_ago: float, admitted: bool = True, timeout: str | None = None) -> Snapshot:
    """Group 1 of vllm admitted whole, its leader bound; its worker made again ``made_ago``
    seconds before the pass from a worker StatefulSet edited by hand to ask 2 GPUs (gated)."""
    snap, rec = _scene(after=3600, bound=2, timeout=timeout)
    made = (snap.now or ADMITTED_AT) - timedelta(seconds=made_ago)
    pods = []
    for p in snap.pods:
        if p["metadata"]["name"] == "vllm-1-1":
            p = lws_pod("vllm", 1, 1, namespace=NS, pool="a", gated=True, gpu_limit=2)
            p["metadata"]["creationTimestamp"] = made.strftime("%Y-%m-%dT%H:%M:%SZ")
        pods.append(p)
    rec["status"]["placedAt"] = (ADMITTED_AT + timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    if not admitted:
        rec["status"]["conditions"][0].update(status="False", reason="WaitingForQuota")
    bound = [q for q in pods if q["spec"].get("nodeName")]
    return replace(snap, pods=pods, bound_pods=bound, statefulsets=lws_statefulsets(snap.lwss, pods))


def test_a_group_whose_own_pod_is_not_as_admitted_is_given_back_after_a_grace() -> None:
    snap = _departed(made_ago=6)
    actions = decide(snap)
    [give] = actions.give_back
    assert (give.group.key.index, give.reason, give.pods, give.retries) == (
        1,
        Reason.NOT_AS_ADMITTED,
        ("vllm-1",),  # its bound leader; the gated worker goes with its StatefulSet
        1,
    )
    assert give.message.startswith("group 1 was given back, retried in 60 s: pod vllm-1-1 asks ")
    assert "more than its role (worker) was admitted with" in give.message
    assert "for 6 s" in give.message
    # Its words are the give-back's: no second write restating the record in the same pass.
    assert actions.strangers == () and actions.ungate == ()
    assert actions.look_again is None


@pytest.mark.parametrize("timeout", [None, "2h"], ids=["no-timeout", "timeout-not-due"])
def test_within_the_grace_the_pod_stays_gated_and_the_pass_looks_again_when_it_ends(
    timeout: str | None,
) -> None:
    snap = _departed(made_ago=2, timeout=timeout)
    actions = decide(snap)
    assert actions.give_back == ()
    assert [s.reason for s in actions.strangers] == [Reason.NOT_AS_ADMITTED]
    assert (NS, "vllm-1-1") not in actions.ungate
    assert snap.now is not None and actions.look_again == snap.now + timedelta(seconds=3)


def test_a_group_not_admitted_is_not_given_back_for_a_pod_not_as_admitted() -> None:
    actions = decide(_departed(made_ago=600, admitted=False))
    assert actions.give_back == () and actions.look_again is None


def test_the_give_back_for_a_pod_not_as_admitted_says_so_on_the_record_and_in_an_event() -> None:
    from gatekeeper.core.backends.pools.giveback import given_back

    snap = _departed(made_ago=6)
    _, plan = _plan(snap)
    [write] = [w for w in walk(plan) if w.tag == "give-back"]
    cond = write.body["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", "NotAsAdmitted")
    assert write.body["retryAt"] == "2026-12-01T11:01:00Z"
    assert given_back({"status": write.body})
    assert [w.name for w in write.then if w.op is Op.DELETE] == ["vllm-1"]
    assert [(e.body.reason, e.body.warning) for e in write.then if e.op is Op.EVENT] == [
        ("NotAsAdmitted", True)
    ]
    assert not [w for w in walk(plan) if w.tag == "restate"]


# ----- the charge of a given-back group follows its pods ------------------------------------


def _terminating_after_give_back(*, leader_gone: bool) -> Snapshot:
    """Group 1 given back (retry in 30 s) while its bound leader still terminates (a grace
    period); another LWS's group of 2 GPUs waits. Pool ``a``: quota 4 GPUs, 6 one-GPU nodes
    (room on the nodes, so only the quota holds the other group)."""
    snap, _ = _scene(after=121)
    later = _given_back(snap, retry_in=30)
    leader = lws_pod("vllm", 1, 0, namespace=NS, pool="a", gated=False, node_name="n2", phase="Running")
    leader["metadata"]["deletionTimestamp"] = "2026-12-01T10:02:01Z"
    other = lws("other", NS).pool("a").uid("u-2").size(2).replicas(1).worker(gpu_limit=1).obj()
    other_pods = [lws_pod("other", 0, w, namespace=NS, pool="a") for w in (0, 1)]
    pods = [*later.pods[:2], *([] if leader_gone else [leader]), later.pods[3], *other_pods]
    return replace(
        later,
        lwss=[*later.lwss, other],
        pods=pods,
        bound_pods=[p for p in pods if p["spec"].get("nodeName")],
        nodes=[node(f"n{i}").labels(pool="a").alloc(gpu=1).parsed() for i in range(6)],
        statefulsets=lws_statefulsets([*later.lwss, other], pods),
    )


def test_the_pass_that_gives_a_group_back_admits_no_other_on_its_quota() -> None:
    snap, _ = _scene(after=121)
    other = lws("other", NS).pool("a").uid("u-2").size(2).replicas(1).worker(gpu_limit=1).obj()
    pods = [*snap.pods, *(lws_pod("other", 0, w, namespace=NS, pool="a") for w in (0, 1))]
    more = replace(
        snap,
        lwss=[*snap.lwss, other],
        pods=pods,
        nodes=[node(f"n{i}").labels(pool="a").alloc(gpu=1).parsed() for i in range(6)],
        statefulsets=lws_statefulsets([*snap.lwss, other], pods),
    )
    actions = decide(more)
    assert [g.group.key.index for g in actions.give_back] == [1]
    assert actions.admit == (), "admitted on the quota of a group whose pods are still there"


def test_a_given_back_group_holds_its_charge_until_its_let_through_pods_are_gone() -> None:
    """Given back, the group's reservation is not free while a pod let through on it still
    terminates: another group waits for the quota, and is admitted once that pod is gone."""
    held = decide(_terminating_after_give_back(leader_gone=False))
    assert held.admit == (), "admitted over the quota while the given-back leader terminates"
    [wait] = [w for w in held.waiting if w.group.key.name == "other"]
    assert wait.reason is Reason.WAITING_FOR_QUOTA
    assert held.pools["a"].admitted == 2  # group 0, and group 1 until its pod is gone
    gone = decide(_terminating_after_give_back(leader_gone=True))
    assert [a.group.key.name for a in gone.admit] == ["other"]


@pytest.mark.parametrize(
    ("after", "bound", "looks"),
    [(100, 1, 20.0), (121, 1, None), (100, 2, None)],
    ids=["time-left", "given-back-now", "whole"],
)
def test_the_pass_looks_again_when_the_admission_timeout_falls_due(
    after: float, bound: int, looks: float | None
) -> None:
    snap, _ = _scene(after=after, bound=bound)
    actions = decide(snap)
    assert snap.now is not None
    assert actions.look_again == (snap.now + timedelta(seconds=looks) if looks is not None else None)

"""Borrowing between the Pools of one cohort (``spec.cohort``, ``spec.lendingLimit``,
``spec.borrowingLimit``) and a lender taking its room back
(``spec.preemption.reclaimWithinCohort``): who borrows from whom, within which limits, where a
borrower's pods run, what its record and the Pools' statuses say, and which borrowers a lender
preempts."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from core_builders import lws, lws_pod, lws_statefulsets, node, pool, read_pools, record, waiting

from gatekeeper.core.admission.queue import AdmittedGroup
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools import PassInputs, Snapshot, decide, plan_writes
from gatekeeper.core.backends.pools.cohort import lenders, over, reclaims
from gatekeeper.core.backends.pools.pass_through import index
from gatekeeper.core.backends.pools.planner import plan
from gatekeeper.core.model.demand import group_demand
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.pool import ReclaimWithinCohort, parse_pool
from gatekeeper.core.writes.plan import Memory, walk

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
CLASSES = {"low": 10, "high": 1000}
GPU = "nvidia.com/gpu"


def _at(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Lws:
    """One LWS of the scene, in pool ``pool``: its groups ``admitted`` (group index -> its nodes,
    and the pool that lent it room, "" for none); every other group below ``replicas`` waits."""

    name: str
    pool: str
    klass: str = "low"
    replicas: int = 1
    size: int = 2
    admitted: dict[int, tuple[tuple[str, ...], str]] = field(default_factory=dict)
    namespace: str = "team"


def _pool(name: str, **spec: Any) -> dict[str, Any]:
    p = pool(name).quota(gpu=2).obj()
    p["spec"].update({"cohort": "gpu", **spec})
    if name == "b":
        p["spec"]["tolerations"] = [
            {"key": "pool", "operator": "Equal", "value": "b", "effect": "NoSchedule"}
        ]
    return p


def _scene(
    *lwss: Lws, a: dict[str, Any] | None = None, b: dict[str, Any] | None = None, b_nodes: int = 2
) -> Snapshot:
    """Pools ``a`` and ``b`` of cohort ``gpu``, each 2 GPUs (unless ``b`` says) on 1-GPU nodes
    (``a0``, ``a1``, ``b0``...); ``b``'s tolerate its taint. Groups of ``size`` 1-GPU pods."""
    objs, pods, records = [], [], []
    for one in lwss:
        obj = (
            lws(one.name, one.namespace)
            .pool(one.pool)
            .uid(f"u-{one.name}")
            .size(one.size)
            .replicas(one.replicas)
            .worker(gpu_limit=1)
            .priority_class(one.klass)
            .obj()
        )
        objs.append(obj)
        for g in range(one.replicas):
            placed = one.admitted.get(g)
            for w in range(one.size):
                on = placed[0][w] if placed else None
                pod = lws_pod(
                    one.name,
                    g,
                    w,
                    pool=one.pool,
                    namespace=one.namespace,
                    gated=placed is None,
                    node_name=on,
                    phase="Running" if on else "Pending",
                    gpu_limit=1,
                )
                pod["spec"]["priorityClassName"] = one.klass
                pods.append(pod)
            if placed is not None:
                where = {str(i): n for i, n in enumerate(placed[0])}
                r = record(obj, g, admitted=True, pool=one.pool, placement=where)
                r["metadata"]["resourceVersion"] = f"{one.name}-{g}"
                r["status"].update(admittedAt=_at(600), demand={GPU: str(one.size)}, pods=one.size)
                if placed[1]:
                    r["status"]["borrowedFrom"] = placed[1]
                records.append(r)
    nodes = [node(f"a{i}").labels(pool="a").alloc(gpu=1).parsed() for i in range(2)]
    nodes += [node(f"b{i}").labels(pool="b").alloc(gpu=1).parsed() for i in range(b_nodes)]
    return Snapshot(
        lwss=objs,
        pods=pods,
        bound_pods=[q for q in pods if q["spec"].get("nodeName")],
        nodes=nodes,
        pools=read_pools([_pool("a", **(a or {})), _pool("b", **(b or {}))]),
        records=records,
        statefulsets=lws_statefulsets(objs, pods),
        priorities=CLASSES,
        now=NOW,
    )


def _key(name: str, index: int = 0) -> GroupKey:
    return GroupKey("team", name, index)


# ----- the fields ---------------------------------------------------------------------


def test_the_cohort_fields_are_parsed_and_need_a_cohort() -> None:
    parsed = parse_pool(_pool("a", lendingLimit={GPU: 1}, borrowingLimit={GPU: "3"}))
    assert (parsed.cohort, parsed.lending_limit, parsed.borrowing_limit) == ("gpu", {GPU: 1}, {GPU: 3})
    assert parsed.reclaim_within_cohort is ReclaimWithinCohort.NEVER
    assert parse_pool(pool("a").obj()).cohort == ""
    for bad, match in (
        ({"lendingLimit": {GPU: 1}}, "spec.lendingLimit: only with spec.cohort"),
        ({"borrowingLimit": {GPU: 1}}, "spec.borrowingLimit: only with spec.cohort"),
        ({"preemption": {"reclaimWithinCohort": "Any"}}, "reclaimWithinCohort: only with spec.cohort"),
        ({"cohort": "GPU pool"}, "spec.cohort: expected a DNS label"),
        ({"cohort": "x" * 64}, "spec.cohort: expected a DNS label"),
        ({"cohort": "gpu", "reservation": "odcr"}, "spec.cohort: only a pool whose own nodes"),
        (
            {"cohort": "gpu", "nodeFit": "QuotaOnly", "quota": {GPU: 1}},
            "spec.cohort: only a pool whose own nodes",
        ),
        (
            {"cohort": "gpu", "lendingLimit": {GPU: "-1"}},
            r"spec.lendingLimit\[nvidia.com/gpu\]: '-1' is negative",
        ),
        (
            {"cohort": "gpu", "preemption": {"reclaimWithinCohort": "Some"}},
            "is not one of Never, LowerPriority, Any",
        ),
    ):
        obj = pool("a").obj()
        obj["spec"].update(bad)
        with pytest.raises(ValueError, match=match):
            parse_pool(obj)


@pytest.mark.parametrize(
    ("limit", "held", "ask", "passed"),
    [
        (None, {GPU: 100}, {GPU: 8}, ""),
        ({GPU: 8}, {GPU: 4}, {GPU: 4}, ""),
        ({GPU: 8}, {GPU: 5}, {GPU: 4}, GPU),
        ({"cpu": 1000}, {GPU: 50}, {GPU: 8}, ""),
        ({GPU: 0}, {}, {"cpu": 100}, ""),
    ],
)
def test_a_limit_caps_only_the_resources_it_names(
    limit: dict[str, int] | None, held: dict[str, int], ask: dict[str, int], passed: str
) -> None:
    assert over(limit, held, ask) == passed


def test_a_pool_borrows_from_the_others_of_its_cohort_by_name() -> None:
    pools = [parse_pool(_pool(n)) for n in "cab"] + [parse_pool(pool("d").obj())]
    assert [p.name for p in lenders(pools, pools[1])] == ["b", "c"]
    assert lenders(pools, pools[3]) == [], "a pool of no cohort borrows from none"


@pytest.mark.parametrize(
    ("policy", "borrower", "waiting", "taken"),
    [
        (ReclaimWithinCohort.NEVER, 10, 1000, False),
        (ReclaimWithinCohort.LOWER_PRIORITY, 10, 1000, True),
        (ReclaimWithinCohort.LOWER_PRIORITY, 1000, 1000, False),
        (ReclaimWithinCohort.ANY, 5000, 10, True),
    ],
)
def test_which_borrowers_a_lender_reclaims(
    policy: ReclaimWithinCohort, borrower: int, waiting: int, taken: bool
) -> None:
    lender = parse_pool(_pool("b", preemption={"reclaimWithinCohort": str(policy)}))
    assert reclaims(lender, borrower, waiting) is taken


# ----- borrowing ----------------------------------------------------------------------


def test_a_group_its_pool_has_no_room_for_borrows_the_room_of_another_pool_of_its_cohort() -> None:
    full = Lws("full", "a", admitted={0: (("a0", "a1"), "")})
    more = Lws("more", "a")
    snap = _scene(full, more)
    actions = decide(snap)
    [admit] = actions.admit
    assert (admit.group.key, admit.lender, set(admit.nodes)) == (_key("more"), "b", {"b0", "b1"})
    steered = actions.steer[("team", "more-0")]
    assert steered.node_selector == {"pool": "b"}, "its pods run on the lender's nodes"
    assert {"key": "pool", "operator": "Equal", "value": "b", "effect": "NoSchedule"} in steered.tolerations
    a, b = actions.pools["a"], actions.pools["b"]
    assert (a.borrowed, a.lent, a.used[GPU]) == ({GPU: 2}, {}, 2)
    assert (b.lent, b.borrowed, b.used[GPU], b.free[GPU]) == ({GPU: 2}, {}, 2, 0)
    writes = list(walk(plan_writes(actions, PassInputs(snap, Memory(), NOW, 0.0))))
    body = next(w.body for w in writes if w.tag == "admit" and w.name.startswith("more"))
    assert body["pool"] == "a" and body["borrowedFrom"] == "b"
    said = body["conditions"][0]["message"]
    assert said.startswith(
        "group 0 admitted into pool a (borrowed from pool b of its cohort): 2 nvidia.com/gpu"
    )
    status = next(w.body for w in writes if w.tag == "pool" and w.name == "b")
    assert (status["lent"], status["borrowed"]) == ({GPU: "2"}, {})


def test_a_borrowed_admission_is_held_in_the_lenders_room_on_the_next_pass() -> None:
    full = Lws("full", "a", admitted={0: (("a0", "a1"), "")})
    more = Lws("more", "a", admitted={0: (("b0", "b1"), "b")})
    own = Lws("own", "b")
    actions = decide(_scene(full, more, own))
    assert actions.admit == () and actions.give_back == ()
    [wait] = actions.waiting
    assert (wait.group.key, wait.reason) == (_key("own"), Reason.WAITING_FOR_QUOTA)
    assert actions.pools["b"].lent == {GPU: 2} and actions.pools["a"].borrowed == {GPU: 2}


def test_a_lenders_own_groups_come_first_in_the_pass() -> None:
    full = Lws("full", "a", klass="high", admitted={0: (("a0", "a1"), "")})
    early = Lws("early", "a", klass="high")
    own = Lws("own", "b", klass="low")
    actions = decide(_scene(full, early, own))
    assert [(a.group.key.name, a.lender) for a in actions.admit] == [("own", "")]
    [wait] = actions.waiting
    assert wait.group.key == _key("early") and wait.position == 1


@pytest.mark.parametrize(
    ("a", "b", "borrows"),
    [
        ({}, {}, True),
        ({"borrowingLimit": {GPU: 1}}, {}, False),
        ({"borrowingLimit": {GPU: 2}}, {}, True),
        ({}, {"lendingLimit": {GPU: 1}}, False),
        ({}, {"lendingLimit": {"cpu": 1}}, True),
        ({}, {"cohort": "other"}, False),
    ],
    ids=[
        "no-limits",
        "borrowing-limit",
        "borrowing-limit-enough",
        "lending-limit",
        "limit-of-another-resource",
        "other-cohort",
    ],
)
def test_limits_and_cohorts(a: dict[str, Any], b: dict[str, Any], borrows: bool) -> None:
    full = Lws("full", "a", admitted={0: (("a0", "a1"), "")})
    actions = decide(_scene(full, Lws("more", "a"), a=a, b=b))
    assert [x.lender for x in actions.admit] == (["b"] if borrows else [])
    if not borrows:
        [wait] = actions.waiting
        assert wait.reason is Reason.WAITING_FOR_QUOTA and wait.position == 1


@pytest.mark.parametrize(("strategy", "lends"), [("StrictFIFO", False), ("BestEffortFIFO", True)])
def test_a_strict_fifo_lender_whose_own_head_waits_lends_nothing(strategy: str, lends: bool) -> None:
    """b (4 GPUs, 2 held) has a head of 3 pods waiting: a StrictFIFO queue keeps b's 2 free GPUs
    for it; a BestEffortFIFO one lends them."""
    full = Lws("full", "a", admitted={0: (("a0", "a1"), "")})
    holds = Lws("holds", "b", admitted={0: (("b0", "b1"), "")})
    big = Lws("big", "b", size=3)
    b = {"queueingStrategy": strategy, "quota": {GPU: 4}}
    actions = decide(_scene(full, Lws("more", "a"), holds, big, b=b, b_nodes=4))
    assert [(x.group.key.name, x.lender) for x in actions.admit] == ([("more", "b")] if lends else [])
    assert "big" in {w.group.key.name for w in actions.waiting}


def test_a_group_the_lender_could_never_hold_does_not_borrow_there() -> None:
    """The planner's own 'never' check is made against the lender: no nodes of it big enough."""
    pools = read_pools([_pool("a"), _pool("b", quota={GPU: 1})]).ok
    nodes = [node(f"{p}{i}").labels(pool=p).alloc(gpu=1).parsed() for p in "ab" for i in range(2)]
    demand = group_demand(lws("x", "team").size(2).worker(gpu_limit=1).obj())
    held = AdmittedGroup(_key("full"), "a", demand)
    result = plan(pools, nodes, {}, [held], [waiting("more", 0, demand, namespace="team")])
    assert result.admit == () and result.pools["b"].lent == {}


def test_the_webhook_lets_a_borrowers_new_pods_through_onto_the_lenders_nodes() -> None:
    more = Lws("more", "a", admitted={0: (("b0", "b1"), "b")})
    snap = _scene(more)
    [rec] = snap.records
    rec["status"]["conditions"][0]["reason"] = "Admitted"
    idx = index(snap.lwss, snap.pods, snap.statefulsets, snap.pools.ok, lambda obj: group_demand(obj))
    found = idx.entry(rec)
    assert found is not None and found[1].node_selector == {"pool": "b"}


# ----- reclaim ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "borrower_class", "reclaimed"),
    [
        ("Never", "low", False),
        ("LowerPriority", "low", True),
        ("LowerPriority", "high", False),
        ("Any", "high", True),
    ],
)
def test_a_lenders_own_group_takes_back_what_was_lent(
    policy: str, borrower_class: str, reclaimed: bool
) -> None:
    full = Lws("full", "a", klass=borrower_class, admitted={0: (("a0", "a1"), "")})
    more = Lws("more", "a", klass=borrower_class, admitted={0: (("b0", "b1"), "b")})
    own = Lws("own", "b", klass="high")
    actions = decide(_scene(full, more, own, b={"preemption": {"reclaimWithinCohort": policy}}))
    assert actions.admit == ()
    assert [g.group.key for g in actions.give_back] == ([_key("more")] if reclaimed else [])
    if reclaimed:
        [give] = actions.give_back
        assert give.reason is Reason.PREEMPTED and give.pods == ("more-0", "more-0-1")
        assert "preempted in pool b, which lent it room from its cohort and took it back," in give.message
        assert give.message.endswith("it waits in pool a's queue again")
        [told] = actions.preempting
        assert "1 of them borrowing its room" in told.message


def test_within_pool_preemption_does_not_reach_a_pools_groups_running_on_a_loan() -> None:
    """Pool a preempts within: its own group on b's room frees nothing of a's."""
    low_on_loan = Lws("loan", "a", klass="low", admitted={0: (("b0", "b1"), "b")})
    high = Lws("high", "a", klass="high", admitted={0: (("a0", "a1"), "")}, replicas=2)
    actions = decide(
        _scene(low_on_loan, high, a={"preemption": {"withinPool": "LowerPriority"}}, b={"quota": {GPU: 2}})
    )
    assert actions.give_back == ()


def test_a_group_too_big_for_the_lender_does_not_stop_a_smaller_one_after_it() -> None:
    """What found no room in a lender is remembered for the pass (loans only take room); a
    smaller group queued after it is still tried, and borrows."""
    a = pool("a").quota(gpu=4).obj()
    a["spec"]["cohort"] = "gpu"
    pools = read_pools([a, _pool("b")]).ok
    nodes = [node(f"a{i}").labels(pool="a").alloc(gpu=1).parsed() for i in range(4)]
    nodes += [node(f"b{i}").labels(pool="b").alloc(gpu=1).parsed() for i in range(2)]

    def demand(size: int) -> Any:
        return group_demand(lws("x", "team").size(size).worker(gpu_limit=1).obj())

    held = AdmittedGroup(_key("full"), "a", demand(4))
    queue = [
        waiting("big", 0, demand(3), namespace="team", priority=100),
        waiting("big", 1, demand(3), namespace="team", priority=100),
        waiting("small", 0, demand(2), namespace="team"),
    ]
    result = plan(pools, nodes, {}, [held], queue)
    assert [(x.key.name, x.lender) for x in result.admit] == [("small", "b")]
    assert [(w.key.name, w.key.index, w.position) for w in result.waiting] == [("big", 0, 1), ("big", 1, 2)]

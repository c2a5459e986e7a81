"""Whole-group preemption within a Pool (``spec.preemption.withinPool: LowerPriority``): which
groups are chosen, that they are given back whole and held until their pods are gone, and when
nothing is preempted (the pool's default, equal priority, ``preemptionPolicy: Never``,
``spec.minRunSeconds``, a group that would still not fit)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from core_builders import bound_pod, lws, lws_pod, lws_statefulsets, node, pool, read_pools, record

from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools import Actions, PassInputs, Snapshot, decide, plan_writes
from gatekeeper.core.backends.pools.giveback import give_back_status
from gatekeeper.core.backends.pools.preempting import PREEMPTING
from gatekeeper.core.backends.pools.preemption import MAX_SIMULATIONS, Room, preempts
from gatekeeper.core.kube.keys import EXCLUSIVE_TOPOLOGY_ANNOTATION, GROUP_KEY_LABEL
from gatekeeper.core.model.pool import MAX_MIN_RUN_SECONDS, WithinPool, parse_pool
from gatekeeper.core.writes.plan import Memory, Op, walk

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
RACK = "topology.example.com/rack"
CLASSES = {"low": 10, "mid": 100, "high": 1000, "vip": 5000}


def _at(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Lws:
    """One LWS of the scene: its groups ``admitted`` (group index -> its nodes, and how long
    ago it was admitted); every other group below ``replicas`` waits, gated."""

    name: str
    klass: str
    size: int = 2
    replicas: int = 1
    admitted: dict[int, tuple[tuple[str, ...], float]] = field(default_factory=dict)
    namespace: str = "team"
    gpus: int = 1
    """Each pod's GPUs."""
    exclusive: bool = False
    """An LWS with exclusive placement on ``RACK`` (its pods carry the annotation and LWS's group key)."""


def _scene(
    *lwss: Lws,
    nodes: int = 6,
    gpus: int = 1,
    quota: int = 6,
    within: str | None = "LowerPriority",
    min_run: int | None = None,
    racks: int = 0,
) -> Snapshot:
    p = pool("a").quota(gpu=quota).obj()
    if within is not None:
        p["spec"]["preemption"] = {"withinPool": within}
    if min_run is not None:
        p["spec"]["minRunSeconds"] = min_run
    objs, pods, records = [], [], []
    for one in lwss:
        obj = (
            lws(one.name, one.namespace)
            .pool("a")
            .uid(f"u-{one.name}")
            .size(one.size)
            .replicas(one.replicas)
            .worker(gpu_limit=one.gpus)
            .priority_class(one.klass)
            .obj()
        )
        if one.exclusive:
            obj["metadata"]["annotations"] = {EXCLUSIVE_TOPOLOGY_ANNOTATION: RACK}
        objs.append(obj)
        for g in range(one.replicas):
            placed = one.admitted.get(g)
            for w in range(one.size):
                on = placed[0][w] if placed else None
                made = lws_pod(
                    one.name,
                    g,
                    w,
                    namespace=one.namespace,
                    gated=placed is None,
                    node_name=on,
                    phase="Running" if on else "Pending",
                    gpu_limit=one.gpus,
                )
                made["metadata"]["labels"][GROUP_KEY_LABEL] = f"{one.name}-{g}"
                if one.exclusive:
                    made["metadata"]["annotations"] = {EXCLUSIVE_TOPOLOGY_ANNOTATION: RACK}
                pods.append(_of_class(one.klass, made))
            if placed is not None:
                r = record(
                    obj, g, admitted=True, pool="a", placement={str(i): n for i, n in enumerate(placed[0])}
                )
                r["metadata"]["resourceVersion"] = f"{one.name}-{g}"
                r["status"].update(
                    admittedAt=_at(placed[1]), demand={"nvidia.com/gpu": str(one.size * one.gpus)}
                )
                r["status"]["pods"] = one.size
                records.append(r)
    return Snapshot(
        lwss=objs,
        pods=pods,
        bound_pods=[q for q in pods if q["spec"].get("nodeName")],
        nodes=[
            node(f"n{i}")
            .labels(pool="a", **({RACK: f"r{i * racks // nodes}"} if racks else {}))
            .alloc(gpu=gpus)
            .parsed()
            for i in range(nodes)
        ],
        pools=read_pools([p]),
        records=records,
        statefulsets=lws_statefulsets(objs, pods),
        priorities=CLASSES,
        now=NOW,
    )


@pytest.fixture
def simulations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every simulated pass preemption runs, counted."""
    calls: list[int] = []
    fits = Room.fits

    def counted(self: Room, *args: Any) -> Any:
        calls.append(1)
        return fits(self, *args)

    monkeypatch.setattr(Room, "fits", counted)
    return calls


def _of_class(klass: str, pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as made from a template that names ``klass``."""
    pod["spec"]["priorityClassName"] = klass
    return pod


def _hpa_case(**kwargs: Any) -> Snapshot:
    """The seed's HPA case: a pool of six 1-GPU nodes; ``exp`` (low) holds four GPUs in two
    groups, group 1 admitted last; ``prod`` (high) holds two and has just been scaled to 2."""
    exp = Lws("exp", "low", replicas=2, admitted={0: (("n0", "n1"), 600), 1: (("n2", "n3"), 300)})
    prod = Lws("prod", "high", replicas=2, admitted={0: (("n4", "n5"), 900)})
    return _scene(exp, prod, **kwargs)


def test_a_waiting_group_of_higher_priority_preempts_the_most_recent_lower_group_whole() -> None:
    actions = decide(_hpa_case())
    assert actions.strangers == () and actions.problems == (), "the scene's pods are as their LWSs make them"
    [give] = actions.give_back
    assert (give.group.key.name, give.group.key.index, give.reason) == ("exp", 1, Reason.PREEMPTED)
    assert give.pods == ("exp-1", "exp-1-1"), "every pod of the victim, the whole group"
    assert give.retry_at == NOW, "queued again at once, in its turn"
    assert give.message == (
        "group 1 was preempted in pool a by group 1 of LeaderWorkerSet prod of priority 1000 "
        "(its own: 10); its pods are deleted, and it waits in the pool's queue again"
    )
    assert actions.admit == (), "the preemptor waits for the victim's pods to go"
    [wait] = actions.waiting
    assert wait.group.key.name == "prod" and wait.reason is Reason.WAITING_FOR_QUOTA
    assert wait.message.endswith(
        "; it preempted 1 group(s) of lower priority (from 10) in pool a: exp group 1; "
        "it is admitted once their pods are gone"
    )
    [told] = actions.preempting
    assert told.group.key.index == 1 and told.message.startswith("group 1 preempted 1 group(s)")
    assert [g.key.index for g in actions.held_by_pods] == [1]
    assert ("team", "exp-1") not in actions.ungate and actions.pools["a"].free == {"nvidia.com/gpu": 0}


def test_the_writes_give_the_victim_back_first_then_delete_its_pods_and_tell_both() -> None:
    snap = _hpa_case()
    plan = plan_writes(decide(snap), PassInputs(snap, Memory(), NOW, 0.0))
    writes = list(walk(plan))
    give = next(w for w in writes if w.tag == "give-back")
    assert give.guard == "exp-1" and give.body is not None
    assert give.body["conditions"][0]["reason"] == "Preempted"
    assert {w.name for w in give.then if w.op is Op.DELETE} == {"exp-1", "exp-1-1"}
    events = [w for w in writes if w.op is Op.EVENT]
    reasons = {(w.name, w.body.reason) for w in events if w.body is not None}
    assert {("exp", "Preempted"), ("prod", PREEMPTING)} <= reasons


def _next_pass(snap: Snapshot, *, pods_gone: bool) -> Snapshot:
    """The pass after the preemption: the victim's record given back; its pods terminating, or
    gone and made again, gated."""
    actions = decide(snap)
    [give] = actions.give_back
    name = give.group.record
    records = []
    for r in snap.records:
        if r["metadata"]["name"] == name:
            r = {**r, "status": {**r["status"], **give_back_status(give, r["status"], _at(0))}}
        records.append(r)
    victim = give.group.key
    pods = []
    for q in snap.pods:
        labels = q["metadata"]["labels"]
        mine = labels.get("leaderworkerset.sigs.k8s.io/name") == victim.name and labels.get(
            "leaderworkerset.sigs.k8s.io/group-index"
        ) == str(victim.index)
        if mine and pods_gone:
            w = int(labels["leaderworkerset.sigs.k8s.io/worker-index"])
            q = _of_class("low", lws_pod(victim.name, victim.index, w, namespace=victim.namespace))
        elif mine:
            q = {**q, "metadata": {**q["metadata"], "deletionTimestamp": _at(0)}}
        pods.append(q)
    return replace(
        snap,
        records=records,
        pods=pods,
        bound_pods=[q for q in pods if q["spec"].get("nodeName")],
        statefulsets=lws_statefulsets(list(snap.lwss), pods),
        now=NOW + timedelta(seconds=1),
    )


def test_while_the_victims_pods_go_nothing_more_is_preempted_and_nothing_admitted() -> None:
    actions = decide(_next_pass(_hpa_case(), pods_gone=False))
    assert actions.give_back == () and actions.admit == () and actions.preempting == ()
    [wait] = actions.waiting
    assert wait.group.key.name == "prod"
    assert wait.message.endswith("; it waits for 1 preempted group(s) of lower priority to stop")
    assert actions.pools["a"].free == {"nvidia.com/gpu": 0}, "the victim holds until its pods are gone"


def test_once_the_victims_pods_are_gone_the_preemptor_is_admitted_and_the_victim_waits() -> None:
    actions = decide(_next_pass(_hpa_case(), pods_gone=True))
    assert [(a.group.key.name, a.group.key.index) for a in actions.admit] == [("prod", 1)]
    assert sorted(a for a in actions.admit[0].nodes) == ["n2", "n3"]
    assert [(w.group.key.name, w.reason) for w in actions.waiting] == [("exp", Reason.WAITING_FOR_QUOTA)]
    assert actions.give_back == ()


@pytest.mark.parametrize(
    ("within", "prod_class", "never", "why"),
    [
        (None, "high", frozenset(), "a Pool preempts nothing unless it says so"),
        ("Never", "high", frozenset(), "Never says so"),
        ("LowerPriority", "low", frozenset(), "equal priority preempts nothing"),
        ("LowerPriority", "high", frozenset({"high"}), "the class's preemptionPolicy is Never"),
    ],
)
def test_no_preemption(within: str | None, prod_class: str, never: frozenset[str], why: str) -> None:
    exp = Lws("exp", "low", replicas=2, admitted={0: (("n0", "n1"), 600), 1: (("n2", "n3"), 300)})
    prod = Lws("prod", prod_class, replicas=2, admitted={0: (("n4", "n5"), 900)})
    actions = decide(replace(_scene(exp, prod, within=within), never_preempt=never))
    assert actions.give_back == (), why
    assert actions.preempting == ()


def test_a_pod_without_a_class_never_preempts_when_the_default_class_says_so() -> None:
    exp = Lws("exp", "low", replicas=2, admitted={0: (("n0", "n1"), 600), 1: (("n2", "n3"), 300)})
    prod = Lws("prod", "high", replicas=2, admitted={0: (("n4", "n5"), 900)})
    snap = _scene(exp, prod)
    assert decide(replace(snap, never_preempt=frozenset({""}))).give_back != (), "prod names its class"


def test_min_run_seconds_keeps_a_young_group_and_the_pass_looks_again_when_it_may_go() -> None:
    actions = decide(_hpa_case(min_run=900))
    assert actions.give_back == ()
    assert actions.look_again == NOW + timedelta(seconds=300), "exp group 1, admitted 600 s ago, at 900 s"
    [wait] = actions.waiting
    assert wait.message.endswith(
        "; it preempts nothing yet: 2 group(s) of lower priority have held their admission less than "
        "the pool's spec.minRunSeconds (900 s), the first until 12:05:00"
    )
    older = decide(_hpa_case(min_run=450))
    [give] = older.give_back
    assert give.group.key.index == 0, "the only one that has run long enough"


def test_lowest_priority_goes_first_and_a_victim_not_needed_is_put_back() -> None:
    """``small`` (low) holds 1 GPU, ``big`` (mid) 4, quota 5, all held: ``prod`` (high) needs 4.
    Lowest first takes ``small``, then ``big``; ``small`` is then put back."""
    small = Lws("small", "low", size=1, admitted={0: (("n0",), 100)})
    big = Lws("big", "mid", size=4, admitted={0: (("n1", "n2", "n3", "n4"), 900)})
    prod = Lws("prod", "high", size=4)
    actions = decide(_scene(small, big, prod, nodes=5, quota=5))
    assert [g.group.key.name for g in actions.give_back] == ["big"]


def test_when_the_nodes_decide_the_candidates_are_halved_and_the_needless_put_back() -> None:
    """Three 2-GPU nodes, quota 6, all held: ``a`` (n0) and ``b`` (n1), each beside a high
    group, and ``c`` and ``d`` (both on n2) are low, ``a`` the most recent. ``prod`` needs one
    2-GPU pod. The quota's run (a, b) frees a GPU on n0 and on n1: no node has 2; all four do;
    halving finds a, b, c too little and a, b, c, d enough; putting back c fails, then b and a
    go back: c and d are preempted, a whole node."""
    lows = [
        Lws(name, "low", size=1, admitted={0: ((node,), age)})
        for name, node, age in (("a", "n0", 100), ("b", "n1", 200), ("c", "n2", 300), ("d", "n2", 400))
    ]
    highs = [
        Lws(name, "high", size=1, admitted={0: ((node,), 900)}) for name, node in (("h0", "n0"), ("h1", "n1"))
    ]
    prod = Lws("prod", "high", size=1, gpus=2)
    actions = decide(_scene(*lows, *highs, prod, nodes=3, gpus=2, quota=6))
    assert sorted(g.group.key.name for g in actions.give_back) == ["c", "d"]


def test_a_group_that_would_still_not_fit_preempts_nothing() -> None:
    """``vip`` (higher than prod) holds 4 of 6; even with ``exp`` gone prod's 4 do not fit."""
    vip = Lws("vip", "vip", size=4, admitted={0: (("n0", "n1", "n2", "n3"), 900)})
    exp = Lws("exp", "low", admitted={0: (("n4", "n5"), 100)})
    prod = Lws("prod", "high", size=4)
    actions = decide(_scene(vip, exp, prod))
    assert actions.give_back == () and actions.preempting == ()


def test_node_fit_counts_not_quota_alone() -> None:
    """Three 2-GPU nodes, quota 6; ``exp`` holds one GPU on n0 and on n1, ``lowb`` one on n2: 3
    free in quota, but no node has 2 free for ``prod``'s one 2-GPU pod. The most recent of the
    two low groups goes, and one is enough: it frees a whole node."""
    exp = Lws("exp", "low", admitted={0: (("n0", "n1"), 300)})
    lowb = Lws("lowb", "low", size=1, admitted={0: (("n2",), 100)})
    prod = Lws("prod", "high", size=1, gpus=2)
    actions = decide(_scene(exp, lowb, prod, nodes=3, gpus=2, quota=6))
    [wait] = actions.waiting
    assert wait.reason is Reason.WAITING_FOR_NODES
    assert [g.group.key.name for g in actions.give_back] == ["lowb"]
    lowb = Lws("lowb", "low", size=1, admitted={0: (("n2",), 900)})
    actions = decide(_scene(exp, lowb, prod, nodes=3, gpus=2, quota=6))
    assert [g.group.key.name for g in actions.give_back] == ["exp"], "now the most recent; it frees n0, n1"


def test_a_victim_of_another_namespace_is_not_named_to_the_preemptor_nor_the_other_way() -> None:
    exp = Lws(
        "exp", "low", replicas=2, admitted={0: (("n0", "n1"), 600), 1: (("n2", "n3"), 300)}, namespace="lab"
    )
    prod = Lws("prod", "high", replicas=2, admitted={0: (("n4", "n5"), 900)}, namespace="serving")
    actions = decide(_scene(exp, prod))
    [give] = actions.give_back
    assert "by a group of another namespace of priority 1000" in give.message and "prod" not in give.message
    [told] = actions.preempting
    assert "1 of other namespaces" in told.message and "exp" not in told.message


def test_two_preemptors_in_one_pass_take_different_victims() -> None:
    exp = Lws(
        "exp",
        "low",
        replicas=3,
        admitted={g: ((f"n{2 * g}", f"n{2 * g + 1}"), 100 * (g + 1)) for g in range(3)},
    )
    prod = Lws("prod", "high", replicas=2)
    actions = decide(_scene(exp, prod))
    assert sorted(g.group.key.index for g in actions.give_back) == [0, 1], "the two most recent"
    assert len(actions.preempting) == 2


def test_the_pool_fields_are_parsed_and_bounded() -> None:
    obj = pool("a").obj()
    parsed = parse_pool(obj)
    assert (parsed.within_pool, parsed.min_run_seconds) == (WithinPool.NEVER, 0)
    obj["spec"].update(preemption={"withinPool": "LowerPriority"}, minRunSeconds=60)
    parsed = parse_pool(obj)
    assert (parsed.within_pool, parsed.min_run_seconds) == (WithinPool.LOWER_PRIORITY, 60)
    for bad, match in (
        ({"preemption": {"withinPool": "Any"}}, "withinPool: 'Any' is not one of Never, LowerPriority"),
        ({"preemption": "yes"}, "spec.preemption: expected an object"),
        ({"minRunSeconds": -1}, "spec.minRunSeconds"),
        ({"minRunSeconds": MAX_MIN_RUN_SECONDS + 1}, "spec.minRunSeconds"),
        ({"minRunSeconds": True}, "spec.minRunSeconds"),
    ):
        obj = pool("a").obj()
        obj["spec"].update(bad)
        with pytest.raises(ValueError, match=match):
            parse_pool(obj)


def test_many_candidates_cost_one_simulation(simulations: list[int]) -> None:
    """200 one-GPU groups of low priority fill 200 nodes; a high group of 8 needs 8 of them: the
    quota's arithmetic finds the 8 most recently admitted, and one simulation confirms they make
    room on the nodes."""
    exp = Lws("exp", "low", size=1, replicas=200, admitted={g: ((f"n{g}",), 1000 - g) for g in range(200)})
    prod = Lws("prod", "high", size=8)
    actions: Actions = decide(_scene(exp, prod, nodes=200, quota=200))
    assert sorted(g.group.key.index for g in actions.give_back) == list(range(192, 200))
    assert len(simulations) == 1 <= MAX_SIMULATIONS


# ----- the default scheduler's own preemption: a placed group that lost a node's room --------


def _displaced(*, created_ago: float, placed: bool = True, foreign: bool = True) -> Snapshot:
    """``exp`` (size 2) was placed whole on n0 and n1; then a pod of higher priority that the
    gatekeeper did not admit took n1 (``foreign``) and the LWS made the group's pods again: its
    leader is bound on n0, its worker, let through, waits unbound, made ``created_ago`` s ago."""
    exp = Lws("exp", "low", admitted={0: (("n0", "n1"), 600)})
    snap = _scene(exp, nodes=2, quota=2, within=None)
    records = [dict(r, status={**r["status"]}) for r in snap.records]
    if placed:
        records[0]["status"]["placedAt"] = _at(590)
    pods = list(snap.pods)
    worker = _of_class("low", lws_pod("exp", 0, 1, namespace="team", gated=False))
    worker["metadata"]["creationTimestamp"] = _at(created_ago)
    pods[1] = worker
    bound = [q for q in pods if q["spec"].get("nodeName")]
    if foreign:
        bound.append(bound_pod("urgent", "n1", namespace="other", **{"nvidia.com/gpu": 1}))
    return replace(snap, records=records, pods=pods, bound_pods=bound)


def test_a_placed_group_whose_pod_no_node_has_room_for_is_given_back_whole() -> None:
    actions = decide(_displaced(created_ago=9))
    [give] = actions.give_back
    assert give.reason is Reason.STRANDED and give.pods == ("exp-0", "exp-0-1")
    assert give.message.startswith(
        "group 0 was placed whole, but its pod exp-0-1 has waited unbound for 9 s and no node of pool a "
        "has room for it"
    )
    assert give.retry_at == NOW and actions.ungate == ()


def test_a_displaced_group_gets_its_grace_and_the_pass_looks_again_when_it_ends() -> None:
    actions = decide(_displaced(created_ago=3))
    assert actions.give_back == ()
    assert actions.look_again == NOW + timedelta(seconds=5)


@pytest.mark.parametrize(
    ("placed", "foreign", "why"),
    [
        (False, True, "never placed whole: its admission timeout applies instead"),
        (True, False, "n1 has room: the worker binds there, nothing is stranded"),
    ],
)
def test_no_displaced_give_back(placed: bool, foreign: bool, why: str) -> None:
    gives = decide(_displaced(created_ago=60, placed=placed, foreign=foreign)).give_back
    assert [g for g in gives if g.reason is Reason.STRANDED] == [], why


def test_a_hundred_alike_waiting_groups_cost_two_simulations(simulations: list[int]) -> None:
    """Three 2-GPU nodes, quota 6: ``big`` (high) fills n0, ``mid`` (high) holds a GPU on n1 and
    on n2, ``small`` (low) the other GPU of n1. ``prod`` (high) has 100 groups of one 2-GPU pod
    waiting: the quota says ``small`` is enough, the nodes say no (n1 and n2 would each have 1
    free). Two simulations find that (the quota's run, then all), not two hundred."""
    big = Lws("big", "high", size=2, admitted={0: (("n0", "n0"), 100)})
    mid = Lws("mid", "high", size=2, admitted={0: (("n1", "n2"), 100)})
    small = Lws("small", "low", size=1, admitted={0: (("n1",), 100)})
    prod = Lws("prod", "high", size=1, gpus=2, replicas=100)
    actions = decide(_scene(big, mid, small, prod, nodes=3, gpus=2, quota=6))
    assert actions.give_back == ()
    assert len(simulations) == 2


def test_a_group_the_quota_alone_rules_out_costs_no_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The only lower group holds 1 GPU; prod's groups need 2 more than the quota has free."""
    calls: list[int] = []
    monkeypatch.setattr(Room, "fits", lambda self, *a: calls.append(1))
    small = Lws("small", "low", size=1, admitted={0: (("n0",), 100)})
    big = Lws("big", "high", size=2, admitted={0: (("n1", "n2"), 100)})
    prod = Lws("prod", "high", size=2, replicas=100)
    assert decide(_scene(small, big, prod, nodes=3, quota=3)).give_back == ()
    assert calls == []


def test_in_a_strict_fifo_pool_the_head_preempts_and_those_it_blocks_do_not() -> None:
    exp = Lws("exp", "low", replicas=2, admitted={0: (("n0", "n1"), 600), 1: (("n2", "n3"), 300)})
    prod = Lws("prod", "high", replicas=3, admitted={0: (("n4", "n5"), 900)})
    p = pool("a").quota(gpu=6).strict().obj()
    p["spec"]["preemption"] = {"withinPool": "LowerPriority"}
    snap = replace(_scene(exp, prod), pools=read_pools([p]))
    actions = decide(snap)
    assert [(g.group.key.name, g.group.key.index) for g in actions.give_back] == [("exp", 1)]
    [told] = actions.preempting
    assert told.group.key.index == 1, "the head, group 1; group 2 is blocked behind it"


def test_a_quota_only_pool_preempts_by_its_quota() -> None:
    exp = Lws("exp", "low", replicas=2, admitted={0: (("n0", "n1"), 600), 1: (("n2", "n3"), 300)})
    prod = Lws("prod", "high", replicas=2, admitted={0: (("n4", "n5"), 900)})
    p = pool("a").quota(gpu=6).quota_only().obj()
    p["spec"]["preemption"] = {"withinPool": "LowerPriority"}
    actions = decide(replace(_scene(exp, prod), pools=read_pools([p])))
    assert [(g.group.key.name, g.group.key.index) for g in actions.give_back] == [("exp", 1)]


def test_a_victims_gated_pod_is_not_let_through_in_the_pass_that_preempts_it() -> None:
    """exp group 1 is admitted with its worker just made again, gated: any other pass lets it
    through; the pass that preempts the group does not."""
    snap = _hpa_case()
    pods = [
        _of_class("low", lws_pod("exp", 1, 1, namespace="team", gated=True))
        if q["metadata"]["name"] == "exp-1-1"
        else q
        for q in snap.pods
    ]
    snap = replace(snap, pods=pods, bound_pods=[q for q in pods if q["spec"].get("nodeName")])
    assert ("team", "exp-1-1") in decide(
        replace(snap, pools=read_pools([pool("a").quota(gpu=6).obj()]))
    ).ungate
    actions = decide(snap)
    assert [g.group.key.index for g in actions.give_back] == [1]
    assert ("team", "exp-1-1") not in actions.ungate


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"reservation": "shared"}, "charged to a hub Reservation: the hub grants in its own order"),
        ({"nodePools": ["gpu"]}, "over Karpenter NodePools: it can buy nodes instead"),
    ],
)
def test_a_pool_on_a_hub_or_over_node_pools_preempts_nothing(extra: dict[str, Any], why: str) -> None:
    p = pool("a").quota(gpu=6).obj()
    p["spec"].update(preemption={"withinPool": "LowerPriority"}, **extra)
    assert not preempts(parse_pool(p)), why
    p["spec"].pop(next(iter(extra)))
    assert preempts(parse_pool(p))


def test_a_victims_topology_domain_is_freed_in_the_simulation() -> None:
    """Exclusive placement: each of two racks holds a group of ``exp`` (low); ``prod`` (high, of
    the same namespace, exclusive on the rack too) can only go into a rack no other group of the
    namespace holds: the most recent exp group goes, and with it its rack."""
    exp = Lws(
        "exp", "low", replicas=2, exclusive=True, admitted={0: (("n0", "n1"), 600), 1: (("n2", "n3"), 300)}
    )
    prod = Lws("prod", "high", exclusive=True)
    actions = decide(_scene(exp, prod, nodes=4, quota=4, racks=2))
    assert actions.strangers == () and actions.problems == ()
    assert [(g.group.key.name, g.group.key.index) for g in actions.give_back] == [("exp", 1)]


def test_a_domain_held_by_a_group_that_stays_is_not_freed() -> None:
    """Rack r0 holds ``exp`` (low, one pod, admitted last) beside ``keep`` (high); rack r1 holds
    ``other`` (low, two pods). Taking exp frees quota but not r0 (keep stays there): prod goes
    into r1, so ``other`` is the victim and exp is put back."""
    exp = Lws("exp", "low", size=1, exclusive=True, admitted={0: (("n0",), 60)})
    keep = Lws("keep", "high", size=1, exclusive=True, admitted={0: (("n1",), 600)})
    other = Lws("other", "low", exclusive=True, admitted={0: (("n2", "n3"), 600)})
    prod = Lws("prod", "vip", exclusive=True)
    actions = decide(_scene(exp, keep, other, prod, nodes=4, quota=4, racks=2))
    assert [(g.group.key.name, g.group.key.index) for g in actions.give_back] == [("other", 0)]

"""A Pool's ``spec.allowedPriorityClasses``: read from the Pool, the classes an LWS names, the
planner's refusal (``PriorityClassNotAllowed``), and the whole pass from the LWS."""

from __future__ import annotations

from typing import Any

import pytest
from core_builders import T0, ctr, gpu_nodes, lws, pod_spec, pool, read_pools, waiting

from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.pools import Snapshot, decide
from gatekeeper.core.backends.pools.planner import plan
from gatekeeper.core.model.lws import priority_classes
from gatekeeper.core.model.pool import MAX_ALLOWED_PRIORITY_CLASSES, parse_pool


@pytest.mark.parametrize(
    ("value", "allowed"),
    [
        (None, None),
        ([], frozenset()),
        (["low"], frozenset({"low"})),
        (["low", "batch"], frozenset({"low", "batch"})),
    ],
)
def test_the_pool_reads_its_allowed_classes(value: Any, allowed: frozenset[str] | None) -> None:
    obj = pool("a").obj()
    if value is not None:
        obj["spec"]["allowedPriorityClasses"] = value
    assert parse_pool(obj).allowed_priority_classes == allowed


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("low", "spec.allowedPriorityClasses: expected a list"),
        ([""], r"spec.allowedPriorityClasses\[0\]: expected a PriorityClass name"),
        (["low", 7], r"spec.allowedPriorityClasses\[1\]: expected a PriorityClass name, got 7"),
        (["x" * 254], r"spec.allowedPriorityClasses\[0\]"),
        ([f"c{i}" for i in range(MAX_ALLOWED_PRIORITY_CLASSES + 1)], "at most 32"),
    ],
)
def test_a_bad_list_makes_the_pool_invalid(value: Any, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        pool("a").allowed_classes(*value).parsed() if isinstance(value, list) else parse_pool(
            {**pool("a").obj(), "spec": {**pool("a").obj()["spec"], "allowedPriorityClasses": value}}
        )


def _named(leader: str | None, worker: str | None, *, leader_template: bool = True) -> dict[str, Any]:
    def spec(name: str | None) -> dict[str, Any]:
        s = pod_spec(ctr(gpu_limit=1))
        if name is not None:
            s["priorityClassName"] = name
        return s

    built = lws("x").worker(spec(worker))
    if leader_template:
        built = built.leader(spec(leader))
    return built.obj()


@pytest.mark.parametrize(
    ("obj", "classes"),
    [
        (_named("low", "low"), ("low",)),
        (_named("high", "low"), ("high", "low")),
        (_named(None, "low"), ("", "low")),
        (_named(None, None), ("",)),
        (_named("ignored", "low", leader_template=False), ("low",)),  # the leader is made from the worker's
    ],
)
def test_the_classes_an_lws_names(obj: dict[str, Any], classes: tuple[str, ...]) -> None:
    assert priority_classes(obj) == classes


@pytest.mark.parametrize(
    ("allowed", "classes", "reason"),
    [
        (None, ("high",), None),  # unset: any class
        (None, ("",), None),
        (("low",), ("low",), None),
        (("low", "batch"), ("batch", "low"), None),
        (("low",), ("high",), Reason.PRIORITY_CLASS_NOT_ALLOWED),
        (("low",), ("low", "high"), Reason.PRIORITY_CLASS_NOT_ALLOWED),  # the worker's counts too
        (("low",), ("",), Reason.PRIORITY_CLASS_NOT_ALLOWED),  # naming none is not naming low
        ((), ("low",), Reason.PRIORITY_CLASS_NOT_ALLOWED),  # an empty list allows nothing
    ],
)
def test_the_planner_admits_only_the_classes_the_pool_allows(
    allowed: tuple[str, ...] | None, classes: tuple[str, ...], reason: Reason | None
) -> None:
    built = pool("a").quota(gpu=4)
    if allowed is not None:
        built = built.allowed_classes(*allowed)
    demand = lws("x").size(2).worker(gpu_limit=1).demand()
    result = plan([built.parsed()], gpu_nodes(4), {}, [], [waiting("x", 0, demand, classes=classes)])
    if reason is None:
        assert len(result.admit) == 1 and not result.waiting
        return
    [wait] = result.waiting
    assert not result.admit
    assert wait.reason is reason and wait.reason.permanent
    assert "spec.allowedPriorityClasses" in wait.message


def test_a_refused_class_does_not_hold_back_the_queue_behind_it() -> None:
    """A StrictFIFO pool: the refused group is permanent, so it blocks nobody."""
    demand = lws("x").size(2).worker(gpu_limit=1).demand()
    strict = pool("a").quota(gpu=4).strict().allowed_classes("low").parsed()
    result = plan(
        [strict],
        gpu_nodes(4),
        {},
        [],
        [
            waiting("jumper", 0, demand, priority=1000, classes=("high",)),
            waiting("older", 0, demand, classes=("low",)),
        ],
    )
    assert [a.key.name for a in result.admit] == ["older"]
    assert [(w.key.name, w.reason) for w in result.waiting] == [("jumper", Reason.PRIORITY_CLASS_NOT_ALLOWED)]


def test_the_whole_pass_reads_the_classes_from_the_lws() -> None:
    """From the LWSs to the decision: the jumper's record says why it waits, and names both."""

    def one(name: str, klass: str, age: int) -> dict[str, Any]:
        return lws(name).size(2).worker(gpu_limit=1).pool("a").priority_class(klass).age(age).obj()

    snap = Snapshot(
        lwss=[one("older", "low", 0), one("jumper", "high", 10)],
        pods=[],
        records=[],
        pools=read_pools([pool("a").quota(gpu=2).allowed_classes("low").obj()]),
        nodes=gpu_nodes(2),
        bound_pods=[],
        priorities={"low": 10, "high": 1000},
        now=T0,
    )
    decided = decide(snap)
    assert [a.group.key.name for a in decided.admit] == ["older"]
    [wait] = [w for w in decided.waiting if w.group.key.name == "jumper"]
    assert wait.reason is Reason.PRIORITY_CLASS_NOT_ALLOWED
    assert "PriorityClass high" in wait.message and "PriorityClasses low" in wait.message

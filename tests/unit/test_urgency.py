"""Which watched changes call for a pass at once: ``core.backends.pools.urgency``,
``core.backends.kueue.urgency`` and ``core.checks.node_fit.urgency``."""

from __future__ import annotations

from typing import Any

import pytest

from gatekeeper.core.backends.kueue.urgency import KueueUrgency
from gatekeeper.core.backends.pools.urgency import Urgency
from gatekeeper.core.checks.node_fit.urgency import NodeFitUrgency


def obj(generation: int | None = None, phase: str | None = None, name: str = "x") -> dict[str, Any]:
    out: dict[str, Any] = {"metadata": {"namespace": "ns", "name": name}}
    if generation is not None:
        out["metadata"]["generation"] = generation
    if phase is not None:
        out["status"] = {"phase": phase}
    return out


@pytest.mark.parametrize(
    ("plural", "kind", "o", "urgent"),
    [
        ("pods", "DELETED", obj(), True),
        ("pods", "MODIFIED", obj(phase="Running"), False),
        ("pods", "MODIFIED", obj(phase="Succeeded"), True),
        ("pods", "MODIFIED", obj(phase="Failed"), True),
        ("pods", "ADDED", obj(phase="Pending"), False),
        ("pods", "SYNC", obj(phase="Failed"), False),
        ("groupadmissions", "MODIFIED", obj(), False),
        ("groupadmissions", "DELETED", obj(), True),
        ("nodes", "ADDED", obj(), True),
        ("nodes", "MODIFIED", obj(), False),
        ("statefulsets", "ADDED", obj(), False),
        ("reservationclaims", "MODIFIED", obj(), True),
        ("leaderworkersets", "ADDED", obj(1), True),
        ("pools", "ADDED", obj(1), True),
    ],
)
def test_a_change_is_urgent_when_it_may_let_a_group_in(plural: str, kind: str, o: Any, urgent: bool) -> None:
    assert Urgency()(plural, kind, o) is urgent


@pytest.mark.parametrize("plural", ["leaderworkersets", "pools", "reservations"])
def test_a_status_rewrite_is_not_urgent_and_a_new_generation_is(plural: str) -> None:
    urgent = Urgency()
    assert urgent(plural, "ADDED", obj(1))
    assert not urgent(plural, "MODIFIED", obj(1)), "the same spec: its status changed"
    assert urgent(plural, "MODIFIED", obj(2)), "scaled, or its template changed"
    assert not urgent(plural, "MODIFIED", obj(2))
    assert urgent(plural, "MODIFIED", obj(2, name="other")), "another object"
    assert urgent(plural, "DELETED", obj(2))
    assert urgent(plural, "ADDED", obj(2)), "made again after its deletion"


def test_the_memory_of_generations_is_bounded() -> None:
    urgent = Urgency(limit=10)
    for i in range(25):
        assert urgent("leaderworkersets", "ADDED", obj(1, name=f"l{i}"))
    assert len(urgent._generations) <= 10


def workload(*true: str, name: str = "w") -> dict[str, Any]:
    """A Workload whose conditions ``true`` are True (QuotaReserved, Admitted, Evicted)."""
    conditions = [{"type": c, "status": "True"} for c in true]
    return {"metadata": {"namespace": "ns", "name": name}, "status": {"conditions": conditions}}


def test_kueue_a_workload_is_news_when_kueue_moves_it_not_when_we_make_it_or_it_is_rewritten() -> None:
    urgent = KueueUrgency()
    assert not urgent("workloads", "ADDED", workload()), "our own creation: Kueue has not looked yet"
    assert not urgent("workloads", "MODIFIED", workload()), "a rewrite that changed no admission condition"
    assert not urgent("workloads", "MODIFIED", workload("QuotaReserved")), "reserved: the checks' turn"
    assert urgent("workloads", "MODIFIED", workload("QuotaReserved", "Admitted")), "admitted: gates to lift"
    assert not urgent("workloads", "MODIFIED", workload("QuotaReserved", "Admitted")), "PodsReady, say"
    assert urgent("workloads", "MODIFIED", workload("Admitted", "Evicted")), "evicted: pods to stop"
    assert urgent("workloads", "DELETED", workload())
    assert urgent("workloads", "ADDED", workload("QuotaReserved", "Admitted", name="seen-late")), (
        "first seen already admitted (after a watch restart)"
    )


@pytest.mark.parametrize(
    ("plural", "kind", "o", "is_urgent"),
    [
        ("leaderworkersets", "ADDED", obj(1), True),
        ("leaderworkersets", "DELETED", obj(1), True),
        ("pods", "ADDED", obj(phase="Pending"), False),
        ("pods", "DELETED", obj(), False),
        ("groupadmissions", "MODIFIED", obj(), False),
        ("statefulsets", "ADDED", obj(), False),
        ("workloads", "SYNC", workload("Admitted"), False),
    ],
)
def test_kueue_other_changes(plural: str, kind: str, o: Any, is_urgent: bool) -> None:
    assert KueueUrgency()(plural, kind, o) is is_urgent


def test_kueue_an_lws_is_news_when_its_spec_changes() -> None:
    urgent = KueueUrgency()
    assert urgent("leaderworkersets", "ADDED", obj(1))
    assert not urgent("leaderworkersets", "MODIFIED", obj(1)), "its status rewritten"
    assert urgent("leaderworkersets", "MODIFIED", obj(2)), "scaled by the HPA"


def test_node_fit_a_workload_is_news_when_its_quota_is_reserved() -> None:
    urgent = NodeFitUrgency()
    assert not urgent("workloads", "ADDED", workload()), "not reserved: not the check's turn"
    assert urgent("workloads", "MODIFIED", workload("QuotaReserved")), "reserved: the check must answer"
    assert not urgent("workloads", "MODIFIED", workload("QuotaReserved")), "a rewrite of the same state"
    assert not urgent("workloads", "MODIFIED", workload("Evicted")), "evicted: nothing to answer"
    assert urgent("workloads", "MODIFIED", workload("QuotaReserved")), "reserved again after the eviction"
    assert urgent("workloads", "ADDED", workload("QuotaReserved", name="seen-late"))


@pytest.mark.parametrize(
    ("plural", "kind", "o", "is_urgent"),
    [
        ("nodes", "ADDED", obj(), True),
        ("nodes", "DELETED", obj(), True),
        ("nodes", "MODIFIED", obj(), False),
        ("pods", "DELETED", obj(), True),
        ("pods", "MODIFIED", obj(phase="Succeeded"), True),
        ("pods", "MODIFIED", obj(phase="Running"), False),
        ("pods", "ADDED", obj(phase="Pending"), False),
        ("admissionchecks", "ADDED", obj(1), True),
        ("admissionchecks", "MODIFIED", obj(1), False),
        ("resourceflavors", "MODIFIED", obj(1), False),
    ],
)
def test_node_fit_room_changes(plural: str, kind: str, o: Any, is_urgent: bool) -> None:
    assert NodeFitUrgency()(plural, kind, o) is is_urgent

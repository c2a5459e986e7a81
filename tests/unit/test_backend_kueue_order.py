"""The ``kueue`` backend meeting groups admitted by another backend (adoption), and the order in
which it offers an LWS's groups to Kueue (lowest index first).

Table tests on plain dicts; the real Kueue is in ``tests/e2e/test_kueue_switch.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from core_builders import lws_pod, record
from test_backend_kueue import ADMITTED, EVICTED, LQ, UID, cond, decide, rec, vllm, workload

from gatekeeper.core.backends.kueue import KueueSnapshot, new_workload, plan_writes
from gatekeeper.core.kube.keys import ADOPTING_REASON, SPEC_HASH_ANNOTATION, WAITING_FOR_KUEUE
from gatekeeper.core.model.charge import charge_toleration
from gatekeeper.core.model.gating import Ungate
from gatekeeper.core.model.record import record_name
from gatekeeper.core.writes.plan import Memory, Op, walk

NOW = datetime(2025, 1, 1, tzinfo=UTC)
NO_ROOM = [cond("QuotaReserved", False, "Pending", "couldn't assign flavors: insufficient unused quota")]


def spec_hash(obj: dict[str, Any]) -> str:
    """The spec digest of the Workloads the LWS asks for now (the same for each of its groups)."""
    [(group, _)] = decide([obj], records=[rec(obj, 0)]).create_workloads
    return str(new_workload(group, obj, "r")["metadata"]["annotations"][SPEC_HASH_ANNOTATION])


def wl(obj: dict[str, Any], index: int, spec: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """Our Workload of group ``index``, made for the LWS's spec now (or with digest ``spec``)."""
    made = workload(obj, index, **kwargs)
    made["metadata"]["annotations"][SPEC_HASH_ANNOTATION] = spec or spec_hash(obj)
    return made


def running(index: int, size: int = 2, revision: str | None = None) -> list[dict[str, Any]]:
    return [
        lws_pod("vllm", index, w, pool=LQ, gated=False, node_name="n1", phase="Running", revision=revision)
        for w in range(size)
    ]


def gated(index: int, size: int = 2, revision: str | None = None) -> list[dict[str, Any]]:
    return [lws_pod("vllm", index, w, pool=LQ, revision=revision) for w in range(size)]


def name(index: int) -> str:
    return record_name("vllm", UID, index)


def status_of(acts: Any, index: int) -> Any:
    [st] = [s for s in acts.statuses if s.group.key.index == index]
    return st


# ----- adoption: a group admitted by the pools backend ------------------------------------


def test_a_group_admitted_by_pools_is_adopted_not_stopped() -> None:
    """Record Admitted (no ``status.workload``: the pools backend wrote it), pods running, no Workload."""
    obj = vllm(replicas=1)
    acts = decide([obj], running(0), [record(obj, 0, admitted=True)], [])
    assert acts.stop == ()
    assert [g.record for g, _ in acts.create_workloads] == [name(0)]
    st = status_of(acts, 0)
    assert (st.admitted, st.reason) == (True, ADOPTING_REASON)
    assert "pods are kept until Kueue admits" in st.message


def test_an_adopted_group_waits_for_kueue_with_its_pods_kept_and_its_restarts_let_through() -> None:
    obj = vllm(replicas=1, size=3)
    adopting = rec(obj, 0, admitted=True)
    adopting["status"]["conditions"][0]["reason"] = ADOPTING_REASON
    pods = [
        *running(0, size=2, revision="r1"),
        lws_pod("vllm", 0, 2, pool=LQ, revision="r1"),  # a restarted worker of the running revision
    ]
    acts = decide([obj], pods, [adopting], [wl(obj, 0, conditions=NO_ROOM)])
    assert acts.stop == () and acts.delete_workloads == () and acts.create_workloads == ()
    assert acts.ungate == (Ungate("default", "vllm-0-2", {}, (charge_toleration(UID, 0),)),)
    st = status_of(acts, 0)
    assert (st.admitted, st.reason) == (True, ADOPTING_REASON)
    assert "insufficient unused quota" in st.message


def test_an_adopted_group_keeps_new_revision_pods_gated() -> None:
    obj = vllm(replicas=1, size=3)
    pods = [*running(0, size=2, revision="r1"), lws_pod("vllm", 0, 2, pool=LQ, revision="r2")]
    acts = decide([obj], pods, [record(obj, 0, admitted=True)], [])
    assert acts.ungate == () and acts.stop == ()


def test_an_adopted_group_admitted_by_kueue_is_a_kueue_group() -> None:
    obj = vllm(replicas=1, size=3)
    adopting = rec(obj, 0, admitted=True)
    adopting["status"]["conditions"][0]["reason"] = ADOPTING_REASON
    pods = [*running(0, size=2), lws_pod("vllm", 0, 2, pool=LQ)]
    acts = decide([obj], pods, [adopting], [wl(obj, 0, conditions=ADMITTED, flavors={"worker": "h100"})])
    st = status_of(acts, 0)
    assert (st.admitted, st.reason) == (True, "Admitted")
    [one] = acts.ungate
    assert one.pod == "vllm-0-2" and one.node_selector  # onto the flavor's nodes now


def test_an_adopted_group_whose_workload_kueue_evicts_is_stopped() -> None:
    """Kueue admitted it and took it back before a pass saw it: Kueue's word holds."""
    obj = vllm(replicas=1)
    adopting = rec(obj, 0, admitted=True)
    adopting["status"]["conditions"][0]["reason"] = ADOPTING_REASON
    acts = decide([obj], running(0), [adopting], [wl(obj, 0, conditions=EVICTED, flavors={"leader": "h100"})])
    assert sorted(p for _, p in acts.stop) == ["vllm-0", "vllm-0-1"]


def test_a_group_admitted_by_the_kueue_backend_whose_workload_went_is_still_stopped() -> None:
    """Not an adoption: its record names its Workload, which was deleted by hand."""
    obj = vllm(replicas=1)
    acts = decide([obj], running(0), [rec(obj, 0, admitted=True)], [])
    assert sorted(p for _, p in acts.stop) == ["vllm-0", "vllm-0-1"]


def test_waiting_groups_get_no_workload_while_adopted_ones_wait_for_kueue() -> None:
    obj = vllm(replicas=2)
    recs = [record(obj, 0, admitted=True), rec(obj, 1, admitted=False)]
    acts = decide([obj], [*running(0), *gated(1)], recs)
    assert [g.record for g, _ in acts.create_workloads] == [name(0)]
    assert (status_of(acts, 1).admitted, status_of(acts, 1).reason) == (False, WAITING_FOR_KUEUE)


# ----- order: lowest group index first ----------------------------------------------------


def test_a_new_lws_offers_only_its_first_group_to_kueue() -> None:
    obj = vllm(replicas=6)
    acts = decide([obj])
    assert len(acts.create_records) == 6
    assert acts.deferred == frozenset(("default", name(i)) for i in range(1, 6))
    snap = KueueSnapshot([obj], [], [], [], [])
    made = [w for w in walk(plan_writes(acts, snap, Memory(), NOW)) if w.resource == "workloads"]
    assert [(w.op, w.name) for w in made] == [(Op.CREATE, name(0))]


def test_the_window_widens_with_the_groups_that_hold_quota() -> None:
    obj = vllm(replicas=8)
    wls = [wl(obj, i, conditions=ADMITTED, flavors={"leader": "h100"}) for i in range(2)]
    recs = [rec(obj, i, admitted=i < 2) for i in range(8)]
    acts = decide([obj], [*running(0), *running(1)], recs, wls)
    assert [g.key.index for g, _ in acts.create_workloads] == [2, 3]
    assert (status_of(acts, 4).admitted, status_of(acts, 4).reason) == (False, WAITING_FOR_KUEUE)


def test_no_group_is_offered_while_one_waits_unreserved() -> None:
    obj = vllm(replicas=4)
    wls = [wl(obj, 0, conditions=ADMITTED, flavors={"leader": "h100"}), wl(obj, 1)]
    recs = [rec(obj, i, admitted=i == 0) for i in range(4)]
    acts = decide([obj], running(0), recs, wls)
    assert acts.create_workloads == () and acts.delete_workloads == ()


def test_once_kueue_finds_the_lowest_waiting_one_inadmissible_higher_waiting_ones_go() -> None:
    obj = vllm(replicas=4)
    wls = [wl(obj, 1, conditions=NO_ROOM), wl(obj, 2), wl(obj, 3, conditions=NO_ROOM)]
    recs = [rec(obj, i, admitted=False) for i in range(4)]
    acts = decide([obj], [], recs, [wl(obj, 0, conditions=ADMITTED, flavors={"leader": "h100"}), *wls])
    assert acts.delete_workloads == (("default", name(2)), ("default", name(3)))
    assert "waits for group 1" in status_of(acts, 3).message


def test_a_higher_waiting_one_kueue_found_inadmissible_first_goes_and_the_lowest_stays() -> None:
    # Seen with the real Kueue: groups 2 and 3 made in the same second, Kueue tried 3 first
    # (UID order) and never tried 2; 3's Workload must go so that 2 is tried when room frees.
    obj = vllm(replicas=4)
    admitted = [wl(obj, i, conditions=ADMITTED, flavors={"leader": "h100"}) for i in (0, 1)]
    recs = [rec(obj, i, admitted=i < 2) for i in range(4)]
    acts = decide(
        [obj], [*running(0), *running(1)], recs, [*admitted, wl(obj, 2), wl(obj, 3, conditions=NO_ROOM)]
    )
    assert acts.delete_workloads == (("default", name(3)),)
    assert "waits for group 2" in status_of(acts, 3).message


def test_a_higher_waiting_one_of_another_spec_does_not_trim() -> None:
    obj = vllm(replicas=3)
    admitted = wl(obj, 0, conditions=ADMITTED, flavors={"leader": "h100"})
    recs = [rec(obj, i, admitted=i == 0) for i in range(3)]
    other = wl(obj, 2, spec="another-spec", conditions=NO_ROOM)
    acts = decide([obj], running(0), recs, [admitted, wl(obj, 1), other])
    assert ("default", name(1)) not in acts.delete_workloads


def test_a_higher_group_admitted_first_is_held_then_gives_its_quota_to_the_lower_one() -> None:
    obj = vllm(replicas=3)
    recs = [rec(obj, i, admitted=False) for i in range(3)]
    first = wl(obj, 0, conditions=ADMITTED, flavors={"leader": "h100"})
    second = wl(obj, 2, conditions=ADMITTED, flavors={"leader": "h100"})
    pods = [*running(0), *gated(1), *gated(2)]
    # Kueue has not tried group 1 yet: group 2 keeps its quota but not its gates.
    acts = decide([obj], pods, recs, [first, wl(obj, 1), second])
    assert [u.pod for u in acts.ungate] == []
    assert acts.delete_workloads == ()
    st = status_of(acts, 2)
    assert (st.admitted, st.reason) == (False, WAITING_FOR_KUEUE)
    # Kueue found no room for group 1: group 2's Workload goes, its quota to group 1.
    acts = decide([obj], pods, recs, [first, wl(obj, 1, conditions=NO_ROOM), second])
    assert acts.delete_workloads == (("default", name(2)),)
    assert acts.ungate == ()


def test_groups_of_another_spec_are_not_held_behind_a_waiting_one() -> None:
    """A rolling update between them: they do not ask the same, so Kueue's order is theirs."""
    obj = vllm(replicas=3)
    recs = [rec(obj, i, admitted=False) for i in range(3)]
    pods = [*gated(1), *gated(2)]
    later = wl(obj, 2, spec="s2", conditions=ADMITTED, flavors={"leader": "h100"})
    acts = decide([obj], pods, recs, [wl(obj, 1, conditions=NO_ROOM), later])
    assert {u.pod for u in acts.ungate} == {"vllm-2", "vllm-2-1"}
    assert acts.delete_workloads == ()


def test_a_running_group_is_never_held() -> None:
    obj = vllm(replicas=3)
    recs = [rec(obj, i, admitted=i == 2) for i in range(3)]
    wls = [wl(obj, 1, conditions=NO_ROOM), wl(obj, 2, conditions=ADMITTED, flavors={"leader": "h100"})]
    acts = decide([obj], [*gated(1), *running(2)], recs, wls)
    assert acts.delete_workloads == () and acts.stop == ()
    assert status_of(acts, 2).admitted


def test_a_100_group_scale_up_that_fits_is_offered_in_8_rounds_not_100() -> None:
    """Passes of the backend against a Kueue that admits every Workload at once."""
    obj = vllm(replicas=100)
    made_for = spec_hash(obj)
    recs: dict[int, dict[str, Any]] = {}
    wls: dict[int, dict[str, Any]] = {}
    rounds = []
    while len(wls) < 100 and len(rounds) < 100:
        acts = decide([obj], [], list(recs.values()), list(wls.values()))
        offered = [g.key.index for g, _ in acts.create_workloads]
        for g in acts.create_records:
            recs[g.key.index] = rec(obj, g.key.index, admitted=False)
            if (g.key.namespace, g.record) not in acts.deferred:
                offered.append(g.key.index)
        for i in offered:
            wls[i] = wl(obj, i, made_for, conditions=ADMITTED, flavors={"leader": "h100"})
        rounds.append(len(offered))
    assert rounds == [1, 1, 2, 4, 8, 16, 32, 36]
    assert sorted(wls) == list(range(100))

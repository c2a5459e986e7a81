"""With the ``kueue`` backend: record and Workload go only with the group's pods.

Kueue releases a Workload's quota when the object is gone (its Delete event), not while it
is being deleted: a Workload held by a finalizer keeps its quota in Kueue's cache. So the
gatekeeper's Workloads carry its finalizer too, and both are released together.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from core_builders import lws_pod
from test_backend_kueue import ADMITTED, FLAVOR, LQ, UID, decide, rec, vllm, workload

from gatekeeper.core.backends.kueue import KueueSnapshot, new_workload, plan_writes
from gatekeeper.core.kube.keys import HOLD_FINALIZER, RECORD_PLURAL, WORKLOAD_PLURAL
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.groups import DemandMemo, GroupState
from gatekeeper.core.model.record import record_name
from gatekeeper.core.writes.plan import Memory, Op

NAME = record_name("vllm", UID, 0)
KEY = ("default", NAME)


def deleted(obj: dict[str, Any], *, held: bool = True) -> dict[str, Any]:
    meta = {**obj["metadata"], "deletionTimestamp": "2025-01-02T00:00:00Z", "resourceVersion": "7"}
    meta.setdefault("uid", f"uid-{obj['kind']}")
    meta["finalizers"] = [HOLD_FINALIZER] if held else ["example.com/other"]
    return {**obj, "metadata": meta}


def pods(*, gated: bool = False) -> list[dict[str, Any]]:
    where: dict[str, Any] = {} if gated else {"node_name": "n1", "phase": "Running"}
    return [lws_pod("vllm", 0, w, pool=LQ, gated=gated, **where) for w in range(2)]


def test_new_workloads_carry_the_finalizer() -> None:
    obj = vllm(replicas=1)
    group = GroupState(GroupKey("default", "vllm", 0), UID, LQ, NAME, DemandMemo().demand(obj), (), ())
    assert new_workload(group, obj, "rec-uid-0")["metadata"]["finalizers"] == [HOLD_FINALIZER]


@pytest.mark.parametrize(
    ("lws_there", "live", "kept"),
    [
        pytest.param(False, True, True, id="namespace-deleted-pods-running"),
        pytest.param(False, False, False, id="namespace-deleted-pods-gone"),
        pytest.param(True, True, True, id="record-deleted-by-hand-running"),
        pytest.param(True, False, False, id="record-deleted-by-hand-no-pod"),
    ],
)
def test_a_deleted_record_keeps_its_workload_while_the_group_has_a_live_pod(
    lws_there: bool, live: bool, kept: bool
) -> None:
    obj = vllm(replicas=1)
    record = deleted(rec(obj, 0, admitted=True))
    wl = workload(obj, 0, conditions=ADMITTED, flavors={"leader": "h100"})
    acts = decide([obj] if lws_there else [], pods() if live else [], [record], [wl])
    assert (KEY not in acts.release) == kept
    assert acts.create_workloads == () and acts.create_records == ()


def test_a_workload_deleted_by_hand_is_an_admission_taken_back_held_until_its_pods_stop() -> None:
    """Its ungated pods are stopped (as on eviction) while it keeps the quota; once only gated
    pods are left its finalizer goes, and a new Workload is made once it is gone."""
    obj = vllm(replicas=1)
    wl = deleted(workload(obj, 0, conditions=ADMITTED, flavors={"leader": "h100"}))
    record = rec(obj, 0, admitted=True)
    acts = decide([obj], pods(), [record], [wl])
    assert sorted(p for _, p in acts.stop) == ["vllm-0", "vllm-0-1"]
    assert acts.delete_workloads == () and acts.release == () and acts.ungate == ()
    [st] = acts.statuses
    assert (st.admitted, st.reason) == (False, "WaitingForKueue")
    assert "is being deleted" in st.message
    recreated = decide([obj], pods(gated=True), [record], [wl])
    assert recreated.delete_workloads == (KEY,) and recreated.create_workloads == ()
    assert recreated.ungate == ()
    assert [g.record for g, _ in decide([obj], pods(gated=True), [record], []).create_workloads] == [NAME]


def test_released_record_and_workload_lose_the_finalizer_workload_first() -> None:
    obj = vllm(replicas=1)
    record = deleted(rec(obj, 0, admitted=True))
    wl = deleted(workload(obj, 0, conditions=ADMITTED, flavors={"leader": "h100"}))
    snap = KueueSnapshot([], [], [record], [wl], [FLAVOR])
    acts = decide([], [], [record], [wl])
    assert acts.release == (KEY,)
    first = plan_writes(acts, snap, Memory(), datetime(2026, 12, 1, tzinfo=UTC))[0]
    [wl_write] = first
    assert (wl_write.op, wl_write.resource, wl_write.body[-1]) == (
        Op.JSON_PATCH,
        WORKLOAD_PLURAL,
        {"op": "remove", "path": "/metadata/finalizers/0"},
    )
    [rec_write] = wl_write.then
    assert (rec_write.op, rec_write.resource, rec_write.then) == (Op.JSON_PATCH, RECORD_PLURAL, ())
    # A Workload someone else holds: the record is released all the same.
    other = deleted(wl, held=False)
    snap = KueueSnapshot([], [], [record], [other], [FLAVOR])
    [only] = plan_writes(acts, snap, Memory(), datetime.now(UTC))[0]
    assert (only.resource, only.op) == (RECORD_PLURAL, Op.JSON_PATCH)


def test_older_records_and_workloads_are_given_the_finalizer() -> None:
    obj = vllm(replicas=1)
    record = {**rec(obj, 0, admitted=True), "metadata": {**rec(obj, 0)["metadata"], "resourceVersion": "3"}}
    wl = {**workload(obj, 0, conditions=ADMITTED, flavors={"leader": "h100"})}
    wl["metadata"] = {**wl["metadata"], "uid": "wl-uid"}
    acts = decide([obj], pods(), [record], [wl])
    snap = KueueSnapshot([obj], pods(), [record], [wl], [FLAVOR])
    last = plan_writes(acts, snap, Memory(), datetime.now(UTC))[-1]
    assert sorted((w.resource, w.tag, w.body[-1]["value"][0]) for w in last) == [
        (RECORD_PLURAL, "hold", HOLD_FINALIZER),
        (WORKLOAD_PLURAL, "hold", HOLD_FINALIZER),
    ]

"""The ``kueue`` backend gives back a group Kueue admitted whose pods are not all bound in
time (``--admission-timeout-seconds``, 10 minutes by default), counted as every backend
counts it; a group whose leader loads its model is not given back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from core_builders import lws_pod, lws_statefulsets
from test_backend_kueue import ADMITTED, FLAVOR, LQ, rec, vllm, workload

from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.kueue import KueueSnapshot, decide_kueue
from gatekeeper.core.backends.kueue.writes import record_status_patch

T = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _snap(after: float, pods: str, *, startup: str | None = None, placed: bool = False) -> KueueSnapshot:
    """vllm: one group of 2, admitted by Kueue at T; ``pods``: "none" (never made), "leader"
    (the leader bound, not Ready), "ready" (the leader Ready at T + 3600 s), "whole"."""
    obj = vllm(replicas=1, size=2)
    if startup:
        obj["spec"]["startupPolicy"] = startup
    made: list[dict[str, Any]] = []
    if pods != "none":
        leader = lws_pod("vllm", 0, 0, pool=LQ, gated=False, node_name="n0", phase="Running")
        if pods == "ready":
            leader["status"]["conditions"] = [
                {"type": "Ready", "status": "True", "lastTransitionTime": _stamp(T + timedelta(seconds=3600))}
            ]
        made.append(leader)
    if pods == "whole":
        made.append(lws_pod("vllm", 0, 1, pool=LQ, gated=False, node_name="n1", phase="Running"))
    record = rec(obj, 0, admitted=True)
    record["status"]["admittedAt"] = _stamp(T)
    if placed:
        record["status"]["placedAt"] = _stamp(T + timedelta(seconds=5))
    wl = workload(obj, 0, conditions=ADMITTED, flavors={"leader": "h100", "worker": "h100"})
    return KueueSnapshot(
        [obj],
        made,
        [record],
        [wl],
        [FLAVOR],
        statefulsets=lws_statefulsets([obj], made),
        bound_pods=[p for p in made if p["spec"].get("nodeName")],
        now=T + timedelta(seconds=after),
    )


CASES = [
    (599, "none", None, False, False),
    (601, "none", None, False, True),
    (601, "leader", None, False, True),
    (7200, "leader", "LeaderReady", False, False),  # loading its model: kept
    (4199, "ready", "LeaderReady", False, False),
    (4201, "ready", "LeaderReady", False, True),
    (7200, "whole", None, False, False),
    (7200, "leader", None, True, False),  # whole once: a restart is not a give-back
]
"""(seconds since the admission, its pods, startupPolicy, placedAt written, given back):
every backend's deadline (``core.admission.timeout``), one table."""


@pytest.mark.parametrize(("after", "pods", "startup", "placed", "given_back"), CASES)
def test_a_group_kueue_admitted_is_given_back_when_its_pods_are_not_bound_in_time(
    after: float, pods: str, startup: str | None, placed: bool, given_back: bool
) -> None:
    acts = decide_kueue(_snap(after, pods, startup=startup, placed=placed))
    timed = [s for s in acts.statuses if s.reason == Reason.ADMISSION_TIMEOUT]
    assert bool(timed) is given_back
    if given_back:
        [st] = timed
        assert not st.admitted and st.retries == 1 and st.retry_at is not None
        assert "pods bound within 600 s of" in st.message
        assert acts.ungate == ()
        assert acts.stop == ((("default", "vllm-0"),) if pods != "none" else ())


def test_the_pass_looks_again_at_the_deadline() -> None:
    assert decide_kueue(_snap(100, "none")).look_again == T + timedelta(seconds=600)


def test_a_whole_group_is_placed_once_on_its_record() -> None:
    snap = _snap(30, "whole")
    [st] = decide_kueue(snap).statuses
    assert st.admitted and st.placed
    patch, _ = record_status_patch(st, snap.records[0], "2026-12-01T12:00:30Z")
    assert patch is not None and patch["placedAt"] == "2026-12-01T12:00:30Z"
    placed = _snap(30, "whole", placed=True)
    [again] = decide_kueue(placed).statuses
    patch, _ = record_status_patch(again, placed.records[0], "2026-12-01T12:00:31Z")
    assert patch is None or "placedAt" not in patch, "placed once"


def test_after_the_give_back_its_pods_stop_then_its_workload_goes() -> None:
    """The next pass, the record saying AdmissionTimeout and its retry still to come: the
    leader let through stops; once no pod is left, the Workload is deleted."""
    snap = _snap(601, "leader")
    [st] = [s for s in decide_kueue(snap).statuses if s.reason == Reason.ADMISSION_TIMEOUT]
    patch, _ = record_status_patch(st, snap.records[0], "2026-12-01T12:10:01Z")
    assert patch is not None
    record = {**snap.records[0], "status": {**snap.records[0]["status"], **patch}}
    later = KueueSnapshot(
        snap.lwss, [], [record], snap.workloads, snap.flavors, statefulsets=snap.statefulsets, now=snap.now
    )
    acts = decide_kueue(later)
    assert acts.delete_workloads == (("default", record["metadata"]["name"]),)

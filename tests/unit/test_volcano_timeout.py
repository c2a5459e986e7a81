"""The ``volcano`` backend gives back a group Volcano let in whose pods are not all bound in
time (``--admission-timeout-seconds``, 10 minutes by default), counted as every backend counts
it (``core.admission.timeout``); a group whose leader loads its model is not given back."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from core_builders import lws_pod
from test_backend_volcano import NOW, QUEUE, pg, rec, snap, vllm
from test_kueue_timeout import CASES

from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.volcano import VolcanoSnapshot, decide_volcano
from gatekeeper.core.backends.volcano.writes import record_status_patch


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _snap(after: float, pods: str, *, startup: str | None = None, placed: bool = False) -> VolcanoSnapshot:
    """vllm: one group of 2, let in by Volcano at NOW; ``pods``: "none" (never made), "leader"
    (the leader bound, not Ready), "ready" (the leader Ready at NOW + 3600 s), "whole"."""
    obj = vllm(replicas=1)
    if startup:
        obj["spec"]["startupPolicy"] = startup
    made: list[dict[str, Any]] = []
    if pods != "none":
        leader = lws_pod("vllm", 0, 0, pool=QUEUE, gated=False, node_name="n0", phase="Running")
        if pods == "ready":
            at = _stamp(NOW + timedelta(seconds=3600))
            leader["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": at}]
        made.append(leader)
    if pods == "whole":
        made.append(lws_pod("vllm", 0, 1, pool=QUEUE, gated=False, node_name="n1", phase="Running"))
    record = rec(obj, 0, admitted=True, reason="Inqueue")
    record["status"]["admittedAt"] = _stamp(NOW)
    if placed:
        record["status"]["placedAt"] = _stamp(NOW + timedelta(seconds=5))
    group = pg(obj, 0, "Running")
    return replace(snap(obj, [record], [group], made), now=NOW + timedelta(seconds=after))


@pytest.mark.parametrize(("after", "pods", "startup", "placed", "given_back"), CASES)
def test_a_group_volcano_let_in_is_given_back_when_its_pods_are_not_bound_in_time(
    after: float, pods: str, startup: str | None, placed: bool, given_back: bool
) -> None:
    acts = decide_volcano(_snap(after, pods, startup=startup, placed=placed))
    [st] = acts.statuses
    assert (st.reason == Reason.ADMISSION_TIMEOUT) is given_back, st
    if given_back:
        assert not st.admitted and st.retries == 1 and st.retry_at is not None and st.warning
        assert "pods bound within 600 s of" in st.message
        assert acts.ungate == ()
        assert acts.stop == ((("default", "vllm-0"),) if pods != "none" else ())
        assert acts.retire_pod_groups == (), "its PodGroup goes only once its pods are gone"
    else:
        assert st.admitted


def test_the_pass_looks_again_at_the_deadline() -> None:
    assert decide_volcano(_snap(100, "none")).look_again == NOW + timedelta(seconds=600)


def test_a_whole_group_is_placed_once_on_its_record() -> None:
    snapshot = _snap(30, "whole")
    [st] = decide_volcano(snapshot).statuses
    assert st.admitted and st.placed
    patch, _ = record_status_patch(st, snapshot.records[0], "2026-01-01T00:00:30Z")
    assert patch is not None and patch["placedAt"] == "2026-01-01T00:00:30Z"
    placed = _snap(30, "whole", placed=True)
    [again] = decide_volcano(placed).statuses
    patch, _ = record_status_patch(again, placed.records[0], "2026-01-01T00:00:31Z")
    assert patch is None or "placedAt" not in patch, "placed once"


def test_after_the_give_back_its_pods_stop_then_its_pod_group_goes_then_it_is_offered_again() -> None:
    snapshot = _snap(601, "leader")
    [st] = decide_volcano(snapshot).statuses
    patch, _ = record_status_patch(st, snapshot.records[0], _stamp(NOW + timedelta(seconds=601)))
    assert patch is not None
    record = {**snapshot.records[0], "status": {**snapshot.records[0]["status"], **patch}}
    running = decide_volcano(replace(snapshot, records=[record]))
    [held] = running.statuses
    assert (held.admitted, held.reason) == (False, Reason.ADMISSION_TIMEOUT)
    assert running.stop == (("default", "vllm-0"),) and running.retire_pod_groups == ()
    gone = decide_volcano(replace(snapshot, records=[record], pods=[]))
    assert [name for _, name, _ in gone.retire_pod_groups] == [snapshot.pod_groups[0]["metadata"]["name"]]
    retry = NOW + timedelta(seconds=601 + 61)
    again = decide_volcano(replace(snapshot, records=[record], pods=[], pod_groups=[], now=retry))
    assert [g.key.index for g, _ in again.create_pod_groups] == [0]

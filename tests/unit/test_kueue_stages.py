"""The ``kueue`` decision's stages, each on its own: adoption, why a group waits, a check's verdict.

``test_backend_kueue.py`` proves the whole pass; these tables pin each stage's rule.
"""

from __future__ import annotations

from typing import Any

import pytest
from core_builders import group_pod, lws, record

from gatekeeper.core.backends.kueue.adopt import adopted_elsewhere, old_pods
from gatekeeper.core.backends.kueue.workload import never_fits, waiting_reason
from gatekeeper.core.kube.keys import (
    ADMITTED,
    ADOPTING_REASON,
    EVICTED_REASON,
    NEVER_FITS,
    WAITING_FOR_CHECKS,
    WAITING_FOR_KUEUE,
)
from gatekeeper.core.model.lws import GroupPod

LWS = lws("vllm").size(2).worker(gpu=1).uid("u-vllm").pool("q").obj()


def admitted(
    *, reason: str = "Admitted", workload: str | None = None, revision: str | None = None
) -> dict[str, Any]:
    rec = record(LWS, 0, admitted=True, pool="q", revision=revision)
    for cond in rec["status"]["conditions"]:
        if cond["type"] == ADMITTED:
            cond["reason"] = reason
    if workload is not None:
        rec["status"]["workload"] = workload
    return rec


# ----- adoption: a group running on another backend's admission -------------------------------


@pytest.mark.parametrize(
    ("rec", "adopted"),
    [
        pytest.param(None, False, id="no-record"),
        pytest.param(record(LWS, 0, admitted=False, pool="q"), False, id="not-admitted"),
        pytest.param(admitted(), True, id="admitted-by-pools-no-workload"),
        pytest.param(admitted(workload="wl-0"), False, id="admitted-by-kueue"),
        pytest.param(admitted(reason=ADOPTING_REASON, workload="wl-0"), True, id="marked-adopting"),
    ],
)
def test_a_group_is_adopted_when_its_admission_was_not_made_by_kueue(
    rec: dict[str, Any] | None, adopted: bool
) -> None:
    assert adopted_elsewhere(rec) is adopted


def member(
    name: str, revision: str, *, gated: bool, live: bool = True, terminating: bool = False
) -> GroupPod:
    return group_pod(name, revision, gated=gated, live=live, terminating=terminating)


@pytest.mark.parametrize(
    ("members", "noted", "through"),
    [
        pytest.param(
            [member("a", "v1", gated=False), member("b", "v1", gated=True)], None, {"b"}, id="restart"
        ),
        pytest.param(
            [member("a", "v1", gated=False), member("b", "v2", gated=True)], None, set(), id="new-rev"
        ),
        pytest.param([member("b", "v1", gated=True)], "v1", {"b"}, id="by-the-record"),
        pytest.param([member("b", "v1", gated=True, terminating=True)], "v1", set(), id="terminating"),
        pytest.param(
            [member("a", "v1", gated=False, live=False), member("b", "v1", gated=True)],
            None,
            set(),
            id="done-pod",
        ),
    ],
)
def test_an_adopted_group_lets_through_only_pods_of_the_revision_it_runs(
    members: list[GroupPod], noted: str | None, through: set[str]
) -> None:
    assert old_pods(admitted(revision=noted), members) == through


# ----- why a group waits, in Kueue's words -------------------------------------------------------


def workload(
    *conds: dict[str, str], checks: list[dict[str, str]] | None = None, deleting: bool = False
) -> dict[str, Any]:
    wl: dict[str, Any] = {"metadata": {"name": "wl-0"}, "status": {"conditions": list(conds)}}
    if checks is not None:
        wl["status"]["admissionChecks"] = checks
    if deleting:
        wl["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    return wl


def cond(kind: str, status: str, reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


@pytest.mark.parametrize(
    ("wl", "reason", "words"),
    [
        pytest.param(None, WAITING_FOR_KUEUE, "is being created in LocalQueue lq", id="none-yet"),
        pytest.param(workload(deleting=True), WAITING_FOR_KUEUE, "is being deleted", id="deleting"),
        pytest.param(
            workload(cond("Evicted", "True", "Preempted", "by a higher one")),
            EVICTED_REASON,
            "evicted by Kueue (Preempted): by a higher one",
            id="evicted",
        ),
        pytest.param(
            workload(
                cond("QuotaReserved", "True"),
                checks=[{"name": "node-fit", "state": "Pending", "message": "waits for room"}],
            ),
            WAITING_FOR_CHECKS,
            "node-fit is Pending: waits for room",
            id="quota-but-checks",
        ),
        pytest.param(
            workload(cond("QuotaReserved", "False", "Pending", "couldn't assign flavors")),
            "Pending",
            "waits in LocalQueue lq (Workload wl-0): couldn't assign flavors",
            id="no-quota",
        ),
        pytest.param(workload(), WAITING_FOR_KUEUE, "has not evaluated Workload wl-0", id="not-evaluated"),
    ],
)
def test_a_waiting_group_is_told_why_in_kueues_words(
    wl: dict[str, Any] | None, reason: str, words: str
) -> None:
    got_reason, message = waiting_reason(wl, 0, "lq")
    assert got_reason == reason
    assert words in message and message.startswith("group 0 ")


@pytest.mark.parametrize(
    ("checks", "verdict"),
    [
        pytest.param([], None, id="no-checks"),
        pytest.param([{"state": "Pending", "message": "waits for room"}], None, id="pending-for-now"),
        pytest.param([{"state": "Ready", "message": f"{NEVER_FITS} anywhere"}], None, id="ready"),
        pytest.param(
            [{"state": "Pending", "message": f"{NEVER_FITS}: 9 GPUs"}], f"{NEVER_FITS}: 9 GPUs", id="never"
        ),
    ],
)
def test_only_a_pending_never_fits_verdict_of_ours_counts(
    checks: list[dict[str, str]], verdict: str | None
) -> None:
    assert never_fits(workload(checks=checks)) == verdict

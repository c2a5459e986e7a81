"""The fault monitor's judgement: it sees an overrun, a double admission and an ungated pod
with no record when they are there, and nothing when they are not (so a clean fault table
means something)."""

from __future__ import annotations

from typing import Any

import pytest

from gatekeeper_lab.sandbox.faults import Monitor, Tally

POOL = "p"


def pod(
    uid: str, index: int, *, node: str | None = "n1", gated: bool = False, gpus: int = 1
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]
    }
    if node:
        spec["nodeName"] = node
    if gated:
        spec["schedulingGates"] = [{"name": "lws-gatekeeper.io/admission"}]
    return {
        "metadata": {
            "uid": uid,
            "name": uid,
            "labels": {
                "lws-gatekeeper.io/pool": POOL,
                "leaderworkerset.sigs.k8s.io/name": "burst",
                "leaderworkerset.sigs.k8s.io/group-index": str(index),
            },
        },
        "spec": spec,
        "status": {"phase": "Running"},
    }


def record(index: int, *, uid: str = "r", admitted_at: str | None = "2026-12-01T00:00:00Z") -> dict[str, Any]:
    conditions = []
    if admitted_at:
        conditions.append({"type": "Admitted", "status": "True", "lastTransitionTime": admitted_at})
    return {
        "metadata": {"name": f"burst-{index}", "uid": f"{uid}{index}"},
        "spec": {"leaderWorkerSet": "burst", "groupIndex": index},
        "status": {"conditions": conditions},
    }


def monitor(quota: int = 4) -> Monitor:
    return Monitor(api=None, namespace="ns", pool=POOL, quota_gpus=quota, tally=Tally("t"))  # type: ignore[arg-type]


def test_a_clean_run_leaves_a_clean_tally() -> None:
    m = monitor()
    for _ in range(3):
        m.observe(
            [pod("a", 0), pod("b", 0), pod("c", 1, node=None, gated=True)],
            [record(0), record(1, admitted_at=None)],
        )
    assert m.tally.clean
    assert m.tally.peak_overrun <= 0


def test_bound_gpus_over_the_quota_are_an_overrun() -> None:
    m = monitor(quota=2)
    m.observe([pod("a", 0), pod("b", 0), pod("c", 1), pod("d", 1)], [record(0), record(1)])
    assert m.tally.peak_overrun == 2
    assert not m.tally.clean


def test_a_group_admitted_anew_while_its_pods_run_was_admitted_twice() -> None:
    m = monitor()
    m.observe([pod("a", 0), pod("b", 0)], [record(0)])
    m.observe([pod("a", 0), pod("b", 0)], [record(0, admitted_at="2026-12-01T00:00:09Z")])
    assert m.tally.double_admissions == 1


def test_a_group_admitted_again_after_its_pods_went_is_no_double() -> None:
    m = monitor()
    m.observe([pod("a", 0), pod("b", 0)], [record(0)])
    m.observe([], [])  # scaled away: pods and record gone
    m.observe([pod("c", 0), pod("d", 0)], [record(0, uid="s", admitted_at="2026-12-01T00:01:00Z")])
    assert m.tally.double_admissions == 0


@pytest.mark.parametrize("records", [[], [record(0, admitted_at=None)]])
def test_an_ungated_pod_without_an_admitted_record_is_counted(records: list[dict[str, Any]]) -> None:
    m = monitor()
    m.observe([pod("a", 0)], records)
    assert m.tally.ungated_without_record == 1


def given_back(index: int) -> dict[str, Any]:
    r = record(index, admitted_at=None)
    r["status"]["conditions"] = [
        {
            "type": "Admitted",
            "status": "False",
            "reason": "NotAsAdmitted",
            "lastTransitionTime": "2026-12-01T00:00:05Z",
        }
    ]
    return r


def test_pods_let_through_on_an_admission_given_back_are_no_pods_without_one() -> None:
    """A give-back writes the record first, then deletes the pods (their quota stays held
    while they live): a look between the two sees them ungated under a record that no
    longer says Admitted. They went through on an admission; a pod that never did counts."""
    m = monitor()
    m.observe([pod("a", 0), pod("b", 0)], [record(0)])
    m.observe([pod("a", 0), pod("b", 0)], [given_back(0)])
    assert m.tally.ungated_without_record == 0
    m.observe([pod("a", 0), pod("c", 0)], [given_back(0)])
    assert m.tally.ungated_without_record == 1
    assert any("c" in n and "NotAsAdmitted" in n for n in m.tally.notes), m.tally.notes

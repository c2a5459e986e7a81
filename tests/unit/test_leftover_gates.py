"""``core.writes.leftover_gates``: which pods ``lws-gatekeeper ungate`` frees, and when it refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gatekeeper.core.kube.keys import SCHEDULING_GATE
from gatekeeper.core.writes.leftover_gates import lease_holder, plan_leftover_gates

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def pod(name: str, gates: list[str], *, namespace: str = "team", version: str | None = "7") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if version is not None:
        meta["resourceVersion"] = version
    return {"metadata": meta, "spec": {"schedulingGates": [{"name": g} for g in gates]}}


def lease(renewed_ago: float, *, holder: str = "gk-0", duration: int = 15) -> dict[str, Any]:
    renewed = (NOW - timedelta(seconds=renewed_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": renewed}}


@pytest.mark.parametrize(
    ("held", "holder"),
    [
        (None, ""),
        (lease(3), "gk-0"),
        (lease(20), ""),
        (lease(3, holder=""), ""),
        ({"spec": {"holderIdentity": "gk-0"}}, ""),
    ],
    ids=["no lease", "renewed within its duration", "not renewed for longer", "no holder", "no duration"],
)
def test_a_lease_is_held_while_it_is_renewed(held: dict[str, Any] | None, holder: str) -> None:
    assert lease_holder(held, NOW) == holder


def test_only_our_gate_is_removed_each_write_guarded_by_the_pods_version() -> None:
    pods = [
        pod("b", [SCHEDULING_GATE]),
        pod("a", ["other.example/gate", SCHEDULING_GATE], namespace="other"),
        pod("free", []),
        pod("theirs", ["other.example/gate"]),
        pod("unversioned", [SCHEDULING_GATE], version=None),
    ]
    plan = plan_leftover_gates(pods, None, NOW)
    assert plan.refused == ""
    assert [(u.namespace, u.name) for u in plan.pods] == [("other", "a"), ("team", "b")]
    first = plan.pods[0].ops
    assert first[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    assert {"op": "remove", "path": "/spec/schedulingGates/1"} in first
    assert {"op": "test", "path": "/spec/schedulingGates/1/name", "value": SCHEDULING_GATE} in first
    assert not [op for op in first if op["op"] == "remove" and op["path"].endswith("/0")], "their gate stays"


def test_a_gatekeeper_still_renewing_its_lease_is_left_its_gates_unless_forced() -> None:
    pods = [pod("b", [SCHEDULING_GATE])]
    refused = plan_leftover_gates(pods, lease(2), NOW)
    assert refused.pods == () and "holder gk-0" in refused.refused and "--force" in refused.refused
    assert [u.name for u in plan_leftover_gates(pods, lease(2), NOW, force=True).pods] == ["b"]
    assert [u.name for u in plan_leftover_gates(pods, lease(60), NOW).pods] == ["b"]

"""``controller.held``: the gauge of groups holding back pods their LWS did not say."""

from __future__ import annotations

from prometheus_client import REGISTRY

from gatekeeper.controller.held import report_held


def _value(reason: str) -> float | None:
    return REGISTRY.get_sample_value("lws_gatekeeper_groups_holding_pods", {"reason": reason})


def test_each_stranger_reason_is_counted_and_the_others_are_zero() -> None:
    report_held(["BeyondGroupSize", "Admitted", "NotAsAdmitted", "BeyondGroupSize", "WaitingForQuota"])
    assert (_value("BeyondGroupSize"), _value("NotAsAdmitted"), _value("NotMadeByLeaderWorkerSet")) == (
        2.0,
        1.0,
        0.0,
    )
    assert _value("Admitted") is None
    report_held([])
    assert _value("BeyondGroupSize") == 0.0, "a pass with none sets it back"

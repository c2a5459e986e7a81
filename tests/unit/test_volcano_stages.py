"""The ``volcano`` decision's give-back stage on its own: when a group is given back, what stops,
when its PodGroup goes.

``test_backend_volcano.py`` proves the whole pass; these tables pin the stage's rule.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from core_builders import group_pod, lws, record

from gatekeeper.core.admission.conformance import Departed
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.backends.volcano.giveback import Back, give_back, given_back, giving_back
from gatekeeper.core.kube.keys import GROUP_INDEX_LABEL, LWS_NAME_LABEL, LWS_UID_ANNOTATION
from gatekeeper.core.model.demand import GroupDemand, group_demand
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.groups import GroupState, LwsGroup
from gatekeeper.core.model.lws import GroupPod

LWS = lws("vllm").size(2).worker(gpu=1).uid("u-vllm").pool("q").obj()
NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
PG_KEY = ("default", "vllm-0-gk")
DEMAND = group_demand(LWS)
assert isinstance(DEMAND, GroupDemand)


def given(retry_at: str = "2025-01-01T12:01:00Z", *, reason: str = Reason.NOT_AS_ADMITTED) -> dict[str, Any]:
    rec = record(LWS, 0, admitted=False, reason=reason, pool="q")
    rec["status"]["retryAt"] = retry_at
    rec["status"]["conditions"][0]["message"] = "given back: pod vllm-0-1 asks 2 GPUs"
    return rec


@pytest.mark.parametrize(
    ("rec", "now", "held"),
    [
        pytest.param(given(), NOW, True, id="before-its-retry"),
        pytest.param(given("2025-01-01T11:59:59Z"), NOW, False, id="its-retry-has-come"),
        pytest.param(given(), None, False, id="no-time-no-give-back"),
        pytest.param(given(reason="WaitingForVolcano"), NOW, False, id="waiting-for-another-reason"),
        pytest.param(record(LWS, 0, admitted=True, pool="q"), NOW, False, id="admitted"),
        pytest.param(None, NOW, False, id="no-record"),
    ],
)
def test_a_group_is_held_back_only_until_its_retry(
    rec: dict[str, Any] | None, now: datetime | None, held: bool
) -> None:
    assert given_back(rec, now) is held


def pod(name: str, *, gated: bool, live: bool = True) -> GroupPod:
    return group_pod(name, gated=gated, live=live)


def group(rec: dict[str, Any] | None, *pods: GroupPod) -> LwsGroup:
    st = GroupState(
        key=GroupKey("default", "vllm", 0),
        lws_uid="u-vllm",
        pool="q",
        record="r",
        demand=DEMAND,
        pods=(),
        gated=(),
    )
    return LwsGroup(state=st, members=pods, present=pods, staying=True, record=rec)


def pod_group(uid: str = "u-vllm") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "vllm-0-gk",
            "namespace": "default",
            "uid": "pg-uid",
            "labels": {LWS_NAME_LABEL: "vllm", GROUP_INDEX_LABEL: "0"},
            "annotations": {LWS_UID_ANNOTATION: uid},
        }
    }


@pytest.mark.parametrize(
    ("pods", "charges", "pgs", "stop", "withdraw", "busy"),
    [
        pytest.param(
            [pod("vllm-0", gated=False), pod("vllm-0-1", gated=True)],
            {},
            {PG_KEY: pod_group()},
            [("default", "vllm-0")],
            None,
            True,
            id="its-running-pods-stop-first",
        ),
        pytest.param(
            [],
            {("default", "u-vllm", 0): ("relabelled",)},
            {PG_KEY: pod_group()},
            [("default", "relabelled")],
            None,
            True,
            id="a-pod-charged-to-it-counts",
        ),
        pytest.param(
            [pod("vllm-0", gated=True), pod("old", gated=False, live=False)],
            {},
            {PG_KEY: pod_group()},
            [],
            ("default", "vllm-0-gk", "pg-uid"),
            True,
            id="none-runs-its-pod-group-goes",
        ),
        pytest.param(
            [], {}, {PG_KEY: pod_group("earlier")}, [], None, False, id="an-earlier-lws-pod-group-is-not-ours"
        ),
        pytest.param([], {}, {}, [], None, False, id="its-pod-group-gone"),
    ],
)
def test_a_group_given_back_stops_its_pods_then_its_pod_group_goes(
    pods: list[GroupPod],
    charges: dict[tuple[str, str, int], tuple[str, ...]],
    pgs: dict[tuple[str, str], dict[str, Any]],
    stop: list[tuple[str, str]],
    withdraw: tuple[str, str, str] | None,
    busy: bool,
) -> None:
    holding = giving_back(group(given(), *pods), pgs, NOW, charges)
    assert holding is not None
    assert (list(holding.stop), holding.retire, holding.busy) == (stop, withdraw, busy)
    assert holding.message == "given back: pod vllm-0-1 asks 2 GPUs"


def test_a_group_not_given_back_is_not_held() -> None:
    assert giving_back(group(given("2025-01-01T11:00:00Z")), {PG_KEY: pod_group()}, NOW, {}) is None


@pytest.mark.parametrize(("retries", "delay"), [(0, 60), (1, 120), (3, 480)])
def test_each_give_back_doubles_the_wait_before_the_retry(retries: int, delay: int) -> None:
    rec = given()
    rec["status"]["retries"] = retries
    out = give_back(
        group(rec, pod("vllm-0", gated=False)), Departed("vllm-0-1", "asks 2 GPUs", 5), Back(NOW, 60, {})
    )
    assert out.retries == retries + 1
    assert out.retry_at == (NOW + timedelta(seconds=delay)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert out.stop == (("default", "vllm-0"),)


def test_a_give_back_needs_the_time_of_the_pass() -> None:
    with pytest.raises(ValueError, match="time of the pass"):
        give_back(group(given()), Departed("p", "why", 5), Back(None, 60, {}))

"""The pools' gauges show only what is (``controller.backends.pools.report_pools``): a deleted
Pool's series, a resource gone from its quota and a pool out of its cohort leave the scrape."""

from __future__ import annotations

from prometheus_client import REGISTRY

from gatekeeper.controller.backends.pools import report_pools
from gatekeeper.core.backends.pools.outcome import PoolStatus
from gatekeeper.core.model.pool import QueueingStrategy

GPU = "nvidia.com/gpu"


def _status(name: str, quota: dict[str, int], cohort: str = "") -> PoolStatus:
    return PoolStatus(
        name=name,
        queueing_strategy=QueueingStrategy.BEST_EFFORT_FIFO,
        quota=quota,
        used=dict.fromkeys(quota, 1),
        free={},
        admitted=1,
        waiting=2,
        inadmissible=0,
        nodes=1,
        cohort=cohort,
        lent=dict.fromkeys(quota, 1) if cohort else {},
    )


def _value(metric: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)


def test_series_of_what_is_gone_are_removed_and_the_rest_kept() -> None:
    series = report_pools(
        {
            "gauge-a": _status("gauge-a", {GPU: 4, "cpu": 8000}, cohort="c"),
            "gauge-b": _status("gauge-b", {GPU: 2}),
        },
        set(),
    )
    assert _value("gatekeeper_pool_quota", pool="gauge-a", resource="cpu") == 8000
    assert _value("gatekeeper_pool_lent", pool="gauge-a", resource=GPU) == 1
    assert _value("gatekeeper_waiting_groups", pool="gauge-b") == 2
    report_pools({"gauge-a": _status("gauge-a", {GPU: 4})}, series)
    assert _value("gatekeeper_pool_quota", pool="gauge-a", resource=GPU) == 4
    assert _value("gatekeeper_pool_quota", pool="gauge-a", resource="cpu") is None, "a resource gone"
    assert _value("gatekeeper_pool_lent", pool="gauge-a", resource=GPU) is None, "out of its cohort"
    assert _value("gatekeeper_waiting_groups", pool="gauge-b") is None, "a Pool deleted"
    assert _value("gatekeeper_pool_used", pool="gauge-b", resource=GPU) is None

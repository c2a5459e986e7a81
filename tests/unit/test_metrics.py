"""The metrics (``gatekeeper.metrics``): named by Prometheus' conventions, in base units, the
same for every backend; series of what is gone leave the scrape; a replica that stops leading
clears the leader's view; a name a tenant chooses cannot grow the scrape without bound."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

import gatekeeper.controller.app  # noqa: F401  (imports every module that counts)
from gatekeeper import metrics as m
from gatekeeper.controller.backends.pools import pool_series
from gatekeeper.core.backends.pools.outcome import PoolStatus
from gatekeeper.core.model.pool import QueueingStrategy

GPU = "nvidia.com/gpu"
ROOT = Path(__file__).resolve().parents[2]


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


def _ours() -> list[tuple[str, str]]:
    return [
        (f.name, f.type) for f in REGISTRY.collect() if f.name.startswith(("gatekeeper", "lws_gatekeeper"))
    ]


def test_every_metric_has_the_prefix_and_the_convention_of_its_type() -> None:
    ours = _ours()
    assert len(ours) >= 30
    for name, kind in ours:
        assert name.startswith(m.PREFIX), name
        assert re.fullmatch(r"[a-z_]+", name), name
        if kind == "histogram":
            assert name.endswith("_seconds"), name
        if kind == "gauge":
            assert not name.endswith("_total"), name


def _renamed() -> dict[str, str]:
    text = (ROOT / "docs/operations.md").read_text(encoding="utf-8")
    table = text.split("### Renamed metrics", 1)[1]
    return dict(re.findall(r"^\| `([a-z_]+)` \| `([a-z_]+)[`{]", table, re.M))


def test_the_docs_say_what_every_old_name_became_and_list_every_metric() -> None:
    families = {name for name, _ in _ours()}
    renamed = _renamed()
    assert len(renamed) >= 35
    for old, new in renamed.items():
        assert not old.startswith(m.PREFIX), old
        assert new.removesuffix("_total") in families, (old, new)
    assert "gatekeeper_forbidden_total" in renamed, "a name the last release scraped"
    text = (ROOT / "docs/operations.md").read_text(encoding="utf-8")
    for name in families:
        assert f"`{name}" in text, f"{name} is not in docs/operations.md"


def test_pool_series_are_in_base_units_and_what_is_gone_leaves_the_scrape() -> None:
    series = m.Series()
    series.publish(
        pool_series(
            {
                "gauge-a": _status("gauge-a", {GPU: 4, "cpu": 8000, "memory": 2**30}, cohort="c"),
                "gauge-b": _status("gauge-b", {GPU: 2}),
            }
        )
    )
    assert _value("lws_gatekeeper_pool_quota", pool="gauge-a", resource="cpu") == 8.0, "cores, not millicores"
    assert _value("lws_gatekeeper_pool_quota", pool="gauge-a", resource="memory") == 2**30
    assert _value("lws_gatekeeper_pool_used", pool="gauge-a", resource="cpu") == 0.001
    assert _value("lws_gatekeeper_pool_lent", pool="gauge-a", resource=GPU) == 1
    assert _value("lws_gatekeeper_waiting_groups", backend="pools", pool="gauge-b") == 2
    series.publish(pool_series({"gauge-a": _status("gauge-a", {GPU: 4})}))
    assert _value("lws_gatekeeper_pool_quota", pool="gauge-a", resource=GPU) == 4
    assert _value("lws_gatekeeper_pool_quota", pool="gauge-a", resource="cpu") is None, "a resource gone"
    assert _value("lws_gatekeeper_pool_lent", pool="gauge-a", resource=GPU) is None, "out of its cohort"
    assert _value("lws_gatekeeper_waiting_groups", backend="pools", pool="gauge-b") is None, "a Pool deleted"
    assert _value("lws_gatekeeper_pool_used", pool="gauge-b", resource=GPU) is None
    series.publish(())


@pytest.mark.parametrize(
    ("counts", "limit", "expected"),
    [
        ({}, 3, {}),
        ({"a": 1, "b": 2}, 3, {"a": 1, "b": 2}),
        ({"a": 1, "b": 2, "c": 3}, 3, {"a": 1, "b": 2, "c": 3}),
        ({"a": 1, "b": 2, "c": 3, "d": 4}, 3, {"d": 4, "c": 3, m.OTHER: 3}),
        ({"x": 1, "y": 1, "z": 1, "w": 1}, 2, {"w": 1, m.OTHER: 3}),
    ],
)
def test_bounded_keeps_the_largest_and_sums_the_rest(
    counts: dict[str, float], limit: int, expected: dict[str, float]
) -> None:
    assert m.bounded(counts, limit) == expected
    assert sum(m.bounded(counts, limit).values()) == sum(counts.values())


@pytest.mark.parametrize(
    ("resource", "units", "value"),
    [("cpu", 1500, 1.5), ("cpu", 0, 0.0), ("memory", 1024, 1024.0), (GPU, 8, 8.0), ("pods", 110, 110.0)],
)
def test_base_value(resource: str, units: int, value: float) -> None:
    assert m.base_value(resource, units) == value


def test_a_replica_that_stops_leading_clears_the_leaders_view_and_keeps_its_counters() -> None:
    m.leading(True)
    assert _value("lws_gatekeeper_leader") == 1
    m.WAITING_GROUPS.labels("pools", "lead-a").set(3)
    m.POOL_QUOTA.labels("lead-a", GPU).set(8)
    m.ADMISSIONS.labels("pools", "lead-a").inc()
    m.HUB_MEMBERS_GONE.set(2)
    m.leading(False)
    assert _value("lws_gatekeeper_hub_members_gone") == 0
    assert _value("lws_gatekeeper_leader") == 0
    assert _value("lws_gatekeeper_waiting_groups", backend="pools", pool="lead-a") is None
    assert _value("lws_gatekeeper_pool_quota", pool="lead-a", resource=GPU) is None
    assert (_value("lws_gatekeeper_admissions_total", backend="pools", pool="lead-a") or 0) >= 1


def test_build_info_is_one_series() -> None:
    m.build_info("1.2.3", "kueue", "member")
    m.build_info("1.2.4", "pools", "member")
    samples = [s for f in REGISTRY.collect() if f.name == "lws_gatekeeper_build_info" for s in f.samples]
    assert len(samples) == 1
    assert samples[0].labels["version"] == "1.2.4"
    assert samples[0].labels["backend"] == "pools"
    assert samples[0].value == 1

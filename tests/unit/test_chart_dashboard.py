"""The chart's Grafana dashboard: off by default, a ConfigMap for Grafana's sidecar when on, and
a JSON whose every query is one the end-to-end test runs, on metrics the gatekeeper exports.

``tests/e2e/test_dashboard.py`` runs the queries against a real Prometheus; this checks the
file itself and what the chart makes of it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

import gatekeeper.controller.app  # noqa: F401  (registers every metric of the controller)
from gatekeeper_lab.sandbox import build, dashboard
from tests.unit.test_chart import CHART, NAMESPACE, by_kind, one, template

FILE = CHART / "files" / "dashboards" / "lws-gatekeeper.json"


@pytest.fixture(scope="module")
def helm() -> Path:
    return build.build_all(["helm"])["helm"].bin / "helm"


@pytest.fixture(scope="module")
def board() -> dict[str, Any]:
    return dashboard.load(FILE)


def _exprs(node: Any) -> Iterator[str]:
    """Every ``expr`` anywhere in the JSON, however deep (rows, library panels...)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr":
                yield str(value)
            else:
                yield from _exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _exprs(item)


def test_the_module_reads_the_charts_file() -> None:
    assert FILE.resolve() == dashboard.DASHBOARD.resolve()


def test_every_expr_of_the_file_is_a_target_the_end_to_end_test_runs(board: dict[str, Any]) -> None:
    found = sorted(_exprs(board))
    assert found, "the dashboard has queries"
    assert sorted(t.expr for t in dashboard.targets(board)) == found


def test_the_panels_are_the_issues_and_each_has_a_query(board: dict[str, Any]) -> None:
    titles = [p["title"] for p in board["panels"]]
    for wanted in (
        "Pool quota and usage",
        "Waiting groups",
        "Admissions",
        "Give-backs",
        "Admission wait time",
        "Webhook latency",
        "Pass duration",
        "Replicas: leader and version",
        "API errors",
        "Shared reservation (hub)",
        "AdmissionCheck Workloads (Kueue)",
    ):
        assert wanted in titles
    for panel in board["panels"]:
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(set(refs)) == len(refs), panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["description"], panel["title"]
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])


def test_the_panels_tile_the_grid_without_overlap(board: dict[str, Any]) -> None:
    taken: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells


def test_every_variable_is_defined_and_filled_in(board: dict[str, Any]) -> None:
    names = {v["name"] for v in board["templating"]["list"]}
    assert names == {"datasource", "cluster", "backend", "pool", "resource"}
    assert dashboard.variables(board) == [
        dashboard.Variable("cluster", "lws_gatekeeper_build_info", "cluster"),
        dashboard.Variable("backend", "lws_gatekeeper_build_info", "backend"),
        dashboard.Variable("pool", "lws_gatekeeper_waiting_groups", "pool"),
        dashboard.Variable("resource", "lws_gatekeeper_pool_quota", "resource"),
    ]
    for t in dashboard.targets(board):
        filled = dashboard.promql(t.expr, rate_interval="30s", chosen={"pool": ["a-1", "b.2"]})
        assert "$" not in filled, filled
        assert 'cluster=~".*"' in filled, f"{t.panel}: every query is of the clusters chosen"
        if "$pool" in t.expr:
            assert 'pool=~"a-1|b\\\\.2"' in filled, "Grafana's escape: a PromQL string of a regex"
        if "$resource" in t.expr:
            assert 'resource=~".*"' in filled, "none chosen: All"
    with pytest.raises(ValueError, match=r"\$region"):
        dashboard.promql('up{region="$region"}', rate_interval="1m")


def test_what_every_backend_does_is_one_query_with_the_backend_variable(board: dict[str, Any]) -> None:
    shared = ("lws_gatekeeper_waiting_groups", "lws_gatekeeper_admissions_total", "lws_gatekeeper_reconcile")
    exprs = [t.expr for t in dashboard.targets(board) if any(name in t.expr for name in shared)]
    assert len(exprs) >= 5
    for expr in exprs:
        assert 'backend=~"$backend"' in expr, expr


def _exported() -> set[str]:
    """The sample names the controller's metrics export (a labelled metric with no child yet
    exports no sample, so the names are made from each family's type)."""
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}
    names = set()
    for family in REGISTRY.collect():
        for suffix in suffixes.get(family.type, [""]):
            names.add(family.name + suffix)
    return names


def test_every_metric_the_dashboard_reads_is_exported(board: dict[str, Any]) -> None:
    read = {m for t in dashboard.targets(board) for m in re.findall(r"\blws_gatekeeper_\w+", t.expr)}
    read |= {v.metric for v in dashboard.variables(board)}
    assert read, "the dashboard reads the gatekeeper's metrics"
    assert read <= _exported(), read - _exported()


def test_no_dashboard_by_default(helm: Path) -> None:
    assert not by_kind(template(helm), "ConfigMap")


def test_the_dashboard_configmap_is_labelled_for_grafanas_sidecar(helm: Path) -> None:
    cm = one(template(helm, "--set", "metrics.dashboard.enabled=true"), "ConfigMap")
    assert cm["metadata"]["name"] == "lws-gatekeeper-dashboard"
    assert cm["metadata"]["namespace"] == NAMESPACE
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["labels"]["app.kubernetes.io/name"] == "lws-gatekeeper"
    assert list(cm["data"]) == ["lws-gatekeeper.json"]
    assert json.loads(cm["data"]["lws-gatekeeper.json"]) == json.loads(FILE.read_text())


def test_the_dashboard_follows_its_values(helm: Path) -> None:
    values = {
        "metrics.dashboard.enabled": "true",
        "metrics.dashboard.namespace": "monitoring",
        "metrics.dashboard.labels.grafana_dashboard": "null",
        "metrics.dashboard.labels.dashboards": "gpu",
        "metrics.dashboard.annotations.grafana_folder": "GPU",
    }
    cm = one(template(helm, *[a for k, v in values.items() for a in ("--set", f"{k}={v}")]), "ConfigMap")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["dashboards"] == "gpu"
    assert "grafana_dashboard" not in cm["metadata"]["labels"]
    assert cm["metadata"]["annotations"] == {"grafana_folder": "GPU"}

"""The chart's Grafana dashboard read as Prometheus queries: each panel's targets, variables filled in.

Why this exists: the dashboard (``charts/lws-gatekeeper/files/dashboards/lws-gatekeeper.json``,
shipped in a ConfigMap by the chart) is proved by running its queries against a real
Prometheus. The end-to-end test (``tests/e2e/test_dashboard.py``) and the PNG renderer
(``dashboard_png.py``, ``scripts/dashboard-png``) both take the queries from the JSON
through :func:`targets`, so neither can drift from what Grafana shows; the chart's unit
test checks that :func:`targets` finds every ``expr`` of the file.

Grafana fills in variables before it sends a query; :func:`promql` does the same for the
ones the dashboard uses: its query variables ``$cluster``, ``$backend``, ``$pool`` and
``$resource`` (the values chosen, or "All", ``.*``) and ``$__rate_interval`` (a window the
caller picks: Grafana makes it at least four scrape intervals). A variable it does not know is an error, not a
query sent with a ``$`` in it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DASHBOARD",
    "QUERY_VARIABLES",
    "Target",
    "Variable",
    "legend",
    "load",
    "promql",
    "targets",
    "variables",
]

#: The dashboard file in a clone of the repository.
DASHBOARD = Path(__file__).resolve().parents[3] / "charts/lws-gatekeeper/files/dashboards/lws-gatekeeper.json"

#: The dashboard's query variables, each a label the queries match on.
QUERY_VARIABLES = ("cluster", "backend", "pool", "resource")

_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_LABEL_VALUES = re.compile(r"^label_values\(\s*(\w+)\s*,\s*(\w+)\s*\)$")


@dataclass(frozen=True)
class Target:
    """One query of one panel, as the dashboard has it (variables not filled in)."""

    panel: str
    ref: str
    expr: str
    legend: str
    unit: str


@dataclass(frozen=True)
class Variable:
    """A query variable ``label_values(metric, label)``: the values of ``label`` on ``metric``."""

    name: str
    metric: str
    label: str


def load(path: Path = DASHBOARD) -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(path.read_text())
    return dashboard


def _panels(panels: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels") or [])  # the panels of a row


def targets(dashboard: Mapping[str, Any]) -> list[Target]:
    """Every query of every panel (rows' panels too), in the dashboard's order."""
    out = []
    for panel in _panels(dashboard.get("panels") or []):
        unit = str(panel.get("fieldConfig", {}).get("defaults", {}).get("unit", ""))
        for t in panel.get("targets") or []:
            out.append(
                Target(
                    str(panel["title"]), str(t["refId"]), str(t["expr"]), str(t.get("legendFormat", "")), unit
                )
            )
    return out


def variables(dashboard: Mapping[str, Any]) -> list[Variable]:
    """The dashboard's query variables (``label_values(metric, label)``; others are refused)."""
    out = []
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        match = _LABEL_VALUES.match(str(query).strip())
        if match is None:
            raise ValueError(f"variable {var['name']}: only label_values(metric, label) is read here")
        out.append(Variable(str(var["name"]), match.group(1), match.group(2)))
    return out


def _regex_escape(value: str) -> str:
    """A value of a multi-value variable in a ``=~"..."`` matcher, as Grafana writes it: each
    regex metacharacter after two backslashes (one for the PromQL string, one for the regex)."""
    return re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\\\1", value)


def promql(expr: str, *, rate_interval: str, chosen: Mapping[str, Sequence[str]] | None = None) -> str:
    """``expr`` with Grafana's variables filled in: each query variable (``QUERY_VARIABLES``)
    with its ``chosen`` values (none chosen: "All", ``.*``) and ``$__rate_interval``. Raises on
    any other variable."""
    chosen = chosen or {}
    values = {v: "|".join(map(_regex_escape, chosen.get(v, ()))) or ".*" for v in QUERY_VARIABLES}
    values["__rate_interval"] = rate_interval

    def fill(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in values:
            raise ValueError(f"{expr!r}: variable ${name} is not one the dashboard defines")
        return values[name]

    return _VARIABLE.sub(fill, expr)


def legend(fmt: str, labels: Mapping[str, str]) -> str:
    """A series' name as Grafana's ``legendFormat`` makes it (``{{pool}} p99``)."""
    if not fmt:
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()

"""Draw the chart's Grafana dashboard as a PNG from a Prometheus' answers to its own queries.

Why this exists: docs/operations.md shows what the dashboard looks like, and Grafana cannot run on
our machines. So this takes every panel's queries from the dashboard's JSON
(``dashboard.py``, as the end-to-end test does), asks a Prometheus for them with
``query_range`` (the sandbox's, ``sandbox up --with-prometheus``, or any URL) over a
window, and plots each panel where the dashboard's grid puts it, with its title, legend
format and unit. ``scripts/dashboard-png`` runs it; ``docs/dashboard.png`` is its output
after ``tests/e2e/test_dashboard.py``'s scale-up. matplotlib is a dev-only dependency and
is imported only here, only when drawing.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gatekeeper_lab.sandbox import dashboard, prometheus
from gatekeeper_lab.sandbox.cluster import Sandbox

__all__ = ["Drawn", "fetch", "main", "render"]

# (panel title) -> [(legend, dashed, [(unix seconds, value)])]
Drawn = dict[str, list[tuple[str, bool, list[tuple[float, float]]]]]

_SCALE = {"percentunit": (100.0, "%"), "ops": (1.0, "/s"), "reqps": (1.0, "req/s"), "short": (1.0, "")}


def fetch(
    base: str,
    board: Mapping[str, Any],
    *,
    start: float,
    end: float,
    step: float,
    rate_interval: str,
    chosen: Mapping[str, Sequence[str]],
) -> Drawn:
    """Every series of every panel's queries, over ``[start, end]``: what the PNG draws."""
    dashed = _dashed_refs(board)
    out: Drawn = {}
    for t in dashboard.targets(board):
        expr = dashboard.promql(t.expr, rate_interval=rate_interval, chosen=chosen)
        lines = out.setdefault(t.panel, [])
        for series in prometheus.query_range(base, expr, start=start, end=end, step=step):
            points = _with_gaps([(float(at), float(v)) for at, v in series["values"]], step)
            lines.append((dashboard.legend(t.legend, series["metric"]), (t.panel, t.ref) in dashed, points))
    return out


def _with_gaps(points: list[tuple[float, float]], step: float) -> list[tuple[float, float]]:
    """The points with a NaN wherever steps are missing (a filter such as ``> 0`` dropped
    them): the line breaks there, as Grafana's does, instead of joining across the gap."""
    out: list[tuple[float, float]] = []
    for at, value in points:
        if out and at - out[-1][0] > 1.5 * step:
            out.append((out[-1][0] + step, math.nan))
        out.append((at, value))
    return out


def _dashed_refs(board: Mapping[str, Any]) -> set[tuple[str, str]]:
    """(panel, refId) of the queries the dashboard draws dashed (its quota lines)."""
    found = set()
    for panel in board.get("panels") or []:
        for override in panel.get("fieldConfig", {}).get("overrides") or []:
            matcher = override.get("matcher", {})
            styles = [p for p in override.get("properties") or [] if p.get("id") == "custom.lineStyle"]
            if matcher.get("id") == "byFrameRefID" and any(s["value"].get("fill") == "dash" for s in styles):
                found.add((str(panel["title"]), str(matcher["options"])))
    return found


def _scale(unit: str, peak: float) -> tuple[float, str]:
    if unit == "s":
        return (1000.0, "ms") if peak < 1 else (1.0, "s")
    return _SCALE.get(unit, (1.0, unit))


def render(board: Mapping[str, Any], drawn: Drawn, out: Path, *, start: float, end: float, note: str) -> None:
    """Draw ``drawn`` in the dashboard's grid (24 columns, 8-row panels) into ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(board.get("panels") or [])
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels) // 8
    height = 3.3 * rows + 1.2
    fig = plt.figure(figsize=(16, height), dpi=100)
    grid = fig.add_gridspec(rows, 24, hspace=0.55, wspace=0.9, top=1 - 1.2 / height, bottom=0.04)
    stamp = datetime.fromtimestamp(start, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    fig.suptitle(f"{board.get('title')}: {stamp} + {end - start:.0f} s\n{note}", fontsize=11)
    for panel in panels:
        g = panel["gridPos"]
        ax = fig.add_subplot(grid[g["y"] // 8 : (g["y"] + g["h"]) // 8, g["x"] : g["x"] + g["w"]])
        unit = str(panel.get("fieldConfig", {}).get("defaults", {}).get("unit", ""))
        lines = drawn.get(str(panel["title"]), [])
        finite = [v for _, _, pts in lines for _, v in pts if math.isfinite(v)]
        factor, label = _scale(unit, max(finite, default=0.0))
        for name, dashed, pts in lines:
            xs = [at - start for at, _ in pts]
            ys = [v * factor if math.isfinite(v) else math.nan for _, v in pts]
            if dashed:  # a limit (the quota): drawn over the lines that reach it
                ax.plot(xs, ys, linestyle="--", linewidth=2, color="0.3", zorder=3, label=name)
            else:
                ax.plot(xs, ys, linewidth=1.4, label=name)
        ax.set_title(str(panel["title"]), fontsize=10, loc="left")
        ax.set_xlim(0, end - start)
        ax.set_ylim(bottom=0)
        ax.set_ylabel(label, fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if lines:
            ax.legend(fontsize=7, loc="upper left", ncol=2 if len(lines) > 4 else 1, framealpha=0.7)
        else:
            ax.text(0.5, 0.5, "No data", transform=ax.transAxes, ha="center", va="center", color="grey")
        if g["y"] + g["h"] == rows * 8:
            ax.set_xlabel("seconds", fontsize=8)
    fig.savefig(out)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/dashboard-png", description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--dir", type=Path, help="a sandbox started with --with-prometheus")
    where.add_argument("--prometheus", help="the base URL of a Prometheus")
    parser.add_argument("--seconds", type=float, default=300, help="the window: the last N seconds")
    parser.add_argument("--start", type=float, help="the window's start (unix seconds), instead")
    parser.add_argument("--end", type=float, help="the window's end (unix seconds; default now)")
    parser.add_argument("--pool", action="append", default=[], help="only these Pools (default: all)")
    parser.add_argument("--resource", action="append", default=[], help="resources of the quota panel")
    parser.add_argument("--rate-interval", default="15s", help="$__rate_interval (default 15s)")
    parser.add_argument("--step", type=float, default=1.0, help="seconds between points (default 1)")
    parser.add_argument("--out", type=Path, default=Path("dashboard.png"))
    args = parser.parse_args(argv)
    base = args.prometheus or Sandbox(args.dir).prometheus_url()
    board = dashboard.load()
    end = args.end or time.time()
    start = args.start or end - args.seconds
    chosen = {"pool": args.pool, "resource": args.resource or ["nvidia.com/gpu"]}
    drawn = fetch(
        base, board, start=start, end=end, step=args.step, rate_interval=args.rate_interval, chosen=chosen
    )
    note = (
        "each panel: the dashboard's own queries (charts/lws-gatekeeper/files/dashboards), "
        f"Prometheus query_range, step {args.step:g} s, $__rate_interval {args.rate_interval}"
    )
    render(board, drawn, args.out, start=start, end=end, note=note)
    print(f"{args.out}: {sum(len(v) for v in drawn.values())} series in {len(drawn)} panels")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

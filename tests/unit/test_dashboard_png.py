"""The dashboard PNG renderer: gaps stay gaps, quota lines are found, every panel is drawn.

``docs/dashboard.png`` is drawn by it from a real Prometheus (``scripts/dashboard-png``);
this draws made-up series into a temporary file and reads the PNG back (matplotlib is a dev
dependency: without it these fail, they do not skip).
"""

from __future__ import annotations

import math
from pathlib import Path

from gatekeeper_lab.sandbox import dashboard, dashboard_png


def test_missing_steps_break_the_line() -> None:
    points = dashboard_png._with_gaps([(0.0, 1.0), (1.0, 2.0), (5.0, 3.0)], 1.0)
    assert [at for at, _ in points] == [0.0, 1.0, 2.0, 5.0]
    assert math.isnan(points[2][1]) and points[3] == (5.0, 3.0)


def test_the_quota_query_is_the_dashed_one() -> None:
    assert dashboard_png._dashed_refs(dashboard.load()) == {("Pool quota and usage", "A")}


def test_every_panel_is_drawn_into_a_png(tmp_path: Path) -> None:
    board = dashboard.load()
    drawn: dashboard_png.Drawn = {
        t.panel: [(t.legend, False, [(100.0 + i, float(i)) for i in range(30)])]
        for t in dashboard.targets(board)
    }
    drawn["API errors"] = []  # a panel with no data says so
    out = tmp_path / "d.png"
    dashboard_png.render(board, drawn, out, start=100.0, end=130.0, note="test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 20_000

"""Draw the scale curve from ``bench_scale.py --out`` files: one point per file (its size).

Four panels against the pods of the run: the time to all Running with the gatekeeper
against the run without it (each alternated pair's ratio: median, with min and max as the
bar), the gatekeeper's passes' wall time (p50 and p99), its peak memory (VmHWM) and its pod
webhook's p99 as the API server timed it (each the median of the runs). A knee shows as a bend in any of them.

Usage: python benchmarks/plot_scale.py OUT.svg|OUT.png RUN.json [RUN.json ...]
matplotlib comes with the lab (lab/pyproject.toml).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def points(files: list[Path]) -> list[dict[str, float]]:
    """Per file: pods, nodes and the figures the panels draw (the ``fit`` runs)."""
    out = []
    for path in files:
        runs = [r for r in json.loads(path.read_text())["runs"] if r["scenario"] == "fit"]
        plain = [r for r in runs if r["mode"] == "default"]
        mine = [r for r in runs if r["mode"] == "gatekeeper"]
        ratios = [m["running_s"] / p["running_s"] for p, m in zip(plain, mine, strict=True)]
        out.append(
            {
                "pods": mine[0]["pods"],
                "nodes": mine[0].get("nodes", 0),
                "ratio_min": min(ratios),
                "ratio": statistics.median(ratios),
                "ratio_max": max(ratios),
                "pass_p50": statistics.median(r.get("pass_p50_s", float("nan")) for r in mine),
                "pass_p99": statistics.median(r.get("pass_p99_s", float("nan")) for r in mine),
                "rss": statistics.median(r["peak_rss_mib"] for r in mine),
                "webhook_p99": statistics.median(r["webhook_p99_ms"] for r in mine),
            }
        )
    return sorted(out, key=lambda p: p["pods"])


def draw(out: Path, pts: list[dict[str, float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pods = [p["pods"] for p in pts]
    fig, (a, b, c, d) = plt.subplots(1, 4, figsize=(17, 4))
    err = [[p["ratio"] - p["ratio_min"] for p in pts], [p["ratio_max"] - p["ratio"] for p in pts]]
    a.errorbar(pods, [p["ratio"] for p in pts], yerr=err, marker="o", capsize=4)
    a.axhline(1.1, linestyle="--", color="grey", label="target 1.1x")
    a.set(title="all Running, gatekeeper / none", xlabel="pods", ylabel="ratio (pairs: median, min-max)")
    a.legend()
    b.plot(pods, [p["pass_p50"] for p in pts], marker="o", label="p50")
    b.plot(pods, [p["pass_p99"] for p in pts], marker="s", label="p99")
    b.axhline(0.5, linestyle="--", color="grey", label="target p99 0.5 s")
    b.set(title="pass wall time", xlabel="pods", ylabel="seconds")
    b.legend()
    c.plot(pods, [p["rss"] for p in pts], marker="o")
    c.axhline(400, linestyle="--", color="grey", label="target 400 MiB")
    c.set(title="gatekeeper peak RSS", xlabel="pods", ylabel="MiB")
    c.legend()
    d.plot(pods, [p["webhook_p99"] for p in pts], marker="o")
    d.set(title="pod webhook p99 at the API server", xlabel="pods", ylabel="ms")
    for ax in (a, b, c, d):
        ax.set_xticks(pods, [f"{int(p['pods'])}\n{int(p['nodes'])} nodes" for p in pts])
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(out, metadata={"Date": None})


def main(argv: list[str]) -> None:
    if len(argv) < 3:
        sys.exit(__doc__)
    pts = points([Path(a) for a in argv[2:]])
    for p in pts:
        print(
            f"{int(p['pods']):5} pods on {int(p['nodes']):4} nodes: ratio {p['ratio_min']:.2f} / "
            f"{p['ratio']:.2f} / {p['ratio_max']:.2f}; pass p50 / p99 {p['pass_p50']:.2f} / "
            f"{p['pass_p99']:.2f} s; peak RSS {p['rss']:.0f} MiB; webhook p99 {p['webhook_p99']:.0f} ms"
        )
    draw(Path(argv[1]), pts)


if __name__ == "__main__":
    main(sys.argv)

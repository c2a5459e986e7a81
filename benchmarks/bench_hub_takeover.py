"""What a new term of the hub pays before its first grant: one fence per Pending claim.

A new term of the hub's leader cannot know the grants the last term still had in flight,
so its first pass fences every Pending claim (``core.reservation.unsure``) before it grants
anything. This starts the hub's gatekeeper afresh (a new term) on a sandbox hub of its own
whose Reservation has room for one 8-GPU claim and holds N Pending claims of 8 GPUs, the
oldest of them ``first``, and times from the start of the process until ``first`` is
Granted; N = 0 is the same run's baseline (the process's start, its lists, one pass). Each
figure is the median of ``RUNS``. Printed: N, the seconds, the ratio against N = 0, and
the fences per second the term wrote.
Run: ``.venv/bin/python benchmarks/bench_hub_takeover.py [--sizes 0,500,2000] [--dir D]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from gatekeeper.core.kube.keys import GATEKEEPER_API_VERSION
from gatekeeper.core.reservation import CLUSTER_LABEL, member_namespace
from gatekeeper_lab.sandbox.cluster import default_dir
from gatekeeper_lab.sandbox.hub import GATEKEEPER, Hub

RESERVATION = "takeover"
HOME = member_namespace("cluster-a")
RUNS = 3


def claim(i: int) -> dict[str, Any]:
    name = "first" if i == 0 else f"c{i:05d}"
    return {
        "apiVersion": GATEKEEPER_API_VERSION,
        "kind": "ReservationClaim",
        "metadata": {"name": name, "namespace": HOME, "labels": {CLUSTER_LABEL: "cluster-a"}},
        "spec": {
            "reservation": RESERVATION,
            "cluster": "cluster-a",
            "namespace": "team",
            "leaderWorkerSet": f"lws-{i}",
            "leaderWorkerSetUID": f"uid-{i}",
            "groupIndex": 0,
            "groupCreated": f"2026-01-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
            "demand": {"nvidia.com/gpu": "8"},
        },
    }


def _granted(hub: Hub) -> bool:
    out = hub.kubectl("get", "reservationclaim", "first", "-n", HOME, "-o", "json", check=False)
    return out.returncode == 0 and json.loads(out.stdout).get("status", {}).get("state") == "Granted"


def one_run(hub: Hub, pending: int) -> float:
    hub.kubectl("delete", "reservationclaims", "--all", "-n", HOME, "--wait=false")
    while hub.kubectl("get", "reservationclaims", "-n", HOME, "-o", "name").stdout.strip():
        time.sleep(0.5)  # (kubectl's --wait waits for one object after the other)
    objs = [claim(i) for i in range(pending + 1)]
    for start in range(0, len(objs), 500):
        items = {"apiVersion": "v1", "kind": "List", "items": objs[start : start + 500]}
        hub.kubectl("create", "-f", "-", input=json.dumps(items))
    begin = time.monotonic()
    hub.start_gatekeeper(args=("--no-leader-elect",))
    while not _granted(hub):
        time.sleep(0.1)
    took = time.monotonic() - begin
    hub.stop(GATEKEEPER, kill=True)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0,500,2000", help="numbers of other Pending claims")
    parser.add_argument("--dir", type=Path, default=None, help="the hub's folder")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    hub = Hub(args.dir or Path(f"{default_dir('bench')}-takeover-hub"), say=lambda m: None)
    hub.up(gatekeeper=False)
    try:
        reservation = {
            "apiVersion": GATEKEEPER_API_VERSION,
            "kind": "Reservation",
            "metadata": {"name": RESERVATION},
            "spec": {"capacity": {"nvidia.com/gpu": "8"}},
        }
        home = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": HOME}}
        hub.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [home, reservation]}),
        )
        print(f"{'Pending claims':>15} | {'start to first grant (s)':>25} | {'x N=0':>6} | fences/s")
        base = None
        for n in sizes:
            seconds = statistics.median(one_run(hub, n) for _ in range(RUNS))
            base = base if base is not None else seconds
            extra = seconds - base
            rate = f"{(n + 1) / extra:.0f}" if n and extra > 0 else "-"
            print(f"{n + 1:>15} | {seconds:>25.2f} | {seconds / base:>6.2f} | {rate}")
    finally:
        hub.down(quiet=True)


if __name__ == "__main__":
    main()

"""Churn benchmark: a burst of gangs of mixed sizes on whole 8-GPU nodes, each running a
fixed time once whole and then deleted, with and without the gatekeeper.

Why this exists: a scale-up (``bench_scale.py``) says how fast groups start; a shared pool
lives by how well it keeps its nodes busy while gangs come and go. GANGS LWSs (one group
each, of 1 to 32 pods drawn from a seed, each pod asking a whole node's 8 GPUs) are
created at once on NODES nodes. A gang runs RUN seconds from the moment all its pods are
Running, then its LWS is deleted. Its pods are sampled every 0.5 s. Printed per mode:

* makespan (burst created -> last gang done) against its lower bound, the total
  node-seconds asked divided by the node count (no schedule can do better);
* mean GPU occupancy by whole gangs (GPU-seconds of gangs with every pod Running, over
  all GPUs for the makespan);
* peak GPUs stranded (bound to pods of gangs not whole) and the longest any gang sat
  partly bound;
* gangs that never ran before the cap (the lower bound + CAP_EXTRA seconds, or 3x it).

Modes: ``default`` (not opted in: the default scheduler alone), ``strict`` and
``besteffort`` (a Pool with ``queueingStrategy`` StrictFIFO or BestEffortFIFO).

Usage: python benchmarks/bench_churn.py [--nodes 32] [--gangs 30] [--run 15] [--seed 7]
       [--modes default,strict,besteffort] [--keep]
It starts its own sandbox (folder sandboxes/bench-churn in the cache) and stops it.
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import kr8s.asyncio

from gatekeeper.core.keys import LWS_NAME_LABEL, POOL_LABEL
from gatekeeper.sandbox.cluster import Sandbox, default_dir, fake_node
from gatekeeper.sandbox.replay import LeaderWorkerSet, list_raw

SIZES = (1, 1, 2, 2, 2, 4, 4, 8, 16, 32)
"""Gang sizes are drawn from these (pods, each a whole node)."""
GPUS_PER_NODE = 8
SAMPLE_SECONDS = 0.5
CAP_EXTRA = 120.0
LABEL = {"bench": "churn"}


@dataclass
class Gang:
    name: str
    size: int
    whole_at: float | None = None
    done_at: float | None = None
    partial_since: float | None = None
    longest_partial: float = 0.0


@dataclass
class Tally:
    occupied: float = 0.0
    """GPU-seconds of whole gangs."""
    peak_stranded: int = 0
    samples: int = 0
    gangs: list[Gang] = field(default_factory=list)


def gangs_of(seed: int, count: int, nodes: int) -> list[Gang]:
    rng = random.Random(seed)
    return [Gang(f"g{i:03d}", min(rng.choice(SIZES), nodes)) for i in range(count)]


def lws(gang: Gang, namespace: str, pool: str | None) -> dict[str, Any]:
    gpus = str(GPUS_PER_NODE)
    pod = {
        "spec": {
            "nodeSelector": dict(LABEL),
            "containers": [
                {
                    "name": "c",
                    "image": "vllm",
                    "resources": {"requests": {"nvidia.com/gpu": gpus}, "limits": {"nvidia.com/gpu": gpus}},
                }
            ],
        }
    }
    body: dict[str, Any] = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": gang.name, "namespace": namespace, "labels": {}},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {"size": gang.size, "leaderTemplate": pod, "workerTemplate": pod},
        },
    }
    if pool:
        body["metadata"]["labels"][POOL_LABEL] = pool
    return body


def _running(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("nodeName")) and pod.get("status", {}).get("phase") == "Running"


async def one_mode(sb: Sandbox, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    api = await kr8s.asyncio.api(kubeconfig=str(sb.kubeconfig))
    ns = f"churn-{mode}"
    sb.kubectl("create", "namespace", ns)
    pool = None
    if mode != "default":
        pool = f"churn-{mode}"
        strategy = "StrictFIFO" if mode == "strict" else "BestEffortFIFO"
        sb.apply(
            [
                {
                    "apiVersion": "lws-gatekeeper.io/v1alpha1",
                    "kind": "Pool",
                    "metadata": {"name": pool},
                    "spec": {
                        "nodeSelector": dict(LABEL),
                        "namespaceSelector": {},
                        "queueingStrategy": strategy,
                    },
                }
            ]
        )
    gangs = gangs_of(args.seed, args.gangs, args.nodes)
    bound = sum(g.size for g in gangs) * args.run / args.nodes
    cap = max(bound + CAP_EXTRA, 3 * bound)
    tally = Tally(gangs=gangs)
    start = time.monotonic()
    for gang in gangs:  # the burst, in order: the queue's order is the gangs' age
        await (await LeaderWorkerSet(lws(gang, ns, pool), api=api)).create()
    last = time.monotonic()
    while time.monotonic() - start < cap and any(g.done_at is None for g in gangs):
        await anyio.sleep(SAMPLE_SECONDS)
        pods = await list_raw(api, "pods", namespace=ns)
        now = time.monotonic()
        dt, last = now - last, now
        by_gang: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            if not pod["metadata"].get("deletionTimestamp"):
                by_gang.setdefault(pod["metadata"].get("labels", {}).get(LWS_NAME_LABEL, ""), []).append(pod)
        stranded = 0
        for gang in gangs:
            if gang.done_at is not None:
                continue
            mine = by_gang.get(gang.name, [])
            running = sum(1 for p in mine if _running(p))
            placed = sum(1 for p in mine if p["spec"].get("nodeName"))
            if gang.whole_at is None and running == gang.size:
                gang.whole_at = now
            if gang.whole_at is not None:
                tally.occupied += gang.size * GPUS_PER_NODE * dt
                if now - gang.whole_at >= args.run:
                    gang.done_at = now
                    obj = await LeaderWorkerSet.get(gang.name, namespace=ns, api=api)
                    await obj.delete()
                continue
            if placed:
                stranded += placed * GPUS_PER_NODE
                gang.partial_since = gang.partial_since or now
                gang.longest_partial = max(gang.longest_partial, now - gang.partial_since)
            else:
                gang.partial_since = None
        tally.peak_stranded = max(tally.peak_stranded, stranded)
        tally.samples += 1
    end = time.monotonic()
    finished = [g.done_at for g in gangs if g.done_at is not None]
    all_done = len(finished) == len(gangs)
    makespan = (max(finished) - start) if all_done else end - start
    sb.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=300s", check=False)
    if pool:
        sb.kubectl("delete", "pool", pool, check=False)
    return {
        "mode": mode,
        "makespan": makespan,
        "all_done": all_done,
        "bound": bound,
        "occupancy": tally.occupied / (args.nodes * GPUS_PER_NODE * makespan),
        "peak_stranded": tally.peak_stranded,
        "longest_partial": max(g.longest_partial for g in gangs),
        "never_ran": sum(1 for g in gangs if g.whole_at is None),
        "samples": tally.samples,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--gangs", type=int, default=30)
    ap.add_argument("--run", type=float, default=15.0, help="seconds a gang runs once whole")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--modes", default="default,strict,besteffort")
    ap.add_argument("--keep", action="store_true", help="leave the sandbox running")
    args = ap.parse_args()
    sizes = [g.size for g in gangs_of(args.seed, args.gangs, args.nodes)]
    print(f"{args.gangs} gangs of sizes {sizes} ({sum(sizes)} nodes' worth), {args.run:.0f} s each, "
          f"on {args.nodes} nodes of {GPUS_PER_NODE} GPUs; seed {args.seed}", flush=True)  # fmt: skip
    sb = Sandbox(default_dir("bench-churn"), say=lambda m: print(m, flush=True))
    sb.up(nodes=0)
    try:
        node = {"gpus": GPUS_PER_NODE, "cpu": "64", "memory": "512Gi", "labels": dict(LABEL)}
        sb.create_nodes([fake_node(f"churn-{i}", **node) for i in range(args.nodes)])  # type: ignore[arg-type]
        time.sleep(3)  # nodes Ready
        rows = [anyio.run(one_mode, sb, mode, args) for mode in args.modes.split(",")]
    finally:
        if not args.keep:
            sb.down()
    print()
    print(
        f"{'mode':10} | {'makespan (s)':>12} | {'x bound':>7} | {'mean occupancy':>14} | "
        f"{'peak GPUs stranded':>18} | {'longest partial (s)':>19} | never ran"
    )
    for r in rows:
        span = f"{r['makespan']:.1f}" + ("" if r["all_done"] else " (cap)")
        print(
            f"{r['mode']:10} | {span:>12} | {r['makespan'] / r['bound']:>7.2f} | "
            f"{100 * r['occupancy']:>13.1f}% | {r['peak_stranded']:>18} | {r['longest_partial']:>19.1f} | "
            f"{r['never_ran']}"
        )
    print(
        f"lower bound {rows[0]['bound']:.1f} s (total node-seconds / nodes); samples every {SAMPLE_SECONDS} s"
    )


if __name__ == "__main__":
    main()

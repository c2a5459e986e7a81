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
* gangs that never ran before the cap (the lower bound + CAP_EXTRA seconds, or 3x it);
* where the nodes' time went, sampled: held by whole gangs, being released (a done gang's pods
  until they are gone: the garbage collector's chain LWS -> StatefulSets -> pods, then KWOK),
  starting (bound to a gang not yet whole), admitted and not bound yet (its pods not made
  yet, or gated until the gatekeeper's write, or Pending for the scheduler), free while a
  waiting gang would fit (the gatekeeper has not admitted it yet), and free with no
  waiting gang that fits (the queueing strategy);
* the same strategy's makespan with no latency at all (``ideal``: each gang admitted the
  moment its room is free, Running at once): what the strategy itself costs.

Modes: ``default`` (not opted in: the default scheduler alone), ``strict`` and
``besteffort`` (a Pool with ``queueingStrategy`` StrictFIFO or BestEffortFIFO).

Usage: python benchmarks/bench_churn.py [--nodes 32] [--gangs 30] [--run 15] [--seed 7]
       [--modes default,strict,besteffort] [--keep]
It starts its own sandbox (folder sandboxes/bench-churn in the cache) and stops it.
"""

from __future__ import annotations

import argparse
import heapq
import random
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import kr8s.asyncio

from gatekeeper.core.kube.keys import LWS_NAME_LABEL, POOL_LABEL, SCHEDULING_GATE
from gatekeeper_lab.sandbox.cluster import Sandbox, default_dir, fake_node
from gatekeeper_lab.sandbox.replay import LeaderWorkerSet, list_raw

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


IDLE = ("releasing", "starting", "not bound", "waiting fits", "nothing fits")
"""Node time not held by a whole gang, by why (see the module's docstring)."""


@dataclass
class Tally:
    occupied: float = 0.0
    """GPU-seconds of whole gangs."""
    idle: dict[str, float] = field(default_factory=lambda: dict.fromkeys(IDLE, 0.0))
    """Node-seconds not held by a whole gang, by why."""
    peak_stranded: int = 0
    samples: int = 0
    gangs: list[Gang] = field(default_factory=list)


def gangs_of(seed: int, count: int, nodes: int) -> list[Gang]:
    rng = random.Random(seed)
    return [Gang(f"g{i:03d}", min(rng.choice(SIZES), nodes)) for i in range(count)]


def ideal(sizes: list[int], nodes: int, run: float, strict: bool) -> float:
    """The makespan of the queueing strategy alone: every gang in the burst's order, each
    admitted the moment its room is free (StrictFIFO: only from the head of the queue;
    BestEffortFIFO: any gang that fits, in order) and done ``run`` seconds later."""
    free, queue, end = nodes, list(sizes), 0.0
    sizes_at: list[tuple[float, int]] = []  # (when it ends, size) of the gangs running

    def admit(now: float) -> None:
        nonlocal free
        i = 0
        while i < len(queue):
            if queue[i] <= free:
                free -= queue[i]
                heapq.heappush(sizes_at, (now + run, queue.pop(i)))
            elif strict:
                return
            else:
                i += 1

    admit(0.0)
    while sizes_at:
        end, size = heapq.heappop(sizes_at)
        free += size
        while sizes_at and sizes_at[0][0] == end:
            free += heapq.heappop(sizes_at)[1]
        admit(end)
    return end if not queue else float("inf")


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


def _gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == SCHEDULING_GATE for g in pod["spec"].get("schedulingGates") or ())


def idle_nodes(
    nodes: int, pods: list[dict[str, Any]], gangs: list[Gang], admitted: set[str], strict: bool
) -> dict[str, int]:
    """Nodes not held by a whole gang in one sample, by why (each pod is a whole node).

    ``admitted``: the gangs whose record says Admitted (without the gatekeeper, every gang
    that has a pod without the gate). Free nodes go first to the admitted gangs not yet
    whole (their pods not made yet, gated until the gatekeeper's write, or not bound yet by
    the scheduler), then to the waiting gangs that fit, in the queue's order."""
    out = dict.fromkeys(IDLE, 0)
    done = {g.name for g in gangs if g.done_at is not None}
    whole = {g.name for g in gangs if g.whole_at is not None and g.done_at is None}
    bound: dict[str, int] = {}
    held = 0
    for pod in pods:
        if not pod["spec"].get("nodeName"):
            continue
        held += 1
        gang = pod["metadata"].get("labels", {}).get(LWS_NAME_LABEL, "")
        if pod["metadata"].get("deletionTimestamp") or gang in done:
            out["releasing"] += 1
        elif gang not in whole:
            out["starting"] += 1
            bound[gang] = bound.get(gang, 0) + 1
    free = max(0, nodes - held)
    coming = sum(g.size - bound.get(g.name, 0) for g in gangs if g.name in admitted and g.whole_at is None)
    out["not bound"] = min(free, coming)
    free -= out["not bound"]
    fits = 0
    for g in gangs:  # the waiting gangs, in the queue's order
        if g.whole_at is not None or g.name in admitted:
            continue
        if g.size <= free - fits:
            fits += g.size
        elif strict:
            break
    out["waiting fits"] = fits
    out["nothing fits"] = free - fits
    return out


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
        if pool:
            records = await list_raw(api, "groupadmissions", namespace=ns)
            admitted = {
                str(r.get("spec", {}).get("leaderWorkerSet"))
                for r in records
                if any(
                    c.get("type") == "Admitted" and c.get("status") == "True"
                    for c in r.get("status", {}).get("conditions", [])
                )
            }
        else:
            admitted = {
                str(p["metadata"].get("labels", {}).get(LWS_NAME_LABEL)) for p in pods if not _gated(p)
            }
        for why, count in idle_nodes(args.nodes, pods, gangs, admitted, mode == "strict").items():
            tally.idle[why] += count * dt
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
        "idle": {why: secs / (args.nodes * makespan) for why, secs in tally.idle.items()},
        "ideal": ideal([g.size for g in gangs], args.nodes, args.run, mode == "strict") if pool else None,
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
    print()
    print("the nodes' time not held by a whole gang, as a share of nodes x makespan:")
    print(f"{'mode':10} | " + " | ".join(f"{why:>12}" for why in IDLE) + " | strategy alone (no latency)")
    for r in rows:
        alone = "-" if r["ideal"] is None else f"{r['ideal']:.1f} s ({r['ideal'] / r['bound']:.2f}x)"
        shares = " | ".join(f"{100 * r['idle'][w]:>11.1f}%" for w in IDLE)
        print(f"{r['mode']:10} | {shares} | {alone}")


if __name__ == "__main__":
    main()

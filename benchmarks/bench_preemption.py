"""Preemption side by side on one sandbox with the real Kueue: production takes its GPUs back.

The seed's HPA case at a size: NODES one-GPU nodes, filled by an experiment LWS (PriorityClass
bench-low, groups of SIZE); then a production LWS (bench-high) of GROUPS groups is made. Each
mode must evict whole experiment groups to run production. Modes:

  kueue-lws   Kueue's own LWS integration; the ClusterQueue preempts withinClusterQueue:
              LowerPriority (the run without the gatekeeper: the ratios are against it)
  gk-kueue    the gatekeeper's kueue backend, the same ClusterQueue and its node-fit check
  gk-pools    the gatekeeper's pools backend, a Pool with spec.preemption.withinPool: LowerPriority

Figures per run: seconds from production's creation until all its pods run (and as a ratio
against kueue-lws in the same round), the most GPUs bound on the run's nodes at any sample
(never above NODES), the most GPUs bound in groups that were partly bound at a sample, and the
longest any group stayed partly bound (a preempted group's pods go within a second or two;
one left half-running would show here), experiment groups still whole at the end.

Usage: python benchmarks/bench_preemption.py [--nodes 16] [--size 2] [--groups 3] [--rounds 3]
           [--modes kueue-lws,gk-kueue,gk-pools] [--keep] [--dir FOLDER]
It starts its own sandbox with Kueue (folder sandboxes/bench-kueue in the cache, or --dir) and
stops it at the end unless --keep.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import kr8s.asyncio
from bench_backends import Scenario, clean, kueue_queue, lws, use_backend

from gatekeeper.core.kube.keys import LWS_NAME_LABEL, POOL_LABEL
from gatekeeper_lab.sandbox.cluster import Sandbox, default_dir, fake_node
from gatekeeper_lab.sandbox.kueue import MANAGED_NAMESPACE_LABEL
from gatekeeper_lab.sandbox.replay import LeaderWorkerSet, list_raw

MODES = ("kueue-lws", "gk-kueue", "gk-pools")
LOW, HIGH = "bench-low", "bench-high"


@dataclass
class Samples:
    """What the sampler saw of the run's pods."""

    peak: int = 0
    partial_gpus: int = 0
    partial_since: dict[tuple[str, str], float] = field(default_factory=dict)
    longest_partial: float = 0.0

    def take(self, pods: list[dict[str, Any]], now: float) -> None:
        bound = [
            p
            for p in pods
            if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")
        ]
        self.peak = max(self.peak, len(bound))
        groups: dict[tuple[str, str], list[bool]] = {}
        for p in pods:
            labels = p["metadata"].get("labels", {})
            key = (labels.get(LWS_NAME_LABEL, ""), labels.get("leaderworkerset.sigs.k8s.io/group-index", ""))
            groups.setdefault(key, []).append(bool(p["spec"].get("nodeName")))
        partial = {k: v for k, v in groups.items() if any(v) and not all(v)}
        self.partial_gpus = max(self.partial_gpus, sum(sum(v) for v in partial.values()))
        self.partial_since = {k: self.partial_since.get(k, now) for k in partial}
        for since in self.partial_since.values():
            self.longest_partial = max(self.longest_partial, now - since)


@dataclass(frozen=True)
class Run:
    mode: str
    seconds: float
    samples: Samples
    whole_experiment: int


def _running(pods: list[dict[str, Any]], name: str) -> int:
    return sum(
        1
        for p in pods
        if p["metadata"].get("labels", {}).get(LWS_NAME_LABEL) == name
        and p["status"].get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    )


def _whole(pods: list[dict[str, Any]], name: str, size: int) -> int:
    groups: dict[str, int] = {}
    for p in pods:
        labels = p["metadata"].get("labels", {})
        if labels.get(LWS_NAME_LABEL) == name and p["status"].get("phase") == "Running":
            index = labels.get("leaderworkerset.sigs.k8s.io/group-index", "")
            groups[index] = groups.get(index, 0) + 1
    return sum(1 for n in groups.values() if n == size)


def _with_class(body: dict[str, Any], klass: str) -> dict[str, Any]:
    body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["priorityClassName"] = klass
    return body


async def one_run(sb: Sandbox, mode: str, nodes: int, size: int, groups: int) -> Run:
    tag = "p" + uuid.uuid4().hex[:6]
    ns = f"bench-preempt-{mode}-{tag}"
    use_backend(sb, "pools" if mode == "gk-pools" else "kueue")
    sb.create_nodes([fake_node(f"{tag}-{i}", gpus=1, labels={"bench": tag}) for i in range(nodes)])
    labels = {MANAGED_NAMESPACE_LABEL: "true"} if mode == "kueue-lws" else {}
    sb.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}])
    sc = Scenario("preempt", nodes=nodes, gpus_per_node=1, groups=nodes // size, size=size, gpus_per_pod=1)
    lws_labels: dict[str, str] = {}
    if mode == "gk-pools":
        sb.apply(
            [{"apiVersion": "lws-gatekeeper.io/v1alpha1", "kind": "Pool", "metadata": {"name": f"p-{tag}"},
              "spec": {"nodeSelector": {"bench": tag}, "namespaceSelector": {},
                       "quota": {"nvidia.com/gpu": str(nodes)},
                       "preemption": {"withinPool": "LowerPriority"}}}]
        )  # fmt: skip
        lws_labels[POOL_LABEL] = f"p-{tag}"
    else:
        queue = kueue_queue(sb, sc, tag, ns, node_fit=mode == "gk-kueue", preempt=True)
        lws_labels["kueue.x-k8s.io/queue-name" if mode == "kueue-lws" else POOL_LABEL] = queue
    await anyio.sleep(3)  # nodes Ready, service account made
    api = await kr8s.asyncio.api(kubeconfig=str(sb.kubeconfig))
    try:
        exp = _with_class(lws("experiment", ns, sc, tag, dict(lws_labels)), LOW)
        await (await LeaderWorkerSet(exp, api=api)).create()
        deadline = time.monotonic() + 300
        while _running(await list_raw(api, "pods", namespace=ns), "experiment") < nodes:
            if time.monotonic() > deadline:
                raise TimeoutError("the experiment did not fill the nodes in 300 s")
            await anyio.sleep(0.5)
        prod_sc = Scenario("preempt", nodes=nodes, gpus_per_node=1, groups=groups, size=size, gpus_per_pod=1)
        prod = _with_class(lws("production", ns, prod_sc, tag, dict(lws_labels)), HIGH)
        samples = Samples()
        start = time.monotonic()
        await (await LeaderWorkerSet(prod, api=api)).create()
        while True:
            pods = await list_raw(api, "pods", namespace=ns)
            now = time.monotonic()
            samples.take(pods, now)
            if _running(pods, "production") >= groups * size:
                seconds = now - start
                break
            if now - start > 600:
                raise TimeoutError("production did not run in 600 s")
            await anyio.sleep(0.5)
        end = time.monotonic() + 10  # the victims' pods come back, gated (or Pending): still sampled
        while time.monotonic() < end:
            pods = await list_raw(api, "pods", namespace=ns)
            samples.take(pods, time.monotonic())
            await anyio.sleep(0.5)
        return Run(mode, seconds, samples, _whole(pods, "experiment", size))
    finally:
        clean(sb, ns, tag)


def _priority_classes(sb: Sandbox) -> None:
    sb.apply(
        [
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
            for name, value in ((LOW, 10), (HIGH, 100000))
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--size", type=int, default=2)
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--keep", action="store_true", help="leave the sandbox running")
    ap.add_argument("--dir", type=Path, default=None, help="the sandbox's folder (default: bench-kueue)")
    args = ap.parse_args()
    modes = args.modes.split(",")
    if unknown := [m for m in modes if m not in MODES]:
        raise SystemExit(f"unknown mode {unknown[0]!r}: choose from {', '.join(MODES)}")
    sb = Sandbox(args.dir or default_dir("bench-kueue"), say=lambda m: print(m, flush=True))
    sb.up(nodes=0, with_kueue=True)
    _priority_classes(sb)
    runs: dict[str, list[Run]] = {m: [] for m in modes}
    ratios: dict[str, list[float]] = {m: [] for m in modes}
    print(f"{args.nodes} one-GPU nodes; experiment groups of {args.size}; production {args.groups} groups")
    print(
        "| round | mode      | to running s | vs kueue-lws | peak GPUs | partial GPUs | longest partial s "
        "| experiment whole |"
    )
    print(
        "|------:|-----------|-------------:|-------------:|----------:|-------------:|------------------:|-----------------:|"
    )
    try:
        for r in range(1, args.rounds + 1):
            base: Run | None = None
            for mode in modes:
                run = anyio.run(one_run, sb, mode, args.nodes, args.size, args.groups)
                runs[mode].append(run)
                base = run if mode == "kueue-lws" else base
                ratio = run.seconds / base.seconds if base and base.seconds else float("nan")
                ratios[mode].append(ratio)
                s = run.samples
                print(
                    f"| {r:5} | {mode:9} | {run.seconds:12.2f} | {ratio:11.2f}x "
                    f"| {s.peak:4} / {args.nodes:<3} | {s.partial_gpus:12} | {s.longest_partial:17.1f} "
                    f"| {run.whole_experiment:16} |",
                    flush=True,
                )
        print("\nmedians over the rounds:")
        for mode in modes:
            secs = [r.seconds for r in runs[mode]]
            print(
                f"  {mode:9}: to running {statistics.median(secs):.2f} s "
                f"(min {min(secs):.2f}, max {max(secs):.2f}); "
                f"vs kueue-lws {statistics.median(ratios[mode]):.2f}x; "
                f"peak GPUs {max(r.samples.peak for r in runs[mode])} of {args.nodes}"
            )
    finally:
        if not args.keep:
            sb.down()


if __name__ == "__main__":
    main()

"""Side by side on one sandbox with the real Kueue and Volcano: six ways to admit LWS groups.

Modes:
  default     the default scheduler alone (no queue, no gate)
  kueue-lws   Kueue's own LWS integration (LWS labelled kueue.x-k8s.io/queue-name)
  lws-volcano LWS's own Volcano provider: the LWS controller restarted with its global switch
              (Configuration gangSchedulingManagement: {schedulerProvider: volcano}), the
              gatekeeper stopped; the LWS's templates say schedulerName: volcano and the LWS
              names its Queue (annotation scheduling.volcano.sh/queue-name); LWS writes one
              PodGroup per group (minMember the size, 1 under LeaderReady); the switch is
              turned off again after the run
  gk-kueue    the gatekeeper's kueue backend, with its node-fit AdmissionCheck on the ClusterQueue
  gk-pools    the gatekeeper's pools backend (its own Pool object)
  gk-volcano  the gatekeeper's volcano backend (a Volcano Queue with the nodes' GPUs as capability)

The two Volcano modes get the same Queue: the run's GPUs as capability.

Scenarios (every pod asks 1 CPU and its GPUs; one-GPU nodes unless said):
  seed        the LWS issue: 4 one-GPU nodes, groups of 2, scaled 0 -> 10
  scale       GROUPS groups of SIZE one-GPU pods on 3/4 as many nodes: only 3/4 of them can run
  fragmented  groups of 2 pods x 2 GPUs on 8 nodes of 3 GPUs: quota (24 GPUs) says 6 groups,
              the nodes hold one such pod each, so only 4 groups can really run
  leaderready the fragmented case with startupPolicy: LeaderReady (LWS creates a group's
              workers once its leader is Ready): only 4 groups can run whole

For each: seconds until the pods settle, whole groups running, GPUs held and GPUs stranded
in incomplete groups, pods let through (no gate) that no node takes (quota held by groups
that cannot run: Kueue's documented gap), API requests the API server served meanwhile (all clients:
scheduler, controllers, Kueue, Volcano, KWOK, gatekeeper) and those the gatekeeper made; seconds
and API requests also as ratios against the default mode's run of the same scenario in the
same run (the run without the gatekeeper; "-" when the default mode was not run first).

Usage: python benchmarks/bench_backends.py [--groups 100] [--size 4]
           [--scenarios seed,scale,fragmented,leaderready]
           [--modes default,kueue-lws,lws-volcano,gk-kueue,gk-pools,gk-volcano] [--keep] [--dir FOLDER]
It starts its own sandbox with Kueue and Volcano's scheduler (folder sandboxes/bench-kueue in
the cache, or --dir) and stops it at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import kr8s.asyncio

from gatekeeper.core.backends.volcano.keys import VOLCANO_API_VERSION
from gatekeeper.core.kube.keys import POOL_LABEL
from gatekeeper_lab.sandbox.cluster import LWS_GANG_OFF, Sandbox, default_dir, fake_node
from gatekeeper_lab.sandbox.kueue import MANAGED_NAMESPACE_LABEL
from gatekeeper_lab.sandbox.observe import Verdict
from gatekeeper_lab.sandbox.replay import LeaderWorkerSet, list_raw, settle
from gatekeeper_lab.sandbox.volcano import SCHEDULER_NAME as VOLCANO_SCHEDULER

KUEUE = "kueue.x-k8s.io/v1beta2"
NODE_FIT_CHECK = "bench-node-fit"
MODES = ("default", "kueue-lws", "lws-volcano", "gk-kueue", "gk-pools", "gk-volcano")
#: LWS's annotation naming the Volcano Queue of its PodGroups (``volcano.sh/apis``' QueueNameAnnotationKey).
VOLCANO_QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"
BACKENDS = {"gk-pools": "pools", "gk-volcano": "volcano"}


@dataclass(frozen=True)
class Scenario:
    name: str
    nodes: int
    gpus_per_node: int
    groups: int
    size: int
    gpus_per_pod: int
    leader_ready: bool = False

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def scenarios(groups: int, size: int) -> dict[str, Scenario]:
    return {
        "seed": Scenario("seed", nodes=4, gpus_per_node=1, groups=10, size=2, gpus_per_pod=1),
        "scale": Scenario("scale", nodes=groups * size * 3 // 4, gpus_per_node=1, groups=groups, size=size,
                          gpus_per_pod=1),
        "fragmented": Scenario("fragmented", nodes=8, gpus_per_node=3, groups=8, size=2, gpus_per_pod=2),
        "leaderready": Scenario("leaderready", nodes=8, gpus_per_node=3, groups=8, size=2, gpus_per_pod=2,
                                leader_ready=True),
    }  # fmt: skip


def lws(
    name: str,
    ns: str,
    sc: Scenario,
    tag: str,
    labels: dict[str, str],
    *,
    annotations: dict[str, str] | None = None,
    scheduler: str | None = None,
) -> dict[str, Any]:
    res = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(sc.gpus_per_pod)}
    pod: dict[str, Any] = {
        "spec": {
            "nodeSelector": {"bench": tag},
            "containers": [{"name": "c", "image": "vllm", "resources": {"requests": res, "limits": res}}],
        }
    }
    if scheduler is not None:
        pod["spec"]["schedulerName"] = scheduler
    spec: dict[str, Any] = {
        "replicas": sc.groups,
        "leaderWorkerTemplate": {"size": sc.size, "workerTemplate": pod},
    }
    if sc.leader_ready:
        spec["startupPolicy"] = "LeaderReady"
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": annotations or {}},
        "spec": spec,
    }


def _sum(metrics: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}\{{.*\}} (\S+)$", metrics, re.M))


def apiserver_requests(sb: Sandbox) -> float:
    return _sum(sb.kubectl("get", "--raw", "/metrics").stdout, "apiserver_request_total")


def gatekeeper_requests(sb: Sandbox) -> float:
    return _sum(sb.metrics(), "lws_gatekeeper_api_requests_total")


def use_backend(sb: Sandbox, backend: str | None) -> None:
    """Run the sandbox's gatekeeper with ``backend`` (restarting it if it runs another one);
    ``None``: no gatekeeper, LWS's own Volcano provider on. Any other: that provider off."""
    if backend is None:
        sb.stop("gatekeeper")
        sb.up(nodes=0, gatekeeper=False, lws_gang_scheduler="volcano")
        return
    sb.up(nodes=0, gatekeeper=False, lws_gang_scheduler=LWS_GANG_OFF)
    if sb.state()["processes"].get("gatekeeper", {}).get("backend") == backend:
        return
    sb.stop("gatekeeper")
    sb.start_gatekeeper(backend=backend)


def volcano_queue(sb: Sandbox, sc: Scenario, tag: str) -> str:
    """A Volcano Queue with the run's GPUs as capability."""
    sb.apply(
        [{"apiVersion": VOLCANO_API_VERSION, "kind": "Queue", "metadata": {"name": f"vq-{tag}"},
          "spec": {"weight": 1, "reclaimable": False, "capability": {"nvidia.com/gpu": str(sc.gpus)}}}]
    )  # fmt: skip
    return f"vq-{tag}"


def kueue_queue(
    sb: Sandbox, sc: Scenario, tag: str, ns: str, *, node_fit: bool, preempt: bool = False
) -> str:
    """A flavor on the run's nodes, a ClusterQueue with the nodes' GPUs as quota (``preempt``:
    preempting lower priority within it), a LocalQueue."""
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": f"f-{tag}",
                        "resources": [
                            {"name": "cpu", "nominalQuota": str(64 * sc.nodes)},
                            {"name": "memory", "nominalQuota": f"{256 * sc.nodes}Gi"},
                            {"name": "nvidia.com/gpu", "nominalQuota": str(sc.gpus)},
                        ],
                    }
                ],
            }
        ],
    }
    if preempt:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    if node_fit:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": NODE_FIT_CHECK}]}
        sb.apply(
            [
                {
                    "apiVersion": KUEUE,
                    "kind": "AdmissionCheck",
                    "metadata": {"name": NODE_FIT_CHECK},
                    "spec": {"controllerName": "lws-gatekeeper.io/node-fit"},
                }
            ]
        )
    sb.apply(
        [
            {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": f"f-{tag}"},
             "spec": {"nodeLabels": {"bench": tag}}},
            {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": f"cq-{tag}"}, "spec": spec},
        ]
    )  # fmt: skip
    sb.apply(
        [
            {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns},
             "spec": {"clusterQueue": f"cq-{tag}"}}
        ]
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = sb.kubectl(
            "get", "localqueue.kueue.x-k8s.io", "lq", "-n", ns,
            "-o", "jsonpath={.status.conditions[?(@.type=='Active')].status}", check=False,
        ).stdout  # fmt: skip
        if got == "True":
            return "lq"
        time.sleep(0.5)
    raise RuntimeError(f"LocalQueue {ns}/lq did not become Active")


@dataclass(frozen=True)
class Run:
    """One mode's run of one scenario: its figures."""

    scenario: Scenario
    mode: str
    seconds: float
    verdict: Verdict
    unplaced: int
    served: float
    made: float | None

    def row(self, base: Run | None) -> str:
        sc, v = self.scenario, self.verdict

        def ratio(mine: float, theirs: float | None) -> str:
            return f"{mine / theirs:5.2f}x" if theirs else "     -"

        made = f"{self.made:6.0f}" if self.made is not None else "     -"
        slower = ratio(self.seconds, base.seconds if base else None)
        busier = ratio(self.served, base.served if base else None)
        return (
            f"| {sc.name:11} | {self.mode:11} | {self.seconds:8.1f} | {slower:>10} | "
            f"{v.whole_groups:5} / {sc.groups:<5} | {v.gpus_held:4} / {sc.gpus:<4} | {v.gpus_stranded:8} | "
            f"{self.unplaced:8} | {self.served:8.0f} | {busier:>10} | {made} |"
        )


HEADER = (
    "| scenario    | mode        | settle s | vs default | whole groups | GPUs held | stranded | unplaced "
    "| API reqs | vs default | by gk  |\n"
    "|-------------|-------------|---------:|-----------:|-------------:|----------:|---------:|---------:"
    "|---------:|-----------:|-------:|"
)


async def one_run(sb: Sandbox, sc: Scenario, mode: str, stable_for: float) -> Run:
    tag = "b" + uuid.uuid4().hex[:6]
    ns = f"bench-{sc.name}-{mode}-{tag}"
    use_backend(sb, None if mode == "lws-volcano" else BACKENDS.get(mode, "kueue"))
    sb.create_nodes(
        [fake_node(f"{tag}-{i}", gpus=sc.gpus_per_node, labels={"bench": tag}) for i in range(sc.nodes)]
    )
    labels = {MANAGED_NAMESPACE_LABEL: "true"} if mode == "kueue-lws" else {}
    sb.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}])
    lws_labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    scheduler: str | None = None
    if mode == "kueue-lws":
        lws_labels["kueue.x-k8s.io/queue-name"] = kueue_queue(sb, sc, tag, ns, node_fit=False)
    elif mode == "gk-kueue":
        lws_labels[POOL_LABEL] = kueue_queue(sb, sc, tag, ns, node_fit=True)
    elif mode == "gk-pools":
        sb.apply(
            [{"apiVersion": "lws-gatekeeper.io/v1alpha1", "kind": "Pool", "metadata": {"name": f"p-{tag}"},
              "spec": {"nodeSelector": {"bench": tag}, "namespaceSelector": {}}}]
        )  # fmt: skip
        lws_labels[POOL_LABEL] = f"p-{tag}"
    elif mode == "gk-volcano":
        lws_labels[POOL_LABEL] = volcano_queue(sb, sc, tag)
    elif mode == "lws-volcano":
        annotations[VOLCANO_QUEUE_ANNOTATION] = volcano_queue(sb, sc, tag)
        scheduler = VOLCANO_SCHEDULER
    await anyio.sleep(3)  # nodes Ready, service account made
    api = await kr8s.asyncio.api(kubeconfig=str(sb.kubeconfig))
    by_gk = mode.startswith("gk")
    served, made = apiserver_requests(sb), gatekeeper_requests(sb) if by_gk else 0.0
    start = time.monotonic()
    body = lws("bench", ns, sc, tag, lws_labels, annotations=annotations, scheduler=scheduler)
    obj = await LeaderWorkerSet(body, api=api)
    await obj.create()
    try:
        v = await _settle_or_stuck(api, ns, sc, stable_for)
    except BaseException:
        clean(sb, ns, tag)
        raise
    seconds = time.monotonic() - start - stable_for  # minus the stability window
    served = apiserver_requests(sb) - served
    # Let through but not placed: quota held by pods that cannot run (Kueue's documented gap).
    listed = json.loads(sb.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
    pending = sum(1 for p in listed if not p["spec"].get("schedulingGates") and not p["spec"].get("nodeName"))
    run = Run(sc, mode, seconds, v, pending, served, gatekeeper_requests(sb) - made if by_gk else None)
    clean(sb, ns, tag)
    return run


def clean(sb: Sandbox, ns: str, tag: str) -> None:
    sb.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=300s", check=False)
    sb.kubectl("delete", "nodes", "-l", f"bench={tag}", "--wait=false", check=False)
    for kind, name in (
        ("clusterqueue.kueue.x-k8s.io", f"cq-{tag}"),
        ("resourceflavor.kueue.x-k8s.io", f"f-{tag}"),
        ("pool", f"p-{tag}"),
        ("queue.scheduling.volcano.sh", f"vq-{tag}"),
    ):
        sb.kubectl("delete", kind, name, "--ignore-not-found", "--wait=false", check=False)


class Stuck(RuntimeError):
    """A run that cannot settle: the sandbox, not the mode, failed (the message says how)."""


#: Seconds a pod may stay Running but not Ready before KWOK is taken to have failed it.
NOT_READY_LIMIT = 60.0


async def _settle_or_stuck(api: Any, ns: str, sc: Scenario, stable_for: float) -> Verdict:
    """``settle``, watched: KWOK marks a bound pod Ready at once; one left Running and not
    Ready for a minute will never be (seen under load: KWOK's status patch adding a second
    pod IP, refused by the API server), and the run cannot settle."""
    seen: dict[str, float] = {}
    result: list[Verdict] = []

    async def watch() -> None:
        while True:
            await anyio.sleep(5)
            now = time.monotonic()
            for p in await list_raw(api, "pods", namespace=ns):
                conds = {c.get("type"): c.get("status") for c in p.get("status", {}).get("conditions", [])}
                name = p["metadata"]["name"]
                if p.get("status", {}).get("phase") == "Running" and conds.get("Ready") != "True":
                    if now - seen.setdefault(name, now) > NOT_READY_LIMIT:
                        raise Stuck(f"pod {ns}/{name} Running, not Ready for {NOT_READY_LIMIT:.0f}s (KWOK)")
                else:
                    seen.pop(name, None)

    async def run(tg: anyio.abc.TaskGroup) -> None:
        result.append(
            await settle(
                api,
                ns,
                "bench",
                expected_pods=sc.groups * sc.size,
                size=sc.size,
                timeout=900,
                stable_for=stable_for,
                leader_ready=sc.leader_ready,
            )
        )
        tg.cancel_scope.cancel()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            tg.start_soon(run, tg)
    except ExceptionGroup as group:  # one task failed: its error, not the group's
        raise group.exceptions[0] from None
    return result[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--size", type=int, default=4)
    ap.add_argument("--scenarios", default="seed,scale,fragmented,leaderready")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--keep", action="store_true", help="leave the sandbox running")
    ap.add_argument(
        "--stable-for",
        type=float,
        default=10.0,
        help="seconds a run's pods stay unchanged to count as settled",
    )
    ap.add_argument(
        "--dir", type=Path, default=None, help="the sandbox's folder (default: bench-kueue in the cache)"
    )
    args = ap.parse_args()
    table = scenarios(args.groups, args.size)
    sb = Sandbox(args.dir or default_dir("bench-kueue"), say=lambda m: print(m, flush=True))
    sb.up(nodes=0, with_kueue=True, with_volcano=True)
    modes = args.modes.split(",")
    if unknown := [m for m in modes if m not in MODES]:
        raise SystemExit(f"unknown mode {unknown[0]!r}: choose from {', '.join(MODES)}")
    rows = [HEADER]
    try:
        for name in args.scenarios.split(","):
            base: Run | None = None
            for mode in modes:
                row = ""
                for attempt in (1, 2):
                    try:
                        run = anyio.run(one_run, sb, table[name], mode, args.stable_for)
                    except (Stuck, TimeoutError) as exc:
                        print(f"{name} {mode}, attempt {attempt}: {exc}", flush=True)
                        row = f"| {name:11} | {mode:11} | did not settle twice: {str(exc)[:120]} |"
                        continue
                    base = run if mode == "default" else base
                    row = run.row(base)
                    break
                print(row, flush=True)
                rows.append(row)
        print("\n".join(rows))
    finally:
        if not args.keep:
            sb.down()


if __name__ == "__main__":
    main()

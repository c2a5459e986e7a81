"""Side by side on one sandbox with the real Kueue and Volcano: five ways to admit LWS groups.

Modes:
  default    the default scheduler alone (no queue, no gate)
  kueue-lws  Kueue's own LWS integration (LWS labelled kueue.x-k8s.io/queue-name)
  gk-kueue   the gatekeeper's kueue backend, with its node-fit AdmissionCheck on the ClusterQueue
  gk-pools   the gatekeeper's pools backend (its own Pool object)
  gk-volcano the gatekeeper's volcano backend (a Volcano Queue with the nodes' GPUs as capability)

Scenarios (every pod asks 1 CPU and its GPUs; one-GPU nodes unless said):
  seed        the LWS issue: 4 one-GPU nodes, groups of 2, scaled 0 -> 10
  scale       GROUPS groups of SIZE one-GPU pods on 3/4 as many nodes: only 3/4 of them can run
  fragmented  groups of 2 pods x 2 GPUs on 8 nodes of 3 GPUs: quota (24 GPUs) says 6 groups,
              the nodes hold one such pod each, so only 4 groups can really run

For each: seconds until the pods settle, whole groups running, GPUs held and GPUs stranded
in incomplete groups, pods let through (no gate) that no node takes (quota held by groups
that cannot run: Kueue's documented gap), API requests the API server served meanwhile (all clients:
scheduler, controllers, Kueue, KWOK, gatekeeper) and those the gatekeeper made.

Usage: python benchmarks/bench_backends.py [--groups 100] [--size 4]
           [--scenarios seed,scale,fragmented] [--modes default,kueue-lws,gk-kueue,gk-pools,gk-volcano]
           [--keep] [--dir FOLDER]
It starts its own sandbox with Kueue and Volcano's scheduler (folder sandboxes/bench-kueue in
the cache) and stops it at the end unless --keep.
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
import kr8s.asyncio

from gatekeeper.core.keys import POOL_LABEL, VOLCANO_API_VERSION
from gatekeeper.sandbox.cluster import Sandbox, default_dir, fake_node
from gatekeeper.sandbox.kueue import MANAGED_NAMESPACE_LABEL
from gatekeeper.sandbox.observe import Verdict
from gatekeeper.sandbox.replay import LeaderWorkerSet, settle

KUEUE = "kueue.x-k8s.io/v1beta2"
NODE_FIT_CHECK = "bench-node-fit"
MODES = ("default", "kueue-lws", "gk-kueue", "gk-pools", "gk-volcano")
BACKENDS = {"gk-pools": "pools", "gk-volcano": "volcano"}


@dataclass(frozen=True)
class Scenario:
    name: str
    nodes: int
    gpus_per_node: int
    groups: int
    size: int
    gpus_per_pod: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def scenarios(groups: int, size: int) -> dict[str, Scenario]:
    return {
        "seed": Scenario("seed", nodes=4, gpus_per_node=1, groups=10, size=2, gpus_per_pod=1),
        "scale": Scenario("scale", nodes=groups * size * 3 // 4, gpus_per_node=1, groups=groups, size=size,
                          gpus_per_pod=1),
        "fragmented": Scenario("fragmented", nodes=8, gpus_per_node=3, groups=8, size=2, gpus_per_pod=2),
    }  # fmt: skip


def lws(name: str, ns: str, sc: Scenario, tag: str, labels: dict[str, str]) -> dict[str, Any]:
    res = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(sc.gpus_per_pod)}
    pod = {
        "spec": {
            "nodeSelector": {"bench": tag},
            "containers": [{"name": "c", "image": "vllm", "resources": {"requests": res, "limits": res}}],
        }
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"replicas": sc.groups, "leaderWorkerTemplate": {"size": sc.size, "workerTemplate": pod}},
    }


def _sum(metrics: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}\{{.*\}} (\S+)$", metrics, re.M))


def apiserver_requests(sb: Sandbox) -> float:
    return _sum(sb.kubectl("get", "--raw", "/metrics").stdout, "apiserver_request_total")


def gatekeeper_requests(sb: Sandbox) -> float:
    return _sum(sb.metrics(), "gatekeeper_api_requests_total")


def use_backend(sb: Sandbox, backend: str) -> None:
    """Run the sandbox's gatekeeper with ``backend`` (restarting it if it runs another one)."""
    if sb.state()["processes"].get("gatekeeper", {}).get("backend") == backend:
        return
    sb.stop("gatekeeper")
    sb.start_gatekeeper(backend=backend)


def kueue_queue(sb: Sandbox, sc: Scenario, tag: str, ns: str, *, node_fit: bool) -> str:
    """A flavor on the run's nodes, a ClusterQueue with the nodes' GPUs as quota, a LocalQueue."""
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


async def one_run(sb: Sandbox, sc: Scenario, mode: str) -> str:
    tag = "b" + uuid.uuid4().hex[:6]
    ns = f"bench-{sc.name}-{mode}-{tag}"
    use_backend(sb, BACKENDS.get(mode, "kueue"))
    sb.create_nodes(
        [fake_node(f"{tag}-{i}", gpus=sc.gpus_per_node, labels={"bench": tag}) for i in range(sc.nodes)]
    )
    labels = {MANAGED_NAMESPACE_LABEL: "true"} if mode == "kueue-lws" else {}
    sb.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}])
    lws_labels: dict[str, str] = {}
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
        sb.apply(
            [{"apiVersion": VOLCANO_API_VERSION, "kind": "Queue", "metadata": {"name": f"vq-{tag}"},
              "spec": {"weight": 1, "reclaimable": False, "capability": {"nvidia.com/gpu": str(sc.gpus)}}}]
        )  # fmt: skip
        lws_labels[POOL_LABEL] = f"vq-{tag}"
    await anyio.sleep(3)  # nodes Ready, service account made
    api = await kr8s.asyncio.api(kubeconfig=str(sb.kubeconfig))
    served, made = apiserver_requests(sb), gatekeeper_requests(sb)
    start = time.monotonic()
    obj = await LeaderWorkerSet(lws("bench", ns, sc, tag, lws_labels), api=api)
    await obj.create()
    v: Verdict = await settle(
        api, ns, "bench", expected_pods=sc.groups * sc.size, size=sc.size, timeout=900, stable_for=5
    )
    seconds = time.monotonic() - start - 5  # minus the stability window
    served = apiserver_requests(sb) - served
    # Let through but not placed: quota held by pods that cannot run (Kueue's documented gap).
    listed = json.loads(sb.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
    pending = sum(1 for p in listed if not p["spec"].get("schedulingGates") and not p["spec"].get("nodeName"))
    made = gatekeeper_requests(sb) - made
    line = (
        f"| {sc.name:10} | {mode:9} | {seconds:7.1f} | {v.whole_groups:5} / {sc.groups:<5} | "
        f"{v.gpus_held:4} / {sc.gpus:<4} | {v.gpus_stranded:8} | {pending:7} | {served:8.0f} | "
        f"{f'{made:6.0f}' if mode.startswith('gk') else '     -'} |"
    )
    sb.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=300s", check=False)
    sb.kubectl("delete", "nodes", "-l", f"bench={tag}", "--wait=false", check=False)
    for kind, name in (
        ("clusterqueue.kueue.x-k8s.io", f"cq-{tag}"),
        ("resourceflavor.kueue.x-k8s.io", f"f-{tag}"),
        ("pool", f"p-{tag}"),
        ("queue.scheduling.volcano.sh", f"vq-{tag}"),
    ):
        sb.kubectl("delete", kind, name, "--ignore-not-found", "--wait=false", check=False)
    return line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--size", type=int, default=4)
    ap.add_argument("--scenarios", default="seed,scale,fragmented")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--keep", action="store_true", help="leave the sandbox running")
    ap.add_argument(
        "--dir", type=Path, default=None, help="the sandbox's folder (default: bench-kueue in the cache)"
    )
    args = ap.parse_args()
    table = scenarios(args.groups, args.size)
    sb = Sandbox(args.dir or default_dir("bench-kueue"), say=lambda m: print(m, flush=True))
    sb.up(nodes=0, with_kueue=True, with_volcano=True)
    rows = [
        "| scenario   | mode      | settle s | whole groups | GPUs held | stranded | unplaced "
        "| API reqs | by gk  |",
        "|------------|-----------|---------:|-------------:|----------:|---------:|--------:|---------:|-------:|",
    ]
    try:
        for name in args.scenarios.split(","):
            for mode in args.modes.split(","):
                if mode not in MODES:
                    raise SystemExit(f"unknown mode {mode!r}: choose from {', '.join(MODES)}")
                row = anyio.run(one_run, sb, table[name], mode)
                print(row, flush=True)
                rows.append(row)
        print("\n".join(rows))
    finally:
        if not args.keep:
            sb.down()


if __name__ == "__main__":
    main()

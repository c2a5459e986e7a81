"""Scale-up benchmark on the sandbox: many LWS groups at once, with and without the gatekeeper.

Prints, for each run: seconds until every group that can run is Running, whole groups,
the share of GPUs stranded in incomplete groups, and (with the gatekeeper) the API
requests it made per admitted group and its peak memory (VmHWM).

Runs:
  fit      GROUPS groups of SIZE on GROUPS*SIZE one-GPU nodes: everything fits.
  scarce   the same groups on 3/4 of those nodes: only some groups can run.

Usage: python benchmarks/bench_scale.py [--groups 100] [--size 4] [--runs fit,scarce]
It starts its own sandbox (folder sandboxes/bench in the cache) and stops it at the end.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import Any

import anyio
import kr8s.asyncio

from gatekeeper.core.kube.keys import POOL_LABEL
from gatekeeper_lab.sandbox.cluster import Sandbox, default_dir, fake_node
from gatekeeper_lab.sandbox.observe import Verdict
from gatekeeper_lab.sandbox.replay import LeaderWorkerSet, settle


def lws(name: str, namespace: str, groups: int, size: int, pool: str | None) -> dict[str, Any]:
    pod = {
        "spec": {
            "nodeSelector": {"bench": "gpu"},
            "containers": [{"name": "c", "image": "vllm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        }
    }
    body: dict[str, Any] = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace, "labels": {}},
        "spec": {"replicas": groups, "leaderWorkerTemplate": {"size": size, "workerTemplate": pod}},
    }
    if pool:
        body["metadata"]["labels"][POOL_LABEL] = pool
    return body


def api_requests(metrics: str) -> float:
    return sum(float(v) for v in re.findall(r"^gatekeeper_api_requests_total\{.*\} (\S+)$", metrics, re.M))


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def one_run(sb: Sandbox, label: str, nodes: int, groups: int, size: int, gatekeeper: bool) -> None:
    api = await kr8s.asyncio.api(kubeconfig=str(sb.kubeconfig))
    ns = f"bench-{label}-{'gk' if gatekeeper else 'plain'}"
    sb.kubectl("delete", "nodes", "-l", "bench=gpu", "--wait=true", check=False)
    sb.create_nodes([fake_node(f"b-{i}", gpus=1, labels={"bench": "gpu"}) for i in range(nodes)])
    sb.kubectl("create", "namespace", ns)
    pool = None
    if gatekeeper:
        pool = f"bench-{label}"
        sb.apply(
            [
                {
                    "apiVersion": "lws-gatekeeper.io/v1alpha1",
                    "kind": "Pool",
                    "metadata": {"name": pool},
                    "spec": {"nodeSelector": {"bench": "gpu"}, "namespaceSelector": {}},
                }
            ]
        )
    await anyio.sleep(3)  # nodes Ready
    before = api_requests(sb.metrics()) if gatekeeper else 0.0
    start = time.monotonic()
    obj = await LeaderWorkerSet(lws("bench", ns, groups, size, pool), api=api)
    await obj.create()
    v: Verdict = await settle(
        api, ns, "bench", expected_pods=groups * size, size=size, timeout=900, stable_for=5
    )
    seconds = time.monotonic() - start - 5  # minus the stability window
    line = (
        f"{label:7} {'gatekeeper' if gatekeeper else 'default   '}  nodes={nodes:4} groups={groups}x{size}  "
        f"settled={seconds:6.1f}s  whole={v.whole_groups:4}  GPUs held={v.gpus_held:4}  "
        f"stranded={v.gpus_stranded:4} ({100 * v.gpus_stranded / nodes:5.1f}% of GPUs)"
    )
    if gatekeeper:
        made = api_requests(sb.metrics()) - before
        pid = int(sb.state()["processes"]["gatekeeper"]["pid"])
        per_group = made / max(v.whole_groups, 1)
        line += f"  API requests/admitted group={per_group:5.1f}  peak RSS={peak_rss_mib(pid):6.1f} MiB"
    print(line, flush=True)
    sb.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=300s", check=False)
    if pool:
        sb.kubectl("delete", "pool", pool, check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--size", type=int, default=4)
    ap.add_argument("--runs", default="fit,scarce")
    ap.add_argument("--keep", action="store_true", help="leave the sandbox running")
    args = ap.parse_args()
    sb = Sandbox(default_dir("bench"), say=lambda m: print(m, flush=True))
    sb.up(nodes=0)
    try:
        total = args.groups * args.size
        sizes = {"fit": total, "scarce": total * 3 // 4}
        for label in args.runs.split(","):
            for gatekeeper in (False, True):
                anyio.run(one_run, sb, label, sizes[label], args.groups, args.size, gatekeeper)
    finally:
        if not args.keep:
            sb.down()


if __name__ == "__main__":
    main()

"""Load benchmark on the sandbox: the gatekeeper's memory, webhook latency, Lease and writes.

Two parts, each printed as a table of figures next to its target:

  writes   GROUPS waiting groups (LWSs of two 8-GPU pods, startupPolicy LeaderReady, in
           a Pool whose free nodes hold two groups) while node usage churns: plain 1-GPU
           pods are created and deleted on the pool's other nodes, one change every
           CHURN_INTERVAL seconds, for CHURN_SECONDS. Counts the gatekeeper's API writes
           (its own counter, lws_gatekeeper_api_requests_total, every verb but get) and
           watches every record: the most rewrites of one waiting record within a minute
           without a change of its reason. Then the same churn with the gatekeeper
           stopped gives the API server's request rate without it.
  memory   PODS plain pods bound to fake nodes (spec.nodeName, PODS_PER_NODE a node) in
           NAMESPACES namespaces that are not opted in, beside a few opted-in LWSs and a
           trickle of opted-in pods (they go through the webhook); then kube-apiserver is
           restarted, which breaks every watch, so every informer of the gatekeeper lists
           again (the log shows it). Samples the gatekeeper's VmRSS/VmHWM every 0.5 s,
           reads the webhook's latency from the API server's own histogram
           apiserver_admission_webhook_admission_duration_seconds and the Lease's
           renewTime every 0.5 s.

Usage: python benchmarks/bench_load.py [--pods 20000] [--groups 1000] [--parts writes,memory]
It starts its own sandbox (--sandbox-dir, by default sandboxes/bench-load in the cache)
and stops it at the end (unless --keep).
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import anyio
import anyio.to_thread
import httpx
from load_support import (
    CONTROL,
    RECORDS,
    Api,
    RecordWatch,
    Samplers,
    apiserver_requests,
    both_webhooks,
    create_all,
    gk_pid,
    gk_writes,
    log_size,
    lws,
    namespace,
    pass_seconds,
    plain_pod,
    pool,
    proc_kib,
    quantile,
    read_from,
    row,
)

from gatekeeper.core.kube.keys import POOL_LABEL
from gatekeeper_lab.sandbox import control_plane
from gatekeeper_lab.sandbox.cluster import Sandbox, default_dir, fake_node


async def churn(api: Api, nodes: list[str], seconds: float, interval: float, tag: str) -> int:
    """Random walk of 1..4 one-GPU plain pods per node; returns how many changes it made."""
    held: dict[str, list[str]] = {n: [f"base-{n}"] for n in nodes}
    made, end, rng = 0, time.monotonic() + seconds, random.Random(7)
    path = "/api/v1/namespaces/load-churn/pods"
    while time.monotonic() < end:
        node = rng.choice(nodes)
        pods = held[node]
        if len(pods) < 4 and (len(pods) == 1 or rng.random() < 0.5):
            name = f"{tag}-{node}-{made}"
            await api.create(path, plain_pod(name, node, gpus=1))
            pods.append(name)
        else:
            await api.delete(f"{path}/{pods.pop()}")
        made += 1
        await anyio.sleep(interval)
    for node, pods in held.items():
        for name in pods[1:]:
            await api.delete(f"{path}/{name}")
        held[node] = pods[:1]
    return made


async def part_writes(sb: Sandbox, args: argparse.Namespace) -> None:
    api = Api(sb)
    selector = {"load-pool": "writes"}
    nodes = [f"w-{i}" for i in range(8)]
    await create_all(api, [("/api/v1/nodes", fake_node(n, gpus=8, cpu="64", labels=selector)) for n in nodes])
    sb.apply([pool("load-writes", selector, {"nvidia.com/gpu": "100000"})])
    await create_all(api, [namespace("load-writes"), namespace("load-churn")])
    await anyio.sleep(3)
    # Nodes w-4..w-7 always hold at least one 1-GPU pod: no 8-GPU pod fits there, so the
    # groups past the first two wait for nodes whatever the churn does.
    churned = nodes[4:]
    await create_all(
        api, [("/api/v1/namespaces/load-churn/pods", plain_pod(f"base-{n}", n, gpus=1)) for n in churned]
    )
    total = args.groups + 2
    per = 100
    await create_all(
        api,
        [
            (
                "/apis/leaderworkerset.x-k8s.io/v1/namespaces/load-writes/leaderworkersets",
                lws(f"w{i:03}", min(per, total - i * per), 8, "load-writes", selector),
            )
            for i in range((total + per - 1) // per)
        ],
        concurrency=4,
    )
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        items = (await api.get(RECORDS)).get("items", [])
        waiting = sum(1 for o in items if RecordWatch._state(o)[0] == "False")
        if len(items) >= total and waiting >= args.groups:
            break
        await anyio.sleep(5)
    print(f"writes: {len(items)} records, {waiting} waiting", flush=True)
    await anyio.sleep(70)  # past the first minute: every waiting message written once

    watch = RecordWatch(api)
    before_gk, before_api = gk_writes(sb.metrics()), apiserver_requests(await api.text("/metrics"))
    start = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch.run)
        await anyio.sleep(1)
        changes = await churn(api, churned, args.churn_seconds, args.churn_interval, "gk")
        tg.cancel_scope.cancel()
    took = time.monotonic() - start
    after_gk, after_api = gk_writes(sb.metrics()), apiserver_requests(await api.text("/metrics"))
    writes = {r: after_gk.get(r, 0) - before_gk.get(r, 0) for r in after_gk}
    with_gk = (after_api - before_api) / took

    sb.stop("gatekeeper")
    before_api, start = apiserver_requests(await api.text("/metrics")), time.monotonic()
    await churn(api, churned, args.churn_seconds, args.churn_interval, "plain")
    without_gk = (apiserver_requests(await api.text("/metrics")) - before_api) / (time.monotonic() - start)
    sb.start_gatekeeper()

    print(f"\nwrites: {watch.waiting()} waiting groups, {changes} node-usage changes in {took:.0f} s")
    row("figure", "measured", "target", "note")
    row("---", "---:", "---", "---")
    per_s = sum(writes.values()) / took
    detail = ", ".join(f"{r} {v / took:.2f}" for r, v in sorted(writes.items()) if v)
    row("gatekeeper API writes/s", f"{per_s:.2f}", "", detail)
    row("record changes seen/s", f"{watch.changes / took:.2f}", "", "MODIFIED events of all records")
    row(
        "most rewrites of one waiting record in a minute, same reason",
        str(watch.worst_minute()),
        "<= 1",
        f"{sum(len(v) for v in watch.same_reason.values())} such rewrites in all",
    )
    row("API server requests/s with gatekeeper", f"{with_gk:.1f}", "", "all clients")
    row("API server requests/s without (same churn)", f"{without_gk:.1f}", "", "gatekeeper stopped")
    row("ratio with / without", f"{with_gk / max(without_gk, 1e-9):.2f}", "", "")
    await api.delete("/api/v1/namespaces/load-writes")
    await api.client.aclose()
    sb.kubectl(
        "delete", "namespace", "load-writes", "load-churn", "--wait=true", "--timeout=600s", check=False
    )


async def webhook_traffic(api: Api, stop: anyio.Event, rate: float) -> int:
    """Opted-in pods, created and deleted at ``rate`` a second: each goes through the webhook."""
    path, made = "/api/v1/namespaces/load-in/pods", 0
    while not stop.is_set():
        body = plain_pod(f"hook-{made}", "", labels={POOL_LABEL: "load-mem"})
        del body["spec"]["nodeName"]
        try:
            await api.create(path, body)
            made += 1
            if made > 20:
                await api.delete(f"{path}/hook-{made - 21}")
        except (httpx.HTTPError, RuntimeError):
            pass  # the API server restarting
        await anyio.sleep(1 / rate)
    return made


def restart_apiserver(sb: Sandbox) -> None:
    """Stop kube-apiserver and start it again on its port: every watch of every client breaks."""
    sb.stop(control_plane.APISERVER)
    control_plane.start_apiserver(sb.runner, sb.state(), sb.pki)


async def part_memory(sb: Sandbox, args: argparse.Namespace) -> None:
    api = Api(sb)
    per_node = args.pods_per_node
    node_count = (args.pods + per_node - 1) // per_node
    nodes = [f"m-{i}" for i in range(node_count)]

    def node_of(i: int) -> str:
        return nodes[i // per_node]

    big = [fake_node(n, gpus=0, cpu="1000", memory="4Ti", pods=per_node + 10) for n in nodes]
    gpu = [fake_node(f"mg-{i}", gpus=4, labels={"load-pool": "mem"}) for i in range(4)]
    await create_all(api, [("/api/v1/nodes", node) for node in [*big, *gpu]])
    sb.apply([pool("load-mem", {"load-pool": "mem"})])
    spaces = [f"load-{i}" for i in range(args.namespaces)]
    await create_all(api, [namespace(n) for n in [*spaces, "load-in"]])
    await create_all(
        api,
        [
            (
                "/apis/leaderworkerset.x-k8s.io/v1/namespaces/load-in/leaderworkersets",
                lws(f"in{i}", 2, 1, "load-mem", {"load-pool": "mem"}),
            )
            for i in range(3)
        ],
    )
    await anyio.sleep(3)
    samplers, stop = Samplers(sb, api), anyio.Event()
    baseline, baseline_lws = both_webhooks(await api.text("/metrics"))
    start_kib = proc_kib(gk_pid(sb), "VmRSS")
    passes_before = pass_seconds(sb.metrics())
    async with anyio.create_task_group() as tg:
        tg.start_soon(samplers.run)
        hooks: list[int] = []

        async def traffic() -> None:
            hooks.append(await webhook_traffic(api, stop, args.webhook_rate))

        tg.start_soon(traffic)
        t0 = time.monotonic()
        await create_all(
            api,
            [
                (
                    f"/api/v1/namespaces/{spaces[i % len(spaces)]}/pods",
                    plain_pod(f"p-{i}", nodes[i // per_node]),
                )
                for i in range(args.pods)
            ],
        )
        print(f"memory: {args.pods} pods created in {time.monotonic() - t0:.0f} s", flush=True)
        await anyio.sleep(30)
        before_relist = proc_kib(gk_pid(sb), "VmRSS")
        hwm_before = proc_kib(gk_pid(sb), "VmHWM")
        first, first_lws = both_webhooks(await api.text("/metrics"))
        log = Path(sb.state()["processes"]["gatekeeper"]["log"])
        log_from = log_size(log)
        outage_start = time.time()
        await anyio.to_thread.run_sync(restart_apiserver, sb)
        outage = (outage_start, time.time())
        await anyio.sleep(45)
        stop.set()
        samplers.stop.set()
    second, second_lws = both_webhooks(await api.text("/metrics"))
    buckets = {b: first.get(b, 0) - baseline.get(b, 0) + second.get(b, 0) for b in second}
    text = read_from(log, log_from)
    relists, terms = text.count("relisting"), text.count("became leader")
    every, outside = samplers.gaps(outage)
    passes_after = pass_seconds(sb.metrics())
    print(
        f"\nmemory: {args.pods} plain pods on {node_count} nodes in {args.namespaces} namespaces; "
        f"kube-apiserver down {outage[1] - outage[0]:.1f} s; gatekeeper log after it: "
        f"{relists} 'relisting' lines, {terms} 'became leader'"
    )
    row("figure", "measured", "target", "note")
    row("---", "---:", "---", "---")
    peak = max(kib for _, kib in samplers.rss) / 1024
    row(
        "gatekeeper peak RSS (VmHWM)",
        f"{samplers.hwm / 1024:.0f} MiB",
        "< 256 MiB",
        f"sampled VmRSS max {peak:.0f}; at start {start_kib / 1024:.0f}; before the relist "
        f"{before_relist / 1024:.0f} (VmHWM {hwm_before / 1024:.0f})",
    )
    lws_buckets = {
        b: first_lws.get(b, 0) - baseline_lws.get(b, 0) + second_lws.get(b, 0) for b in first_lws | second_lws
    }
    phases = {
        "while the pods are created": {b: first.get(b, 0) - baseline.get(b, 0) for b in first},
        "after the restart (relists)": second,
        "whole run": buckets,
        f"control {CONTROL} (LWS), while the pods are created": {
            b: first_lws.get(b, 0) - baseline_lws.get(b, 0) for b in first_lws
        },
        f"control {CONTROL} (LWS), after the restart": second_lws,
        f"control {CONTROL} (LWS), whole run": lws_buckets,
    }
    for phase, counts in phases.items():
        calls = counts.get(float("inf"), 0)
        within = counts.get(0.1, float("nan"))
        if not calls:
            continue
        row(
            f"webhook p50 / p99, {phase}",
            f"{1000 * quantile(counts, 0.5):.0f} / {1000 * quantile(counts, 0.99):.0f} ms",
            "p99 < 100 ms",
            f"{calls:.0f} calls, {100 * within / max(calls, 1):.1f}% <= 100 ms",
        )
    passes = [p2 - p1 for p1, p2 in zip(passes_before, passes_after, strict=True)]
    row("gatekeeper passes", f"{passes[0]:.0f}", "", f"{passes[1]:.1f} s in passes in all")
    row(
        "largest gap between Lease renewals",
        f"{outside:.1f} s",
        "< 10 s renew deadline",
        f"outside the API server's outage; nominal 2 s; {every:.1f} s across it",
    )
    await api.client.aclose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sandbox-dir", type=Path, default=None)
    ap.add_argument("--parts", default="writes,memory")
    ap.add_argument("--pods", type=int, default=20_000)
    ap.add_argument("--pods-per-node", type=int, default=200)
    ap.add_argument("--namespaces", type=int, default=20)
    ap.add_argument("--webhook-rate", type=float, default=4.0, help="opted-in pods a second")
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--churn-seconds", type=float, default=180.0)
    ap.add_argument("--churn-interval", type=float, default=0.5)
    ap.add_argument("--keep", action="store_true", help="leave the sandbox running")
    args = ap.parse_args()
    sb = Sandbox(args.sandbox_dir or default_dir("bench-load"), say=lambda m: print(m, flush=True))
    sb.up(nodes=0)
    try:
        for part in args.parts.split(","):
            anyio.run({"writes": part_writes, "memory": part_memory}[part], sb, args)
    finally:
        if not args.keep:
            sb.down()


if __name__ == "__main__":
    main()

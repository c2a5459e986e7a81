"""Load benchmark on the sandbox: the gatekeeper's memory, webhook latency, Lease and writes.

Two parts, each printed as a table of figures next to its target:

  writes   GROUPS waiting groups (LWSs of two 8-GPU pods, startupPolicy LeaderReady, in
           a Pool whose free nodes hold two groups) while node usage churns: plain 1-GPU
           pods are created and deleted on the pool's other nodes, one change every
           CHURN_INTERVAL seconds, for CHURN_SECONDS. Counts the gatekeeper's API writes
           (its own counter, gatekeeper_api_requests_total, every verb but get) and
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
import json
import random
import re
import ssl
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx

from gatekeeper.core.keys import ADMITTED, GATEKEEPER_API_VERSION, POOL_LABEL
from gatekeeper.sandbox import control_plane
from gatekeeper.sandbox.cluster import GATEKEEPER_NAMESPACE, Sandbox, default_dir, fake_node

WEBHOOK = "pods.lws-gatekeeper.io"
CONTROL = "mpod.kb.io"
"""The LWS controller's pod webhook (Go, on loopback like ours, called for every pod created):
its latency in the same moments says how much of ours is the machine's load."""
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{GATEKEEPER_NAMESPACE}/leases/lws-gatekeeper"
RECORDS = f"/apis/{GATEKEEPER_API_VERSION}/groupadmissions"


class Api:
    """The sandbox's API server as its admin, over one HTTP/1.1 client."""

    def __init__(self, sb: Sandbox) -> None:
        self.sb = sb
        pki = sb.pki
        ctx = ssl.create_default_context(cafile=str(pki.ca_crt))
        ctx.load_cert_chain(str(pki.admin_crt), str(pki.admin_key))
        self.client = httpx.AsyncClient(
            base_url=f"https://127.0.0.1:{sb.state()['ports']['apiserver']}",
            verify=ctx,
            timeout=httpx.Timeout(30.0),
            limits=httpx.Limits(max_connections=64),
        )

    async def get(self, path: str, **params: str) -> dict[str, Any]:
        resp = await self.client.get(path, params=params)
        resp.raise_for_status()
        return dict(resp.json())

    async def text(self, path: str) -> str:
        resp = await self.client.get(path)
        resp.raise_for_status()
        return resp.text

    async def create(self, path: str, body: dict[str, Any]) -> None:
        resp = await self.client.post(path, json=body)
        if resp.status_code not in (200, 201, 409):
            raise RuntimeError(f"POST {path}: {resp.status_code} {resp.text[:300]}")

    async def delete(self, path: str) -> None:
        resp = await self.client.delete(path)
        if resp.status_code not in (200, 202, 404):
            raise RuntimeError(f"DELETE {path}: {resp.status_code} {resp.text[:300]}")


# ----- what is measured -----------------------------------------------------------------


def gk_pid(sb: Sandbox) -> int:
    return int(sb.state()["processes"]["gatekeeper"]["pid"])


def proc_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def gk_writes(metrics: str) -> dict[str, float]:
    """The gatekeeper's API requests other than reads, by resource (its own counter)."""
    out: dict[str, float] = defaultdict(float)
    for labels, value in re.findall(r"^gatekeeper_api_requests_total\{(.*)\} (\S+)$", metrics, re.M):
        kv = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if kv.get("verb") != "get":
            out[kv.get("resource", "")] += float(value)
    return dict(out)


def pass_seconds(metrics: str) -> tuple[float, float]:
    """(passes, seconds spent in them) of the pools backend."""
    found = dict(re.findall(r"^gatekeeper_reconcile_seconds_(count|sum) (\S+)$", metrics, re.M))
    return float(found.get("count", 0)), float(found.get("sum", 0))


def apiserver_requests(metrics: str) -> float:
    return sum(float(v) for v in re.findall(r"^apiserver_request_total\{.*\} (\S+)$", metrics, re.M))


def webhook_buckets(metrics: str, name: str = WEBHOOK) -> dict[float, float]:
    """Cumulative counts by upper bound of the admission latency of webhook ``name``."""
    out: dict[float, float] = defaultdict(float)
    for labels, value in re.findall(
        r"^apiserver_admission_webhook_admission_duration_seconds_bucket\{(.*)\} (\S+)$", metrics, re.M
    ):
        kv = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if kv.get("name") == name:
            out[float(kv["le"])] += float(value)
    return dict(out)


def both_webhooks(metrics: str) -> tuple[dict[float, float], dict[float, float]]:
    return webhook_buckets(metrics), webhook_buckets(metrics, CONTROL)


def quantile(buckets: dict[float, float], q: float) -> float:
    """The q-quantile by linear interpolation within the bucket (Prometheus' histogram_quantile)."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] == 0:
        return float("nan")
    rank, lower, below = q * buckets[bounds[-1]], 0.0, 0.0
    for bound in bounds:
        if buckets[bound] >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(buckets[bound] - below, 1e-9)
        lower, below = bound, buckets[bound]
    return float("nan")


def max_in_window(times: list[float], window: float) -> int:
    best, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] > window:
            start += 1
        best = max(best, end - start + 1)
    return best


def log_size(path: Path) -> int:
    return path.stat().st_size


def read_from(path: Path, offset: int) -> str:
    with path.open("rb") as fh:
        fh.seek(offset)
        return fh.read().decode(errors="replace")


def rfc3339(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class Samplers:
    """The gatekeeper's memory and the Lease's renewals, every 0.5 s, until stopped."""

    def __init__(self, sb: Sandbox, api: Api) -> None:
        self.sb, self.api = sb, api
        self.rss: list[tuple[float, int]] = []
        self.hwm = 0
        self.renewals: list[float] = []
        self.stop = anyio.Event()

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._memory)
            tg.start_soon(self._lease)

    async def _memory(self) -> None:
        while not self.stop.is_set():
            pid = gk_pid(self.sb)
            self.rss.append((time.monotonic(), proc_kib(pid, "VmRSS")))
            self.hwm = max(self.hwm, proc_kib(pid, "VmHWM"))
            await anyio.sleep(0.5)

    async def _lease(self) -> None:
        while not self.stop.is_set():
            try:
                with anyio.fail_after(2):
                    stamp = (await self.api.get(LEASE)).get("spec", {}).get("renewTime")
                if stamp and (not self.renewals or rfc3339(stamp) != self.renewals[-1]):
                    self.renewals.append(rfc3339(stamp))
            except (httpx.HTTPError, TimeoutError, OSError):
                pass  # the API server restarting
            await anyio.sleep(0.5)

    def gaps(self, outage: tuple[float, float] | None) -> tuple[float, float]:
        """(largest gap between renewals, the same leaving out gaps that overlap ``outage``),
        in wall-clock seconds; ``outage`` is (start, end) in wall-clock time."""
        every, outside = 0.0, 0.0
        for a, b in zip(self.renewals, self.renewals[1:], strict=False):
            every = max(every, b - a)
            if outage is None or b < outage[0] or a > outage[1]:
                outside = max(outside, b - a)
        return every, outside


# ----- objects -------------------------------------------------------------------------


def plain_pod(name: str, node: str, gpus: int = 0, labels: dict[str, str] | None = None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "load", **(labels or {})}},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi", **limits}, "limits": limits},
                }
            ],
        },
    }


def lws(name: str, replicas: int, gpus: int, pool: str, selector: dict[str, str]) -> dict[str, Any]:
    pod = {
        "spec": {
            "nodeSelector": selector,
            "containers": [
                {"name": "c", "image": "vllm", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        }
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": {POOL_LABEL: pool}},
        "spec": {
            "replicas": replicas,
            "startupPolicy": "LeaderReady",
            "leaderWorkerTemplate": {"size": 2, "workerTemplate": pod},
        },
    }


def pool(name: str, selector: dict[str, str], quota: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeSelector": selector}
    if quota:
        spec["quota"] = quota
    return {"apiVersion": GATEKEEPER_API_VERSION, "kind": "Pool", "metadata": {"name": name}, "spec": spec}


async def create_all(api: Api, items: list[tuple[str, dict[str, Any]]], concurrency: int = 24) -> None:
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(path: str, body: dict[str, Any]) -> None:
        async with limiter:
            await api.create(path, body)

    async with anyio.create_task_group() as tg:
        for path, body in items:
            tg.start_soon(one, path, body)


def namespace(name: str) -> tuple[str, dict[str, Any]]:
    return "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def row(figure: str, value: str, target: str = "", note: str = "") -> None:
    print(f"| {figure} | {value} | {target} | {note} |", flush=True)


class RecordWatch:
    """Every change of every record, to count rewrites of a waiting record whose reason stayed."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.last: dict[str, tuple[str, str]] = {}
        self.same_reason: dict[str, list[float]] = defaultdict(list)
        self.changes = 0

    @staticmethod
    def _state(obj: dict[str, Any]) -> tuple[str, str]:
        for cond in obj.get("status", {}).get("conditions", []) or []:
            if cond.get("type") == ADMITTED:
                return str(cond.get("status")), str(cond.get("reason"))
        return "", ""

    async def run(self) -> None:
        listed = await self.api.get(RECORDS)
        for obj in listed.get("items", []):
            self.last[obj["metadata"]["uid"]] = self._state(obj)
        params = {"watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"]}
        async with self.api.client.stream("GET", RECORDS, params=params, timeout=None) as resp:
            async for line in resp.aiter_lines():
                if not line:
                    continue
                event = json.loads(line)
                obj = event["object"]
                uid = obj.get("metadata", {}).get("uid", "")
                state = self._state(obj)
                if event["type"] == "MODIFIED":
                    self.changes += 1
                    before = self.last.get(uid)
                    if before == state and state[0] == "False":
                        self.same_reason[uid].append(time.monotonic())
                self.last[uid] = state

    def worst_minute(self) -> int:
        return max((max_in_window(t, 60.0) for t in self.same_reason.values()), default=0)

    def waiting(self) -> int:
        return sum(1 for status, _ in self.last.values() if status == "False")


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

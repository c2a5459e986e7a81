"""What bench_load.py measures with and builds: the admin's API client, the figures read
from /metrics and /proc, the samplers of memory and the Lease, the watch of every record,
and the objects it makes. Imported by bench_load.py, which runs from this folder."""

from __future__ import annotations

import json
import re
import ssl
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import httpx

from gatekeeper.core.kube.keys import ADMITTED, GATEKEEPER_API_VERSION, POOL_LABEL
from gatekeeper_lab.sandbox.cluster import GATEKEEPER_NAMESPACE, Sandbox

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
    for labels, value in re.findall(r"^lws_gatekeeper_api_requests_total\{(.*)\} (\S+)$", metrics, re.M):
        kv = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if kv.get("verb") != "get":
            out[kv.get("resource", "")] += float(value)
    return dict(out)


def pass_seconds(metrics: str) -> tuple[float, float]:
    """(passes, seconds spent in them) of the pools backend."""
    found = dict(
        re.findall(
            r'^lws_gatekeeper_reconcile_duration_seconds_(count|sum)\{backend="pools"\} (\S+)$', metrics, re.M
        )
    )
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


def histogram(metrics: str, name: str) -> dict[float, float]:
    """Cumulative counts by upper bound of histogram ``name``, its series summed."""
    out: dict[float, float] = defaultdict(float)
    for labels, value in re.findall(rf"^{name}_bucket\{{(.*)\}} (\S+)$", metrics, re.M):
        out[float(dict(re.findall(r'(\w+)="([^"]*)"', labels))["le"])] += float(value)
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


def share_within(buckets: dict[float, float], bound: float) -> float:
    """The share of observations at most ``bound`` seconds, exact when ``bound`` is one of the
    histogram's bucket bounds (the API server's webhook histogram: 5, 25, 100, 500 ms, ...),
    where a quantile is an interpolation inside a bucket 5 to 400 ms wide."""
    total = buckets.get(float("inf"), max(buckets.values(), default=0.0))
    if not total or bound not in buckets:
        return float("nan")
    return buckets[bound] / total


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
    spec: dict[str, Any] = {"nodeSelector": selector, "namespaceSelector": {}}
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

"""Scale-up benchmark on the sandbox: many LWS groups at once, with and without the gatekeeper.

The headline is the time from the LWS's creation until every pod that will run is Running
(as a watch of the namespace's pods brings their changes): all GROUPS*SIZE pods in ``fit``,
the pods of the groups that can run in ``scarce``. Runs without and with the gatekeeper
alternate, ``--repeat`` times (3 by default), in one sandbox; the ratio of each pair, and of
the medians, is printed with its min / median / max. Each run also gives: seconds until
settled (unchanged for 5 s, not counted), whole groups, GPUs stranded in incomplete groups,
the CPU seconds of the gatekeeper and of every process of the sandbox (per 1,000 pods, and
the extra against the run without), the p50 / p99 of the gatekeeper's pod webhook as the API
server timed it (interpolated in its buckets) and the share of calls it timed within 5 and
25 ms (exact: bounds of those buckets), the gatekeeper's API requests per admitted group,
its peak memory (VmHWM), its passes' wall time p50 / p99, its writes by purpose and the
watch events its informers decoded, by resource (count and KiB).

Runs (each pod asks for one GPU; ``--gpus-per-node`` GPUs a node, 1 by default):
  fit      GROUPS groups of SIZE on as many nodes as GROUPS*SIZE GPUs take: everything fits.
  scarce   the same groups on 3/4 of those GPUs: only some groups can run.

The curve of the scale without a knee: ``--size 8 --gpus-per-node 4`` and ``--groups`` 250,
500, 1000 (500, 1,000, 2,000 nodes), one file each; ``plot_scale.py`` draws them.

``--floor python,go`` adds runs with a webhook that answers at once and does nothing
(``floor_webhook.py`` on aiohttp, ``floor_webhook.go`` on Go's server, built here) in the
gatekeeper's place: what any webhook costs a pod create on this machine.

``--out FILE.json`` writes every figure of every run, with the commit, the machine and its
load before and after, for a dated file under ``benchmarks/results/``.

Usage: python benchmarks/bench_scale.py [--groups 100] [--size 4] [--gpus-per-node 1]
       [--runs fit,scarce] [--repeat 3] [--out results.json]
It starts its own sandbox (folder sandboxes/bench in the cache) and stops it at the end.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import kr8s.asyncio
from bench_timeline import cpu_seconds, machine_busy
from load_support import WEBHOOK, histogram, pass_seconds, quantile, share_within, webhook_buckets

from gatekeeper.controller.informer import Informer
from gatekeeper.controller.resources import PODS
from gatekeeper.core.kube.keys import POOL_LABEL
from gatekeeper_lab.sandbox.cluster import Sandbox, default_dir, fake_node
from gatekeeper_lab.sandbox.observe import Verdict
from gatekeeper_lab.sandbox.process import free_ports
from gatekeeper_lab.sandbox.replay import LeaderWorkerSet, list_raw, settle

HERE = Path(__file__).parent
WRITES = "lws_gatekeeper_writes_total"
WATCH_EVENTS = "lws_gatekeeper_watch_events_total"
WATCH_BYTES = "lws_gatekeeper_watch_bytes_total"
STAGES = "lws_gatekeeper_reconcile_stage_seconds_total"
PASS_SECONDS = "lws_gatekeeper_reconcile_duration_seconds"
FLOOR = "floor.bench.lws-gatekeeper.io"
LWS_SELECTOR = "leaderworkerset.sigs.k8s.io/name=bench"
GPU = "nvidia.com/gpu"


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


def requests_by_kind(metrics: str, counter: str = "lws_gatekeeper_api_requests_total") -> dict[str, float]:
    """The gatekeeper's API requests so far, by ``verb resource`` (its own counter); with
    ``lws_gatekeeper_writes_total``, its plans' writes by ``resource purpose``."""
    out: dict[str, float] = {}
    for labels, value in re.findall(rf"^{counter}\{{(.*)\}} (\S+)$", metrics, re.M):
        key = " ".join(re.findall(r'\w+="([^"]*)"', labels))
        out[key] = out.get(key, 0.0) + float(value)
    return out


def grown(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@dataclass
class Run:
    """One run's figures."""

    scenario: str
    mode: str
    """default (no gatekeeper), gatekeeper, or floor-python / floor-go (a webhook that answers
    at once, no gatekeeper)."""
    repeat: int
    pods: int
    running_s: float
    """From the LWS's creation until the last pod that runs at the end was Running."""
    settled_s: float
    whole: int
    gpus_held: int
    stranded: int
    cpu_gatekeeper_s: float
    cpu_all_s: float
    machine_busy: float
    webhook_p50_ms: float
    webhook_p99_ms: float
    """Interpolated inside the API server's buckets (5, 25, 100, 500 ms): read with the shares."""
    requests_per_group: float
    peak_rss_mib: float
    cpu_by_process: dict[str, float]
    requests: dict[str, float]
    """The gatekeeper's API requests in the run, by verb and resource."""
    writes: dict[str, float]
    """Its plans' writes in the run, by resource and purpose (``lws_gatekeeper_writes_total``)."""
    watch_events: dict[str, float]
    """The watch events its informers received in the run, by resource and type."""
    watch_kib: dict[str, float]
    """Their size, KiB by resource."""
    passes: int = 0
    """The planning passes in the run."""
    pass_p50_s: float = float("nan")
    pass_p99_s: float = float("nan")
    """The passes' wall time, p50 / p99 (from the gatekeeper's histogram, its buckets' bounds)."""
    nodes: int = 0
    gpus_per_node: int = 1
    stage_s: dict[str, float] = field(default_factory=dict)
    """Their wall seconds by stage (snapshot, decide, plan, execute)."""
    webhook_within_ms: dict[str, float] = field(default_factory=dict)
    """The share of the pod webhook's calls the API server timed at most 5 and 25 ms (exact:
    those are bounds of its buckets)."""


def _sandbox_cpu(sb: Sandbox) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, proc in sb.state()["processes"].items():
        try:
            out[name] = cpu_seconds(int(proc["pid"]))
        except (OSError, ValueError):
            continue
    return out


class PodWatch:
    """The bench LWS's pods as one watch of its namespace brings them, and each moment the
    count of Running ones changed (seconds from ``start``, count). A watch, not a list every
    half second: at thousands of pods the lists would be a load of their own on the machine
    (and on the run being timed). It is the gatekeeper's own informer (plain JSON, one dict
    per event): kr8s' watch builds an object per event and fell minutes behind at 8,000 pods."""

    def __init__(self, api: kr8s.asyncio.Api, namespace: str, start: float) -> None:
        self.start = start
        self.running: set[str] = set()
        self.seen: list[tuple[float, int]] = []
        self.informer = Informer(
            api, PODS, namespace=namespace, label_selector=LWS_SELECTOR, on_change=self._changed
        )

    def _changed(self, kind: str, pod: dict[str, Any]) -> None:
        name, was = pod["metadata"]["name"], len(self.running)
        if kind != "DELETED" and pod.get("status", {}).get("phase") == "Running":
            self.running.add(name)
        else:
            self.running.discard(name)
        if len(self.running) != was:
            self.seen.append((time.monotonic() - self.start, len(self.running)))

    async def follow(self, started: anyio.Event) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.informer.run)
            await self.informer.synced.wait()
            started.set()

    async def current(self) -> list[dict[str, Any]]:
        return self.informer.values()


def profile(folder: Path | None, pid: int, name: str) -> subprocess.Popen[bytes] | None:
    """py-spy sampling the stack of the gatekeeper's thread that holds the interpreter (its
    CPU in Python: TLS and other work done with the interpreter released is not seen), 100
    times a second without pausing it, until interrupted; collapsed stacks, which
    ``profile_scale.py`` sums by component. None when ``folder`` is None (no profile)."""
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{name}.txt"
    spy = ["py-spy", "record", "-p", str(pid), "--nonblocking", "--threads", "--gil", "-r", "100"]
    return subprocess.Popen(
        [*spy, "--format", "raw", "-o", str(out)],
        stdout=subprocess.DEVNULL,
    )


def floor_server(language: str) -> list[str]:
    """The command of the floor webhook in ``language`` (python, or go: built here once)."""
    if language == "python":
        return [sys.executable, str(HERE / "floor_webhook.py")]
    binary = Path(default_dir("bench-floor")) / "floor-webhook"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "GO111MODULE": "off", "CGO_ENABLED": "0"}
        subprocess.run(
            ["go", "build", "-o", str(binary), str(HERE / "floor_webhook.go")], env=env, check=True
        )
    return [str(binary)]


def floor_webhook(sb: Sandbox, namespace: str, language: str) -> subprocess.Popen[bytes]:
    """A floor webhook serving every pod create of ``namespace`` (until the namespace goes)."""
    [port] = free_ports(1)
    tls = sb.pki.webhook_dir
    server = subprocess.Popen(
        [*floor_server(language), str(port), str(tls / "tls.crt"), str(tls / "tls.key")]
    )
    hook = {
        "name": "floor.bench.lws-gatekeeper.io",
        "clientConfig": {
            "url": f"https://127.0.0.1:{port}/mutate",
            "caBundle": base64.b64encode(sb.pki.ca_crt.read_bytes()).decode(),
        },
        "rules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
        ],
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": 10,
    }
    config = {"metadata": {"name": FLOOR}, "webhooks": [hook]}
    sb.apply(
        [{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration", **config}]
    )
    return server


async def one_run(
    sb: Sandbox,
    label: str,
    nodes: int,
    gpus: int,
    groups: int,
    size: int,
    mode: str,
    repeat: int,
    profile_dir: Path | None = None,
) -> Run:
    api = await kr8s.asyncio.api(kubeconfig=str(sb.kubeconfig))
    gatekeeper = mode == "gatekeeper"
    ns = f"bench-{label}-{mode}-{repeat}"
    want = [fake_node(f"b-{i}", gpus=gpus, labels={"bench": "gpu"}) for i in range(nodes)]
    have = await list_raw(api, "nodes", label_selector="bench=gpu")

    def shape(objs: list[dict[str, Any]]) -> set[tuple[str, str]]:
        return {(n["metadata"]["name"], str(n["status"]["allocatable"].get(GPU))) for n in objs}

    if shape(have) != shape(want):  # else the same empty nodes serve: deleting thousands takes minutes
        sb.kubectl("delete", "nodes", "-l", "bench=gpu", "--wait=true", check=False)
        sb.create_nodes(want)
    sb.kubectl("create", "namespace", ns)
    pool = None
    if gatekeeper:
        pool = f"bench-{label}-{repeat}"
        spec = {"nodeSelector": {"bench": "gpu"}, "namespaceSelector": {}}
        sb.apply(
            [
                {
                    "apiVersion": "lws-gatekeeper.io/v1alpha1",
                    "kind": "Pool",
                    "metadata": {"name": pool},
                    "spec": spec,
                }
            ]
        )
    server = floor_webhook(sb, ns, mode.removeprefix("floor-")) if mode.startswith("floor-") else None
    await anyio.sleep(3)  # nodes Ready (and the floor webhook serving)
    pid = int(sb.state()["processes"]["gatekeeper"]["pid"])
    text = sb.metrics()
    asked, wrote = requests_by_kind(text), requests_by_kind(text, WRITES)
    watched, watched_size = requests_by_kind(text, WATCH_EVENTS), requests_by_kind(text, WATCH_BYTES)
    staged, passed = requests_by_kind(text, STAGES), pass_seconds(text)[0]
    passes_before = histogram(text, PASS_SECONDS)
    hooks_before = webhook_buckets(
        sb.kubectl("get", "--raw", "/metrics").stdout, FLOOR if server else WEBHOOK
    )
    cpu_before, gk_before, busy_before = _sandbox_cpu(sb), cpu_seconds(pid), machine_busy()
    pods = PodWatch(api, ns, time.monotonic())
    spy = profile(profile_dir, pid, f"{label}-{mode}-{repeat}") if gatekeeper else None
    async with anyio.create_task_group() as tg:
        started = anyio.Event()
        tg.start_soon(pods.follow, started)
        await started.wait()
        start = pods.start = time.monotonic()
        obj = await LeaderWorkerSet(lws("bench", ns, groups, size, pool), api=api)
        await obj.create()
        v: Verdict = await settle(
            api,
            ns,
            "bench",
            expected_pods=groups * size,
            size=size,
            timeout=1800,
            stable_for=5,
            source=pods.current,
        )
        tg.cancel_scope.cancel()
    settled = time.monotonic() - start - 5  # minus the stability window
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes its samples when interrupted
        spy.wait()
    cpu_after, gk_after, busy_after = _sandbox_cpu(sb), cpu_seconds(pid), machine_busy()
    final = pods.seen[-1][1] if pods.seen else 0
    running = next((t for t, n in pods.seen if n >= final), settled)
    hooks = webhook_buckets(sb.kubectl("get", "--raw", "/metrics").stdout, FLOOR if server else WEBHOOK)
    delta = {b: hooks.get(b, 0.0) - hooks_before.get(b, 0.0) for b in hooks}
    text = sb.metrics()
    requests, writes = grown(asked, requests_by_kind(text)), grown(wrote, requests_by_kind(text, WRITES))
    watch_events = grown(watched, requests_by_kind(text, WATCH_EVENTS))
    watch_size = grown(watched_size, requests_by_kind(text, WATCH_BYTES))
    stages = {k.removeprefix("pools "): v for k, v in grown(staged, requests_by_kind(text, STAGES)).items()}
    took = {b: n - passes_before.get(b, 0.0) for b, n in histogram(text, PASS_SECONDS).items()}
    made = sum(requests.values())
    run = Run(
        scenario=label,
        mode=mode,
        repeat=repeat,
        pods=groups * size,
        running_s=round(running, 2),
        settled_s=round(settled, 2),
        whole=v.whole_groups,
        gpus_held=v.gpus_held,
        stranded=v.gpus_stranded,
        cpu_gatekeeper_s=round(gk_after - gk_before, 2),
        cpu_all_s=round(sum(cpu_after.get(k, 0.0) - s for k, s in cpu_before.items()), 2),
        machine_busy=round((busy_after[0] - busy_before[0]) / max(busy_after[1] - busy_before[1], 1.0), 3),
        webhook_p50_ms=round(1000 * quantile(delta, 0.5), 1),
        webhook_p99_ms=round(1000 * quantile(delta, 0.99), 1),
        requests_per_group=round(made / max(v.whole_groups, 1), 1) if gatekeeper else 0.0,
        peak_rss_mib=round(peak_rss_mib(pid), 1),
        cpu_by_process={k: round(cpu_after.get(k, 0.0) - v, 2) for k, v in cpu_before.items()},
        requests=requests,
        writes=writes,
        watch_events=watch_events,
        watch_kib={k: round(v / 1024, 1) for k, v in watch_size.items()},
        passes=int(pass_seconds(text)[0] - passed),
        pass_p50_s=round(quantile(took, 0.5), 3),
        pass_p99_s=round(quantile(took, 0.99), 3),
        nodes=nodes,
        gpus_per_node=gpus,
        stage_s={k: round(v, 2) for k, v in stages.items()},
        webhook_within_ms={str(ms): round(share_within(delta, ms / 1000), 3) for ms in (5, 25)},
    )
    print(
        f"{label:7} {mode:10} #{repeat}  running={run.running_s:6.1f}s  "
        f"settled={run.settled_s:6.1f}s  whole={run.whole:4}  stranded={run.stranded:4}  "
        f"CPU gk={run.cpu_gatekeeper_s:5.1f}s all={run.cpu_all_s:5.1f}s  busy={run.machine_busy:4.0%}  "
        f"webhook p50/p99={run.webhook_p50_ms:5.1f}/{run.webhook_p99_ms:5.1f} ms "
        f"(<=5 ms {run.webhook_within_ms['5']:.0%}, <=25 ms {run.webhook_within_ms['25']:.0%})  "
        f"requests/group={run.requests_per_group:4.1f}  RSS={run.peak_rss_mib:6.1f} MiB  "
        f"pass p50/p99={run.pass_p50_s:.2f}/{run.pass_p99_s:.2f} s",
        flush=True,
    )
    if server is not None:
        sb.kubectl("delete", "mutatingwebhookconfiguration", FLOOR, check=False)
        server.terminate()
        server.wait()
    # Force the pods out (no grace, no KWOK round): thousands of pods leave in seconds, not minutes.
    sb.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    force = ("--grace-period=0", "--force", "--wait=false")
    sb.kubectl("delete", "pods", "--all", "-n", ns, *force, check=False)
    sb.kubectl("wait", "--for=delete", f"namespace/{ns}", "--timeout=900s", check=False)
    if pool:
        sb.kubectl("delete", "pool", pool, check=False)
    return run


def median(runs: list[Run]) -> float:
    return statistics.median(r.running_s for r in runs)


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def _counts(by: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in sorted(by.items(), key=lambda kv: -kv[1])) or "none"


def summary(runs: list[Run]) -> list[str]:
    """Per scenario and mode: the ratio to the default of each alternated pair and of the medians
    (min / median / max), the CPU it cost, its webhook's latency at the API server."""
    lines = []
    for label in dict.fromkeys(r.scenario for r in runs):
        plain = [r for r in runs if r.scenario == label and r.mode == "default"]
        lines.append(f"{label}: default, running (s) min/median/max {spread([r.running_s for r in plain])}")
        for mode in dict.fromkeys(r.mode for r in runs if r.mode != "default"):
            mine = [r for r in runs if r.scenario == label and r.mode == mode]
            pairs = [m.running_s / p.running_s for p, m in zip(plain, mine, strict=True) if p.running_s]
            pods = mine[0].pods / 1000
            extra = [m.cpu_all_s - p.cpu_all_s for p, m in zip(plain, mine, strict=True)]
            cpu = spread([r.cpu_gatekeeper_s / pods for r in mine])
            p50, p99 = spread([r.webhook_p50_ms for r in mine]), spread([r.webhook_p99_ms for r in mine])
            within = {
                ms: spread([r.webhook_within_ms.get(ms, float("nan")) for r in mine]) for ms in ("5", "25")
            }
            whole, stranded = spread([float(r.whole) for r in mine]), max(r.stranded for r in mine)
            lines += [
                f"{label}: {mode}, running (s) {spread([r.running_s for r in mine])}; against the default, "
                f"each pair {spread(pairs)}, of the medians {median(mine) / median(plain):.2f}x",
                f"{label}: {mode}, gatekeeper CPU s per 1,000 pods {cpu}; "
                f"extra CPU s of all processes against the run without {spread(extra)}",
                f"{label}: {mode}, webhook p50 / p99 at the API server (ms) {p50} / {p99}; "
                f"share of calls within 5 ms {within['5']}, within 25 ms {within['25']}; "
                f"whole groups {whole}; stranded GPUs {stranded}",
                f"{label}: {mode}, peak RSS (MiB) {spread([r.peak_rss_mib for r in mine])}; pass p50 (s) "
                f"{spread([r.pass_p50_s for r in mine])}; "
                f"pass p99 (s) {spread([r.pass_p99_s for r in mine])}",
            ]
            last = mine[-1]
            if last.writes or last.watch_events:
                lines.append(
                    f"{label}: {mode}, last run: writes {_counts(last.writes)}; watch events "
                    f"{_counts(last.watch_events)}; watched KiB {_counts(last.watch_kib)}; "
                    f"{last.passes} passes, seconds {_counts(last.stage_s)}"
                )
    return lines


def machine() -> dict[str, Any]:
    mem = Path("/proc/meminfo").read_text().split("\n", 1)[0].split()[1]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(int(mem) / 2**20, 1),
        "commit": commit.stdout.strip(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--size", type=int, default=4)
    ap.add_argument("--gpus-per-node", type=int, default=1, help="GPUs of each node (each pod asks for one)")
    ap.add_argument("--runs", default="fit,scarce")
    ap.add_argument("--repeat", type=int, default=3, help="alternated pairs of runs per scenario")
    ap.add_argument(
        "--floor",
        default="",
        help="also run with a webhook that does nothing, in these languages: python (floor_webhook.py), "
        "go (floor_webhook.go), or python,go",
    )
    ap.add_argument("--out", type=Path, default=None, help="write every figure here (JSON)")
    ap.add_argument("--keep", action="store_true", help="leave the sandbox running")
    ap.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="sample the gatekeeper's stacks in each of its runs with py-spy (on PATH) into this folder",
    )
    args = ap.parse_args()
    if args.profile is not None and shutil.which("py-spy") is None:
        ap.error("--profile needs py-spy on PATH (pip install py-spy)")
    modes = ["default", "gatekeeper", *(f"floor-{lang}" for lang in args.floor.split(",") if lang)]
    sb = Sandbox(default_dir("bench"), say=lambda m: print(m, flush=True))
    sb.up(nodes=0)
    load_before = os.getloadavg()
    runs: list[Run] = []
    try:
        total = args.groups * args.size
        gpus = args.gpus_per_node
        sizes = {"fit": -(-total // gpus), "scarce": total * 3 // 4 // gpus}
        for label in args.runs.split(","):
            for repeat in range(args.repeat):
                for mode in modes:
                    shape = (sizes[label], gpus, args.groups, args.size)
                    runs.append(anyio.run(one_run, sb, label, *shape, mode, repeat, args.profile))
    finally:
        if not args.keep:
            sb.down()
    lines = summary(runs)
    print("\n".join(["", *lines]))
    if args.out is not None:
        record = {
            "script": "bench_scale.py",
            "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": machine(),
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "args": {k: str(v) for k, v in vars(args).items()},
            "summary": lines,
            "runs": [asdict(r) for r in runs],
        }
        args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()

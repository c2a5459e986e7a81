"""Where the time of a scale-up goes: a group's time line, and the writes of every client.

Why this exists: ``bench_scale.py`` says how long a scale-up takes with and without the
gatekeeper; this says where the difference goes. It runs the same scale-up (GROUPS groups
of SIZE one-GPU pods on exactly enough nodes) twice on one sandbox started with the API
server's audit log on, without and then with the gatekeeper, and reads the API server's
own record of every write (who, what, when it was received and when it was answered):

* per group, seconds from the LWS's creation to: its last pod created, its record made,
  its admission written, its last gate lifted, its last pod bound, its last pod Running
  (p50 / p90 / max over the groups), and each step's own share;
* per client and verb: writes, their latency at the API server (p50 / p99), which for a
  pod create includes the webhook's answer;
* the gatekeeper's CPU seconds, its passes, and the seconds its passes spent in each
  stage (snapshot, decide, plan, execute: ``lws_gatekeeper_reconcile_stage_seconds_total``).

Usage: python benchmarks/bench_timeline.py [--groups 100] [--size 4] [--keep]
It starts its own sandbox (folder sandboxes/bench-timeline in the cache) and stops it.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import kr8s.asyncio

from gatekeeper_lab.sandbox.cluster import Sandbox, default_dir, fake_node
from gatekeeper_lab.sandbox.control_plane import AUDIT_LOG
from gatekeeper_lab.sandbox.observe import Verdict
from gatekeeper_lab.sandbox.replay import LeaderWorkerSet, settle

STAGES = ("pods created", "record made", "admitted", "ungated", "bound", "running")


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
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"lws-gatekeeper.io/pool": pool} if pool else {},
        },
        "spec": {"replicas": groups, "leaderWorkerTemplate": {"size": size, "workerTemplate": pod}},
    }
    return body


def _when(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Event:
    client: str
    verb: str
    resource: str
    subresource: str
    name: str
    received: float
    answered: float
    code: int


def client_of(user_agent: str) -> str:
    """``kube-controller-manager/v1.37.2 (...) kubernetes/abc/statefulset-controller`` ->
    ``kube-controller-manager/statefulset-controller``; ``lws-gatekeeper/0.1 (gk)`` ->
    ``lws-gatekeeper``."""
    head = user_agent.split("/", 1)[0] or "unknown"
    tail = user_agent.rsplit("/", 1)[-1] if user_agent.count("/") >= 3 else ""
    return f"{head}/{tail}" if tail and " " not in tail and tail != user_agent else head


def audit_events(path: Path, namespace: str, since: float) -> Iterator[Event]:
    with path.open(errors="replace") as fh:
        for line in fh:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            ref = e.get("objectRef") or {}
            if ref.get("namespace") != namespace or e.get("stage") != "ResponseComplete":
                continue
            received = _when(e["requestReceivedTimestamp"])
            if received < since:
                continue
            yield Event(
                client_of(str(e.get("userAgent") or "")),
                str(e.get("verb")),
                str(ref.get("resource") or ""),
                str(ref.get("subresource") or ""),
                str(ref.get("name") or ""),
                received,
                _when(e["stageTimestamp"]),
                int((e.get("responseStatus") or {}).get("code") or 0),
            )


_POD = re.compile(r"^bench-(\d+)(?:-\d+)?$")
_RECORD = re.compile(r"^bench-[0-9a-f]+-(\d+)$")


@dataclass
class Timeline:
    """Per group, the last moment each stage was reached (epoch seconds)."""

    start: float
    stages: dict[int, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))

    def mark(self, group: int, stage: str, when: float, *, first: bool = False) -> None:
        have = self.stages[group].get(stage)
        if have is None or (when < have if first else when > have):
            self.stages[group][stage] = when


def timeline(events: Iterable[Event], start: float) -> Timeline:
    t = Timeline(start)
    for e in events:
        if e.code >= 400:
            continue
        pod = _POD.match(e.name) if e.resource == "pods" else None
        if pod:
            g = int(pod.group(1))
            if e.verb == "create" and not e.subresource:
                t.mark(g, "pods created", e.answered)
            elif e.verb == "create" and e.subresource == "binding":
                t.mark(g, "bound", e.answered)
            elif e.verb == "patch" and not e.subresource and e.client == "lws-gatekeeper":
                t.mark(g, "ungated", e.answered)
            elif e.subresource == "status" and e.client.startswith("kwok"):
                t.mark(g, "running", e.answered)
        record = _RECORD.match(e.name) if e.resource == "groupadmissions" else None
        if record:
            g = int(record.group(1))
            if e.verb == "create":
                t.mark(g, "record made", e.answered)
            elif e.subresource == "status" and e.verb in ("patch", "update"):
                t.mark(g, "admitted", e.answered, first=True)
    return t


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def print_timeline(label: str, t: Timeline) -> None:
    """Each stage's time since the LWS was made, and its own step: the time from the latest
    earlier stage the group had reached (so a group admitted before its pods exist waits,
    at "ungated", on its last pod's creation, not on its admission)."""
    print(f"\n{label}: seconds from the LWS's creation (p50 / p90 / max over {len(t.stages)} groups)")
    print(f"  {'stage':13} {'p50':>7} {'p90':>7} {'max':>7}   own step: p50, p90, max")
    for i, stage in enumerate(STAGES):
        at = [s[stage] - t.start for s in t.stages.values() if stage in s]
        if not at:
            continue
        steps = [
            s[stage] - max(s[p] for p in STAGES[:i] if p in s)
            for s in t.stages.values()
            if stage in s and any(p in s for p in STAGES[:i])
        ]
        step = f"   {_pct(steps, 0.5):6.2f} {_pct(steps, 0.9):6.2f} {max(steps):6.2f}" if steps else ""
        print(f"  {stage:13} {_pct(at, 0.5):7.2f} {_pct(at, 0.9):7.2f} {max(at):7.2f}{step}")


def print_ungate_wait(label: str, t: Timeline) -> None:
    """The scale-up target: from a group's last pod created to all its pods ungated. A pod
    the gatekeeper never patched was made ungated (its group was admitted already), so a
    group waits only for the patches that come after its last pod's creation."""
    waits = [
        max(0.0, s.get("ungated", 0.0) - s["pods created"]) for s in t.stages.values() if "pods created" in s
    ]
    patched = sum(1 for s in t.stages.values() if "ungated" in s)
    print(
        f"{label}: last pod created -> all ungated, seconds: p50 {_pct(waits, 0.5):.2f}, "
        f"p99 {_pct(waits, 0.99):.2f}, max {max(waits, default=float('nan')):.2f} "
        f"({patched} of {len(waits)} groups had a gate lifted by a patch)"
    )


def print_clients(label: str, events: list[Event]) -> None:
    by: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for e in events:
        kind = e.resource + (f"/{e.subresource}" if e.subresource else "")
        by[(e.client, e.verb, kind)].append((e.answered - e.received) * 1000)
    print(f"\n{label}: writes by client (count, API server latency p50 / p99 ms)")
    for (client, verb, kind), ms in sorted(by.items(), key=lambda kv: -len(kv[1])):
        print(f"  {client:48} {verb:7} {kind:24} {len(ms):6}  {_pct(ms, 0.5):7.1f} {_pct(ms, 0.99):7.1f}")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in clock ticks of 1/100 s


def process_cpu(sb: Sandbox) -> dict[str, float]:
    """CPU seconds so far of every process of the sandbox, by name."""
    return {name: cpu_seconds(int(p["pid"])) for name, p in sb.state()["processes"].items()}


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU ticks of the whole machine so far, from /proc/stat."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return float(sum(ticks) - idle), float(sum(ticks))


def webhook_seconds(sb: Sandbox) -> dict[str, tuple[float, float]]:
    """The API server's own time in each mutating/validating webhook: name -> (sum s, calls)."""
    text = sb.kubectl("get", "--raw", "/metrics").stdout
    out: dict[str, tuple[float, float]] = {}
    for kind in ("sum", "count"):
        metric = f"apiserver_admission_webhook_admission_duration_seconds_{kind}"
        pattern = rf'^{metric}\{{name="([^"]+)"[^}}]*\}} (\S+)$'
        for name, value in re.findall(pattern, text, re.M):
            total, calls = out.get(name, (0.0, 0.0))
            out[name] = (total + float(value), calls) if kind == "sum" else (total, calls + float(value))
    return out


def print_costs(
    label: str,
    seconds: float,
    cpu: dict[str, float],
    busy: float,
    hooks: dict[str, tuple[float, float]],
) -> None:
    """Who spent the machine's CPU during the run, and what each webhook cost a request."""
    print(f"\n{label}: CPU seconds by process in {seconds:.1f} s (machine busy {busy:.0%})")
    for name, s in sorted(cpu.items(), key=lambda kv: -kv[1]):
        print(f"  {name:26} {s:6.1f}")
    print(f"  {'all of them':26} {sum(cpu.values()):6.1f}")
    if hooks:
        print(f"{label}: webhooks at the API server (calls, mean ms)")
        for name, (total, calls) in sorted(hooks.items()):
            if calls:
                print(f"  {name:40} {calls:6.0f} {1000 * total / calls:7.1f}")


def stage_seconds(metrics: str) -> dict[str, float]:
    found = re.findall(
        r'^lws_gatekeeper_reconcile_stage_seconds_total\{backend="pools",stage="(\w+)"\} (\S+)$',
        metrics,
        re.M,
    )
    passes = re.findall(
        r'^lws_gatekeeper_reconcile_duration_seconds_count\{backend="pools"\} (\S+)$', metrics, re.M
    )
    out = {stage: float(v) for stage, v in found}
    out["passes"] = float(passes[0]) if passes else 0.0
    for key, metric in (
        ("born ungated", "lws_gatekeeper_webhook_pass_through_total"),
        ("lifted early", "lws_gatekeeper_gates_lifted_early_total"),
    ):
        value = re.findall(rf"^{metric} (\S+)$", metrics, re.M)
        out[key] = float(value[0]) if value else 0.0
    return out


async def one_run(
    sb: Sandbox, groups: int, size: int, gatekeeper: bool
) -> tuple[float, Timeline, list[Event]]:
    api = await kr8s.asyncio.api(kubeconfig=str(sb.kubeconfig))
    ns = f"timeline-{'gk' if gatekeeper else 'plain'}"
    nodes = groups * size
    sb.kubectl("delete", "nodes", "-l", "bench=gpu", "--wait=true", check=False)
    sb.create_nodes([fake_node(f"b-{i}", gpus=1, labels={"bench": "gpu"}) for i in range(nodes)])
    sb.kubectl("create", "namespace", ns)
    pool = "timeline" if gatekeeper else None
    if pool:
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
    pid = int(sb.state()["processes"]["gatekeeper"]["pid"])
    cpu_before, stages_before = cpu_seconds(pid), stage_seconds(sb.metrics())
    procs_before, busy_before, hooks_before = process_cpu(sb), machine_busy(), webhook_seconds(sb)
    since = time.time() - 1
    start = time.monotonic()
    await (await LeaderWorkerSet(lws("bench", ns, groups, size, pool), api=api)).create()
    v: Verdict = await settle(api, ns, "bench", expected_pods=nodes, size=size, timeout=900, stable_for=5)
    seconds = time.monotonic() - start - 5
    procs_after, busy_after, hooks_after = process_cpu(sb), machine_busy(), webhook_seconds(sb)
    events = list(audit_events(sb.log_dir / AUDIT_LOG, ns, since))
    created = [e.answered for e in events if e.resource == "leaderworkersets" and e.verb == "create"]
    t = timeline(events, created[0] if created else since)
    label = "with the gatekeeper" if gatekeeper else "without it"
    print(
        f"\n=== {label}: settled in {seconds:.1f} s, {v.whole_groups} whole groups, "
        f"{v.gpus_stranded} GPUs stranded"
    )
    print_timeline(label, t)
    if gatekeeper:
        print_ungate_wait(label, t)
    print_clients(label, events)
    print_costs(
        label,
        seconds + 5,
        {k: v - procs_before.get(k, 0.0) for k, v in procs_after.items()},
        (busy_after[0] - busy_before[0]) / max(1.0, busy_after[1] - busy_before[1]),
        {
            k: (v[0] - hooks_before.get(k, (0.0, 0.0))[0], v[1] - hooks_before.get(k, (0.0, 0.0))[1])
            for k, v in hooks_after.items()
        },
    )
    if gatekeeper:
        cpu, after = cpu_seconds(pid) - cpu_before, stage_seconds(sb.metrics())
        spent = {k: after.get(k, 0.0) - stages_before.get(k, 0.0) for k in after}
        stages = ", ".join(
            f"{k} {spent.get(k, 0.0):.2f} s" for k in ("snapshot", "decide", "plan", "execute")
        )
        print(
            f"\ngatekeeper: {cpu:.1f} CPU s in {seconds:.1f} s; {spent.get('passes', 0):.0f} passes; "
            f"{stages}; pods born ungated {spent.get('born ungated', 0):.0f}, gates lifted between passes "
            f"{spent.get('lifted early', 0):.0f}"
        )
    sb.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=300s", check=False)
    if pool:
        sb.kubectl("delete", "pool", pool, check=False)
    return seconds, t, events


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--size", type=int, default=4)
    ap.add_argument("--keep", action="store_true", help="leave the sandbox running")
    args = ap.parse_args()
    sb = Sandbox(default_dir("bench-timeline"), say=lambda m: print(m, flush=True))
    sb.up(nodes=0, audit=True)
    try:
        plain, _, _ = anyio.run(one_run, sb, args.groups, args.size, False)
        with_gk, _, _ = anyio.run(one_run, sb, args.groups, args.size, True)
        print(
            f"\nsettled: {with_gk:.1f} s with the gatekeeper, {plain:.1f} s without: {with_gk / plain:.2f}x"
        )
        print(f"(measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC)")
    finally:
        if not args.keep:
            sb.down()


if __name__ == "__main__":
    main()

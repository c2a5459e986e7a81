"""What a hub adds to admission: one hub and three members, 100 groups each, hub or local-only.

Why this exists: a Pool charged to a Reservation on a hub (``spec.reservation``) admits a
group only once the hub granted its claim; this measures what that costs against a
local-only Pool, in the same run on the same sandboxes. One hub (its gatekeeper in the
hub role) and three member sandboxes (cluster-a, -b, -c), each with KWOK nodes of 8 GPUs
(25: room for exactly its groups) and an LWS of GROUPS groups of two 1-GPU pods created
in all three at once, twice:
into a Pool without a reservation ("local"), then into a Pool charged to a Reservation
with room for every group ("hub"), so nothing waits for capacity and the figures are the
hub's own. Every API server writes its audit log (writes only, with microsecond times
and the client), and the figures come from those logs and from ``/metrics``:

* claims per second the hub grants: grants (the hub gatekeeper's first status write of
  each claim) over the span from the first to the last; and each claim's time from its
  creation by a member to its grant (p50 / p99);
* admission latency: per group, from its last pod created to its last gate lifted (the
  gatekeeper's patch, or the pod's creation when the webhook made it without the gate: a
  pod of a group admitted before it existed), and from the LWSs' creation to that
  (p50 / p99 over the 300 groups); and the time until every pod is bound;
* API requests per admitted group: ``apiserver_request_total`` (every client) of the
  three members' API servers and of the hub's, and the gatekeepers' own
  (``lws_gatekeeper_api_requests_total``: the members' replicas, which include their requests
  to the hub, and the hub's leader).

Usage: python benchmarks/bench_hub.py [--dir BASE] [--groups 100] [--keep]
Folders ``BASE-hub``, ``BASE-a``, ``BASE-b``, ``BASE-c`` (default BASE: the cache's
sandboxes/bench-hub); sandboxes already running there are used (audit turned on), and
stopped at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench_timeline import audit_events

from gatekeeper_lab.sandbox.cluster import Sandbox, default_dir, fake_node
from gatekeeper_lab.sandbox.control_plane import AUDIT_LOG
from gatekeeper_lab.sandbox.hub import Hub

GPU = "nvidia.com/gpu"
GPUS_PER_NODE, SIZE = 8, 2
MEMBERS = ("cluster-a", "cluster-b", "cluster-c")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def _when(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def metric_sum(text: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{.*}})? (\S+)$", text, re.M))


def apiserver_requests(kubectl: Any) -> float:
    return metric_sum(kubectl("get", "--raw", "/metrics").stdout, "apiserver_request_total")


def lws(namespace: str, pool: str, groups: int) -> dict[str, Any]:
    pod = {
        "containers": [
            {"name": "c", "image": "vllm", "resources": {"limits": {GPU: "1"}, "requests": {"cpu": "10m"}}}
        ],
        "nodeSelector": {"bench": "hub"},
    }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "bench", "namespace": namespace, "labels": {"lws-gatekeeper.io/pool": pool}},
        "spec": {
            "replicas": groups,
            "leaderWorkerTemplate": {
                "size": SIZE,
                "leaderTemplate": {"spec": pod},
                "workerTemplate": {"spec": pod},
            },
        },
    }


def claim_events(path: Path, namespace: str, since: float) -> Iterator[tuple[str, str, str, float]]:
    """(claim name, verb, client, answered) of the hub's writes of this namespace's claims."""
    if not path.exists():
        return
    with path.open(errors="replace") as fh:
        for line in fh:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            ref = e.get("objectRef") or {}
            name = str(ref.get("name") or "")
            if ref.get("resource") != "reservationclaims" or f".{namespace}.bench." not in name:
                continue
            if (
                e.get("stage") != "ResponseComplete"
                or int((e.get("responseStatus") or {}).get("code") or 0) >= 400
            ):
                continue
            if _when(e["requestReceivedTimestamp"]) < since:
                continue
            verb = str(e.get("verb")) + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            yield name, verb, str(e.get("userAgent") or ""), _when(e["stageTimestamp"])


@dataclass
class Run:
    mode: str
    seconds: float
    groups: int
    admitted: int
    latencies: list[float]
    from_start: list[float]
    member_requests: float
    member_gk_requests: float
    hub_requests: float
    hub_gk_requests: float
    grants: int
    grant_span: float
    claim_to_grant: list[float]


_POD = re.compile(r"^bench-(\d+)(?:-\d+)?$")


@dataclass
class Pods:
    """Per pod of a member's run, from its audit log: when created, ungated (the gatekeeper's
    patch, or its creation when it was born without the gate: the webhook's pass-through
    of an admitted group), bound."""

    created: dict[str, float]
    patched: dict[str, float]
    bound: dict[str, float]

    def ungated(self, pod: str) -> float | None:
        if pod in self.patched:
            return self.patched[pod]
        return self.created.get(pod) if pod in self.bound else None


def pods_of_run(sb: Sandbox, namespace: str, since: float) -> Pods:
    out = Pods({}, {}, {})
    for e in audit_events(sb.log_dir / AUDIT_LOG, namespace, since):
        if e.resource != "pods" or e.code >= 400 or not _POD.match(e.name):
            continue
        if e.verb == "create" and not e.subresource:
            out.created[e.name] = e.answered
        elif e.verb == "create" and e.subresource == "binding":
            out.bound[e.name] = e.answered
        elif e.verb == "patch" and not e.subresource and e.client == "lws-gatekeeper":
            out.patched.setdefault(e.name, e.answered)
    return out


def group_latencies(pods: Pods, start: float) -> tuple[list[float], list[float]]:
    """Per group ungated whole: (last pod created -> last gate lifted, LWS created -> last gate lifted)."""
    groups: dict[int, list[str]] = {}
    for name in pods.created:
        m = _POD.match(name)
        if m:
            groups.setdefault(int(m.group(1)), []).append(name)
    after_last, after_start = [], []
    for names in groups.values():
        lifted = [pods.ungated(n) for n in names]
        if len(names) < SIZE or any(t is None for t in lifted):
            continue
        last = max(t for t in lifted if t is not None)
        after_last.append(max(last - max(pods.created[n] for n in names), 0.0))
        after_start.append(last - start)
    return after_last, after_start


def one_run(hub: Hub, members: dict[str, Sandbox], mode: str, groups: int) -> Run:
    tag = uuid.uuid4().hex[:5]
    ns, pool, reservation = f"bench-{mode}-{tag}", f"bench-{mode}-{tag}", f"bench-{tag}"
    if mode == "hub":
        hub.kubectl(
            "apply", "-f", "-",
            input=json.dumps(
                {
                    "apiVersion": "lws-gatekeeper.io/v1alpha1",
                    "kind": "Reservation",
                    "metadata": {"name": reservation},
                    "spec": {"capacity": {GPU: groups * SIZE * len(members)}},
                }
            ),
        )  # fmt: skip
    for sb in members.values():
        sb.kubectl("create", "namespace", ns)
        spec: dict[str, Any] = {"nodeSelector": {"bench": "hub"}, "namespaceSelector": {}}
        if mode == "hub":
            spec["reservation"] = reservation
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
    time.sleep(3)  # the Pools in the gatekeepers' caches
    before_m = sum(apiserver_requests(sb.kubectl) for sb in members.values())
    before_mg = sum(metric_sum(sb.metrics(), "lws_gatekeeper_api_requests_total") for sb in members.values())
    before_h = apiserver_requests(hub.kubectl)
    before_hg = metric_sum(hub.metrics(), "lws_gatekeeper_api_requests_total")
    since = time.time() - 1
    start, created_at = time.monotonic(), time.time()
    makers = [threading.Thread(target=sb.apply, args=([lws(ns, pool, groups)],)) for sb in members.values()]
    for maker in makers:
        maker.start()
    for maker in makers:
        maker.join()
    want = groups * SIZE
    deadline = start + 900
    while time.monotonic() < deadline:
        if all(len(pods_of_run(sb, ns, since).bound) >= want for sb in members.values()):
            break
        time.sleep(1)
    seconds = time.monotonic() - start
    time.sleep(3)  # the last writes (records' status, claims' reasons) counted too
    member_requests = sum(apiserver_requests(sb.kubectl) for sb in members.values()) - before_m
    member_gk = (
        sum(metric_sum(sb.metrics(), "lws_gatekeeper_api_requests_total") for sb in members.values())
        - before_mg
    )
    hub_requests = apiserver_requests(hub.kubectl) - before_h
    hub_gk = metric_sum(hub.metrics(), "lws_gatekeeper_api_requests_total") - before_hg
    latencies: list[float] = []
    from_start: list[float] = []
    for sb in members.values():
        after_last, after_start = group_latencies(pods_of_run(sb, ns, since), created_at)
        latencies += after_last
        from_start += after_start
    admitted = len(latencies)
    created: dict[str, float] = {}
    granted: dict[str, float] = {}
    for name, verb, agent, when in claim_events(hub.dir / "logs" / AUDIT_LOG, ns, since):
        if verb == "create":
            created.setdefault(name, when)
        elif verb == "patch/status" and agent.startswith("lws-gatekeeper"):
            granted.setdefault(name, when)  # every claim fits: its first status write is its grant
    to_grant = [granted[n] - created[n] for n in granted if n in created]
    span = (max(granted.values()) - min(granted.values())) if len(granted) > 1 else 0.0
    for sb in members.values():  # all at once, then waited for: the next run needs the nodes
        sb.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    for sb in members.values():
        sb.kubectl("wait", "--for=delete", f"namespace/{ns}", "--timeout=600s", check=False)
        sb.kubectl("delete", "pool", pool, check=False)
    if mode == "hub":
        hub.kubectl("delete", "reservation", reservation, check=False)
    return Run(
        mode, seconds, groups * len(members), admitted, latencies, from_start, member_requests, member_gk,
        hub_requests, hub_gk, len(granted), span, to_grant,
    )  # fmt: skip


def table(local: Run, hub: Run) -> list[str]:
    def ratio(a: float, b: float) -> str:
        return f"{b / a:.2f}x" if a else "-"

    def row(what: str, a: str, b: str, r: str = "") -> str:
        return f"| {what} | {a} | {b} | {r} |"

    la, lb = local.admitted or 1, hub.admitted or 1
    lp50, lp99 = pct(local.latencies, 0.5), pct(local.latencies, 0.99)
    hp50, hp99 = pct(hub.latencies, 0.5), pct(hub.latencies, 0.99)
    ls50, ls99 = pct(local.from_start, 0.5), pct(local.from_start, 0.99)
    hs50, hs99 = pct(hub.from_start, 0.5), pct(hub.from_start, 0.99)
    rate = hub.grants / hub.grant_span if hub.grant_span else float("nan")
    return [
        "| figure | local-only Pool | Pool charged to the hub | hub / local |",
        "|---|---:|---:|---:|",
        row(
            "groups admitted (of 3 x groups)",
            f"{local.admitted} / {local.groups}",
            f"{hub.admitted} / {hub.groups}",
        ),
        row(
            "every pod bound after (s)",
            f"{local.seconds:.1f}",
            f"{hub.seconds:.1f}",
            ratio(local.seconds, hub.seconds),
        ),
        row(
            "group's last pod created -> its last gate lifted, p50 (s)",
            f"{lp50:.2f}",
            f"{hp50:.2f}",
            ratio(lp50, hp50),
        ),
        row(
            "group's last pod created -> its last gate lifted, p99 (s)",
            f"{lp99:.2f}",
            f"{hp99:.2f}",
            ratio(lp99, hp99),
        ),
        row(
            "LWSs created -> group's last gate lifted, p50 (s)",
            f"{ls50:.2f}",
            f"{hs50:.2f}",
            ratio(ls50, hs50),
        ),
        row(
            "LWSs created -> group's last gate lifted, p99 (s)",
            f"{ls99:.2f}",
            f"{hs99:.2f}",
            ratio(ls99, hs99),
        ),
        row("claims granted by the hub / s", "-", f"{rate:.1f} ({hub.grants} in {hub.grant_span:.1f} s)"),
        row(
            "claim created -> granted, p50 / p99 (s)",
            "-",
            f"{pct(hub.claim_to_grant, 0.5):.2f} / {pct(hub.claim_to_grant, 0.99):.2f}",
        ),
        row(
            "member API requests per admitted group (3 API servers, all clients)",
            f"{local.member_requests / la:.1f}",
            f"{hub.member_requests / lb:.1f}",
            ratio(local.member_requests / la, hub.member_requests / lb),
        ),
        row(
            "... of them the member gatekeepers' (theirs to the hub included)",
            f"{local.member_gk_requests / la:.1f}",
            f"{hub.member_gk_requests / lb:.1f}",
            ratio(local.member_gk_requests / la, hub.member_gk_requests / lb),
        ),
        row(
            "hub API requests per admitted group (all clients)",
            f"{local.hub_requests / la:.1f}",
            f"{hub.hub_requests / lb:.1f}",
            ratio(local.hub_requests / la, hub.hub_requests / lb),
        ),
        row(
            "... of them the hub gatekeeper's",
            f"{local.hub_gk_requests / la:.1f}",
            f"{hub.hub_gk_requests / lb:.1f}",
        ),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=str(default_dir("bench-hub")), help="base of the four folders")
    ap.add_argument("--groups", type=int, default=100, help="groups per member")
    ap.add_argument("--keep", action="store_true", help="leave the sandboxes running")
    opts = ap.parse_args()
    hub = Hub(Path(f"{opts.dir}-hub"))
    members = {name: Sandbox(Path(f"{opts.dir}-{name[-1]}")) for name in MEMBERS}
    try:
        hub.up(audit=True)
        for name, sb in members.items():
            sb.up(nodes=0, audit=True, hub=hub.kubeconfig, cluster_name=name)
            sb.kubectl("delete", "nodes", "-l", "bench=hub", "--wait=true", check=False)
            nodes = -(-opts.groups * SIZE // GPUS_PER_NODE)  # exactly room for every group
            sb.create_nodes(
                [fake_node(f"bench-{i}", gpus=GPUS_PER_NODE, labels={"bench": "hub"}) for i in range(nodes)]
            )
        time.sleep(5)  # nodes Ready
        runs = {mode: one_run(hub, members, mode, opts.groups) for mode in ("local", "hub")}
        print(f"\none hub, {len(members)} members, {opts.groups} groups of {SIZE} one-GPU pods each\n")
        for line in table(runs["local"], runs["hub"]):
            print(line)
    finally:
        if not opts.keep:
            for sb in members.values():
                sb.down()
            hub.down()


if __name__ == "__main__":
    main()

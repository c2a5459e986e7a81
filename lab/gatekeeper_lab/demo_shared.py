"""The demo's shared part (``lws-gatekeeper demo --shared``): the seed's second case.

Why this exists: the LWS gang-scheduling issue's second case, in its reporter's words: "I
have reserved hosts to ensure high level of assurance in obtaining capacity, and the
reservation pool is shared by multiple clusters ... the same issue can happen when the
pool is fully utilized." This replays it on one sandbox hub and two member sandboxes,
``cluster-a`` and ``cluster-b``. The reservation is 4 one-GPU machines that either cluster
may launch: :class:`Machines` plays the cloud, launching a machine (a KWOK node) in a
cluster for each of its pods that waits unbound and ungated (all a cluster asks for at
once), one cluster after the other once both have asked, until the 4 are out; nothing
else gives the demo's pods a node. An LWS of groups of two one-GPU pods
(``startupPolicy: LeaderReady``, as multi-host vLLM is run: workers are made once their
leader is ready; a leader loads for 12 s) is scaled from 0 to 2 in both clusters at once.

Without the gatekeeper the machines go to the pods that ask first: the leaders, since a
group's workers do not exist yet. All four go to the four leaders and every group is
half-placed, in both clusters. With it, each cluster's Pool (``nodeFit: QuotaOnly``: its
machines come when its pods ask) is charged to the hub's ``Reservation`` of 4 GPUs:
exactly two whole groups run across the two clusters (the gatekeeper counts a group's
workers before they exist), the other groups' leaders stay gated, and no machine goes to
part of a group. ``run`` prints each part and returns the verdicts
(``tests/e2e/test_shared_demo.py`` checks them). Called by ``cli.demo`` and that test.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gatekeeper.core.kube.keys import (
    GATEKEEPER_API_VERSION,
    POOL_KIND,
    POOL_LABEL,
    SCHEDULING_GATE,
    WORKER_INDEX_LABEL,
)
from gatekeeper_lab.sandbox.cluster import Sandbox
from gatekeeper_lab.sandbox.hub import Hub
from gatekeeper_lab.sandbox.kwok import READY_DELAY_ANNOTATION
from gatekeeper_lab.sandbox.manifests import fake_node
from gatekeeper_lab.sandbox.observe import summarize

__all__ = ["CLUSTERS", "MACHINES", "Machines", "Verdict", "run", "run_demo"]

CLUSTERS = ("cluster-a", "cluster-b")
MACHINES = 4
"""The reservation: one-GPU machines either cluster may launch."""
SIZE = 2
REPLICAS = 2
MACHINE_LABEL = "lws-gatekeeper.io/demo-machine"
"""Every node the demo's cloud launches carries it; the demo's pods go only there."""
RESERVATION = "demo-odcr"
POOL = "demo-shared"
WITHOUT = "shared-without"
WITH = "shared-with"
SETTLE_SECONDS = 12.0
"""A part has settled when its verdicts have not changed for this long: longer than the
scheduler's longest backoff (10 s), so that a worker ungated and waiting out a backoff is not
judged half placed."""
LOADING = "12s"
"""How long a leader takes to turn Ready once bound (a model server loading its weights):
longer than the scheduler's longest backoff (10 s), so that a leader that waits is placed
before the first worker exists, whatever the scheduler's retry timing."""
ASK_WINDOW = 60.0
"""The cloud waits this long at most for every cluster to ask before it serves the first."""


@dataclass(frozen=True)
class Verdict:
    """What one cluster ended a part with."""

    cluster: str
    whole: int
    """Groups with both pods Running and Ready."""
    half_placed: int
    """Groups holding a machine without running whole."""
    gated: int
    machines: int

    def line(self) -> str:
        return (
            f"{self.cluster}: {self.whole} whole, {self.half_placed} half-placed, "
            f"{self.gated} pods gated, {self.machines} machines"
        )


def _get(sb: Sandbox, *args: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(sb.kubectl("get", *args, "-o", "json").stdout)["items"]
    return found


def _gated(pod: Mapping[str, Any]) -> bool:
    return any(g.get("name") == SCHEDULING_GATE for g in pod["spec"].get("schedulingGates", []))


class Machines(threading.Thread):
    """The cloud of the reservation: launches a machine in a cluster for each of the demo's
    pods there that waits unbound and ungated, all it asks for at once, one cluster after the
    other, until none is left. Machines of a part are named ``<part>-m<i>`` and carry
    ``MACHINE_LABEL=<part>``."""

    def __init__(
        self, members: Mapping[str, Sandbox], namespace: str, part: str, *, all_ask: bool = False
    ) -> None:
        super().__init__(daemon=True)
        self.members, self.namespace, self.part = members, namespace, part
        self.all_ask = all_ask
        """Serve the first machine only once every cluster asks (or after ASK_WINDOW)."""
        self.launched: dict[str, int] = dict.fromkeys(members, 0)
        self.stop = threading.Event()

    def _asking(self, sb: Sandbox) -> int:
        pods = _get(sb, "pods", "-n", self.namespace)
        waiting = [
            p
            for p in pods
            if not p["spec"].get("nodeName") and not _gated(p) and not p["metadata"].get("deletionTimestamp")
        ]
        nodes = _get(sb, "nodes", "-l", f"{MACHINE_LABEL}={self.part}")
        used = {p["spec"].get("nodeName") for p in pods if p["spec"].get("nodeName")}
        free = [n for n in nodes if n["metadata"]["name"] not in used]
        return max(len(waiting) - len(free), 0)

    def run(self) -> None:
        # Without the gatekeeper both clusters ask at once; the cloud serves once each has
        # asked (or after ASK_WINDOW seconds), so that a cluster a little faster than the
        # other does not take every machine, its workers' too. With it, the clusters whose
        # groups were granted ask alone.
        start = time.monotonic()
        while self.all_ask and not self.stop.is_set() and time.monotonic() - start < ASK_WINDOW:
            if all(self._asking(sb) for sb in self.members.values()):
                break
            self.stop.wait(0.3)
        while not self.stop.is_set() and sum(self.launched.values()) < MACHINES:
            for cluster, sb in self.members.items():
                first = sum(self.launched.values())
                count = min(self._asking(sb), MACHINES - first)
                if count:  # all it asks for at once: the pods that ask now share them
                    machines = [f"{self.part}-m{first + i}" for i in range(count)]
                    sb.create_nodes(
                        [fake_node(m, gpus=1, labels={MACHINE_LABEL: self.part}) for m in machines]
                    )
                    self.launched[cluster] += count
            self.stop.wait(0.3)


def lws(namespace: str, part: str, *, opted_in: bool) -> dict[str, Any]:
    pod = {
        "nodeSelector": {MACHINE_LABEL: part},
        "containers": [
            {
                "name": "vllm",
                "image": "vllm/vllm-openai",
                "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "100m"}},
            }
        ],
    }
    labels = {POOL_LABEL: POOL} if opted_in else {}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm", "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 0,
            "startupPolicy": "LeaderReady",
            "leaderWorkerTemplate": {
                "size": SIZE,
                "leaderTemplate": {
                    "metadata": {"annotations": {READY_DELAY_ANNOTATION: LOADING}},
                    "spec": pod,
                },
                "workerTemplate": {"spec": pod},
            },
        },
    }


def pool() -> dict[str, Any]:
    return {
        "apiVersion": GATEKEEPER_API_VERSION,
        "kind": POOL_KIND,
        "metadata": {"name": POOL},
        "spec": {
            "nodeSelector": {MACHINE_LABEL: WITH},
            "namespaceSelector": {},
            "nodeFit": "QuotaOnly",
            "quota": {"nvidia.com/gpu": MACHINES},
            "reservation": RESERVATION,
        },
    }


def reservation() -> dict[str, Any]:
    return {
        "apiVersion": GATEKEEPER_API_VERSION,
        "kind": "Reservation",
        "metadata": {"name": RESERVATION},
        "spec": {"capacity": {"nvidia.com/gpu": MACHINES}},
    }


def _verdict(cluster: str, sb: Sandbox, namespace: str, part: str) -> Verdict:
    seen = summarize(_get(sb, "pods", "-n", namespace), SIZE)
    machines = len(_get(sb, "nodes", "-l", f"{MACHINE_LABEL}={part}"))
    return Verdict(cluster, seen.whole_groups, seen.partial_groups, seen.gated_pods, machines)


def _at_rest(pods: list[dict[str, Any]]) -> bool:
    """Nothing more comes by itself: the leaders are made, every bound one has loaded, and
    the workers of each ready leader are made."""
    leaders = [p for p in pods if p["metadata"].get("labels", {}).get(WORKER_INDEX_LABEL) == "0"]
    seen = summarize(leaders, 1)  # each leader alone: a "whole group" when ready
    loading = sum(1 for g in seen.groups.values() if g.bound and not g.ready)
    ready = seen.whole_groups
    return len(leaders) == REPLICAS and not loading and len(pods) == REPLICAS + ready * (SIZE - 1)


def _settle(members: Mapping[str, Sandbox], namespace: str, part: str, timeout: float = 120) -> list[Verdict]:
    """The verdicts once nothing has changed for SETTLE_SECONDS, every pod LWS makes made."""
    deadline = time.monotonic() + timeout
    last: object = None
    since = time.monotonic()
    while True:
        seen = [_verdict(c, sb, namespace, part) for c, sb in members.items()]
        made = all(_at_rest(_get(sb, "pods", "-n", namespace)) for sb in members.values())
        if seen != last or not made:
            last, since = seen, time.monotonic()
        elif time.monotonic() - since >= SETTLE_SECONDS:
            return seen
        if time.monotonic() > deadline:
            return seen
        time.sleep(1)


def _fresh(members: Mapping[str, Sandbox], namespace: str, part: str) -> None:
    for sb in members.values():
        sb.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=true", "--timeout=120s")
        sb.kubectl("delete", "nodes", "-l", f"{MACHINE_LABEL}={part}", "--ignore-not-found")
        sb.kubectl("create", "namespace", namespace)
        deadline = time.monotonic() + 60
        while sb.kubectl("get", "serviceaccount", "default", "-n", namespace, check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"demo: namespace {namespace}'s default service account not within 60 s")
            time.sleep(0.5)


def _part(
    members: Mapping[str, Sandbox], namespace: str, part: str, *, opted_in: bool, say: Callable[[str], None]
) -> list[Verdict]:
    _fresh(members, namespace, part)
    for sb in members.values():
        sb.apply([lws(namespace, part, opted_in=opted_in)])
    cloud = Machines(members, namespace, part, all_ask=not opted_in)
    cloud.start()
    start = time.monotonic()
    scalers = [
        threading.Thread(
            target=sb.kubectl,
            args=(
                "scale",
                "leaderworkersets.leaderworkerset.x-k8s.io",
                "vllm",
                "-n",
                namespace,
                "--replicas=2",
            ),
        )
        for sb in members.values()
    ]
    for t in scalers:
        t.start()
    for t in scalers:
        t.join()
    say(f"$ kubectl scale lws/vllm --replicas={REPLICAS}    # in {' and '.join(members)} at once")
    try:
        verdicts = _settle(members, namespace, part)
    finally:
        cloud.stop.set()
        cloud.join()
    took = time.monotonic() - start - SETTLE_SECONDS
    for cluster, sb in members.items():
        out = sb.kubectl("get", "pods", "-n", namespace, "-o", "wide").stdout
        say(f"  {cluster}:\n" + "\n".join("    " + line for line in out.rstrip().splitlines()))
    for v in verdicts:
        say(f"  verdict {v.line()}")
    say(f"  settled {took:.1f} s after the scale-ups")
    return verdicts


def run(
    hub: Hub, members: Mapping[str, Sandbox], say: Callable[[str], None] = print
) -> tuple[list[Verdict], list[Verdict]]:
    """Both parts on a hub and members joined to it; (without, with) the gatekeeper."""
    start = time.monotonic()
    setting = f"a reservation of {MACHINES} one-GPU machines that {' and '.join(members)} both launch from"
    say(f"\n=== S1. The shared reservation WITHOUT the gatekeeper: {setting} ===")
    without = _part(members, WITHOUT, WITHOUT, opted_in=False, say=say)
    for sb in members.values():
        sb.kubectl("delete", "namespace", WITHOUT, "--wait=false")
        sb.kubectl("delete", "nodes", "-l", f"{MACHINE_LABEL}={WITHOUT}", "--ignore-not-found")
    say(f"\n=== S2. The same WITH the gatekeeper: a Reservation of {MACHINES} GPUs on the hub ===")
    hub.kubectl("apply", "-f", "-", input=json.dumps(reservation()))
    for sb in members.values():
        sb.apply([pool()])
    with_gk = _part(members, WITH, WITH, opted_in=True, say=say)
    out = hub.kubectl("get", "reservations,reservationclaims", "-A").stdout
    say("\n$ kubectl --kubeconfig hub get reservations,reservationclaims -A")
    say("\n".join("    " + line for line in out.rstrip().splitlines()))
    say("\n=== Side by side, after both scale-ups ===")
    for label, verdicts in (("without", without), ("with   ", with_gk)):
        say(f"  {label}: " + "; ".join(v.line() for v in verdicts))
    say(f"\nThe shared demo took {time.monotonic() - start:.0f} s.")
    return without, with_gk


def run_demo(directory: Path, say: Callable[[str], None] = print) -> tuple[list[Verdict], list[Verdict]]:
    """Start (or reuse) the demo's hub and two members (no static node) and replay the case."""
    hub = Hub(directory / "hub", say=say)
    hub.up()
    members = {c: Sandbox(directory / c, say=say) for c in CLUSTERS}
    for cluster, sb in members.items():
        sb.up(nodes=0, hub=hub.kubeconfig, cluster_name=cluster)
    verdicts = run(hub, members, say)
    dirs = " ".join(str(sb.dir) for sb in members.values())
    say(
        f"\nThe hub and members keep running (kubeconfigs: {hub.kubeconfig}, "
        + ", ".join(str(sb.kubeconfig) for sb in members.values())
        + f").\nStop them with: for d in {dirs}; do lws-gatekeeper sandbox down --dir $d; done; "
        f"lws-gatekeeper sandbox hub down --dir {hub.dir}"
    )
    return verdicts

"""What the chaos test of a shared Reservation reads and does: its sampler, scene and faults.

Why this exists: ``test_shared_chaos.py`` runs three member clusters and a hub while members
scale and gatekeepers are killed, and judges every second what the hub holds and what
the members run. Its sampler (:class:`ChaosSampler`) reads the hub and every member at
once (in threads), tolerates the hub being down (a sample without the hub's figure), and
notes each group of pods half-admitted (some ungated, some gated) and for how long. The
scene (:func:`chaos_scene`) is a Reservation on the hub and, in each member, a namespace,
a Pool charged to it and an LWS of groups of two one-GPU pods; :func:`claims_agree`
compares the hub's claims with the groups the members have.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.core.kube.quantity import parse_units
from gatekeeper_lab.sandbox import gatekeeper as gk
from gatekeeper_lab.sandbox.cluster import Sandbox
from gatekeeper_lab.sandbox.hub import Hub

from .hub_support import GPU, HOLDING, bound_throughout, lws_manifest

GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
HUB_LEASE = ("lease", "lws-gatekeeper", "-n", "lws-gatekeeper-system")


@dataclass
class Chaos:
    """One hub with two gatekeeper replicas and three member sandboxes joined to it."""

    hub: Hub
    members: dict[str, Sandbox]
    node_label: str
    hub_replicas: tuple[str, ...]


def hub_claims(hub: Hub, reservation: str) -> list[dict[str, Any]] | None:
    """Every claim naming ``reservation``, or None when the hub cannot be read."""
    res = hub.kubectl("get", "reservationclaims", "-A", "-o", "json", check=False)
    if res.returncode != 0:
        return None
    items: list[dict[str, Any]] = json.loads(res.stdout)["items"]
    return [c for c in items if c["spec"]["reservation"] == reservation]


def held(claims: list[dict[str, Any]]) -> int:
    """GPUs held by Granted and Orphaned claims."""
    return sum(
        parse_units(GPU, c["spec"]["demand"].get(GPU, "0"))
        for c in claims
        if c.get("status", {}).get("state") in HOLDING
    )


def member_pods(sb: Sandbox, namespace: str) -> list[dict[str, Any]] | None:
    res = sb.kubectl("get", "pods", "-n", namespace, "-o", "json", check=False)
    if res.returncode != 0:
        return None
    pods: list[dict[str, Any]] = json.loads(res.stdout)["items"]
    return pods


def groups_of(pods: list[dict[str, Any]]) -> dict[str, tuple[int, int, int]]:
    """Group (its key, else its index) -> (ungated, gated, running ungated) of pods not being deleted."""
    out: dict[str, list[int]] = {}
    for p in pods:
        if p["metadata"].get("deletionTimestamp"):
            continue
        labels = p["metadata"].get("labels", {})
        key = labels.get(GROUP_KEY) or labels.get(GROUP_INDEX, "?")
        row = out.setdefault(key, [0, 0, 0])
        if p["spec"].get("schedulingGates"):
            row[1] += 1
        else:
            row[0] += 1
            row[2] += p["status"].get("phase") == "Running"
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


class ChaosSampler(threading.Thread):
    """Every second: GPUs held on the hub, GPUs bound to opted-in pods across the members,
    and groups half-admitted (how long each was)."""

    def __init__(self, chaos: Chaos, reservation: str, namespace: str) -> None:
        super().__init__(daemon=True)
        self.chaos, self.reservation, self.namespace = chaos, reservation, namespace
        self.members = dict(chaos.members)
        """Members sampled (a test removes one it deletes)."""
        self.held: list[int] = []
        self.bound: list[int] = []
        self.hub_unread = 0
        self.half_since: dict[tuple[str, str], float] = {}
        self.longest_half = 0.0
        self.longest_half_group = ""
        self.stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=4)

    def run(self) -> None:
        while not self.stop.is_set():
            start = time.monotonic()
            self.sample()
            self.stop.wait(max(0.0, 1.0 - (time.monotonic() - start)))
        self._pool.shutdown()

    def sample(self) -> None:
        members = dict(self.members)
        claims = self._pool.submit(hub_claims, self.chaos.hub, self.reservation)
        pods = {n: self._pool.submit(member_pods, sb, self.namespace) for n, sb in members.items()}
        now = time.monotonic()
        got = claims.result()
        if got is None:
            self.hub_unread += 1
        else:
            self.held.append(held(got))
        first = {n: fut.result() for n, fut in pods.items()}
        again = {n: self._pool.submit(member_pods, sb, self.namespace) for n, sb in members.items()}
        self.bound.append(bound_throughout(first, {n: fut.result() for n, fut in again.items()}))
        half: set[tuple[str, str]] = set()
        for name, listed in first.items():
            if listed is None:
                continue
            for key, (ungated, gated, _) in groups_of(listed).items():
                if ungated and gated:
                    half.add((name, key))
        for one in half:
            self.half_since.setdefault(one, now)
        for one in list(self.half_since):
            took = now - self.half_since[one]
            if took > self.longest_half:
                self.longest_half, self.longest_half_group = took, f"{one[0]}/{one[1]}"
            if one not in half:
                del self.half_since[one]

    def figures(self) -> str:
        return (
            f"samples {len(self.bound)} (hub unreadable in {self.hub_unread}); held at most "
            f"{max(self.held, default=0)} GPUs; bound at most {max(self.bound, default=0)} GPUs; "
            f"longest half-admitted group {self.longest_half:.1f}s {self.longest_half_group}"
        )


@contextmanager
def sampled(chaos: Chaos, reservation: str, namespace: str, capacity: int) -> Iterator[ChaosSampler]:
    """A sampler running meanwhile; afterwards its figures printed and held against ``capacity``."""
    sampler = ChaosSampler(chaos, reservation, namespace)
    sampler.start()
    try:
        yield sampler
    finally:
        # A scene that ends quickly still gets its ten looks, of the state it ended in.
        end = time.monotonic() + 60
        while len(sampler.bound) < 10 and sampler.is_alive() and time.monotonic() < end:
            time.sleep(0.2)
        sampler.stop.set()
        sampler.join()
        print(sampler.figures(), flush=True)
    assert len(sampler.bound) >= 10, sampler.figures()
    assert max(sampler.held) <= capacity, sampler.figures()
    assert max(sampler.bound) <= capacity, sampler.figures()


@dataclass
class Scene:
    reservation: str
    pool: str
    namespace: str
    capacity: int


@contextmanager
def chaos_scene(chaos: Chaos, capacity: int, *, preemption: bool = False) -> Iterator[Scene]:
    """A Reservation of ``capacity`` GPUs on the hub (``preemption``: with
    ``spec.preemption.withinReservation: LowerPriority``); in each member a namespace, a Pool
    (quota 4 GPUs, the member's four nodes) charged to it and an LWS ``vllm`` at 0 replicas."""
    tag = uuid.uuid4().hex[:5]
    scene = Scene(f"odcr-{tag}", f"chaos-{tag}", f"chaos-{tag}", capacity)
    spec: dict[str, Any] = {"capacity": {GPU: capacity}}
    if preemption:
        spec["preemption"] = {"withinReservation": "LowerPriority"}
    chaos.hub.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "lws-gatekeeper.io/v1alpha1",
                "kind": "Reservation",
                "metadata": {"name": scene.reservation},
                "spec": spec,
            }
        ),
    )
    for sb in chaos.members.values():
        sb.kubectl("create", "namespace", scene.namespace)
        sb.apply(
            [
                {
                    "apiVersion": "lws-gatekeeper.io/v1alpha1",
                    "kind": "Pool",
                    "metadata": {"name": scene.pool},
                    "spec": {
                        "nodeSelector": {"pool": chaos.node_label},
                        "namespaceSelector": {},
                        "quota": {GPU: 4},
                        "reservation": scene.reservation,
                    },
                },
                lws_manifest(scene.namespace, scene.pool, 0),
            ]
        )
    try:
        yield scene
    finally:
        for sb in chaos.members.values():
            if sb.state_file.exists():
                sb.kubectl("delete", "namespace", scene.namespace, "--wait=false", check=False)
                sb.kubectl("delete", "pool", scene.pool, "--wait=false", check=False)
        chaos.hub.kubectl("delete", "reservation", scene.reservation, "--wait=false", check=False)


def whole_groups(
    chaos: Chaos, namespace: str, members: dict[str, Sandbox] | None = None
) -> tuple[int, int, int]:
    """(groups of 2 running ungated, ungated pods, gated pods) across the members."""
    whole = ungated = gated = 0
    for sb in (members or chaos.members).values():
        for u, g, running in groups_of(member_pods(sb, namespace) or []).values():
            whole += running == 2
            ungated += u
            gated += g
    return whole, ungated, gated


def claims_agree(chaos: Chaos, scene: Scene, members: dict[str, Sandbox] | None = None) -> str:
    """ "" when the hub's claims match the members' groups, else what is wrong: at most one
    claim per group, none for a group that does not exist, every admitted group holding a
    Granted claim, and no held claim for a group not admitted."""
    claims = hub_claims(chaos.hub, scene.reservation)
    if claims is None:
        return "the hub cannot be read"
    members = members or chaos.members
    groups: dict[tuple[str, str, int], bool] = {}  # (cluster, LWS uid, index) -> admitted
    for name, sb in members.items():
        lws = json.loads(sb.kubectl("get", "lws", "vllm", "-n", scene.namespace, "-o", "json").stdout)
        uid, replicas = lws["metadata"]["uid"], int(lws["spec"]["replicas"])
        pods = member_pods(sb, scene.namespace) or []
        by_index: dict[int, list[bool]] = {}
        for p in pods:
            if not p["metadata"].get("deletionTimestamp"):
                index = int(p["metadata"]["labels"].get(GROUP_INDEX, "-1"))
                by_index.setdefault(index, []).append(not p["spec"].get("schedulingGates"))
        for index in range(replicas):
            ungated = by_index.get(index, [])
            groups[(name, uid, index)] = len(ungated) == 2 and all(ungated)
    seen: dict[tuple[str, str, int], str] = {}
    for c in claims:
        spec, state = c["spec"], c.get("status", {}).get("state", "Pending")
        if spec["cluster"] not in members:
            continue
        key = (spec["cluster"], spec.get("leaderWorkerSetUID", ""), int(spec["groupIndex"]))
        if key in seen:
            return f"two claims for group {key}: {seen[key]} and {c['metadata']['name']}"
        seen[key] = c["metadata"]["name"]
        if key not in groups:
            return f"claim {c['metadata']['name']} ({state}) for a group that does not exist"
        if state in HOLDING and not groups[key]:
            return f"claim {c['metadata']['name']} holds ({state}) for a group not admitted"
        if state == "Orphaned":
            return f"claim {c['metadata']['name']} Orphaned though its member beats"
    for key, admitted in groups.items():
        if admitted and key not in seen:
            return f"group {key} admitted without a claim"
        if admitted:
            name = seen[key]
            state = next(c for c in claims if c["metadata"]["name"] == name).get("status", {}).get("state")
            if state != "Granted":
                return f"group {key} admitted on claim {name} in state {state}"
    return ""


def hub_leader(hub: Hub) -> str:
    res = hub.kubectl("get", *HUB_LEASE, "-o", "jsonpath={.spec.holderIdentity}", check=False)
    return res.stdout.strip() if res.returncode == 0 else ""


@dataclass(eq=False)
class Killer(threading.Thread):
    """Until ``until`` (monotonic): every 5-12 s (drawn from ``rng``) SIGKILL one gatekeeper, a
    member's (started again at once) or the hub's leader (started again as a follower: the
    other replica takes over), the targets in a shuffled cycle so each is hit."""

    chaos: Chaos
    rng: random.Random
    until: float
    kills: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(daemon=True)

    def run(self) -> None:
        targets: list[str] = []
        while True:
            pause = self.rng.uniform(5, 12)
            if time.monotonic() + pause >= self.until:
                return
            time.sleep(pause)
            if not targets:
                targets = [*self.chaos.members, "hub"]
                self.rng.shuffle(targets)
            target = targets.pop()
            try:
                self.kill(target)
            except Exception as exc:  # reported by the test, which fails on it
                self.errors.append(f"killing {target}: {exc}")

    def kill(self, target: str) -> None:
        if target == "hub":
            leader = hub_leader(self.chaos.hub) or self.rng.choice(self.chaos.hub_replicas)
            self.chaos.hub.stop(leader, kill=True)
            self.chaos.hub.start_gatekeeper(name=leader)
            target = f"hub ({leader})"
        else:
            self.chaos.members[target].restart(gk.COMPONENT, kill=True)
        self.kills[target.split(" ")[0]] = self.kills.get(target.split(" ")[0], 0) + 1
        print(f"{time.strftime('%H:%M:%S')} killed the gatekeeper of {target}", flush=True)


def scaler(sb: Sandbox, namespace: str, rng: random.Random, until: float, log: list[str]) -> None:
    """Scale the member's LWS to a drawn 0-4 replicas every 2-8 s, until ``until``."""
    while time.monotonic() < until:
        replicas = rng.choice((0, 1, 2, 3, 4, 4))
        res = sb.kubectl("scale", "lws", "vllm", "-n", namespace, f"--replicas={replicas}", check=False)
        log.append(f"{replicas}" if res.returncode == 0 else "x")
        time.sleep(rng.uniform(2, 8))

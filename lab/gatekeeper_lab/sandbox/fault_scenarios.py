"""The fault scenarios: a burst of groups into a pool too small for all, and one fault kind each.

Why this exists: ``tests/e2e/test_faults.py`` runs each scenario small and asserts its
:class:`~gatekeeper_lab.sandbox.faults.Tally` is clean; ``benchmarks/bench_faults.py`` runs
them at full size and prints the table. Both need the same scenarios on the same kind of
sandbox (:func:`prepare`: audit log on, two gatekeeper replicas), so they live here.

Every scenario makes its own namespace, nodes and Pool (room for ``room`` groups, nodes
with room to spare so the quota is what binds), scales one LWS to ``groups`` groups,
injects its faults while the gatekeeper admits, and then judges: groups admitted twice,
peak quota overrun, pods ungated with no admitted record, admissible groups not admitted
30 s after the last fault, pods the gatekeeper deleted (it never should on the ``pools``
backend), writes by a replica after its renew deadline, and seconds to settle.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import kr8s.asyncio

from gatekeeper_lab.sandbox.cluster import Sandbox, fake_node
from gatekeeper_lab.sandbox.control_plane import APISERVER
from gatekeeper_lab.sandbox.etcd import COMPONENT as ETCD
from gatekeeper_lab.sandbox.faults import BlackHole, Monitor, Tally, gatekeeper_writes, lws_body, pool_body
from gatekeeper_lab.sandbox.gatekeeper import COMPONENT as MAIN

__all__ = ["SCENARIOS", "Burst", "prepare", "run_scenario"]

SECOND = "gatekeeper-b"
"""The second replica: campaigns for the Lease, serves no webhook of the sandbox's own."""

LEASE = ("lws-gatekeeper-system", "lws-gatekeeper")
RENEW_DEADLINE = 10.0  # the elector's default (controller/leader.py)
STUCK_AFTER = 30.0


@dataclass(frozen=True)
class Burst:
    """The size of a scenario."""

    groups: int = 100
    room: int = 60
    size: int = 2
    kills: int = 20
    pause_seconds: float = 30.0
    malformed: int = 200
    seed: int = 1
    settle_timeout: float = 240.0


def prepare(sb: Sandbox) -> None:
    """Make a running sandbox fit for the scenarios: audit log on, the second replica running."""
    sb.up(nodes=0, audit=True)
    if SECOND not in sb.running():
        sb.start_gatekeeper(SECOND, register=False)


@dataclass
class Stage:
    """One scenario's own namespace, nodes, Pool and LWS, and the monitor watching them."""

    sb: Sandbox
    api: kr8s.asyncio.Api
    burst: Burst
    tally: Tally
    tag: str
    started: float = 0.0
    last_fault: float = 0.0

    @property
    def namespace(self) -> str:
        return f"faults-{self.tag}"

    @property
    def nodes(self) -> dict[str, str]:
        return {"faults": self.tag}

    @property
    def quota(self) -> int:
        return self.burst.room * self.burst.size

    def scale(self, replicas: int) -> None:
        """Scale through the ``scale`` subresource, as a HorizontalPodAutoscaler does."""
        self.sb.kubectl("scale", "lws", "burst", "-n", self.namespace, f"--replicas={replicas}")

    def fault(self) -> None:
        """One fault injected now (and over now, unless :meth:`fault_over` says later)."""
        self.tally.faults += 1
        self.last_fault = time.time()

    def fault_over(self) -> None:
        """The fault in progress ends now: the 30 s and the settling count from here."""
        self.last_fault = time.time()

    def count_late_writes(self, identity: str, *, faulted: float) -> None:
        """Writes (Lease attempts aside) replica ``identity`` made once its renew deadline had
        passed, counting from ``faulted``, the moment it stopped renewing (audit log)."""
        late = [
            w
            for w in gatekeeper_writes(self.sb, since=faulted + RENEW_DEADLINE)
            if w.identity == identity and w.resource != "leases"
        ]
        self.tally.late_writes = len(late)
        self.tally.notes.extend(f"late write: {w}" for w in late[:5])

    def leader(self) -> str:
        out = self.sb.kubectl(
            "get", "lease", LEASE[1], "-n", LEASE[0], "-o", "jsonpath={.spec.holderIdentity}", check=False
        )
        return out.stdout.strip()

    async def wait_leader(self, name: str, timeout: float = 40) -> None:
        with anyio.fail_after(timeout):
            while self.leader() != name:
                await anyio.sleep(0.5)

    def setup(self) -> None:
        ns, sel = self.namespace, self.nodes
        self.sb.kubectl("create", "namespace", ns)
        deadline = time.monotonic() + 30
        while self.sb.kubectl("get", "serviceaccount", "default", "-n", ns, check=False).returncode:
            if time.monotonic() > deadline:
                raise RuntimeError(f"namespace {ns} has no default service account after 30 s")
            time.sleep(0.2)
        spare = 16  # node room beyond the quota: the quota, not the nodes, is what binds
        count = -(-(self.quota + spare) // 8)
        self.sb.create_nodes([fake_node(f"{self.tag}-{i}", gpus=8, labels=sel) for i in range(count)])
        self.sb.apply([pool_body(self.namespace, sel, self.quota)])
        body = lws_body("burst", ns, self.namespace, replicas=0, size=self.burst.size, nodes=sel)
        self.sb.apply([body])

    def teardown(self) -> None:
        self.sb.kubectl("delete", "namespace", self.namespace, "--wait=false", check=False)
        self.sb.kubectl("delete", "pool", self.namespace, "--wait=false", check=False)
        self.sb.kubectl("delete", "nodes", "-l", f"faults={self.tag}", "--wait=false", check=False)

    async def judge(self, monitor: Monitor, groups: int) -> None:
        """Stuck groups 30 s after the last fault, and seconds until every admissible group ran whole."""
        expected = min(groups, self.burst.room)
        end = max(self.last_fault, self.started)
        settled: float | None = None
        judged = False
        deadline = end + STUCK_AFTER + self.burst.settle_timeout
        while time.time() < deadline and not (judged and settled is not None):
            whole = await monitor.whole(self.burst.size)
            if settled is None and whole >= expected:
                settled = time.time() - end
            if not judged and time.time() >= end + STUCK_AFTER:
                self.tally.stuck, judged = max(0, expected - whole), True
            await anyio.sleep(1)
        if settled is None:
            self.tally.notes.append(
                f"not all {expected} admissible groups whole {deadline - end:.0f} s after the last fault"
            )
            settled = deadline - end
        self.tally.settle_seconds = settled
        deletes = [
            w
            for w in gatekeeper_writes(self.sb, since=self.started)
            if w.verb == "delete" and w.resource == "pods" and w.namespace == self.namespace
        ]
        self.tally.wrongful_deletions = len(deletes)


Scenario = Callable[[Stage], Awaitable[None]]


async def _kills(st: Stage) -> None:
    """SIGKILL the leader (two replicas) again and again during the burst, scaling between kills."""
    rng = random.Random(st.burst.seed)
    st.scale(st.burst.groups)
    for _ in range(st.burst.kills):
        await anyio.sleep(rng.uniform(1.0, 4.0))
        leader = st.leader()
        if leader in (MAIN, SECOND):
            st.sb.restart(leader, kill=True)
            st.fault()
        st.scale(rng.randint(st.burst.room // 2, st.burst.groups))
    st.scale(st.burst.groups)


async def _pause(st: Stage) -> None:
    """SIGSTOP the leader for ``pause_seconds`` while the other takes over, then SIGCONT it."""
    if st.leader() != SECOND:  # pause the replica that serves no webhook: only the controller hangs
        st.sb.pause(MAIN)
        await st.wait_leader(SECOND)
        st.sb.resume(MAIN)
    st.scale(st.burst.groups)
    await anyio.sleep(3)
    st.sb.pause(SECOND)
    paused = time.time()
    st.fault()
    await anyio.sleep(st.burst.pause_seconds / 2)
    st.scale(st.burst.room // 2)
    await anyio.sleep(st.burst.pause_seconds / 2)
    st.scale(st.burst.groups)
    st.sb.resume(SECOND)
    st.fault_over()
    await anyio.sleep(5)
    st.count_late_writes(SECOND, faulted=paused)


def _restart(component: str) -> Scenario:
    async def scenario(st: Stage) -> None:
        st.scale(st.burst.groups)
        await anyio.sleep(1)
        st.sb.restart(component)
        st.fault()

    scenario.__doc__ = f"{component} restarted in the middle of the burst."
    return scenario


async def _black_hole(st: Stage) -> None:
    """The leader's connection to the API server black-holed (no bytes, nothing closed) for 30 s."""
    hole = BlackHole(int(st.sb.state()["ports"]["apiserver"]))
    third = "gatekeeper-c"
    try:
        st.sb.stop(SECOND)
        st.sb.start_gatekeeper(
            third, register=False, kubeconfig=hole.kubeconfig(st.sb, st.sb.dir / "via-hole.kubeconfig")
        )
        if st.leader() != third:
            st.sb.pause(MAIN)
            await st.wait_leader(third)
            st.sb.resume(MAIN)
        st.scale(st.burst.groups)
        await anyio.sleep(3)
        hole.swallow()
        swallowed = time.time()
        st.fault()
        await anyio.sleep(st.burst.pause_seconds)
        hole.release()
        st.fault_over()
        await anyio.sleep(5)
        st.count_late_writes(third, faulted=swallowed)
    finally:
        st.sb.stop(third)
        hole.close()
        st.sb.start_gatekeeper(SECOND, register=False)


async def _webhook_down(st: Stage) -> None:
    """The webhook's replica down for ``pause_seconds``: other pods unaffected, opted-in ones wait."""
    st.scale(st.burst.room // 2)
    await anyio.sleep(3)
    st.sb.stop(MAIN, kill=True)
    st.fault()
    st.scale(st.burst.groups)
    plain = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "not-opted-in", "namespace": st.namespace},
        "spec": {"nodeSelector": st.nodes, "containers": [{"name": "c", "image": "app"}]},
    }
    made = st.sb.kubectl("create", "-f", "-", input=json.dumps(plain), check=False)
    if made.returncode:
        st.tally.notes.append(
            f"a pod of another workload was refused while the webhook was down: {made.stderr.strip()}"
        )
        st.tally.wrongful_deletions += 1  # counted against the scenario: other workloads must be unaffected
    await anyio.sleep(st.burst.pause_seconds)
    st.sb.up(nodes=0)  # brings the webhook's replica back (and registers it again)
    st.fault_over()


def _malformed_objects(st: Stage, rng: random.Random) -> list[dict[str, Any]]:
    ns, pool = st.namespace, st.namespace
    out: list[dict[str, Any]] = []
    for i in range(st.burst.malformed):
        kind = rng.randrange(6)
        name = f"bad-{i}"
        if kind == 0:  # a request with more digits than any quantity the gatekeeper accepts
            body = lws_body(name, ns, pool, replicas=1, size=2, nodes=st.nodes)
            c = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
            c["resources"] = {"limits": {"nvidia.com/gpu": "9" * rng.choice((41, 320, 4300))}}
        elif kind == 1:  # a group far larger than the bound (leader gated, so no worker is made)
            body = lws_body(
                name, ns, pool, replicas=1, size=rng.choice((1001, 65536, 2147483647)), nodes=st.nodes
            )
            body["spec"]["startupPolicy"] = "LeaderReady"
        elif kind == 2:  # a Pool whose quota no number holds
            body = pool_body(f"{ns}-{name}", st.nodes, 1)
            body["spec"]["quota"] = {"nvidia.com/gpu": "9" * rng.choice((41, 500)), "cpu": "1e300"}
        elif kind == 3:  # a record a tenant wrote by hand: admitted, another pool, nonsense numbers
            body = {
                "apiVersion": "lws-gatekeeper.io/v1alpha1",
                "kind": "GroupAdmission",
                "metadata": {"name": f"burst-{rng.randrange(1000, 5000)}", "namespace": ns},
                "spec": {"leaderWorkerSet": "burst", "groupIndex": rng.choice((-1, 10**9, 2**31 - 1))},
            }
        elif kind == 4:  # a pod that claims a group index of the good LWS no group has
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "labels": {
                        "lws-gatekeeper.io/pool": pool,
                        "leaderworkerset.sigs.k8s.io/name": "burst",
                        "leaderworkerset.sigs.k8s.io/group-index": rng.choice(("-3", "x", "99999999999")),
                    },
                },
                "spec": {
                    "nodeSelector": st.nodes,
                    "containers": [
                        {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                    ],
                },
            }
        else:  # an LWS naming a pool that does not exist
            body = lws_body(name, ns, f"missing-{i}", replicas=rng.choice((0, 1)), size=2, nodes=st.nodes)
            body["spec"]["startupPolicy"] = "LeaderReady"
        out.append(body)
    return out


async def _malformed(st: Stage) -> None:
    """Malformed objects applied while the good LWS is scaled; no replica may restart."""
    rng = random.Random(st.burst.seed)
    pids = {n: st.sb.state()["processes"][n]["pid"] for n in (MAIN, SECOND)}
    st.scale(st.burst.room // 2)
    refused = 0
    for i, body in enumerate(_malformed_objects(st, rng)):
        res = st.sb.kubectl("create", "-f", "-", input=json.dumps(body), check=False)
        if res.returncode:
            refused += 1
        else:
            st.fault()
        if i == st.burst.malformed // 2:
            st.scale(st.burst.groups)
    st.tally.notes.append(
        f"{refused} of {st.burst.malformed} malformed objects refused by the API server itself"
    )
    await anyio.sleep(5)
    now = {n: st.sb.state()["processes"][n]["pid"] for n in (MAIN, SECOND)}
    alive = st.sb.running()
    if now != pids or not (alive.get(MAIN) and alive.get(SECOND)):
        st.tally.notes.append(f"a replica restarted or died: {pids} -> {now}, running {alive}")
        st.tally.wrongful_deletions += 1
    for extra in st.sb.kubectl("get", "pools", "-o", "name").stdout.split():
        if extra.startswith(f"pool.lws-gatekeeper.io/{st.namespace}-"):
            st.sb.kubectl("delete", extra, "--wait=false", check=False)


SCENARIOS: dict[str, Scenario] = {
    "leader SIGKILLs": _kills,
    "leader SIGSTOP": _pause,
    "kube-apiserver restart": _restart(APISERVER),
    "etcd restart": _restart(ETCD),
    "black-holed leader": _black_hole,
    "webhook down": _webhook_down,
    "malformed objects": _malformed,
}


async def run_scenario(sb: Sandbox, name: str, burst: Burst) -> Tally:
    """Run one scenario on a prepared sandbox (:func:`prepare`) and return its tally."""
    api = await kr8s.asyncio.api(kubeconfig=str(sb.kubeconfig))
    tally = Tally(scenario=name)
    st = Stage(sb=sb, api=api, burst=burst, tally=tally, tag=uuid.uuid4().hex[:6])
    st.setup()
    monitor = Monitor(api, st.namespace, st.namespace, st.quota, tally)
    stop = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(monitor.run, stop)
            st.started = time.time()
            await SCENARIOS[name](st)
            # Work after the fault: half the groups scaled away and back, so what is judged
            # is admission by the gatekeeper as the fault left it, not groups admitted before.
            st.scale(burst.room // 2)
            await anyio.sleep(2)
            st.scale(burst.groups)
            await st.judge(monitor, burst.groups)
            stop.set()
    finally:
        st.teardown()
    return tally


def write_table(tallies: list[Tally], path: Path | None = None) -> str:
    """The fault table (markdown) of several scenarios."""
    text = "\n".join([Tally.HEADER, "|" + "---|" * 9, *(t.row() for t in tallies)])
    if path is not None:
        path.write_text(text + "\n")
    return text

"""Chaos on a shared Reservation: three members scaling at once while gatekeepers are killed.

One hub (two replicas of its gatekeeper) and three member sandboxes (``chaos`` below:
cluster-a, cluster-b, cluster-c, four 1-GPU KWOK nodes each), a Reservation of 6 GPUs
and in each member a Pool charged to it and an LWS of groups of two 1-GPU pods:

* all three members scale their LWS up and down at random for ``CHAOS_SECONDS`` while a
  random gatekeeper is SIGKILLed every 5-12 s (a member's, started again at once; or the
  hub's leader, the other replica taking over); then all scale to 4 groups (24 GPUs
  asked of 6) and, settled, exactly 3 whole groups run, one Granted claim per admitted
  group, no claim for a group that does not exist, none doubled;
* the hub's API server down 60 s: admitted groups run on (one of their pods deleted is
  made again and runs), a new group waits ``HubUnreachable``, and all agrees after;
* a member deleted for good (its sandbox torn down): its claims become Orphaned once its
  heartbeat expires (10 s in the sandbox), still counted, until ``lws-gatekeeper hub
  release --cluster`` lets the other members' waiting groups run.

Sampled every second throughout: GPUs held on the hub (Granted and Orphaned) and GPUs
bound to opted-in pods across the members never exceed the capacity, and no group stays
half-admitted (some pods ungated, some gated) for longer than ``HALF_WINDOW`` seconds.
The draws (scales, kill times and targets) come from one seed, printed, and taken from
``LWS_GATEKEEPER_CHAOS_SEED`` to replay a run. The member deleted is the last test: the
session's sandboxes are the file's own (folders ``<sandbox dir>-chaos-hub``,
``-chaos-a``, ``-chaos-b``, ``-chaos-c``).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gatekeeper_lab.sandbox.cluster import Sandbox
from gatekeeper_lab.sandbox.hub import GATEKEEPER, Hub

from .chaos_support import (
    Chaos,
    Killer,
    chaos_scene,
    claims_agree,
    held,
    hub_claims,
    member_pods,
    sampled,
    scaler,
    whole_groups,
)
from .conftest import existing, sandbox_base
from .hub_support import eventually

CAPACITY = 6
CHAOS_SECONDS = 100
HALF_WINDOW = 15.0
"""Longest a group may have some pods ungated and others gated (a member's gatekeeper
killed between two of its ungating patches is started again, and takes over, within this)."""
SEED = int(os.environ.get("LWS_GATEKEEPER_CHAOS_SEED") or time.time_ns() % 1_000_000)


@pytest.fixture(scope="module")
def chaos(request: pytest.FixtureRequest) -> Iterator[Chaos]:
    """The hub (two gatekeeper replicas) and members cluster-a, -b, -c, each with four 1-GPU
    KWOK nodes labelled ``pool=chaos``; stopped once this module's tests are done (four
    sandboxes must not run beside every later test). One that cannot start fails the tests,
    never a skip."""
    if existing(request.config):
        pytest.skip("runs sandbox hubs and members of its own, not on an existing cluster")
    base = str(sandbox_base(request.config))
    say = lambda m: print(m, flush=True)  # noqa: E731
    hub = Hub(Path(f"{base}-chaos-hub"), say=say)
    members = {f"cluster-{x}": Sandbox(Path(f"{base}-chaos-{x}"), say=say) for x in "abc"}
    replicas = (GATEKEEPER, f"{GATEKEEPER}-2")
    try:
        hub.up()
        for name in replicas:
            if name not in hub.running():
                hub.start_gatekeeper(name=name)
        for name, sb in members.items():
            sb.up(nodes=4, labels={"pool": "chaos"}, hub=hub.kubeconfig, cluster_name=name)
    except Exception as exc:  # the reason goes into every test's failure, never a skip
        for sb in members.values():
            sb.down(quiet=True)
        hub.down(quiet=True)
        pytest.fail(f"the hub and its three members could not start: {exc}", pytrace=False)
    try:
        yield Chaos(hub, members, "chaos", replicas)
    finally:
        if not request.config.getoption("--keep-sandbox"):
            for sb in members.values():
                sb.down()
            hub.down()


def scale(chaos: Chaos, namespace: str, replicas: dict[str, int]) -> None:
    for name, n in replicas.items():
        chaos.members[name].kubectl("scale", "lws", "vllm", "-n", namespace, f"--replicas={n}")


def test_three_members_scale_at_random_while_gatekeepers_are_killed(chaos: Chaos) -> None:
    print(f"seed {SEED} (LWS_GATEKEEPER_CHAOS_SEED={SEED} replays the draws)", flush=True)
    with (
        chaos_scene(chaos, CAPACITY) as scene,
        sampled(chaos, scene.reservation, scene.namespace, CAPACITY) as s,
    ):
        until = time.monotonic() + CHAOS_SECONDS
        logs: dict[str, list[str]] = {name: [] for name in chaos.members}
        scalers = [
            threading.Thread(
                target=scaler,
                args=(sb, scene.namespace, random.Random(f"{SEED}-{name}"), until, logs[name]),
                daemon=True,
            )
            for name, sb in chaos.members.items()
        ]
        killer = Killer(chaos, random.Random(f"{SEED}-kills"), until)
        for t in [*scalers, killer]:
            t.start()
        for t in [*scalers, killer]:
            t.join()
        print(f"scales: {logs}; kills: {killer.kills}", flush=True)
        assert not killer.errors, killer.errors
        assert len(killer.kills) == 4, (
            f"every member and the hub killed at least once: {killer.kills} (seed {SEED})"
        )
        settle_from = time.monotonic()
        scale(chaos, scene.namespace, dict.fromkeys(chaos.members, 4))

        def settled() -> bool:
            return whole_groups(chaos, scene.namespace) == (3, 6, 18) and not claims_agree(chaos, scene)

        try:
            took = eventually(settled, 180, "3 whole groups, 18 pods gated, claims agreeing")
        except AssertionError:
            why = claims_agree(chaos, scene)
            raise AssertionError(
                f"seed {SEED}: {whole_groups(chaos, scene.namespace)} (whole, ungated, gated); {why}"
            ) from None
        print(
            f"settled {took:.1f}s after the last scale-up ({time.monotonic() - settle_from:.1f}s)", flush=True
        )
        time.sleep(5)  # and stays so
        assert whole_groups(chaos, scene.namespace) == (3, 6, 18), f"seed {SEED}"
        assert claims_agree(chaos, scene) == "", f"seed {SEED}"
        claims = hub_claims(chaos.hub, scene.reservation) or []
        assert held(claims) == CAPACITY
        print(
            f"claims at the end: {len(claims)} "
            f"({sum(c.get('status', {}).get('state') == 'Granted' for c in claims)} Granted)",
            flush=True,
        )
        assert s.longest_half <= HALF_WINDOW, f"seed {SEED}: {s.figures()}"


def test_a_member_of_higher_priority_takes_the_reservation_while_gatekeepers_are_killed(chaos: Chaos) -> None:
    """Preemption across members under kills: a Reservation of 6 GPUs that preempts
    (``withinReservation: LowerPriority``) is full of cluster-a's and cluster-b's groups (priority
    0); cluster-c's LWS (a PriorityClass of 100000) scales to 2 groups (all its Pool's 4 GPUs)
    while a random gatekeeper is SIGKILLed every 5-12 s for 40 s. In the end cluster-c runs its 2
    groups whole, the others one (the 2 GPUs left), every other group waits gated, the claims
    agree, and no sample saw more than 6 GPUs held or bound or a group half-admitted longer than
    ``HALF_WINDOW``."""
    print(f"seed {SEED}", flush=True)
    with (
        chaos_scene(chaos, CAPACITY, preemption=True) as scene,
        sampled(chaos, scene.reservation, scene.namespace, CAPACITY) as s,
    ):
        ns, high = scene.namespace, chaos.members["cluster-c"]
        klass = f"production-{ns}"
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": klass}}
        high.kubectl("create", "-f", "-", input=json.dumps({**body, "value": 100000}))
        path = "/spec/leaderWorkerTemplate/{}/spec/priorityClassName"
        patch = [
            {"op": "add", "path": path.format(t), "value": klass}
            for t in ("leaderTemplate", "workerTemplate")
        ]
        high.kubectl("patch", "lws", "vllm", "-n", ns, "--type=json", "-p", json.dumps(patch))
        scale(chaos, ns, {"cluster-a": 2, "cluster-b": 2})
        eventually(
            lambda: whole_groups(chaos, ns) == (3, 6, 2), 120, "the Reservation full of a's and b's groups"
        )
        killer = Killer(chaos, random.Random(f"{SEED}-preempting"), time.monotonic() + 40)
        killer.start()
        started = time.monotonic()
        scale(chaos, ns, {"cluster-c": 2})
        killer.join()
        assert not killer.errors, killer.errors
        others = {n: sb for n, sb in chaos.members.items() if n != "cluster-c"}

        def settled() -> bool:
            return (
                whole_groups(chaos, ns, {"cluster-c": high}) == (2, 4, 0)
                and whole_groups(chaos, ns, others) == (1, 2, 6)
                and not claims_agree(chaos, scene)
            )

        try:
            eventually(settled, 180, "cluster-c's 2 groups whole, one of the others', claims agreeing")
        except AssertionError:
            raise AssertionError(
                f"seed {SEED}: c {whole_groups(chaos, ns, {'cluster-c': high})}, others "
                f"{whole_groups(chaos, ns, others)} (whole, ungated, gated); {claims_agree(chaos, scene)}"
            ) from None
        print(
            f"cluster-c's 2 groups whole {time.monotonic() - started:.1f}s after its scale-up; "
            f"kills: {killer.kills}",
            flush=True,
        )
        assert held(hub_claims(chaos.hub, scene.reservation) or []) == CAPACITY
        assert s.longest_half <= HALF_WINDOW, f"seed {SEED}: {s.figures()}"


def waits_hub_unreachable(sb: Sandbox, namespace: str) -> bool:
    res = sb.kubectl("get", "groupadmissions", "-n", namespace, "-o", "json", check=False)
    if res.returncode != 0:
        return False
    for rec in json.loads(res.stdout)["items"]:
        for c in rec.get("status", {}).get("conditions", []):
            if c.get("reason") == "HubUnreachable" and "the hub is unreachable since" in c.get("message", ""):
                return True
    return False


def test_hub_down_60s_with_three_members(chaos: Chaos) -> None:
    with (
        chaos_scene(chaos, CAPACITY) as scene,
        sampled(chaos, scene.reservation, scene.namespace, CAPACITY) as s,
    ):
        ns = scene.namespace
        scale(chaos, ns, {"cluster-a": 1, "cluster-b": 1})
        eventually(lambda: whole_groups(chaos, ns) == (2, 4, 0), 90, "a group in cluster-a and in cluster-b")
        a, c = chaos.members["cluster-a"], chaos.members["cluster-c"]
        chaos.hub.interrupt("kube-apiserver")
        down = time.monotonic()
        try:
            before = json.loads(a.kubectl("get", "pod", "vllm-0-1", "-n", ns, "-o", "json").stdout)
            a.kubectl("delete", "pod", "vllm-0-1", "-n", ns, "--wait=false")
            scale(chaos, ns, {"cluster-c": 2})

            def remade() -> bool:
                pods = member_pods(a, ns) or []
                uids = {p["metadata"]["uid"] for p in pods if p["metadata"]["name"] == "vllm-0-1"}
                return bool(uids) and before["metadata"]["uid"] not in uids

            eventually(remade, 60, "cluster-a's deleted worker made again")
            eventually(lambda: waits_hub_unreachable(c, ns), 60, "cluster-c's groups to wait HubUnreachable")
            eventually(
                lambda: whole_groups(chaos, ns) == (2, 4, 4), 60, "admitted groups whole, c's 4 pods gated"
            )
            left = 60 - (time.monotonic() - down)
            time.sleep(max(left, 0))
            assert whole_groups(chaos, ns) == (2, 4, 4)
            assert waits_hub_unreachable(c, ns)
        finally:
            chaos.hub.start_again("kube-apiserver")
        print(f"the hub's API server was down {time.monotonic() - down:.1f}s", flush=True)
        took = eventually(
            lambda: whole_groups(chaos, ns) == (3, 6, 2) and not claims_agree(chaos, scene),
            120,
            "one of cluster-c's groups admitted, claims agreeing",
        )
        print(f"consistent {took:.1f}s after the hub came back", flush=True)
        claims = hub_claims(chaos.hub, scene.reservation) or []
        assert held(claims) == CAPACITY
        assert s.longest_half <= HALF_WINDOW, s.figures()


def test_a_member_deleted_is_orphaned_then_released_and_the_others_run(chaos: Chaos) -> None:
    """The last test: cluster-a's sandbox is torn down for good."""
    with (
        chaos_scene(chaos, CAPACITY) as scene,
        sampled(chaos, scene.reservation, scene.namespace, CAPACITY) as s,
    ):
        ns = scene.namespace
        scale(chaos, ns, {"cluster-a": 2, "cluster-b": 1})
        eventually(
            lambda: whole_groups(chaos, ns) == (3, 6, 0), 90, "two groups in cluster-a, one in cluster-b"
        )
        scale(chaos, ns, {"cluster-c": 2})
        eventually(lambda: whole_groups(chaos, ns) == (3, 6, 4), 60, "cluster-c's 4 pods gated")
        gone = chaos.members["cluster-a"]
        del s.members["cluster-a"]
        rest = {n: sb for n, sb in chaos.members.items() if n != "cluster-a"}
        down = time.monotonic()
        gone.down()
        print(f"cluster-a's sandbox torn down in {time.monotonic() - down:.1f}s", flush=True)

        def a_states() -> list[str]:
            return sorted(
                c.get("status", {}).get("state", "")
                for c in hub_claims(chaos.hub, scene.reservation) or []
                if c["spec"]["cluster"] == "cluster-a"
            )

        eventually(lambda: a_states() == ["Orphaned", "Orphaned"], 60, "cluster-a's claims Orphaned")
        print(
            f"cluster-a's claims Orphaned {time.monotonic() - down:.1f}s after its sandbox went", flush=True
        )
        assert held(hub_claims(chaos.hub, scene.reservation) or []) == CAPACITY  # still counted
        assert whole_groups(chaos, ns, rest) == (1, 2, 4)
        done = subprocess.run(
            [
                sys.executable, "-m", "gatekeeper", "hub", "release",
                "--cluster=cluster-a", f"--kubeconfig={chaos.hub.kubeconfig}",
            ],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        print(done.stdout.strip(), flush=True)
        released = time.monotonic()
        took = eventually(
            lambda: whole_groups(chaos, ns, rest) == (3, 6, 0) and not claims_agree(chaos, scene, rest),
            90,
            "cluster-c's two groups whole",
        )
        print(f"cluster-c's two groups ran {took:.1f}s after the release", flush=True)
        assert a_states() == ["Released", "Released"]
        claims = hub_claims(chaos.hub, scene.reservation) or []
        assert held(claims) == 4 + 2 and time.monotonic() - released < 90
        assert s.longest_half <= HALF_WINDOW, s.figures()

"""A member whose heartbeat expires: its claims Orphaned (still counted), then back or released.

Each member renews a Lease on the hub (every 2.5 s in the sandbox, 10 s duration). With a
member's gatekeeper stopped, the hub marks its granted claims Orphaned: they go on holding
(its machines may still run), so the other member's groups still wait. When its
gatekeeper comes back, the claims are Granted again. When its groups are gone for good,
``lws-gatekeeper hub release --cluster`` (refused while the member still beats) or the
Reservation's ``spec.orphanTimeout`` releases them, and the other member's groups run
whole in the room. Sampled every second throughout: held GPUs and bound GPUs of the
opted-in pods across members never exceed the Reservation's 4.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from gatekeeper_lab.sandbox import gatekeeper as gk

from .conftest import SharedHub
from .hub_support import CAPACITY, Sampler, _json, eventually, granted_gpus, scene, whole_running_groups

__all__ = ["scene"]  # the fixture, used by name


def states(shared: SharedHub, reservation: str, cluster: str) -> list[str]:
    return sorted(
        c.get("status", {}).get("state", "")
        for c in granted_gpus(shared, reservation)[1]
        if c["spec"]["cluster"] == cluster
    )


def whole(shared: SharedHub, cluster: str, ns: str) -> tuple[int, int, int]:
    return whole_running_groups(_json(shared.members[cluster].kubectl, "get", "pods", "-n", ns)["items"])


def hub_release(shared: SharedHub, cluster: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "gatekeeper", "hub", "release",
            f"--cluster={cluster}", f"--kubeconfig={shared.hub.kubeconfig}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip


@contextmanager
def sampled(shared: SharedHub, reservation: str, ns: str) -> Iterator[Sampler]:
    sampler = Sampler(shared, reservation, ns)
    sampler.start()
    try:
        yield sampler
    finally:
        sampler.stop.set()
        sampler.join()
    most, bound = max(sampler.granted), max(sampler.bound)
    print(f"samples: {len(sampler.granted)}; held at most {most} GPUs; bound GPUs at most {bound}")
    assert most <= CAPACITY and bound <= CAPACITY


def a_holds_the_reservation(shared: SharedHub, reservation: str, ns: str) -> None:
    """cluster-a runs two whole groups (all 4 GPUs); cluster-b's two groups wait gated."""
    shared.members["cluster-a"].kubectl("scale", "lws", "vllm", "-n", ns, "--replicas=2")
    eventually(lambda: whole(shared, "cluster-a", ns) == (2, 4, 0), 90, "two whole groups in cluster-a")
    shared.members["cluster-b"].kubectl("scale", "lws", "vllm", "-n", ns, "--replicas=2")
    eventually(lambda: whole(shared, "cluster-b", ns) == (0, 0, 4), 60, "cluster-b's 4 pods gated")
    assert states(shared, reservation, "cluster-a") == ["Granted", "Granted"]


def test_a_member_stopped_is_orphaned_still_counted_and_granted_again_when_it_beats(
    shared_hub: SharedHub, scene: Any
) -> None:
    reservation, _, ns = scene
    a = shared_hub.members["cluster-a"]
    with sampled(shared_hub, reservation, ns):
        a_holds_the_reservation(shared_hub, reservation, ns)
        a.stop(gk.COMPONENT)
        try:
            took = eventually(
                lambda: states(shared_hub, reservation, "cluster-a") == ["Orphaned", "Orphaned"],
                60,
                "cluster-a's claims Orphaned",
            )
            print(f"cluster-a's claims Orphaned {took:.1f}s after its gatekeeper stopped")
            claim = next(
                c for c in granted_gpus(shared_hub, reservation)[1] if c["spec"]["cluster"] == "cluster-a"
            )
            assert claim["status"]["reason"] == "MemberHeartbeatExpired"
            assert "still counted" in claim["status"]["message"]
            assert claim["status"]["orphanedAt"]
            status = _json(shared_hub.hub.kubectl, "get", "reservation", reservation)["status"]
            share = {c["name"]: c for c in status["clusters"]}["cluster-a"]
            assert share["orphaned"] == 2 and status["freeSummary"].startswith("0 nvidia.com/gpu")
            eventually(
                lambda: "lws_gatekeeper_hub_members_gone 1.0" in shared_hub.hub.metrics(),
                30,
                "the hub's gauge of members gone",
            )
            scraped = shared_hub.hub.metrics()
            claimed = (
                f'lws_gatekeeper_hub_claimed{{reservation="{reservation}",resource="nvidia.com/gpu"}} 4.0'
            )
            assert claimed in scraped, "the orphaned claims are still counted"
            assert 'role="hub"' in scraped and "lws_gatekeeper_leader 1.0" in scraped
            # Still counted: cluster-b's groups go on waiting; cluster-a's pods go on running.
            assert whole(shared_hub, "cluster-b", ns) == (0, 0, 4)
            assert whole(shared_hub, "cluster-a", ns) == (2, 4, 0)
        finally:
            a.start_gatekeeper()
        took = eventually(
            lambda: states(shared_hub, reservation, "cluster-a") == ["Granted", "Granted"],
            60,
            "cluster-a's claims Granted again",
        )
        print(f"cluster-a's claims Granted again {took:.1f}s after its gatekeeper came back")
        assert whole(shared_hub, "cluster-a", ns) == (2, 4, 0)
        assert whole(shared_hub, "cluster-b", ns) == (0, 0, 4)


@pytest.mark.parametrize("released_by", ["hub release", "orphanTimeout"])
def test_a_member_gone_for_good_is_released_and_the_other_members_groups_run_whole(
    shared_hub: SharedHub, scene: Any, released_by: str
) -> None:
    reservation, _, ns = scene
    a = shared_hub.members["cluster-a"]
    with sampled(shared_hub, reservation, ns):
        a_holds_the_reservation(shared_hub, reservation, ns)
        refused = hub_release(shared_hub, "cluster-a")
        assert refused.returncode == 1
        # (Claims of earlier tests' scenes the member has not given back yet count too.)
        assert re.search(r"still holds \d+ Granted claim", refused.stderr) and "--force" in refused.stderr
        a.stop(gk.COMPONENT)
        try:
            # Its machines go: its groups' pods are deleted while no gatekeeper of its runs,
            # so nothing gives its claims back but the hub.
            a.kubectl("scale", "lws", "vllm", "-n", ns, "--replicas=0")
            eventually(lambda: whole(shared_hub, "cluster-a", ns) == (0, 0, 0), 60, "cluster-a's pods gone")
            eventually(
                lambda: states(shared_hub, reservation, "cluster-a") == ["Orphaned", "Orphaned"],
                60,
                "cluster-a's claims Orphaned",
            )
            assert whole(shared_hub, "cluster-b", ns) == (0, 0, 4)
            if released_by == "hub release":
                done = hub_release(shared_hub, "cluster-a")
                assert done.returncode == 0, done.stderr
                assert re.search(
                    r"released \d+ claim\(s\) of cluster cluster-a, \d+ of them holding room", done.stdout
                )
            else:
                shared_hub.hub.kubectl(
                    "patch", "reservation", reservation, "--type=merge", "-p",
                    json.dumps({"spec": {"orphanTimeout": "5s"}}),
                )  # fmt: skip
            took = eventually(
                lambda: states(shared_hub, reservation, "cluster-a") == ["Released", "Released"],
                60,
                "cluster-a's claims Released",
            )
            print(f"cluster-a's claims Released ({released_by}) within {took:.1f}s")
            reason = "ReleasedByOperator" if released_by == "hub release" else "OrphanTimeout"
            assert {
                c["status"]["reason"] for c in granted_gpus(shared_hub, reservation)[1]
                if c["spec"]["cluster"] == "cluster-a"
            } == {reason}  # fmt: skip
            took = eventually(
                lambda: whole(shared_hub, "cluster-b", ns) == (2, 4, 0), 90, "cluster-b's two groups whole"
            )
            print(f"cluster-b's two groups ran whole {took:.1f}s after the release")
        finally:
            a.start_gatekeeper()
        # Back, with no group of its own: it gives its released claims back.
        eventually(lambda: states(shared_hub, reservation, "cluster-a") == [], 60, "cluster-a's claims gone")
        assert granted_gpus(shared_hub, reservation)[0] == CAPACITY


def test_a_member_may_write_only_its_own_heartbeat(shared_hub: SharedHub, tmp_path: Any) -> None:
    """With the identity of a member that runs no gatekeeper (cluster-c): its own Lease, in its
    own namespace, is made and renewed; another member's and the hub's own are out of its
    reach (RBAC), and in its namespace one not named and labelled as its own is refused."""
    as_c = str(shared_hub.hub.join("cluster-c", tmp_path))
    kubectl = shared_hub.members["cluster-a"].kubectl
    home = "lws-gatekeeper-member-cluster-c"

    def lease(name: str, cluster: str, namespace: str = home) -> str:
        return json.dumps(
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {"lws-gatekeeper.io/cluster": cluster},
                },
                "spec": {"holderIdentity": "c", "leaseDurationSeconds": 10},
            }
        )

    def write(verb: str, body: str) -> subprocess.CompletedProcess[str]:
        return kubectl(f"--kubeconfig={as_c}", verb, "-f", "-", input=body, check=False)

    # cluster-b's heartbeat (renewed by its gatekeeper) and the hub's own leader Lease exist.
    for name, namespace in (
        ("lws-gatekeeper-member-cluster-b", "lws-gatekeeper-member-cluster-b"),
        ("lws-gatekeeper", "lws-gatekeeper-system"),
    ):
        refused = write("replace", lease(name, "cluster-c", namespace))
        assert refused.returncode != 0 and "forbidden" in refused.stderr, (name, refused.stderr)
    for name, cluster in (
        ("lws-gatekeeper-member-cluster-b", "cluster-b"),
        ("lws-gatekeeper-member-cluster-b", "cluster-c"),
        ("lws-gatekeeper-member-cluster-d", "cluster-d"),
        ("lws-gatekeeper", "cluster-c"),
    ):
        refused = write("create", lease(name, cluster))
        assert refused.returncode != 0, (name, cluster)
        assert "may write only its own heartbeat" in refused.stderr, refused.stderr
    made = write("create", lease("lws-gatekeeper-member-cluster-c", "cluster-c"))
    assert made.returncode == 0, made.stderr
    renewed = write("replace", lease("lws-gatekeeper-member-cluster-c", "cluster-c"))
    assert renewed.returncode == 0, renewed.stderr
    shared_hub.hub.kubectl("delete", "lease", "lws-gatekeeper-member-cluster-c", "-n", home)

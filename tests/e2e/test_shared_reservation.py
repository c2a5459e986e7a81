"""One Reservation on a hub shared by two member clusters: whole groups only, never over.

The seed's second case: a capacity reservation of 4 GPUs that two clusters may both use,
each with four free 1-GPU nodes of its own. Each cluster alone would admit two groups of
two 1-GPU pods; charged to the hub's Reservation, exactly two whole groups run across
both clusters, every other pod stays gated, and the hub's granted total, sampled every
second, never exceeds 4. Real components: one sandbox hub (etcd, kube-apiserver, the
gatekeeper's hub role) and two member sandboxes (``shared_hub`` in ``conftest.py``).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from .conftest import SharedHub
from .hub_support import (
    CAPACITY,
    GPU,
    Sampler,
    _json,
    claim_body,
    eventually,
    granted_gpus,
    scale_all,
    scene,
    whole_groups_across,
    whole_running_groups,
)

__all__ = ["scene"]  # the fixture, used by name


def test_two_clusters_scaled_at_once_run_exactly_two_whole_groups(shared_hub: SharedHub, scene: Any) -> None:
    reservation, _, ns = scene
    sampler = Sampler(shared_hub, reservation, ns)
    sampler.start()
    try:
        _scale_and_judge(shared_hub, reservation, ns)
    finally:
        sampler.stop.set()
        sampler.join()
    most, bound = max(sampler.granted), max(sampler.bound)
    print(f"samples: {len(sampler.granted)}; granted at most {most} GPUs; bound GPUs at most {bound}")
    assert len(sampler.granted) >= 10
    assert most <= CAPACITY
    assert bound <= CAPACITY


def _scale_and_judge(shared_hub: SharedHub, reservation: str, ns: str) -> None:
    scale_all(shared_hub, ns, 4)

    def two_whole_groups(gated: int = 12) -> bool:
        return whole_groups_across(shared_hub, ns) == (2, 4, gated)

    took = eventually(two_whole_groups, 120, "two whole groups running across the clusters, 12 pods gated")
    print(f"two whole groups ran {took:.1f}s after both scale-ups")
    time.sleep(5)  # and it stays so
    assert two_whole_groups()
    total, claims = granted_gpus(shared_hub, reservation)
    assert total == CAPACITY

    # A waiting group says why, in the hub's numbers (a message whose numbers alone changed is
    # rewritten at most once a minute, so this may take that long).
    expected = f"waits for reservation {reservation} on the hub: 0 of 4 nvidia.com/gpu free ("

    def said() -> bool:
        for sb in shared_hub.members.values():
            for rec in _json(sb.kubectl, "get", "groupadmissions", "-n", ns)["items"]:
                for c in rec.get("status", {}).get("conditions", []):
                    if c.get("reason") == "WaitingForReservation" and expected in c.get("message", ""):
                        return True
        return False

    took = eventually(said, 90, "a waiting record to give the hub's numbers")
    print(f"a waiting record gave the hub's numbers {took:.1f}s later")

    # Scale the cluster that holds groups down: its claims go once its pods are gone, and the
    # other cluster's groups take the capacity, still whole.
    holders = {c["spec"]["cluster"] for c in claims if c.get("status", {}).get("state") == "Granted"}
    holder = sorted(holders)[0]
    shared_hub.members[holder].kubectl("scale", "lws", "vllm", "-n", ns, "--replicas=0")
    eventually(lambda: two_whole_groups(gated=4), 120, f"two whole groups again after {holder} scaled to 0")
    assert all(c["spec"]["cluster"] != holder for c in granted_gpus(shared_hub, reservation)[1])

    # Deleted LWSs give their claims back once their pods are gone.
    for sb in shared_hub.members.values():
        sb.kubectl("delete", "lws", "vllm", "-n", ns)
    eventually(
        lambda: granted_gpus(shared_hub, reservation)[1] == [], 120, "every claim of the reservation gone"
    )


C_HOME = "lws-gatekeeper-member-cluster-c"


def test_a_member_may_only_create_and_delete_claims_of_its_own_name(
    shared_hub: SharedHub, scene: Any, tmp_path: Path
) -> None:
    """The hub's policy, with the identity of a member that runs no gatekeeper (cluster-c): its
    claims stay as it leaves them, so nothing but the policy and the hub acts on them."""
    reservation, _, _ = scene
    kubectl = shared_hub.members["cluster-a"].kubectl
    as_c_config = str(shared_hub.hub.join("cluster-c", tmp_path))
    tag = uuid.uuid4().hex[:5]

    def claim(cluster: str, namespace: str | None = None) -> str:
        return claim_body(reservation, cluster, tag, gpus="9", namespace=namespace)

    def as_c(*args: str, input: str | None = None) -> Any:
        return kubectl(f"--kubeconfig={as_c_config}", *args, input=input, check=False)

    # In cluster-b's namespace RBAC refuses it; in its own, the policy (cluster-b's name).
    refused = as_c("create", "-f", "-", input=claim("cluster-b"))
    assert refused.returncode != 0 and "forbidden" in refused.stderr, refused.stderr
    refused = as_c("create", "-f", "-", input=claim("cluster-b", namespace=C_HOME))
    assert refused.returncode != 0
    assert "may create and delete only ReservationClaims of its own cluster" in refused.stderr
    assert as_c("create", "-f", "-", input=claim("cluster-c")).returncode == 0
    # Even with RBAC that allows it, no member writes a claim (its status is the hub's grant).
    role = f"too-wide-{tag}"
    shared_hub.hub.kubectl(
        "create",
        "clusterrole",
        role,
        "--verb=get,patch,update",
        "--resource=reservationclaims,reservationclaims/status",
    )
    shared_hub.hub.kubectl(
        "create",
        "clusterrolebinding",
        role,
        f"--clusterrole={role}",
        "--user=lws-gatekeeper:member:cluster-c",
    )
    try:
        for extra in (["--subresource=status"], []):
            patch = as_c(
                "patch", "reservationclaim", f"cluster-c.{tag}", "-n", C_HOME, *extra, "--type=merge",
                "-p", '{"status":{"state":"Granted"}}',
            )  # fmt: skip
            assert patch.returncode != 0
            assert "may create and delete its ReservationClaims but not change one" in patch.stderr
    finally:
        shared_hub.hub.kubectl("delete", f"clusterrolebinding/{role}", f"clusterrole/{role}")

    def told() -> bool:
        obj = json.loads(
            shared_hub.hub.kubectl(
                "get", "reservationclaim", f"cluster-c.{tag}", "-n", C_HOME, "-o", "json"
            ).stdout
        )
        return bool(obj.get("status", {}).get("reason") == "ExceedsCapacity")

    eventually(told, 30, "the hub to say the claim can never be granted")
    assert as_c("delete", "reservationclaim", f"cluster-c.{tag}", "-n", C_HOME).returncode == 0


def test_a_member_gives_back_a_claim_of_its_name_that_no_group_wants(
    shared_hub: SharedHub, scene: Any
) -> None:
    reservation, _, _ = scene
    member = shared_hub.members["cluster-a"]
    as_a = str(member.dir / "hub" / "kubeconfig")
    name = f"cluster-a.stray-{uuid.uuid4().hex[:5]}"
    stray = {
        "apiVersion": "lws-gatekeeper.io/v1alpha1",
        "kind": "ReservationClaim",
        "metadata": {
            "name": name,
            "namespace": "lws-gatekeeper-member-cluster-a",
            "labels": {"lws-gatekeeper.io/cluster": "cluster-a"},
        },
        "spec": {
            "reservation": reservation,
            "cluster": "cluster-a",
            "namespace": "nowhere",
            "leaderWorkerSet": "none",
            "groupIndex": 0,
            "demand": {GPU: "1"},
        },
    }
    member.kubectl(f"--kubeconfig={as_a}", "create", "-f", "-", input=json.dumps(stray))

    def gone() -> bool:
        res = shared_hub.hub.kubectl(
            "get", "reservationclaim", name, "-n", "lws-gatekeeper-member-cluster-a", check=False
        )
        return res.returncode != 0 and "NotFound" in res.stderr

    took = eventually(gone, 30, "cluster-a's gatekeeper to give the stray claim back")
    print(f"stray claim given back after {took:.1f}s")


def test_the_hub_leader_killed_while_both_clusters_scale(shared_hub: SharedHub, scene: Any) -> None:
    """Two replicas of the hub's gatekeeper; the leader SIGKILLed right after both clusters
    scaled up: the other takes the hub's Lease over, the granted total never exceeds 4
    meanwhile, and exactly two whole groups run once it decides."""
    reservation, _, ns = scene
    hub = shared_hub.hub
    hub.start_gatekeeper(name="hub-gatekeeper-2")
    sampler = Sampler(shared_hub, reservation, ns)
    sampler.start()
    killed = ""
    try:
        scale_all(shared_hub, ns, 4)
        killed = hub.kubectl(
            "get",
            "lease",
            "lws-gatekeeper",
            "-n",
            "lws-gatekeeper-system",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ).stdout.strip()
        assert killed in ("hub-gatekeeper", "hub-gatekeeper-2")
        hub.stop(killed, kill=True)
        took = eventually(lambda: whole_groups_across(shared_hub, ns) == (2, 4, 12), 120, "two whole groups")
        print(f"two whole groups {took:.1f}s after the hub's leader ({killed}) was killed")
        time.sleep(3)
        assert whole_groups_across(shared_hub, ns) == (2, 4, 12)
        scale_all(shared_hub, ns, 0)
        eventually(lambda: granted_gpus(shared_hub, reservation)[1] == [], 120, "every claim given back")
    finally:
        sampler.stop.set()
        sampler.join()
        for name in ("hub-gatekeeper", "hub-gatekeeper-2"):
            if name != killed and name in hub.running():
                hub.stop(name)
        hub.start_gatekeeper()  # the hub as the other tests know it: one replica
    most, bound = max(sampler.granted), max(sampler.bound)
    print(f"samples: {len(sampler.granted)}; granted at most {most} GPUs; bound GPUs at most {bound}")
    assert most <= CAPACITY and bound <= CAPACITY


def test_hub_down_admitted_groups_go_on_new_ones_wait_then_are_admitted(
    shared_hub: SharedHub, scene: Any
) -> None:
    """The hub's API server stopped: an admitted group's recreated pods go through on its
    admission; a new group waits with HubUnreachable (since when), and is admitted once the
    hub is back, nothing lost or doubled."""
    reservation, _, ns = scene
    member = shared_hub.members["cluster-a"]
    member.kubectl("scale", "lws", "vllm", "-n", ns, "--replicas=1")

    def whole(groups: int, gated: int) -> bool:
        got = whole_running_groups(_json(member.kubectl, "get", "pods", "-n", ns)["items"])
        return got == (groups, 2 * groups, gated)

    eventually(lambda: whole(1, 0), 60, "group 0 running in cluster-a")
    shared_hub.hub.interrupt("kube-apiserver")
    try:
        down = time.monotonic()
        before = _json(member.kubectl, "get", "pod", "vllm-0", "-n", ns)["metadata"]["uid"]
        member.kubectl("delete", "pod", "vllm-0", "-n", ns, "--wait=false")  # the LWS makes the group again

        def remade() -> bool:
            pod = member.kubectl("get", "pod", "vllm-0", "-n", ns, "-o", "json", check=False)
            return pod.returncode == 0 and json.loads(pod.stdout)["metadata"]["uid"] != before and whole(1, 0)

        eventually(remade, 60, "group 0 made again and running, the hub down")
        member.kubectl("scale", "lws", "vllm", "-n", ns, "--replicas=2")

        def unreachable() -> bool:
            for rec in _json(member.kubectl, "get", "groupadmissions", "-n", ns)["items"]:
                for c in rec.get("status", {}).get("conditions", []):
                    if c.get("reason") == "HubUnreachable" and "the hub is unreachable since" in c.get(
                        "message", ""
                    ):
                        return True
            return False

        eventually(unreachable, 60, "group 1 to wait with HubUnreachable")
        # Its record may say so before the LWS has made its worker: wait for the whole group.
        eventually(lambda: whole(1, 2), 30, "group 0 running and group 1 gated whole, the hub down")
        print(f"hub down for {time.monotonic() - down:.1f}s")
    finally:
        shared_hub.hub.start_again("kube-apiserver")
    took = eventually(lambda: whole(2, 0), 90, "group 1 admitted once the hub is back")
    print(f"group 1 admitted {took:.1f}s after the hub came back")
    total, claims = granted_gpus(shared_hub, reservation)
    assert total == 4 and len(claims) == 2, claims  # one claim per group: none lost, none doubled

"""A hub trusts no member's word: a Reservation's ``spec.members`` bounds each member cluster.

Why this exists: a member writes its own claims, so a claim's priority, demand and count are
the member's to choose. A member with a bug, or in hostile hands, could queue ahead of every
other member or take the whole reservation. Here the Reservation of 4 GPUs lists its members:
cluster-a may hold 2 GPUs, cluster-c may claim at priority 100 at most, cluster-d is not
listed. As cluster-a's real gatekeeper scales its LWS to two groups of 2 GPUs, one group is
granted and runs whole; the other's claim waits (``MemberLimitReached``) though the
Reservation has room, and its pods stay gated. As the member identities (a client
certificate each, as a member cluster joins): cluster-c's claim above its priority bound and
cluster-d's claim at all are refused at create, with why; and cluster-c may read its own
claims but not cluster-a's.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from .conftest import SharedHub
from .hub_support import GPU, _json, claim_body, eventually, pods_of, scene, whole_running_groups

__all__ = ["scene"]  # the fixture, used by name


def test_each_member_is_held_to_its_bounds_on_the_reservation(
    shared_hub: SharedHub, scene: Any, tmp_path: Path
) -> None:
    reservation, _, ns = scene
    members = [
        {"cluster": "cluster-a", "quota": {GPU: "2"}},
        {"cluster": "cluster-b"},
        {"cluster": "cluster-c", "maxPriority": 100},
    ]
    shared_hub.hub.kubectl(
        "patch", "reservation", reservation, "--type=merge", "-p", json.dumps({"spec": {"members": members}})
    )
    a = shared_hub.members["cluster-a"]
    a.kubectl("scale", "lws", "vllm", "-n", ns, "--replicas=2")

    def claims() -> dict[int, dict[str, Any]]:
        return {
            c["spec"]["groupIndex"]: c
            for c in _json(shared_hub.hub.kubectl, "get", "reservationclaims", "-A")["items"]
            if c["spec"]["reservation"] == reservation and c["spec"]["cluster"] == "cluster-a"
        }

    def one_granted_one_bounded() -> bool:
        states = {i: (c.get("status") or {}).get("reason") for i, c in claims().items()}
        return sorted(states.values(), key=str) == ["Granted", "MemberLimitReached"]

    eventually(one_granted_one_bounded, 120, "one claim of cluster-a granted, the other MemberLimitReached")
    [bounded] = [c for c in claims().values() if c["status"]["reason"] == "MemberLimitReached"]
    message = bounded["status"]["message"]
    assert f"holds 2 of its quota of 2 {GPU} on {reservation}" in message, message
    eventually(
        lambda: whole_running_groups(pods_of(shared_hub, ns)["cluster-a"]) == (1, 2, 2),
        120,
        "cluster-a: one group whole, the other's 2 pods gated",
    )
    granted = sum(1 for c in claims().values() if c["status"].get("state") == "Granted")
    assert granted == 1, "the Reservation had room for 4: only the member's quota held it"

    tag = uuid.uuid4().hex[:5]
    refusals: dict[str, str] = {}
    configs = {c: str(shared_hub.hub.join(c, tmp_path / c)) for c in ("cluster-c", "cluster-d")}
    for cluster, priority in (("cluster-c", 1000), ("cluster-d", 0)):
        config = configs[cluster]
        made = a.kubectl(
            f"--kubeconfig={config}",
            "create",
            "-f",
            "-",
            input=claim_body(reservation, cluster, tag, priority=priority),
            check=False,
        )
        assert made.returncode != 0, f"{cluster}'s claim was accepted"
        refusals[cluster] = made.stderr.strip().split("denied request: ")[-1]
    assert (
        f"priority 1000 is above 100, its maxPriority on Reservation {reservation}" in refusals["cluster-c"]
    )
    assert "does not list cluster cluster-d" in refusals["cluster-d"]
    within = a.kubectl(
        f"--kubeconfig={configs['cluster-c']}",
        "create",
        "-f",
        "-",
        input=claim_body(reservation, "cluster-c", tag, priority=100),
        check=False,
    )
    assert within.returncode == 0, f"a claim within its bounds is accepted: {within.stderr}"
    c_home, a_home = "lws-gatekeeper-member-cluster-c", "lws-gatekeeper-member-cluster-a"
    shared_hub.hub.kubectl(
        "delete", "reservationclaim", f"cluster-c.{tag}", "-n", c_home, "--wait=false", check=False
    )

    # Reads: a member sees its own claims, not another's (they would tell it the other's
    # namespaces, LWSs, demands and priorities).
    reads = {
        where: a.kubectl(
            f"--kubeconfig={configs['cluster-c']}", "get", "reservationclaims", *where.split(), check=False
        )
        for where in ("-A", f"-n {a_home}", f"-n {c_home}")
    }
    assert reads["-A"].returncode != 0 and "forbidden" in reads["-A"].stderr, reads["-A"].stdout
    theirs = reads[f"-n {a_home}"]
    assert theirs.returncode != 0 and "forbidden" in theirs.stderr, theirs.stdout
    assert reads[f"-n {c_home}"].returncode == 0, reads[f"-n {c_home}"]
    print(f"cluster-c reading cluster-a's claims: {theirs.stderr.strip()}")
    print(f"cluster-a past its quota: {message}")
    for cluster, said in sorted(refusals.items()):
        print(f"{cluster} refused: {said}")

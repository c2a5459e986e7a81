"""A member follows its hub credentials as they are rotated, and loses the hub when they are taken.

Why this exists: a member reaches the hub with credentials the hub's authenticator issues (a
client certificate here), mounted from a Secret that a certificate issuer rewrites in place.
Short-lived credentials are only safe if the member follows the files without a restart, and
a revoked member must not go on with the connection it had. Here cluster-b's certificate and
key are rewritten twice while its gatekeeper runs: first with an identity the hub does not
let in (not in the members' group: the hub refuses it everything), then with a new
certificate of its own identity. The member must lose the hub (its new group waits with
``HubUnreachable``, nothing granted) and then come back (the group granted and running
whole), with no restart of its gatekeeper.
"""

from __future__ import annotations

import time
from typing import Any

from gatekeeper.controller.hub_link import CREDENTIALS_SECONDS

from .conftest import SharedHub
from .hub_support import _json, eventually, pods_of, scene, whole_running_groups

__all__ = ["scene"]  # the fixture, used by name


def _waiting_reasons(shared: SharedHub, ns: str) -> list[str]:
    records = _json(shared.members["cluster-b"].kubectl, "get", "groupadmissions", "-n", ns)["items"]
    return sorted(
        next(
            (
                c.get("reason", "")
                for c in r.get("status", {}).get("conditions", [])
                if c["type"] == "Admitted"
            ),
            "",
        )
        for r in records
    )


def test_a_member_follows_its_rotated_hub_credentials_and_loses_the_hub_when_they_are_taken(
    shared_hub: SharedHub, scene: Any
) -> None:
    _, _, ns = scene
    b = shared_hub.members["cluster-b"]
    folder = b.dir / "hub"
    b.kubectl("scale", "lws", "vllm", "-n", ns, "--replicas=1")
    eventually(
        lambda: whole_running_groups(pods_of(shared_hub, ns)["cluster-b"])[0] == 1, 60, "group 0 running"
    )
    try:
        # Taken away: the files now hold an identity the hub refuses; the member has looked twice
        # before its LWS asks for a second group.
        shared_hub.hub.join("cluster-b", folder, user="lws-gatekeeper:revoked:cluster-b", group="nobody")
        time.sleep(CREDENTIALS_SECONDS * 2)
        b.kubectl("scale", "lws", "vllm", "-n", ns, "--replicas=2")
        took = eventually(
            lambda: "HubUnreachable" in _waiting_reasons(shared_hub, ns),
            60,
            "cluster-b's new group to wait with HubUnreachable",
        )
        print(f"cluster-b's new group waits HubUnreachable {took:.1f}s after it was asked for")
        assert whole_running_groups(pods_of(shared_hub, ns)["cluster-b"])[0] == 1, "the running group goes on"
    finally:
        # Rotated: a new certificate of its own identity, in place.
        shared_hub.hub.join("cluster-b", folder)
    took = eventually(
        lambda: whole_running_groups(pods_of(shared_hub, ns)["cluster-b"])[0] == 2,
        60,
        "cluster-b's second group granted and running whole on the rotated certificate",
    )
    print(f"cluster-b back on the hub {took:.1f}s after its certificate was rotated")

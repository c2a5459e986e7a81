"""A hub member's groups keep their claims while the pods let through on them run.

cluster-a runs two whole groups on a Reservation of 4 GPUs shared with cluster-b, whose two
groups wait. Its tenant removes the pool label from the running pods (the namespace's
policies turned off: the policy lws-gatekeeper-member-labels refuses it), orphans them and
deletes the LWS with ``--cascade=orphan``. The pods carry the charge mark
(``lws-gatekeeper.io/charged-to``), so cluster-a keeps its records and its claims stay
Granted on the hub: cluster-b's groups go on waiting until the pods are gone, then run
whole. Sampled every second: held and bound GPUs across members never exceed 4.
"""

from __future__ import annotations

import time
from typing import Any

from gatekeeper.core.kube.keys import LWS_NAME_LABEL, POOL_LABEL
from gatekeeper_lab.sandbox.cluster import POLICIES_LABEL, POLICIES_OFF

from . import attack_table
from .conftest import SharedHub, orphaning
from .hub_support import scene
from .test_shared_members_gone import a_holds_the_reservation, sampled, states, whole
from .watch import watching

__all__ = ["scene"]  # the fixture, used by name


def test_orphaned_unlabelled_pods_of_a_member_keep_its_claims(shared_hub: SharedHub, scene: Any) -> None:
    reservation, _, ns = scene
    a = shared_hub.members["cluster-a"]

    def cluster_b_runs() -> str:
        """The other tenant here is cluster-b, whose groups wait for the reservation: they run
        whole once cluster-a's orphans are gone."""
        a.kubectl("delete", "statefulsets,pods", "-n", ns, "-l", f"{LWS_NAME_LABEL}=vllm", "--wait=false")
        start = time.monotonic()
        while whole(shared_hub, "cluster-b", ns) != (2, 4, 0):
            assert time.monotonic() - start < 120, "cluster-b's groups run whole once the orphans are gone"
            time.sleep(1)
        return f"cluster-b: yes, whole {time.monotonic() - start:.0f} s after the orphans were deleted"

    with (
        sampled(shared_hub, reservation, ns) as sampler,
        watching(a.bin_dir / "kubectl", a.kubeconfig, [ns], others=cluster_b_runs) as watch,
    ):
        watch.pool({"pool": shared_hub.node_label}, 4)  # cluster-a's nodes, the Reservation's 4 GPUs
        a_holds_the_reservation(shared_hub, reservation, ns)
        a.kubectl("label", "namespace", ns, f"{POLICIES_LABEL}={POLICIES_OFF}")
        a.kubectl("label", "pods", "-n", ns, "-l", f"{LWS_NAME_LABEL}=vllm", f"{POOL_LABEL}-")
        for args in orphaning("vllm", ns):
            a.kubectl(*args)
        until = time.monotonic() + 20
        while time.monotonic() < until:
            assert states(shared_hub, reservation, "cluster-a") == ["Granted", "Granted"]
            assert whole(shared_hub, "cluster-b", ns) == (0, 0, 4), "cluster-b's groups wait"
            time.sleep(1)
        assert whole(shared_hub, "cluster-a", ns) == (2, 4, 0), "the orphans run on"
        attack_table.add(
            f"hub member: pool label removed from running pods, LWS deleted --cascade=orphan "
            f"(held at most {max(sampler.granted)} of 4 GPUs across members)",
            "contained",
            "cluster-a's claims stayed Granted while its pods ran; cluster-b's groups waited",
        )

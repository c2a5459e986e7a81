"""The shared-reservation Kueue AdmissionCheck: a Kueue user shares a hub's Reservation.

A Kueue sandbox (Kueue's own LWS integration, no Pool of the gatekeeper) joins the hub of
``shared_hub`` as member ``cluster-k``, its gatekeeper run with
``--shared-reservation-check``. Its ClusterQueue requires an AdmissionCheck
``lws-gatekeeper.io/shared-reservation`` whose parameters name a Reservation of 2 GPUs on
the hub. ``cluster-a``, a member with the ``pools`` backend, holds those 2 GPUs first:
Kueue reserves quota for the Kueue user's group, but its check stays Pending in the hub's
words and its pods stay gated. When cluster-a scales to 0 the hub grants the Kueue
Workload's claim, the check goes Ready, Kueue admits it and both pods run. Deleted, it
gives its claim back.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gatekeeper_lab.sandbox import gatekeeper as gk
from gatekeeper_lab.sandbox.cluster import Sandbox
from tests.e2e.kueue_support import (
    KUEUE_GATE,
    QUEUE_LABEL,
    check_state,
    condition,
    get,
    is_true,
    lws,
    make_queue,
    new_tag,
    pods,
    wait,
    workloads,
)

from .conftest import SharedHub
from .hub_support import _json, lws_manifest, whole_running_groups

CLUSTER = "cluster-k"
GPU = "nvidia.com/gpu"


@pytest.fixture
def kueue_member(kueue_sandbox: Sandbox, shared_hub: SharedHub) -> Iterator[Sandbox]:
    """The Kueue sandbox joined to the hub as cluster-k, serving the shared-reservation check;
    back to its own gatekeeper, joined to no hub, afterwards."""
    sb = kueue_sandbox
    sb.up(nodes=0, with_kueue=True, hub=shared_hub.hub.kubeconfig, cluster_name=CLUSTER)
    sb.stop(gk.COMPONENT)
    sb.start_gatekeeper(args=["--shared-reservation-check"])
    try:
        yield sb
    finally:
        state = sb.state()
        state.pop("hub", None)
        sb.runner.save(state)
        sb.stop(gk.COMPONENT)
        sb.start_gatekeeper()


def claims_of(shared: SharedHub, reservation: str) -> list[dict[str, Any]]:
    return [
        c
        for c in _json(shared.hub.kubectl, "get", "reservationclaims", "-A")["items"]
        if c["spec"]["reservation"] == reservation
    ]


def test_a_kueue_workload_is_admitted_only_once_the_hub_granted_its_claim(
    kueue_member: Sandbox, shared_hub: SharedHub
) -> None:
    sb, tag = kueue_member, new_tag()
    reservation, check = f"kq-{tag}", f"shared-{tag}"
    shared_hub.hub.kubectl(
        "apply", "-f", "-",
        input=json.dumps({
            "apiVersion": "lws-gatekeeper.io/v1alpha1", "kind": "Reservation",
            "metadata": {"name": reservation}, "spec": {"capacity": {GPU: 2}},
        }),
    )  # fmt: skip
    # cluster-a (pools backend) holds the whole Reservation first.
    a = shared_hub.members["cluster-a"]
    a_ns, a_pool = f"hold-{tag}", f"hold-{tag}"
    a.kubectl("create", "namespace", a_ns)
    a.apply(
        [
            {
                "apiVersion": "lws-gatekeeper.io/v1alpha1",
                "kind": "Pool",
                "metadata": {"name": a_pool},
                "spec": {
                    "nodeSelector": {"pool": shared_hub.node_label},
                    "namespaceSelector": {},
                    "quota": {GPU: 4},
                    "reservation": reservation,
                },
            },
            lws_manifest(a_ns, a_pool, 1),
        ]
    )
    try:
        wait(
            "cluster-a's group running whole on the Reservation",
            lambda: whole_running_groups(_json(a.kubectl, "get", "pods", "-n", a_ns)["items"]) == (1, 2, 0),
        )
        # The Kueue user: an AdmissionCheck naming the Reservation, a queue that requires it.
        sb.apply(
            [
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "AdmissionCheck",
                    "metadata": {"name": check},
                    "spec": {
                        "controllerName": "lws-gatekeeper.io/shared-reservation",
                        "parameters": {
                            "apiGroup": "lws-gatekeeper.io",
                            "kind": "Reservation",
                            "name": reservation,
                        },
                    },
                }
            ]
        )
        q = make_queue(sb, gpus=4, nodes=2, gpus_per_node=2, admission_checks=[check], tag=tag)
        active = condition(get(sb, "admissionchecks.kueue.x-k8s.io", check), "Active")
        assert active["status"] == "True" and reservation in active["message"], active
        ns = q.namespace
        sb.apply([lws("vllm", ns, {QUEUE_LABEL: q.local_queue}, replicas=1, size=2, gpus_per_pod=1)])

        def waiting() -> dict[str, Any] | None:
            found = workloads(sb, ns)
            if len(found) != 1 or not is_true(found[0], "QuotaReserved"):
                return None
            state = check_state(found[0], check)
            return found[0] if "cluster-a holds 2" in str(state.get("message")) else None

        wl = wait("the Kueue Workload's check Pending in the hub's words", waiting)
        message = check_state(wl, check)["message"]
        print(f"\nwhile cluster-a holds the Reservation: {check_state(wl, check)['state']}: {message}")
        assert check_state(wl, check)["state"] == "Pending"
        assert message.startswith(
            f"workload {wl['metadata']['name']} waits for reservation {reservation} on the hub:"
        )
        assert "0 of 2 nvidia.com/gpu free" in message
        assert not is_true(wl, "Admitted")
        assert all(
            KUEUE_GATE in {g["name"] for g in p["spec"].get("schedulingGates", [])} for p in pods(sb, ns)
        )
        [mine] = [c for c in claims_of(shared_hub, reservation) if c["spec"]["cluster"] == CLUSTER]
        assert mine["metadata"]["labels"]["lws-gatekeeper.io/claimed-by"] == "admission-check"
        assert mine["spec"]["demand"][GPU] == "2" and mine.get("status", {}).get("state") == "Pending"

        # cluster-a gives the Reservation back: the Kueue user's group is granted and runs.
        a.kubectl("scale", "lws", "vllm", "-n", a_ns, "--replicas=0")

        def admitted() -> dict[str, Any] | None:
            now = workloads(sb, ns)
            ok = now and check_state(now[0], check).get("state") == "Ready" and is_true(now[0], "Admitted")
            return now[0] if ok else None

        wl = wait(
            "the check Ready and the Workload Admitted once cluster-a scaled to 0", admitted, timeout=120
        )
        print(f"after cluster-a scaled to 0: Ready: {check_state(wl, check)['message']}")
        assert check_state(wl, check)["message"].startswith(
            f"granted by reservation {reservation} on the hub"
        )
        wait(
            "both pods Running",
            lambda: len(p := pods(sb, ns)) == 2 and all(x["status"].get("phase") == "Running" for x in p),
        )
        states = {
            c["spec"]["cluster"]: c.get("status", {}).get("state") for c in claims_of(shared_hub, reservation)
        }
        assert states == {CLUSTER: "Granted"}, states

        # Deleted, it gives its claim back.
        sb.kubectl("delete", "lws", "vllm", "-n", ns)
        wait("the Kueue Workload's claim given back", lambda: not claims_of(shared_hub, reservation) or None)
    finally:
        a.kubectl("delete", "namespace", a_ns, "--wait=false", check=False)
        a.kubectl("delete", "pool", a_pool, "--wait=false", check=False)
        shared_hub.hub.kubectl("delete", "reservation", reservation, "--wait=false", check=False)

"""With the ``kueue`` backend, a group's Workload keeps its quota in Kueue while its pods live,
however its LWS goes: Kueue gives a Workload's quota back when the object is gone, so the
record and Workload stay (the gatekeeper's finalizer) until the group's pods are gone.

Measured: this test passes on the code before the finalizer too (in that run the orphaned
group's record and Workload were not deleted); it guards that the finalizer keeps the
release working: A's record and Workload go once its pods are gone, and B then runs."""

from __future__ import annotations

import time

from gatekeeper.core.kube.keys import LWS_NAME_LABEL, POOL_LABEL
from gatekeeper_lab.sandbox.cluster import Sandbox
from tests.e2e.conftest import orphaning
from tests.e2e.kueue_support import group_states, lws, make_queue, records, settled, wait, workloads


def test_orphaned_pods_of_a_deleted_lws_keep_its_workloads_quota(kueue_sandbox: Sandbox) -> None:
    """A ClusterQueue with quota for one group; A admitted and running; A deleted with orphan
    propagation (its pods stay): B waits gated while they live, and runs once they are gone."""
    sb = kueue_sandbox
    q = make_queue(sb, gpus=2, nodes=4, gpus_per_node=1, managed=False)
    opted = {POOL_LABEL: q.local_queue}
    sb.apply([lws("first", q.namespace, opted, replicas=1, size=2, gpus_per_pod=1)])
    wait("A running whole", lambda: settled(sb, q.namespace, running=1, gated=0, size=2, lws_name="first"))

    for args in orphaning("first", q.namespace):
        sb.kubectl(*args)
    sb.apply([lws("second", q.namespace, opted, replicas=1, size=2, gpus_per_pod=1)])
    wait("B gated whole", lambda: settled(sb, q.namespace, running=0, gated=1, size=2, lws_name="second"))
    until = time.monotonic() + 8
    while time.monotonic() < until:
        assert settled(sb, q.namespace, running=0, gated=1, size=2, lws_name="second"), "B ran over the quota"
        time.sleep(0.5)
    assert group_states(sb, q.namespace, "first") == {"0": {"running": 2}}, "A's pods still run"
    held = [w for w in workloads(sb, q.namespace) if w["metadata"]["labels"][LWS_NAME_LABEL] == "first"]
    assert len(held) == 1, "A's Workload stays and holds its quota"

    sb.kubectl("delete", "statefulsets,pods", "-n", q.namespace, "-l", f"{LWS_NAME_LABEL}=first")
    wait("B running whole", lambda: settled(sb, q.namespace, running=1, gated=0, size=2, lws_name="second"))
    wait(
        "A's record and Workload to go",
        lambda: (
            all(r["spec"]["leaderWorkerSet"] == "second" for r in records(sb, q.namespace))
            and len(workloads(sb, q.namespace)) == 1
        ),
    )

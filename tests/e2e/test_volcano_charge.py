"""With the ``volcano`` backend, a tenant moves its running pods out of their PodGroup.

Volcano's scheduler counts a pod in a PodGroup by its annotation
``scheduling.k8s.io/group-name``, which the gatekeeper writes at creation. The policy
lws-gatekeeper-member-labels refuses changing it on a gated or let-through pod. With the
namespace's policies turned off, the tenant changes it on both pods of its running group
and makes a second LWS on the same Queue (capability 2 GPUs, nodes with room for 6): the
gatekeeper keeps the first group's record and PodGroup while the pods charged to it run
(``core.model.charge``), and Volcano keeps counting them in its Queue; GPUs bound in the
namespace are sampled every second.
"""

from __future__ import annotations

import time

from gatekeeper.core.backends.volcano.keys import VOLCANO_GROUP_ANNOTATION
from gatekeeper.core.kube.keys import LWS_NAME_LABEL
from gatekeeper_lab.sandbox.cluster import POLICIES_LABEL, POLICIES_OFF, Sandbox
from tests.e2e import attack_table
from tests.e2e.kueue_support import items, new_tag, pods, records, settled, wait
from tests.e2e.test_kueue_charge import _gpus_bound, hand_edited_worker
from tests.e2e.test_volcano_backend import TAINT, _lws, _setup, _show
from tests.e2e.watch import Watch


def test_pods_moved_out_of_their_podgroup_keep_their_queues_quota(
    volcano_sandbox: Sandbox, volcano_attack_watch: Watch
) -> None:
    sb = volcano_sandbox
    ns = _setup(sb, new_tag(), nodes=3, gpus_per_node=2, queue_gpus=2)
    volcano_attack_watch.pool({TAINT: ns}, 2)  # the Queue's capability, on the test's nodes
    sb.apply([_lws(ns, "first", replicas=1, size=2)])
    try:
        wait("the first group running whole", lambda: settled(sb, ns, running=1, gated=0, size=2))
        move = [
            "annotate",
            "pod",
            "first-0",
            "first-0-1",
            f"{VOLCANO_GROUP_ANNOTATION}=elsewhere",
            "--overwrite",
        ]
        refused = sb.kubectl(*move, "-n", ns, check=False)
        assert refused.returncode != 0, refused.stdout
        assert f"annotation {VOLCANO_GROUP_ANNOTATION} say which" in refused.stderr, refused.stderr
        sb.kubectl("label", "namespace", ns, f"{POLICIES_LABEL}={POLICIES_OFF}")
        sb.kubectl(*move, "-n", ns)
        sb.apply([_lws(ns, "second", replicas=1, size=2)])
        peak, until = 0, time.monotonic() + 25
        while time.monotonic() < until:
            peak = max(peak, _gpus_bound(sb, ns))
            time.sleep(1)
        second = [p for p in pods(sb, ns) if p["metadata"]["labels"].get(LWS_NAME_LABEL) == "second"]
        first = [r for r in records(sb, ns) if r["spec"]["leaderWorkerSet"] == "first"]
    finally:
        _show(sb, ns)
    assert peak <= 2, f"{peak} GPUs bound on a Queue of capability 2"
    assert first, "the first group's record is kept while its pods run"
    assert all(not p["spec"].get("nodeName") for p in second), "the second LWS waits"
    attack_table.add(
        f"volcano: group-name annotation of running pods changed (refused; then with policies off), "
        f"another LWS created (peak {peak} of 2 GPUs)",
        "contained",
        refused.stderr.strip().splitlines()[-1],
    )


def test_a_hand_edited_worker_statefulset_gives_its_group_back(
    volcano_sandbox: Sandbox, volcano_attack_watch: Watch
) -> None:
    """The tenant's hand-edited worker StatefulSet (``hand_edited_worker``), on a Queue of
    capability 2 GPUs: its PodGroup goes once its pods stopped, and after its retry a new
    PodGroup is put Inqueue."""
    sb = volcano_sandbox
    ns = _setup(sb, new_tag(), nodes=4, gpus_per_node=2, queue_gpus=2)
    volcano_attack_watch.pool({TAINT: ns}, 2)

    def pod_group() -> list[str]:
        return [g["metadata"]["uid"] for g in items(sb, "podgroups.scheduling.volcano.sh", "-n", ns)]

    try:
        hand_edited_worker(
            sb, ns, _lws(ns, "lws", replicas=1, size=2), pod_group, "a new PodGroup Inqueue", "volcano"
        )
    finally:
        _show(sb, ns)

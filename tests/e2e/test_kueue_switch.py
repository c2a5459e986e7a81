"""The ``kueue`` backend meeting groups it did not admit, and the order it admits a scale-up in.

Why this exists: a platform team switches a running install from ``pools`` to ``kueue``
(or back) and expects running inference to keep running: the groups the ``pools``
backend admitted are adopted by the ``kueue`` backend (a Workload is made for each, and
their pods are kept while Kueue has not admitted it), never deleted. And an LWS scaled
up under Kueue runs its first groups, not any groups: Kueue orders Workloads by
priority, creation time (one-second resolution) and then UID, so Workloads made in the
same second would be admitted in a random order.
These tests restart the Kueue sandbox's gatekeeper on another backend and always put
it back on ``kueue`` for the other tests.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from gatekeeper.core.kube.keys import ADOPTING_REASON, GATEKEEPER_API_VERSION, POOL_KIND, POOL_LABEL
from gatekeeper_lab.sandbox.cluster import Sandbox
from tests.e2e.kueue_support import (
    Queue,
    condition,
    group_states,
    is_true,
    lws,
    make_queue,
    pods,
    records,
    settled,
    wait,
    workloads,
)


def _show(sb: Sandbox, ns: str) -> None:
    print(sb.kubectl("get", "workloads.kueue.x-k8s.io,groupadmissions,pods", "-n", ns, "-o", "wide").stdout)


@pytest.fixture
def gatekeeper_back_on_kueue(kueue_sandbox: Sandbox) -> Iterator[Sandbox]:
    """The Kueue sandbox, whose gatekeeper runs the ``kueue`` backend again after the test."""
    yield kueue_sandbox
    kueue_sandbox.stop("gatekeeper")
    kueue_sandbox.start_gatekeeper(backend="kueue")


def _switch(sb: Sandbox, backend: str) -> None:
    sb.stop("gatekeeper")
    sb.start_gatekeeper(backend=backend)


def _live_uids(sb: Sandbox, ns: str) -> dict[str, str]:
    """Pod name -> UID of the namespace's pods not being deleted."""
    return {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in pods(sb, ns)
        if not p["metadata"].get("deletionTimestamp")
    }


def _running_uids(sb: Sandbox, ns: str) -> set[str]:
    return {
        p["metadata"]["uid"]
        for p in pods(sb, ns)
        if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    }


def _pinned_lws(q: Queue, name: str, *, replicas: int, size: int) -> dict[str, Any]:
    """An LWS opted in under the LocalQueue's name, whose pods select the queue's nodes themselves
    (the ``pools`` backend does not steer pods, Kueue's flavor does)."""
    obj = lws(name, q.namespace, {POOL_LABEL: q.local_queue}, replicas=replicas, size=size, gpus_per_pod=1)
    template = obj["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        template[role] = {"spec": {**template[role]["spec"], "nodeSelector": dict(q.labels)}}
    return obj


def test_switching_backends_on_a_running_install_deletes_no_pod(gatekeeper_back_on_kueue: Sandbox) -> None:
    """pools -> kueue -> pools with groups running: not one pod deleted by either switch.

    4 one-GPU nodes; under ``pools`` (a Pool named like the LocalQueue) groups 0 and 1 of
    size 2 run and group 2 waits gated. The ClusterQueue has room for one group only, so
    after the switch Kueue admits one adopted group and never the other: that one keeps
    running (record reason ``Adopting``), and the waiting group stays gated.
    """
    sb = gatekeeper_back_on_kueue
    q = make_queue(sb, gpus=2, nodes=4, gpus_per_node=1, managed=False)
    sb.apply(
        [
            {
                "apiVersion": GATEKEEPER_API_VERSION,
                "kind": POOL_KIND,
                "metadata": {"name": q.local_queue},
                "spec": {"nodeSelector": dict(q.labels), "namespaceSelector": {}},
            }
        ]
    )
    try:
        _switch(sb, "pools")
        sb.apply([_pinned_lws(q, "infer", replicas=3, size=2)])
        wait("pools: 2 groups Running, 1 gated", lambda: settled(sb, q.namespace, running=2, gated=1, size=2))
        before = _live_uids(sb, q.namespace)
        running = _running_uids(sb, q.namespace)
        assert len(running) == 4

        _switch(sb, "kueue")
        wait("a Workload for each running group", lambda: len(workloads(sb, q.namespace)) >= 2, timeout=60)

        time.sleep(5)  # several passes of the gatekeeper: a delete would show
        after = _live_uids(sb, q.namespace)
        deleted = set(before.values()) - set(after.values())
        print(f"pods deleted by the switch to kueue: {len(deleted)}")
        assert deleted == set(), "the switch to kueue deleted pods"

        def one_admitted_one_adopting() -> list[dict[str, Any]] | None:
            recs = records(sb, q.namespace)
            reasons = sorted(condition(r, "Admitted").get("reason", "") for r in recs[:2])
            wls = [w for w in workloads(sb, q.namespace) if is_true(w, "Admitted")]
            return recs if reasons == ["Admitted", ADOPTING_REASON] and len(wls) == 1 else None

        recs = wait("Kueue to admit one adopted group; the other adopting", one_admitted_one_adopting)
        assert set(before.values()) <= set(_live_uids(sb, q.namespace).values())
        assert running <= _running_uids(sb, q.namespace)
        adopting = next(r for r in recs if condition(r, "Admitted")["reason"] == ADOPTING_REASON)
        print(condition(adopting, "Admitted"))
        assert condition(adopting, "Admitted")["status"] == "True"
        assert group_states(sb, q.namespace)["2"] == {"gated": 2}

        _switch(sb, "pools")
        time.sleep(5)
        back = _live_uids(sb, q.namespace)
        deleted_back = set(before.values()) - set(back.values())
        print(f"pods deleted by the switch back to pools: {len(deleted_back)}")
        assert deleted_back == set(), "the switch back to pools deleted pods"
        assert settled(sb, q.namespace, running=2, gated=1, size=2)
    finally:
        _show(sb, q.namespace)
        sb.kubectl("delete", "pools.lws-gatekeeper.io", q.local_queue, "--ignore-not-found")


def test_a_scale_up_runs_the_first_groups(kueue_sandbox: Sandbox) -> None:
    """The issue's case: groups of 3 on 6 one-GPU nodes, scaled 0 -> 6, five times: groups 0 and 1 run."""
    sb = kueue_sandbox
    q = make_queue(sb, gpus=6, nodes=6, gpus_per_node=1, managed=False)
    sb.apply([lws("order", q.namespace, {POOL_LABEL: q.local_queue}, replicas=0, size=3, gpus_per_pod=1)])
    ran: list[list[str]] = []
    try:
        for _ in range(5):
            sb.kubectl("scale", "leaderworkerset", "order", "-n", q.namespace, "--replicas=6")
            groups = wait(
                "2 whole groups Running, 4 gated",
                lambda: settled(sb, q.namespace, running=2, gated=4, size=3),
                timeout=120,
            )
            ran.append(sorted(g for g, c in groups.items() if c["running"] == 3))
            sb.kubectl("scale", "leaderworkerset", "order", "-n", q.namespace, "--replicas=0")
            wait(
                "every pod, record and Workload gone",
                lambda: (
                    not pods(sb, q.namespace)
                    and not records(sb, q.namespace)
                    and not workloads(sb, q.namespace)
                ),
                timeout=120,
            )
    finally:
        _show(sb, q.namespace)
        print("groups that ran, per scale-up:", ran)
    assert ran == [["0", "1"]] * 5

"""The ``kueue`` backend keeps a group's record and Workload (and so Kueue's quota) while a
pod let through on it lives, found by its mark (``core.model.charge``), and stops such a pod when
its Workload loses its admission, its labels changed or not."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from core_builders import lws, lws_pod
from test_backend_kueue import ADMITTED, EVICTED, LQ, UID, rec, vllm, workload
from test_charge import marked

from gatekeeper.core.backends.kueue import KueueActions, KueueSnapshot, decide_kueue, plan_writes
from gatekeeper.core.model.charge import charge_toleration
from gatekeeper.core.model.record import record_name
from gatekeeper.core.writes.plan import Memory, Op, walk

MARK = charge_toleration(UID, 0)
RECORD = record_name("vllm", UID, 0)
NOW = datetime(2025, 1, 2, tzinfo=UTC)


def orphans(*, unlabelled: bool = True) -> list[dict[str, Any]]:
    """Group 0's pods, let through with their mark and bound; their pool label removed since."""
    pods = [marked(lws_pod("vllm", 0, w, pool=LQ), MARK, unlabelled=unlabelled) for w in (0, 1)]
    for w, pod in enumerate(pods):
        pod["metadata"]["uid"] = f"pod-{w}"
    return pods


def snap(lwss: list[dict[str, Any]], bound: list[dict[str, Any]], wl: list[dict[str, Any]]) -> KueueSnapshot:
    labelled = [p for p in bound if "lws-gatekeeper.io/pool" in p["metadata"]["labels"]]
    records = [rec(vllm(replicas=1), 0, admitted=True)]
    return KueueSnapshot(lwss, labelled, records, wl, bound_pods=bound)


def decide(lwss: list[dict[str, Any]], bound: list[dict[str, Any]], wl: list[dict[str, Any]]) -> KueueActions:
    return decide_kueue(snap(lwss, bound, wl))


SAME_NAME = lws("vllm").uid("u-2").pool(LQ).replicas(1).size(2).leader(gpu_limit=1).worker(gpu_limit=1).obj()


@pytest.mark.parametrize(
    "lwss",
    [[], [SAME_NAME], [vllm(replicas=0)]],
    ids=["lws-deleted-cascade-orphan", "a-same-named-lws", "scaled-to-zero"],
)
def test_a_group_no_one_wants_keeps_its_workload_while_pods_charged_to_it_run(
    lwss: list[dict[str, Any]],
) -> None:
    held = decide(lwss, orphans(), [workload(vllm(replicas=1), 0, conditions=ADMITTED)])
    assert RECORD not in [name for _, name in held.release], "kept while its pods run"
    assert held.stop == ()
    gone = decide(lwss, [], [workload(vllm(replicas=1), 0, conditions=ADMITTED)])
    assert RECORD in [name for _, name in gone.release], "released once they are gone"


def test_without_the_mark_an_unlabelled_pod_keeps_nothing() -> None:
    plain = orphans()
    for pod in plain:
        pod["spec"]["tolerations"] = [t for t in pod["spec"]["tolerations"] if t != MARK]
    acts = decide([], plain, [workload(vllm(replicas=1), 0, conditions=ADMITTED)])
    assert RECORD in [name for _, name in acts.release]


def test_an_evicted_group_stops_its_pods_found_by_their_mark() -> None:
    """Evicted by Kueue: every pod let through on it stops, those whose labels were changed too
    (the delete names each one's UID), and its quota is not given back while one runs."""
    obj, pods = vllm(replicas=1), orphans()
    evicted = [workload(obj, 0, conditions=EVICTED, flavors={"leader": "h100", "worker": "h100"})]
    acts = decide([obj], pods, evicted)
    assert sorted(acts.stop) == [("default", "vllm-0"), ("default", "vllm-0-1")]
    assert acts.clear_admission == ()
    writes = [
        w for w in walk(plan_writes(acts, snap([obj], pods, evicted), Memory(), NOW)) if w.tag == "stop"
    ]
    assert [(w.op, w.uid) for w in writes] == [(Op.DELETE, p["metadata"].get("uid")) for p in pods]

"""What a pass reads of each opted-in pod is read once per pod version (``PodReads``).

The memo must never change a decision: the pods grouped with it are the pods grouped
without it, pass after pass, as pods come, change (a new resourceVersion) and go.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gatekeeper.core.kube.keys import GROUP_INDEX_LABEL, LWS_NAME_LABEL, SCHEDULING_GATE, WORKER_INDEX_LABEL
from gatekeeper.core.model.groups import PodReads, pods_by_group


def pod(
    name: str, group: int | str, worker: int = 0, *, rv: str | None = "1", uid: str | None = None, **spec: Any
) -> dict[str, Any]:
    labels = {LWS_NAME_LABEL: "vllm", GROUP_INDEX_LABEL: str(group), WORKER_INDEX_LABEL: str(worker)}
    m: dict[str, Any] = {"name": name, "namespace": "team-a", "labels": labels}
    if rv is not None:
        m["resourceVersion"] = rv
    m["uid"] = uid if uid is not None else f"uid-{name}"
    return {"metadata": m, "spec": {"schedulingGates": [{"name": SCHEDULING_GATE}], **spec}}


def stranger(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}", "resourceVersion": "1"}}


PASSES: list[list[dict[str, Any]]] = [
    [pod("vllm-0", 0), pod("vllm-0-1", 0, 1), stranger("web"), pod("vllm-1", "x")],
    # The leader bound (a new version), a worker gone, a pod with no version, a new group.
    [
        {**pod("vllm-0", 0, rv="2"), "spec": {"nodeName": "gpu-1"}},
        pod("vllm-0-2", 0, 2, rv=None),
        pod("vllm-1", 1, uid="uid-vllm-1-again"),
        stranger("web"),
    ],
    # A pod relabelled into another group: a new version, read again.
    [{**pod("vllm-0", 3, rv="3"), "spec": {"nodeName": "gpu-1"}}, pod("vllm-1", 1, uid="uid-vllm-1-again")],
    [],
]


@pytest.mark.parametrize("upto", range(1, len(PASSES) + 1))
def test_grouped_with_the_memo_as_without(upto: int) -> None:
    reads = PodReads()
    for pods in PASSES[:upto]:
        assert pods_by_group(pods, reads) == pods_by_group(pods)


def test_a_pod_is_read_once_per_version() -> None:
    reads = PodReads()
    leader = pod("vllm-0", 0)
    first = pods_by_group([leader], reads)
    # The same version changed in place (never done by an informer, which swaps whole
    # objects): not read again, which shows the memo answered.
    leader["spec"] = {"nodeName": "gpu-1"}
    assert pods_by_group([leader], reads) == first
    moved = copy.deepcopy(leader)
    moved["metadata"]["resourceVersion"] = "2"
    [[[again]]] = [list(g.values()) for g in pods_by_group([moved], reads).values()]
    assert again.bound and not again.gated


def test_a_pod_without_a_version_is_read_every_time() -> None:
    reads = PodReads()
    loose = pod("vllm-0", 0, rv=None)
    pods_by_group([loose], reads)
    loose["spec"] = {"nodeName": "gpu-1"}
    [[[read]]] = [list(g.values()) for g in pods_by_group([loose], reads).values()]
    assert read.bound
    assert len(reads) == 0


def test_holds_only_the_last_pass() -> None:
    reads = PodReads()
    pods_by_group([pod(f"vllm-{i}", i) for i in range(50)], reads)
    assert len(reads) == 50
    pods_by_group([pod("vllm-0", 0), stranger("web")], reads)
    assert len(reads) == 2

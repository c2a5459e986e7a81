"""``core.model.owned``: which StatefulSet changes the guard refuses, as a table of cases."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gatekeeper.core.model.owned import Controller, controller_of, scale_refusal, statefulset_refusal

LWS_REF = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "lws", "uid": "u1"}
POD_REF = {"apiVersion": "v1", "kind": "Pod", "name": "lws-0", "uid": "u2"}


def sts(
    name: str = "lws", *refs: dict[str, Any], controller: bool = True, replicas: int = 1
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": {"leaderworkerset.sigs.k8s.io/name": "lws"},
            "ownerReferences": [{**ref, "controller": controller} for ref in refs],
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": "lws"}},
            "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}},
        },
    }


def changed(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    *keys, last = path.split(".")
    node = out
    for key in keys:
        node = node[key]
    node[last] = value
    return out


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (sts("lws", LWS_REF), Controller("LeaderWorkerSet", "lws", "lws")),
        (sts("lws-0", POD_REF), Controller("Pod", "lws-0", "lws")),
        (sts("db"), None),
        (sts("lws", LWS_REF, controller=False), None),
        (sts("lws", {**LWS_REF, "apiVersion": "example.com/v1"}), None),
        (sts("lws", {**POD_REF, "apiVersion": "example.com/v1"}), None),
        (sts("x", {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "u3"}), None),
        ({"metadata": {"ownerReferences": "not a list"}}, None),
        ({}, None),
    ],
    ids=[
        "leader-sts",
        "worker-sts",
        "no-owner",
        "lws-not-controller",
        "lws-kind-of-another-group",
        "pod-kind-of-another-group",
        "deployment",
        "malformed-owners",
        "empty",
    ],
)
def test_controller_of(obj: dict[str, Any], expected: Controller | None) -> None:
    assert controller_of(obj) == expected


LEADER, WORKER = sts("lws", LWS_REF), sts("lws-0", POD_REF)


@pytest.mark.parametrize(
    ("operation", "new", "old", "refused"),
    [
        ("UPDATE", changed(WORKER, "spec.replicas", 4), WORKER, "its spec (replicas)"),
        ("UPDATE", changed(LEADER, "spec.replicas", 3), LEADER, "its spec (replicas)"),
        (
            "UPDATE",
            changed(WORKER, "spec.template", {"spec": {"containers": [{"name": "c", "image": "y"}]}}),
            WORKER,
            "its spec (template)",
        ),
        ("UPDATE", changed(WORKER, "metadata.ownerReferences", []), WORKER, "its controller reference"),
        (
            "UPDATE",
            changed(WORKER, "metadata.ownerReferences", [{**POD_REF, "controller": False}]),
            WORKER,
            "its controller reference",
        ),
        ("UPDATE", changed(WORKER, "metadata.labels", {}), WORKER, None),
        ("UPDATE", changed(WORKER, "metadata.annotations", {"a": "b"}), WORKER, None),
        ("UPDATE", WORKER, WORKER, None),
        ("UPDATE", changed(sts("db"), "spec.replicas", 9), sts("db"), None),
        (
            "UPDATE",
            sts("db", LWS_REF),
            sts("db", LWS_REF, controller=False),
            "make a StatefulSet",
        ),
        ("CREATE", sts("lws-7", POD_REF), None, "make a StatefulSet"),
        ("CREATE", sts("lws-x", LWS_REF), None, "make a StatefulSet"),
        ("CREATE", sts("db"), None, None),
        ("DELETE", WORKER, WORKER, None),
        ("UPDATE", WORKER, None, None),
    ],
    ids=[
        "scale-worker",
        "scale-leader",
        "template",
        "owner-removed",
        "controller-flag-dropped",
        "labels",
        "annotations",
        "no-change",
        "not-an-lws-sts",
        "made-controlled-only-now",
        "create-under-leader-pod",
        "create-under-lws",
        "create-plain",
        "delete",
        "update-without-old",
    ],
)
def test_statefulset_refusal(
    operation: str, new: dict[str, Any], old: dict[str, Any] | None, refused: str | None
) -> None:
    refusal = statefulset_refusal(operation, new, old)
    if refused is None:
        assert refusal is None
        return
    assert refusal is not None and refused in refusal
    assert "change LeaderWorkerSet lws instead" in refusal or "change the LeaderWorkerSet instead" in refusal
    assert f"StatefulSet team-a/{(old or new)['metadata']['name']}" in refusal


@pytest.mark.parametrize(
    ("obj", "replicas", "old", "refused"),
    [
        (
            WORKER,
            4,
            1,
            "pod lws-0 of LeaderWorkerSet lws, and only the LeaderWorkerSet controller may "
            "change its replicas (1 to 4)",
        ),
        (
            LEADER,
            0,
            2,
            "LeaderWorkerSet lws, and only the LeaderWorkerSet controller may change its replicas (2 to 0)",
        ),
        (WORKER, 1, 1, None),
        (sts("db"), 5, 1, None),
    ],
    ids=["worker", "leader-to-zero", "unchanged", "not-an-lws-sts"],
)
def test_scale_refusal(obj: dict[str, Any], replicas: int, old: int, refused: str | None) -> None:
    refusal = scale_refusal(obj, replicas, old)
    assert (refusal is None) if refused is None else (refusal is not None and refused in refusal)

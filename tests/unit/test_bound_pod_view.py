"""Bound pods are cached as ``bound_pod_view``: what the decisions read, nothing else.

Every pod bound to a node, anyone's, is cached for node room; at 20,000 pods the whole
objects were most of the gatekeeper's memory. The view must read exactly as the
pod does: same node usage, same ties to a group or Workload, same errors when malformed.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from gatekeeper.controller import resources as r
from gatekeeper.controller.caches import BOUND_PODS, OTHER_PODS, Caches
from gatekeeper.core.kube.keys import KUEUE_POD_GROUP_KEY, KUEUE_ROLE_ANNOTATION, POOL_LABEL
from gatekeeper.core.model.nodes import bound_pod_view, node_usage, node_usage_skipping


def full_pod() -> dict[str, Any]:
    """A pod as the API server returns it once a kubelet (here KWOK) has run it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": "shop",
            "uid": "u-1",
            "resourceVersion": "77",
            "labels": {"app": "web", "leaderworkerset.sigs.k8s.io/name": "w"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "x" * 4000,
                KUEUE_POD_GROUP_KEY: "g1",
                KUEUE_ROLE_ANNOTATION: "r1",
            },
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "o-1"}
            ],
            "deletionTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "nodeName": "n0",
            "overhead": {"cpu": "100m"},
            "resources": {"requests": {"memory": "2Gi"}},
            "initContainers": [
                {"name": "init", "image": "i", "resources": {"requests": {"cpu": "3"}}},
                {
                    "name": "side",
                    "image": "s",
                    "restartPolicy": "Always",
                    "resources": {"limits": {"cpu": "1"}},
                },
            ],
            "containers": [
                {
                    "name": "c",
                    "image": "app",
                    "env": [{"name": f"E{i}", "value": "v" * 50} for i in range(40)],
                    "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "2"}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
                {"operator": "Exists"},
            ],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": t, "status": "True"} for t in ("Ready", "Initialized", "PodScheduled")],
            "containerStatuses": [{"name": "c", "ready": True, "image": "app", "state": {"running": {}}}],
            "podIP": "10.0.0.1",
        },
    }


def test_the_view_reads_as_the_pod_and_keeps_only_what_is_read() -> None:
    pod = full_pod()
    view = bound_pod_view(copy.deepcopy(pod))
    assert (
        node_usage([view])
        == node_usage([pod])
        == {"n0": {"cpu": 3100, "memory": 2 * 1024**3, "nvidia.com/gpu": 2, "pods": 1}}
    )
    meta = view["metadata"]
    assert meta["labels"] == pod["metadata"]["labels"]
    assert meta["ownerReferences"] == pod["metadata"]["ownerReferences"]
    assert meta["annotations"] == {KUEUE_POD_GROUP_KEY: "g1", KUEUE_ROLE_ANNOTATION: "r1"}
    assert (meta["uid"], meta["resourceVersion"], meta["deletionTimestamp"]) == (
        "u-1",
        "77",
        pod["metadata"]["deletionTimestamp"],
    )
    assert view["status"] == {"phase": "Running"}
    assert set(view["spec"]) == {
        "nodeName",
        "overhead",
        "resources",
        "initContainers",
        "containers",
        "tolerations",
    }
    # only a toleration that opens closed pools (core.admission.intruders) or charges the pod
    # (core.model.charge)
    assert view["spec"]["tolerations"] == [{"operator": "Exists"}]
    assert view["spec"]["containers"] == [
        {"name": "c", "resources": pod["spec"]["containers"][0]["resources"]}
    ]
    assert len(json.dumps(view)) * 5 < len(json.dumps(pod))


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        (("spec",), ["not", "a", "map"]),
        (("spec", "containers"), "c"),
        (("spec", "containers", 0), 7),
        (("spec", "containers", 0, "resources"), ["x"]),
        (("spec", "initContainers", 1, "restartPolicy"), ["Always"]),
        (("spec", "overhead"), "1"),
        (("metadata",), "m"),
        (("status",), ["Running"]),
        (("status", "phase"), ["Failed"]),
    ],
)
def test_a_malformed_pod_reads_the_same_through_its_view(path: tuple[Any, ...], bad: Any) -> None:
    pod = full_pod()
    where: Any = pod
    for step in path[:-1]:
        where = where[step]
    where[path[-1]] = bad
    view = bound_pod_view(copy.deepcopy(pod))
    got: list[tuple[Any, list[str]]] = []
    for one in (pod, view):
        problems: list[str] = []
        try:
            got.append((node_usage_skipping([one], problems), problems))
        except ValueError as exc:  # metadata that is no map fails before the skipping
            got.append((str(exc), []))
    assert got[0] == got[1]


class Lists:
    """An API server that answers every list with ``items``, and watches that stay quiet."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    @contextlib.asynccontextmanager
    async def call_api(self, method: str, **kwargs: Any) -> AsyncIterator[httpx.Response]:
        if kwargs["params"].get("watch"):
            await anyio.sleep_forever()
        yield httpx.Response(200, json={"metadata": {"resourceVersion": "9"}, "items": self.items})


@pytest.mark.anyio
async def test_the_bound_pod_informer_caches_views_and_the_others_whole_objects() -> None:
    caches = Caches(Lists([full_pod()]))  # type: ignore[arg-type]
    bound = caches.informer(r.PODS, field_selector=BOUND_PODS)
    ours = caches.informer(r.PODS, label_selector="lws-gatekeeper.io/pool")
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(caches.run)
            await bound.synced.wait()
            await ours.synced.wait()
            tg.cancel_scope.cancel()
    assert bound.values() == [bound_pod_view(full_pod())]
    assert ours.values()[0]["status"] == full_pod()["status"]


class BySelector:
    """An API server whose lists answer by label selector, and whose watches stay quiet."""

    def __init__(self, items: dict[str, list[dict[str, Any]]]) -> None:
        self.items = items
        self.asked: list[tuple[str, str]] = []

    @contextlib.asynccontextmanager
    async def call_api(self, method: str, **kwargs: Any) -> AsyncIterator[httpx.Response]:
        params = kwargs["params"]
        if params.get("watch"):
            await anyio.sleep_forever()
        self.asked.append((params.get("labelSelector", ""), params.get("fieldSelector", "")))
        items = self.items.get(params.get("labelSelector", ""), [])
        yield httpx.Response(200, json={"metadata": {"resourceVersion": "9"}, "items": items})


def pod(name: str, uid: str, node: str = "", opted_in: bool = True) -> dict[str, Any]:
    labels = {POOL_LABEL: "p"} if opted_in else {}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    if node:
        spec["nodeName"] = node
    meta = {"name": name, "namespace": "t", "uid": uid, "resourceVersion": "1", "labels": labels}
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


@pytest.mark.anyio
async def test_every_bound_pod_is_read_once_from_two_watches_that_do_not_overlap() -> None:
    opted_bound, opted_waiting = pod("a-0", "u-a", node="n0"), pod("a-1", "u-b")
    other = pod("web-0", "u-c", node="n1", opted_in=False)
    # a-0's label just taken off: the others' watch has it before the opted-in one lets it go
    unlabelled = pod("a-0", "u-a", node="n0", opted_in=False)
    api = BySelector({POOL_LABEL: [opted_bound, opted_waiting], OTHER_PODS: [other, unlabelled]})
    caches = Caches(api)  # type: ignore[arg-type]
    opted, others = caches.bound_informers()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(caches.run)
            await opted.synced.wait()
            await others.synced.wait()
            tg.cancel_scope.cancel()
    assert sorted(api.asked) == [(OTHER_PODS, BOUND_PODS), (POOL_LABEL, "")]
    bound = caches.bound_pods()
    assert sorted(p["metadata"]["uid"] for p in bound) == ["u-a", "u-c"]
    assert opted_bound in bound  # the opted-in pod whole, not its view
    assert node_usage(bound) == {"n0": {"cpu": 1000, "pods": 1}, "n1": {"cpu": 1000, "pods": 1}}
    assert caches.bound_pods() is bound  # made once per change of the two watches


@pytest.mark.anyio
async def test_the_default_priority_is_the_global_default_classes_value_or_zero() -> None:
    def klass(name: str, value: Any, default: bool | None = None) -> dict[str, Any]:
        obj: dict[str, Any] = {"metadata": {"name": name}, "value": value}
        if default is not None:
            obj["globalDefault"] = default
        return obj

    for items, expected in (
        ([klass("low", 10), klass("high", 1000, False)], 0),
        ([klass("low", 10), klass("normal", 100, True), klass("bad", "x", True)], 100),
    ):
        caches = await _classes_read(items)
        assert caches.default_priority() == expected


async def _classes_read(items: list[dict[str, Any]]) -> Caches:
    """Caches that have listed ``items`` as the cluster's PriorityClasses."""
    caches = Caches(Lists(items))  # type: ignore[arg-type]
    classes = caches.informer(r.PRIORITY_CLASSES)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(caches.run)
            await classes.synced.wait()
            tg.cancel_scope.cancel()
    return caches


@pytest.mark.anyio
async def test_the_classes_that_never_preempt_are_read_with_the_default_ones() -> None:
    """``preemptionPolicy: Never`` names a class; "" stands for the cluster's default class when
    the highest global default says so (a pod that names no class gets it)."""

    def klass(name: str, value: int, policy: str | None = None, default: bool = False) -> dict[str, Any]:
        obj: dict[str, Any] = {"metadata": {"name": name}, "value": value, "globalDefault": default}
        if policy is not None:
            obj["preemptionPolicy"] = policy
        return obj

    for items, expected in (
        ([klass("batch", 10, "Never"), klass("prod", 1000, "PreemptLowerPriority")], {"batch"}),
        ([klass("batch", 10, "Never", default=True), klass("prod", 1000)], {"batch", ""}),
        ([klass("old", 5, "Never", default=True), klass("normal", 100, default=True)], {"old"}),
    ):
        caches = await _classes_read(items)
        assert caches.never_preempt() == frozenset(expected)

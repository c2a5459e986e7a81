"""The StatefulSet guard's routes in-process: AdmissionReviews of StatefulSets and Scales."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from gatekeeper.core.kube.keys import CHARGE_KEY
from gatekeeper.webhook import make_app
from gatekeeper.webhook.config import RESIZE_PATH, SCALE_PATH, STATEFULSETS_PATH

WORKER = {
    "apiVersion": "apps/v1",
    "kind": "StatefulSet",
    "metadata": {
        "name": "lws-0",
        "namespace": "team-a",
        "labels": {"leaderworkerset.sigs.k8s.io/name": "lws"},
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "lws-0", "uid": "p", "controller": True}
        ],
    },
    "spec": {"replicas": 1},
}


def review(operation: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "name": "lws-0",
            "namespace": "team-a",
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:team-a:dev"},
            "object": obj,
            "oldObject": old,
        },
    }


def scale(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": "lws-0", "namespace": "team-a"},
        "spec": {"replicas": replicas},
        "status": {"replicas": 1, "selector": "leaderworkerset.sigs.k8s.io/name=lws"},
    }


async def respond(app_kwargs: dict[str, Any], path: str, body: dict[str, Any]) -> dict[str, Any]:
    async with TestClient(TestServer(make_app(**app_kwargs))) as client:
        resp = await client.post(path, json=body)
        assert resp.status == 200
        out = await resp.json()
    response: dict[str, Any] = out["response"]
    assert response["uid"] == body["request"]["uid"]
    assert "patch" not in response
    return response


async def test_a_tenant_scale_of_a_worker_statefulset_is_refused_with_what_to_do() -> None:
    asked: list[tuple[str, str]] = []

    async def lookup(namespace: str, name: str) -> Mapping[str, Any] | None:
        asked.append((namespace, name))
        return WORKER

    response = await respond({"lookup": lookup}, SCALE_PATH, review("UPDATE", scale(4), scale(1)))
    assert asked == [("team-a", "lws-0")]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    message = response["status"]["message"]
    assert "StatefulSet team-a/lws-0 belongs to pod lws-0 of LeaderWorkerSet lws" in message
    assert "change its replicas (1 to 4)" in message and "change LeaderWorkerSet lws instead" in message


@pytest.mark.parametrize(
    ("found", "new", "allowed"),
    [(None, 4, True), ({**WORKER, "metadata": {"name": "lws-0"}}, 4, True), (WORKER, 1, True)],
    ids=["statefulset-gone", "not-an-lws-statefulset", "replicas-unchanged"],
)
async def test_a_scale_the_guard_lets_through(
    found: Mapping[str, Any] | None, new: int, allowed: bool
) -> None:
    async def lookup(namespace: str, name: str) -> Mapping[str, Any] | None:
        return found

    response = await respond({"lookup": lookup}, SCALE_PATH, review("UPDATE", scale(new), scale(1)))
    assert response["allowed"] is allowed


async def test_a_scale_whose_statefulset_cannot_be_read_is_refused_with_the_reason() -> None:
    async def lookup(namespace: str, name: str) -> Mapping[str, Any] | None:
        raise TimeoutError("the API server did not answer")

    response = await respond({"lookup": lookup}, SCALE_PATH, review("UPDATE", scale(4), scale(1)))
    assert response["allowed"] is False and response["status"]["code"] == 503
    assert "cannot read StatefulSet team-a/lws-0" in response["status"]["message"]
    response = await respond({}, SCALE_PATH, review("UPDATE", scale(4), scale(1)))
    assert response["allowed"] is False, "a server that reads nothing refuses every scale"


async def test_a_patch_of_replicas_is_refused_and_a_label_change_is_not() -> None:
    scaled = {**WORKER, "spec": {"replicas": 4}}
    response = await respond({}, STATEFULSETS_PATH, review("UPDATE", scaled, WORKER))
    assert response["allowed"] is False and "change its spec (replicas)" in response["status"]["message"]
    relabelled = {**WORKER, "metadata": {**WORKER["metadata"], "labels": {}}}  # type: ignore[dict-item]
    response = await respond({}, STATEFULSETS_PATH, review("UPDATE", relabelled, WORKER))
    assert response["allowed"] is True


def _pod(cpu: str, *, let_through: bool = True) -> dict[str, Any]:
    tolerations = [{"key": CHARGE_KEY, "operator": "Equal", "value": "u.0", "effect": "NoSchedule"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "lws-0", "namespace": "team-a"},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
            "tolerations": tolerations if let_through else [],
        },
    }


async def test_a_resize_raising_a_let_through_pods_requests_is_refused_and_lowering_is_not() -> None:
    raised = await respond({}, RESIZE_PATH, review("UPDATE", _pod("2"), _pod("1")))
    assert raised["allowed"] is False and raised["status"]["code"] == 403
    assert raised["status"]["message"].startswith("pod lws-0 was let through on the admission of its group")
    assert "change the LeaderWorkerSet instead" in raised["status"]["message"]
    assert (await respond({}, RESIZE_PATH, review("UPDATE", _pod("500m"), _pod("1"))))["allowed"] is True
    plain = review("UPDATE", _pod("2", let_through=False), _pod("1", let_through=False))
    assert (await respond({}, RESIZE_PATH, plain))["allowed"] is True

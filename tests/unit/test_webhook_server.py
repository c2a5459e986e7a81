"""The webhook server in-process: real AdmissionReview bodies in, AdmissionReviews out.

The application is driven over plain HTTP with aiohttp's test client; one test starts
the real HTTPS server to check that a rotated certificate is served without a restart.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import ssl
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import REGISTRY

from gatekeeper.core.kube.keys import POOL_LABEL, SCHEDULING_GATE
from gatekeeper.webhook import LWS_PATH, PODS_PATH, make_app, mutating_webhook_configuration
from gatekeeper.webhook import server as webhook_server
from gatekeeper_lab.sandbox.pki import make_pki

ESCAPED_LABEL = "lws-gatekeeper.io~1pool"


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    async with TestClient(TestServer(make_app())) as c:
        yield c


def review(operation: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
    """An AdmissionReview request as the API server sends it."""
    kind = obj["kind"]
    group, _, version = obj["apiVersion"].rpartition("/")
    resource = {"Pod": "pods", "LeaderWorkerSet": "leaderworkersets"}[kind]
    gvr = {"group": group, "version": version, "resource": resource}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": gvr,
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": gvr,
            "name": obj["metadata"].get("name", ""),
            "namespace": "team-a",
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kube-system:statefulset-controller"},
            "object": obj,
            "oldObject": old,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
        },
    }


def pod(labels: dict[str, str], gates: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.8.5"}]}
    if gates is not None:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "vllm-0", "namespace": "team-a", "labels": labels},
        "spec": spec,
    }


def lws(labels: dict[str, str], template_labels: dict[str, str] | None = None) -> dict[str, Any]:
    def template(role: str) -> dict[str, Any]:
        return {
            "metadata": {"labels": {"role": role, **(template_labels or {})}},
            "spec": {"containers": [{"name": role, "image": "vllm/vllm-openai:v0.8.5"}]},
        }

    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "vllm", "namespace": "team-a", "labels": labels},
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {
                "size": 2,
                "leaderTemplate": template("leader"),
                "workerTemplate": template("worker"),
            },
        },
    }


async def admit(client: TestClient[Any, Any], path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST a review; check the envelope; return the response with its patch decoded."""
    resp = await client.post(path, json=body)
    assert resp.status == 200
    out = await resp.json()
    assert (out["apiVersion"], out["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    response: dict[str, Any] = out["response"]
    assert response["uid"] == body["request"]["uid"]
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        response["patch"] = json.loads(base64.b64decode(response["patch"]))
    else:
        assert "patchType" not in response
    return response


def patched_pods() -> float:
    labels = {"webhook": "pods", "result": "patched"}
    return REGISTRY.get_sample_value("lws_gatekeeper_webhook_requests_total", labels) or 0.0


async def test_opted_in_pod_gets_the_gate(client: TestClient[Any, Any]) -> None:
    before = patched_pods()
    response = await admit(client, PODS_PATH, review("CREATE", pod({POOL_LABEL: "on-demand"})))
    assert patched_pods() == before + 1
    assert response["allowed"] is True
    assert response["patch"] == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": SCHEDULING_GATE}]}
    ]


def timed(webhook: str) -> tuple[float, float]:
    """How many reviews ``lws_gatekeeper_webhook_request_duration_seconds`` timed, and their seconds."""
    labels = {"webhook": webhook}
    count = REGISTRY.get_sample_value("lws_gatekeeper_webhook_request_duration_seconds_count", labels)
    total = REGISTRY.get_sample_value("lws_gatekeeper_webhook_request_duration_seconds_sum", labels)
    assert count is not None and total is not None, "the series exists from make_app() on"
    return count, total


def under_a_second(webhook: str) -> float:
    labels = {"webhook": webhook, "le": "1.0"}
    return REGISTRY.get_sample_value("lws_gatekeeper_webhook_request_duration_seconds_bucket", labels) or 0.0


async def test_every_review_is_timed_by_webhook_whatever_its_result(client: TestClient[Any, Any]) -> None:
    pods, lwss, fast = timed("pods"), timed("leaderworkersets"), under_a_second("pods")
    await admit(client, PODS_PATH, review("CREATE", pod({POOL_LABEL: "on-demand"})))
    assert (await client.post(PODS_PATH, data=b"not json")).status == 400
    await admit(client, LWS_PATH, review("CREATE", lws({POOL_LABEL: "on-demand"})))
    (count, total), (lws_count, lws_total) = timed("pods"), timed("leaderworkersets")
    assert (count, lws_count) == (pods[0] + 2, lwss[0] + 1)
    assert total > pods[1] and lws_total > lwss[1]
    # each observation is one answer's time, in its bucket: well under the API server's timeout
    assert under_a_second("pods") == fast + 2


async def test_pod_with_another_gate_keeps_it(client: TestClient[Any, Any]) -> None:
    body = review("CREATE", pod({POOL_LABEL: "on-demand"}, gates=["example.com/other"]))
    response = await admit(client, PODS_PATH, body)
    assert response["patch"] == [
        {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": SCHEDULING_GATE}}
    ]


async def test_already_gated_pod_gets_no_patch(client: TestClient[Any, Any]) -> None:
    body = review("CREATE", pod({POOL_LABEL: "on-demand"}, gates=[SCHEDULING_GATE]))
    response = await admit(client, PODS_PATH, body)
    assert response["allowed"] is True
    assert "patch" not in response


async def test_pod_update_is_allowed_unchanged(client: TestClient[Any, Any]) -> None:
    old = pod({POOL_LABEL: "on-demand"}, gates=[SCHEDULING_GATE])
    response = await admit(client, PODS_PATH, review("UPDATE", pod({POOL_LABEL: "on-demand"}), old))
    assert response["allowed"] is True
    assert "patch" not in response


async def test_pod_without_the_label_is_left_alone(client: TestClient[Any, Any]) -> None:
    response = await admit(client, PODS_PATH, review("CREATE", pod({"app": "web"})))
    assert response["allowed"] is True
    assert "patch" not in response


async def test_malformed_opted_in_pod_is_refused(client: TestClient[Any, Any]) -> None:
    body = review("CREATE", pod({POOL_LABEL: "on-demand"}))
    body["request"]["object"]["spec"]["schedulingGates"] = "not-a-list"
    response = await admit(client, PODS_PATH, body)
    assert response["allowed"] is False
    assert response["status"]["code"] == 400
    message = response["status"]["message"]
    assert "pod team-a/vllm-0" in message
    assert SCHEDULING_GATE in message
    assert "spec.schedulingGates" in message


@pytest.mark.parametrize(
    ("toleration", "said"),
    [
        ({"key": "lws-gatekeeper.io/pool", "operator": "Equal", "value": "a", "effect": "NoSchedule"},
         "lws-gatekeeper.io/pool=a:NoSchedule"),
        ({"operator": "Exists"}, "every taint (operator Exists, no key)"),
    ],
)  # fmt: skip
async def test_opted_in_pod_written_with_a_closed_pools_toleration_is_refused(
    client: TestClient[Any, Any], toleration: dict[str, Any], said: str
) -> None:
    """Only the gatekeeper gives a pod a toleration of closed pools' taint (the pool's own, as
    it lets the group in); one the template wrote is refused, whoever makes the pod."""
    body = review("CREATE", pod({POOL_LABEL: "on-demand"}))
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists"}
    body["request"]["object"]["spec"]["tolerations"] = [gpu, toleration]
    response = await admit(client, PODS_PATH, body)
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    message = response["status"]["message"]
    assert message.startswith(f"lws-gatekeeper refuses pod team-a/vllm-0: its toleration {said} tolerates")
    assert "remove it from the LeaderWorkerSet's pod template" in message
    # the same pod without the opt-in label is the admission policy's (lws-gatekeeper-closed-pools)
    body = review("CREATE", pod({"app": "web"}))
    body["request"]["object"]["spec"]["tolerations"] = [toleration]
    assert (await admit(client, PODS_PATH, body))["allowed"] is True


async def test_lws_create_gets_the_label_in_both_templates(client: TestClient[Any, Any]) -> None:
    response = await admit(client, LWS_PATH, review("CREATE", lws({POOL_LABEL: "on-demand"})))
    assert response["allowed"] is True
    base = "/spec/leaderWorkerTemplate"
    assert response["patch"] == [
        {"op": "add", "path": f"{base}/leaderTemplate/metadata/labels/{ESCAPED_LABEL}", "value": "on-demand"},
        {"op": "add", "path": f"{base}/workerTemplate/metadata/labels/{ESCAPED_LABEL}", "value": "on-demand"},
    ]


async def test_lws_update_removing_the_label_removes_it_from_templates(client: TestClient[Any, Any]) -> None:
    old = lws({POOL_LABEL: "on-demand"}, {POOL_LABEL: "on-demand"})
    new = lws({}, {POOL_LABEL: "on-demand"})
    response = await admit(client, LWS_PATH, review("UPDATE", new, old))
    base = "/spec/leaderWorkerTemplate"
    assert response["patch"] == [
        {"op": "remove", "path": f"{base}/leaderTemplate/metadata/labels/{ESCAPED_LABEL}"},
        {"op": "remove", "path": f"{base}/workerTemplate/metadata/labels/{ESCAPED_LABEL}"},
    ]


async def test_lws_update_already_mirrored_gets_no_patch(client: TestClient[Any, Any]) -> None:
    obj = lws({POOL_LABEL: "on-demand"}, {POOL_LABEL: "on-demand"})
    response = await admit(client, LWS_PATH, review("UPDATE", obj, obj))
    assert response["allowed"] is True
    assert "patch" not in response


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"not json", id="not-json"),
        pytest.param(b"\xff\xfe", id="not-utf8"),
        pytest.param(b"[]", id="not-an-object"),
        pytest.param(json.dumps({"kind": "Pod"}).encode(), id="not-a-review"),
        pytest.param(
            json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}).encode(),
            id="old-version",
        ),
        pytest.param(
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
            id="no-request",
        ),
        pytest.param(
            json.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}}
            ).encode(),
            id="no-uid",
        ),
    ],
)
@pytest.mark.parametrize("path", [PODS_PATH, LWS_PATH])
async def test_garbage_body_is_a_bad_request(client: TestClient[Any, Any], path: str, body: bytes) -> None:
    resp = await client.post(path, data=body, headers={"Content-Type": "application/json"})
    assert resp.status == 400
    assert (await resp.json())["error"]


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
async def test_health_endpoints(client: TestClient[Any, Any], path: str) -> None:
    resp = await client.get(path)
    assert resp.status == 200
    assert await resp.text() == "ok"


def test_configuration_by_url() -> None:
    config = mutating_webhook_configuration(url="https://127.0.0.1:9443/", ca_bundle=b"PEM")
    pods, lwss = config["webhooks"]
    assert config["kind"] == "MutatingWebhookConfiguration"
    assert (pods["name"], lwss["name"]) == ("pods.lws-gatekeeper.io", "leaderworkersets.lws-gatekeeper.io")
    assert pods["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate-pods", "caBundle": "UEVN"}
    assert lwss["clientConfig"]["url"] == "https://127.0.0.1:9443/mutate-leaderworkersets"
    assert pods["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "operations": ["CREATE"],
            "scope": "Namespaced",
        }
    ]
    assert lwss["rules"] == [
        {
            "apiGroups": ["leaderworkerset.x-k8s.io"],
            "apiVersions": ["v1"],
            "resources": ["leaderworkersets"],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Namespaced",
        }
    ]
    for hook in (pods, lwss):
        assert hook["objectSelector"] == {"matchExpressions": [{"key": POOL_LABEL, "operator": "Exists"}]}
        assert (hook["failurePolicy"], hook["sideEffects"]) == ("Fail", "None")
    # Pods: one call each, whatever webhook runs after ours; LWSs: again if changed after us.
    assert (pods["reinvocationPolicy"], lwss["reinvocationPolicy"]) == ("Never", "IfNeeded")


def test_configuration_by_service() -> None:
    config = mutating_webhook_configuration(service=("lws-system", "gk", 443), ca_bundle=b"PEM")
    assert config["webhooks"][1]["clientConfig"] == {
        "service": {"namespace": "lws-system", "name": "gk", "port": 443, "path": "/mutate-leaderworkersets"},
        "caBundle": "UEVN",
    }


@pytest.mark.parametrize(
    "where", [{}, {"url": "https://x", "service": ("ns", "gk", 443)}], ids=["neither", "both"]
)
def test_configuration_needs_exactly_one_target(where: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        mutating_webhook_configuration(ca_bundle=b"PEM", **where)


async def served_cert(port: int) -> bytes:
    """The DER certificate the server on 127.0.0.1:``port`` presents."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    await writer.wait_closed()
    assert isinstance(der, bytes)
    return der


def der(cert_file: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert_file.read_text())


async def test_rotated_certificate_is_served_without_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webhook_server, "CERT_CHECK_SECONDS", 0.0)
    first, second = make_pki(tmp_path / "a").webhook_dir, make_pki(tmp_path / "b").webhook_dir
    live = tmp_path / "live"
    shutil.copytree(first, live)
    runner = await webhook_server.start_webhook_server("127.0.0.1", 0, live / "tls.crt", live / "tls.key")
    try:
        port = runner.addresses[0][1]
        assert await served_cert(port) == der(first / "tls.crt")
        (live / "tls.key").write_text("half-written rotation")
        assert await served_cert(port) == der(first / "tls.crt"), "an unreadable pair keeps the old one"
        for name in ("tls.crt", "tls.key"):
            shutil.copy(second / name, live / name)
        assert await served_cert(port) == der(second / "tls.crt")
    finally:
        await runner.cleanup()

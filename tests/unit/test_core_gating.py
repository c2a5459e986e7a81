"""Table tests for the webhook's decisions: the gate on pods, the opt-in label in LWS templates.

Each patch is also applied to its input (a minimal RFC 6902 "add"/"remove" applier
below) so the tests check what the API server would store, not only the operations.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gatekeeper.core.kube.keys import POOL_LABEL, SCHEDULING_GATE
from gatekeeper.core.model.gating import is_opted_in, lws_label_patch, pod_gate_patch

GATE = {"name": SCHEDULING_GATE}
OTHER_GATE = {"name": "example.com/other"}
ESCAPED_LABEL = "lws-gatekeeper.io~1pool"


def apply_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """Apply "add" (to an object member or a list's end) and "remove" as RFC 6902 defines them."""
    out = copy.deepcopy(doc)
    for op in ops:
        *parents, last = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        target: Any = out
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        if op["op"] == "remove":
            del target[last]
        elif last == "-":
            target.append(op["value"])
        else:
            target[last] = op["value"]
    return out


def pod(spec: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "p", "labels": {POOL_LABEL: "x"}}}
    if spec is not None:
        body["spec"] = spec
    return body


@pytest.mark.parametrize(
    ("spec", "ops", "gates_after"),
    [
        pytest.param(
            {"containers": []},
            [{"op": "add", "path": "/spec/schedulingGates", "value": [GATE]}],
            [GATE],
            id="no-gates-list",
        ),
        pytest.param(
            {"schedulingGates": None},
            [{"op": "add", "path": "/spec/schedulingGates", "value": [GATE]}],
            [GATE],
            id="null-gates-list",
        ),
        pytest.param(
            {"schedulingGates": []},
            [{"op": "add", "path": "/spec/schedulingGates/-", "value": GATE}],
            [GATE],
            id="empty-gates-list",
        ),
        pytest.param(
            {"schedulingGates": [OTHER_GATE]},
            [{"op": "add", "path": "/spec/schedulingGates/-", "value": GATE}],
            [OTHER_GATE, GATE],
            id="other-gate-kept",
        ),
        pytest.param({"schedulingGates": [GATE]}, [], [GATE], id="already-gated"),
        pytest.param(
            {"schedulingGates": [OTHER_GATE, GATE]}, [], [OTHER_GATE, GATE], id="already-gated-second"
        ),
    ],
)
def test_pod_gate_patch(spec: dict[str, Any], ops: list[dict[str, Any]], gates_after: list[Any]) -> None:
    before = pod(spec)
    assert pod_gate_patch(before) == ops
    assert apply_patch(before, ops)["spec"]["schedulingGates"] == gates_after


def test_pod_without_spec_gets_one() -> None:
    ops = pod_gate_patch(pod(None))
    assert ops == [{"op": "add", "path": "/spec", "value": {"schedulingGates": [GATE]}}]


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"schedulingGates": "gate"}, id="gates-not-a-list"),
        pytest.param({"schedulingGates": ["gate"]}, id="gate-not-an-object"),
        pytest.param({"schedulingGates": [{"name": 3}]}, id="name-not-a-string"),
        pytest.param([], id="spec-not-an-object"),
    ],
)
def test_pod_gate_patch_rejects_malformed_pods(spec: Any) -> None:
    with pytest.raises(ValueError, match="spec"):
        pod_gate_patch({"spec": spec})


@pytest.mark.parametrize(
    ("obj", "opted_in"),
    [
        ({"metadata": {"labels": {POOL_LABEL: "x"}}}, True),
        ({"metadata": {"labels": {POOL_LABEL: ""}}}, True),
        ({"metadata": {"labels": {"app": "x"}}}, False),
        ({"metadata": {}}, False),
        ({}, False),
    ],
)
def test_is_opted_in(obj: dict[str, Any], opted_in: bool) -> None:
    assert is_opted_in(obj) is opted_in


def lws(label: str | None, leader: dict[str, Any] | None, worker: dict[str, Any] | None) -> dict[str, Any]:
    lwt: dict[str, Any] = {"size": 2}
    if leader is not None:
        lwt["leaderTemplate"] = leader
    if worker is not None:
        lwt["workerTemplate"] = worker
    labels = {"app": "vllm"} | ({POOL_LABEL: label} if label is not None else {})
    return {"metadata": {"name": "vllm", "labels": labels}, "spec": {"leaderWorkerTemplate": lwt}}


def tmpl(labels: dict[str, str] | None = None, *, metadata: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"spec": {"containers": [{"name": "c"}]}}
    if metadata:
        body["metadata"] = {} if labels is None else {"labels": labels}
    return body


LEADER = "/spec/leaderWorkerTemplate/leaderTemplate"
WORKER = "/spec/leaderWorkerTemplate/workerTemplate"


@pytest.mark.parametrize(
    ("obj", "ops"),
    [
        pytest.param(
            lws("x", None, tmpl({"app": "w"})),
            [{"op": "add", "path": f"{WORKER}/metadata/labels/{ESCAPED_LABEL}", "value": "x"}],
            id="worker-only",
        ),
        pytest.param(
            lws("x", tmpl({"role": "leader"}), tmpl(metadata=False)),
            [
                {"op": "add", "path": f"{LEADER}/metadata/labels/{ESCAPED_LABEL}", "value": "x"},
                {"op": "add", "path": f"{WORKER}/metadata", "value": {"labels": {POOL_LABEL: "x"}}},
            ],
            id="leader-labels-worker-no-metadata",
        ),
        pytest.param(
            lws("x", tmpl(None), tmpl(None)),
            [
                {"op": "add", "path": f"{LEADER}/metadata/labels", "value": {POOL_LABEL: "x"}},
                {"op": "add", "path": f"{WORKER}/metadata/labels", "value": {POOL_LABEL: "x"}},
            ],
            id="metadata-without-labels",
        ),
        pytest.param(lws("x", tmpl({POOL_LABEL: "x"}), tmpl({POOL_LABEL: "x"})), [], id="already-labelled"),
        pytest.param(
            lws("y", tmpl({POOL_LABEL: "x"}), tmpl({POOL_LABEL: "y"})),
            [{"op": "add", "path": f"{LEADER}/metadata/labels/{ESCAPED_LABEL}", "value": "y"}],
            id="pool-changed",
        ),
        pytest.param(
            lws(None, tmpl({POOL_LABEL: "x", "role": "leader"}), tmpl({POOL_LABEL: "x"})),
            [
                {"op": "remove", "path": f"{LEADER}/metadata/labels/{ESCAPED_LABEL}"},
                {"op": "remove", "path": f"{WORKER}/metadata/labels/{ESCAPED_LABEL}"},
            ],
            id="label-removed",
        ),
        pytest.param(lws(None, tmpl({"role": "leader"}), tmpl(metadata=False)), [], id="never-labelled"),
        pytest.param(lws("x", None, None), [], id="no-templates"),
    ],
)
def test_lws_label_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    assert lws_label_patch(obj) == ops
    after = apply_patch(obj, ops)
    assert lws_label_patch(after) == [], "the patch is idempotent"
    pool = obj["metadata"]["labels"].get(POOL_LABEL)
    for template in after["spec"]["leaderWorkerTemplate"].values():
        if isinstance(template, dict):
            assert template.get("metadata", {}).get("labels", {}).get(POOL_LABEL) == pool


def test_lws_label_patch_keeps_other_template_labels() -> None:
    obj = lws("x", tmpl({"role": "leader"}), tmpl({"role": "worker"}))
    after = apply_patch(obj, lws_label_patch(obj))
    lwt = after["spec"]["leaderWorkerTemplate"]
    assert lwt["leaderTemplate"]["metadata"]["labels"] == {"role": "leader", POOL_LABEL: "x"}
    assert lwt["workerTemplate"]["metadata"]["labels"] == {"role": "worker", POOL_LABEL: "x"}


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        pytest.param({"metadata": {"labels": {POOL_LABEL: 1}}}, "metadata.labels", id="label-not-a-string"),
        pytest.param(
            {"spec": {"leaderWorkerTemplate": {"workerTemplate": []}}},
            "spec.leaderWorkerTemplate.workerTemplate",
            id="template-not-an-object",
        ),
        pytest.param({"spec": "x"}, "spec", id="spec-not-an-object"),
    ],
)
def test_lws_label_patch_rejects_malformed_objects(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        lws_label_patch(obj)

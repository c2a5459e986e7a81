"""What the admission webhook changes: the gate on pods, the opt-in label in LWS templates.

Why this exists: every pod of an opted-in LeaderWorkerSet must be born with the
scheduling gate ``lws-gatekeeper.io/admission``, and no other pod may be touched. The
webhook server only decodes AdmissionReviews; the decisions are these pure functions,
which return RFC 6902 JSON patch operations, so they are table-tested without a cluster.

How opt-in reaches the pods: the label ``lws-gatekeeper.io/pool=<pool>`` sits on the
LWS object, but pods do not inherit an LWS's metadata labels. So the webhook also
mutates the LWS on CREATE and UPDATE, copying that label into the pod templates
(``spec.leaderWorkerTemplate.leaderTemplate``, when there is one, and
``workerTemplate``); an LWS whose label is removed gets it removed from its templates.
Every pod of an opted-in LWS then carries the label, and the pod webhook selects on it
(``objectSelector: lws-gatekeeper.io/pool Exists``). Unrelated pods never pass through
the gatekeeper, so its outage cannot block them; and any pod carrying the label, whether
made by an LWS or not, has opted in and is gated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatekeeper.core._parse import mapping, sequence, string
from gatekeeper.core.names import POOL_LABEL, SCHEDULING_GATE

_TEMPLATES = ("leaderTemplate", "workerTemplate")
_LWT_POINTER = "/spec/leaderWorkerTemplate"


def _pointer_token(key: str) -> str:
    """``key`` as one JSON-pointer reference token (RFC 6901: ``~`` -> ``~0``, ``/`` -> ``~1``)."""
    return key.replace("~", "~0").replace("/", "~1")


def is_opted_in(obj: Mapping[str, Any]) -> bool:
    """Does the object (pod or LWS) carry the opt-in label ``lws-gatekeeper.io/pool``?"""
    labels = mapping(mapping(obj.get("metadata"), "metadata").get("labels"), "metadata.labels")
    return POOL_LABEL in labels


def pod_gate_patch(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Patch operations that add the scheduling gate to ``pod``; empty when it is already there.

    Other gates are left alone. Raises ValueError on a malformed ``spec.schedulingGates``.
    """
    gate = {"name": SCHEDULING_GATE}
    if pod.get("spec") is None:
        return [{"op": "add", "path": "/spec", "value": {"schedulingGates": [gate]}}]
    spec = mapping(pod["spec"], "spec")
    gates = sequence(spec.get("schedulingGates"), "spec.schedulingGates")
    names = [
        string(mapping(g, "spec.schedulingGates[]").get("name"), "spec.schedulingGates[].name") for g in gates
    ]
    if SCHEDULING_GATE in names:
        return []
    if spec.get("schedulingGates") is None:
        return [{"op": "add", "path": "/spec/schedulingGates", "value": [gate]}]
    return [{"op": "add", "path": "/spec/schedulingGates/-", "value": gate}]


def lws_label_patch(lws: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Patch operations that make the LWS's pod templates carry its opt-in label, or drop it.

    With ``lws-gatekeeper.io/pool: <pool>`` on the LWS, both templates get that label
    (missing ``metadata`` / ``labels`` maps are created); without it, a template that
    carries it loses it. Templates absent from the object are left alone. Empty when the
    templates already agree with the LWS.
    """
    labels = mapping(mapping(lws.get("metadata"), "metadata").get("labels"), "metadata.labels")
    pool = string(labels[POOL_LABEL], f"metadata.labels[{POOL_LABEL}]") if POOL_LABEL in labels else None
    lwt = mapping(mapping(lws.get("spec"), "spec").get("leaderWorkerTemplate"), "spec.leaderWorkerTemplate")
    ops: list[dict[str, Any]] = []
    for name in _TEMPLATES:
        if lwt.get(name) is not None:
            where = f"spec.leaderWorkerTemplate.{name}"
            ops.extend(_template_label_ops(mapping(lwt[name], where), f"{_LWT_POINTER}/{name}", pool, where))
    return ops


def _template_label_ops(
    template: Mapping[str, Any], pointer: str, pool: str | None, where: str
) -> list[dict[str, Any]]:
    """Operations that set (``pool``) or remove (None) the label in one pod template."""
    meta = mapping(template.get("metadata"), f"{where}.metadata")
    labels = mapping(meta.get("labels"), f"{where}.metadata.labels")
    label_pointer = f"{pointer}/metadata/labels/{_pointer_token(POOL_LABEL)}"
    if pool is None:
        return [{"op": "remove", "path": label_pointer}] if POOL_LABEL in labels else []
    if labels.get(POOL_LABEL) == pool:
        return []
    if template.get("metadata") is None:
        return [{"op": "add", "path": f"{pointer}/metadata", "value": {"labels": {POOL_LABEL: pool}}}]
    if meta.get("labels") is None:
        return [{"op": "add", "path": f"{pointer}/metadata/labels", "value": {POOL_LABEL: pool}}]
    return [{"op": "add", "path": label_pointer, "value": pool}]

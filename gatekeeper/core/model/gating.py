"""The gate: put on at birth by the webhook, lifted by a backend, as JSON patches.

Why this exists: every pod of an opted-in LeaderWorkerSet must be born with the
scheduling gate ``lws-gatekeeper.io/admission``, and no other pod may be touched. The
webhook server only decodes AdmissionReviews; the decisions are these pure functions,
which return RFC 6902 JSON patch operations, so they are table-tested without a cluster.
When a backend admits a group, ``ungate_patch`` is the one write that lifts the gate from
a pod (and, where the backend says so, steers it to its nodes in the same write): every
backend lifts gates with it.

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
from dataclasses import dataclass
from typing import Any

from gatekeeper.core.kube.fields import mapping, sequence, string
from gatekeeper.core.kube.keys import POOL_LABEL, SCHEDULING_GATE
from gatekeeper.core.kube.objects import as_list, as_map, json_pointer

__all__ = ["Ungate", "is_opted_in", "lws_label_patch", "pod_gate_patch", "ungate_patch"]

_TEMPLATES = ("leaderTemplate", "workerTemplate")
_LWT_POINTER = "/spec/leaderWorkerTemplate"


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
    label_pointer = f"{pointer}/metadata/labels/{json_pointer(POOL_LABEL)}"
    if pool is None:
        return [{"op": "remove", "path": label_pointer}] if POOL_LABEL in labels else []
    if labels.get(POOL_LABEL) == pool:
        return []
    if template.get("metadata") is None:
        return [{"op": "add", "path": f"{pointer}/metadata", "value": {"labels": {POOL_LABEL: pool}}}]
    if meta.get("labels") is None:
        return [{"op": "add", "path": f"{pointer}/metadata/labels", "value": {POOL_LABEL: pool}}]
    return [{"op": "add", "path": label_pointer, "value": pool}]


@dataclass(frozen=True)
class Ungate:
    """Lift our gate from one pod of an admitted group, steering it to its nodes in the same write."""

    namespace: str
    pod: str
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...] = ()


def ungate_patch(pod: Mapping[str, Any], ungate: Ungate | None = None) -> list[dict[str, Any]] | None:
    """JSON patch: remove our gate and, with ``ungate``, add its node labels and tolerations, in one write.

    Kubernetes lets a gated pod's node selector grow (and tolerations be added) in the
    same update that removes a gate. The ``test`` op makes the write fail if the gate moved
    since the pod was read. Returns None if the pod no longer carries our gate. A label
    the pod already selects with another value is left as the pod says.
    """
    spec = as_map(pod.get("spec"))
    gates = as_list(spec.get("schedulingGates"))
    index = next((i for i, g in enumerate(gates) if as_map(g).get("name") == SCHEDULING_GATE), None)
    if index is None:
        return None
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": f"/spec/schedulingGates/{index}/name", "value": SCHEDULING_GATE},
        {"op": "remove", "path": f"/spec/schedulingGates/{index}"},
    ]
    selector = as_map(spec.get("nodeSelector"))
    missing = {k: v for k, v in (ungate.node_selector if ungate else {}).items() if k not in selector}
    if missing and not spec.get("nodeSelector"):
        ops.append({"op": "add", "path": "/spec/nodeSelector", "value": dict(sorted(missing.items()))})
    else:
        for k, v in sorted(missing.items()):
            ops.append({"op": "add", "path": f"/spec/nodeSelector/{json_pointer(k)}", "value": v})
    existing = as_list(spec.get("tolerations"))
    new = [dict(t) for t in (ungate.tolerations if ungate else ()) if t not in existing]
    if new and not existing:
        ops.append({"op": "add", "path": "/spec/tolerations", "value": new})
    else:
        ops.extend({"op": "add", "path": "/spec/tolerations/-", "value": t} for t in new)
    return ops

"""The StatefulSets a LeaderWorkerSet controls are its controller's to change, nobody else's.

Why this exists: a group is what its LWS says (``core.admission.members`` holds a pod made past the
LWS's ``size`` or asking other than its role), but the tenant who scaled a worker
StatefulSet to 4 would only see pods Pending. The StatefulSet guard (a validating
webhook, ``webhook/guard.py``) refuses the change itself, with a sentence that says to
change the LWS instead. This module decides, with no I/O:

- :func:`controller_of`: is a StatefulSet one the LWS controller made (its controller is
  a LeaderWorkerSet, as a leader StatefulSet's is, or a pod, as a worker StatefulSet's
  is: its group's leader)? Any StatefulSet controlled by a pod is taken for an LWS's:
  nothing else in Kubernetes makes one.
- :func:`statefulset_refusal`: a create of such a StatefulSet, or an update of its
  ``spec`` or its controller reference;
- :func:`scale_refusal`: a change of its replicas through ``statefulsets/scale``, whose
  Scale object carries no owner (the webhook reads the StatefulSet for it).
- :func:`leader_template_revision`: the template revision the LWS's own leader StatefulSet
  makes pods with, for the record of a group admitted before its pods exist (the pools
  backend's ``decide``).

The LWS controller and the garbage collector (which drops the owner reference when an
LWS is deleted with ``--cascade=orphan``) are left out by the webhook configuration's
match conditions (``webhook/config.py``), so they never reach these functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gatekeeper.core.kube.keys import LWS_KIND, LWS_NAME_LABEL, REVISION_LABEL
from gatekeeper.core.kube.objects import as_list, as_map, condition, labels, meta, name_of

__all__ = [
    "Controller",
    "controller_of",
    "leader_template_revision",
    "scale_refusal",
    "statefulset_refusal",
    "statefulset_view",
]

UPDATE_IN_PROGRESS = "UpdateInProgress"
"""The LWS condition that says a rolling update is under way."""

#: What the decisions read of a StatefulSet: who it is and who controls it.
_STS_META = ("name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences", "deletionTimestamp")


def statefulset_view(sts: Mapping[str, Any]) -> dict[str, Any]:
    """What the decisions read of a StatefulSet watched by an LWS's name label: its identity
    and its controller (``core.admission.members``, ``backends.pools.pass_through``), no spec.

    Anyone with ``edit`` in a namespace can make StatefulSets with that label, of any size;
    kept whole, their templates would grow the gatekeeper's memory with a tenant's objects.
    (The StatefulSet guard reads a StatefulSet's spec from the API server, not from here.)"""
    metadata = sts.get("metadata")
    view: dict[str, Any] = {k: sts[k] for k in ("apiVersion", "kind") if k in sts}
    if isinstance(metadata, Mapping):
        view["metadata"] = {k: metadata[k] for k in _STS_META if k in metadata}
    else:
        view["metadata"] = metadata  # malformed reads as malformed, not as empty
    return view


@dataclass(frozen=True)
class Controller:
    """What controls an LWS's StatefulSet: the LWS itself, or its group's leader pod."""

    kind: str
    """``LeaderWorkerSet`` or ``Pod``."""
    name: str
    lws: str
    """The LeaderWorkerSet's name, as far as the StatefulSet tells it."""

    def said(self) -> str:
        if self.kind == LWS_KIND:
            return f"LeaderWorkerSet {self.name}"
        return f"pod {self.name} of LeaderWorkerSet {self.lws}" if self.lws else f"pod {self.name}"


def _controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in as_list(meta(obj).get("ownerReferences")):
        ref = as_map(ref)
        if ref.get("controller") is True:
            return ref
    return None


def leader_template_revision(
    lws: Mapping[str, Any], statefulsets: Mapping[tuple[str, str], Mapping[str, Any]]
) -> str:
    """The template revision the LWS's leader StatefulSet (``statefulsets`` by namespace and
    name) makes pods with now, its revision label: what a group none of whose pods exists
    yet will be made from, so that its admission can say it. "" while the LWS says a rolling
    update is in progress (a pod below the partition is then made from the old revision),
    or when that StatefulSet is not the LWS's own."""
    if condition(lws, UPDATE_IN_PROGRESS).get("status") == "True":
        return ""
    m = meta(lws)
    sts = statefulsets.get((str(m.get("namespace") or ""), str(m.get("name") or "")))
    if sts is None or not m.get("uid"):
        return ""
    ref = _controller_ref(sts)
    if ref is None or ref.get("kind") != LWS_KIND or ref.get("uid") != m.get("uid"):
        return ""
    revision = labels(sts).get(REVISION_LABEL)
    return revision if isinstance(revision, str) else ""


def controller_of(sts: Mapping[str, Any]) -> Controller | None:
    """The LWS or pod controlling ``sts``; ``None`` for a StatefulSet of anything else."""
    ref = _controller_ref(sts)
    if ref is None:
        return None
    kind, name = ref.get("kind"), str(ref.get("name") or "")
    if kind == LWS_KIND and str(ref.get("apiVersion") or "").startswith("leaderworkerset.x-k8s.io/"):
        return Controller(LWS_KIND, name, name)
    if kind == "Pod" and ref.get("apiVersion") == "v1":
        lws = labels(sts).get(LWS_NAME_LABEL)
        return Controller("Pod", name, lws if isinstance(lws, str) else "")
    return None


def _refusal(namespace: str, sts: str, controller: Controller, may: str) -> str:
    lws = f"LeaderWorkerSet {controller.lws}" if controller.lws else "the LeaderWorkerSet"
    return (
        f"lws-gatekeeper: StatefulSet {namespace}/{sts} belongs to {controller.said()}, and only "
        f"the LeaderWorkerSet controller may {may}: the gatekeeper admits a group as its "
        f"LeaderWorkerSet says; change {lws} instead (spec.replicas for its groups, "
        "spec.leaderWorkerTemplate for its pods)"
    )


def statefulset_refusal(operation: str, obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> str | None:
    """Why a create or update of a StatefulSet is refused; ``None``: let it through.

    Refused: creating a StatefulSet controlled by an LWS or a pod, or giving one such a
    controller; changing the ``spec`` (replicas, template, anything) or the controller
    reference of one that is. Its labels,
    annotations and other owners stay the tenant's.
    """
    namespace = str(meta(obj).get("namespace") or (meta(old).get("namespace") if old else "") or "")
    if operation == "CREATE":
        made = controller_of(obj)
        if made is None:
            return None
        return _refusal(namespace, name_of(obj), made, f"make a StatefulSet {made.said()} controls")
    if operation != "UPDATE" or old is None:
        return None
    controller = controller_of(old)
    if controller is None:
        made = controller_of(obj)
        if made is None:
            return None
        return _refusal(namespace, name_of(obj), made, f"make a StatefulSet {made.said()} controls")
    if as_map(old.get("spec")) != as_map(obj.get("spec")):
        changed = sorted(
            key
            for key in {*as_map(old.get("spec")), *as_map(obj.get("spec"))}
            if as_map(old.get("spec")).get(key) != as_map(obj.get("spec")).get(key)
        )
        return _refusal(namespace, name_of(old), controller, f"change its spec ({', '.join(changed)})")
    if _controller_ref(old) != _controller_ref(obj):
        return _refusal(namespace, name_of(old), controller, "change its controller reference")
    return None


def scale_refusal(sts: Mapping[str, Any], replicas: object, old_replicas: object) -> str | None:
    """Why a change of ``sts``'s replicas through its scale subresource is refused."""
    if replicas == old_replicas:
        return None
    controller = controller_of(sts)
    if controller is None:
        return None
    return _refusal(
        str(meta(sts).get("namespace") or ""),
        name_of(sts),
        controller,
        f"change its replicas ({old_replicas} to {replicas})",
    )

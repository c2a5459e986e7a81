"""The charge follows the pods: a reservation is held while any pod let through on it lives.

Why this exists: the decisions find a group's pods by their labels (the LWS name, the
group index, the pool label), and a tenant may change the labels of a running pod, delete
its LWS with ``--cascade=orphan`` and create another: the first group's pods run on,
unseen, and its reservation would be given to the second. So every pod the gatekeeper
lets through (a pass lifting its gate, or the webhook making it ungated) gets a
toleration that names its group, :data:`~gatekeeper.core.kube.keys.CHARGE_KEY` with value
``<LWS UID>.<group index>`` (:func:`charge_toleration`). The API server lets no update
remove or change a toleration, so it is a mark the tenant cannot wipe. A toleration of a
taint no node has, it changes nothing of where the pod may run.

:func:`live_charges` reads those marks from every pod the pass sees (the opted-in pods and
the view of every bound pod), :func:`charged` says whether a record's group still has one
live. A backend keeps a record that it would release (its LWS gone or replaced, its group
scaled away, the record deleted) while its group is charged, and holds its recorded
demand. Only pods in the record's namespace count: a tenant who copies another's mark
onto its own pod only holds its own namespace's records.

:func:`resize_refusal` keeps the charge true of what the pod asks: an in-place resize
(``pods/resize``) of a pod let through may lower its requests, not raise them (the
gatekeeper's validating webhook asks it, beside the policy ``lws-gatekeeper-member-resize``).

Not seen: a pod let through, not yet bound, whose labels were changed (the labelled pods'
informer no longer has it, the bound pods' view not yet); the policy
``lws-gatekeeper-member-labels`` refuses that change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gatekeeper.core.kube.keys import CHARGE_KEY
from gatekeeper.core.kube.objects import as_list, as_map, is_live, meta
from gatekeeper.core.kube.quantity import format_resources
from gatekeeper.core.model.demand import pod_requests

__all__ = ["Charge", "charge_toleration", "charged", "charged_to", "live_charges", "resize_refusal"]

Charge = tuple[str, str, int]
"""(namespace, LWS UID, group index): the group a pod is charged to."""


def charge_toleration(lws_uid: str, index: int) -> dict[str, Any]:
    """The toleration a pod of group ``index`` of the LWS ``lws_uid`` is let through with."""
    return {"key": CHARGE_KEY, "operator": "Equal", "value": f"{lws_uid}.{index}", "effect": "NoSchedule"}


def charged_to(pod: Mapping[str, Any]) -> Charge | None:
    """The group ``pod`` was let through on, from its mark; ``None`` for a pod without one."""
    for toleration in as_list(as_map(pod.get("spec")).get("tolerations")):
        toleration = as_map(toleration)
        if toleration.get("key") != CHARGE_KEY:
            continue
        uid, _, index = str(toleration.get("value") or "").rpartition(".")
        if uid and index.isdigit() and len(index) <= 6:
            return str(meta(pod).get("namespace") or ""), uid, int(index)
    return None


def live_charges(*pod_lists: Iterable[Mapping[str, Any]]) -> dict[Charge, tuple[str, ...]]:
    """The groups with a live marked pod among ``pod_lists`` (one pod counted once, by UID),
    with those pods' names."""
    seen: set[str] = set()
    found: dict[Charge, list[str]] = {}
    for pods in pod_lists:
        for pod in pods:
            uid = str(meta(pod).get("uid") or "")
            if not uid or uid in seen:
                continue
            seen.add(uid)
            charge = charged_to(pod)
            if charge is not None and is_live(pod):
                found.setdefault(charge, []).append(str(meta(pod).get("name") or ""))
    return {charge: tuple(sorted(names)) for charge, names in found.items()}


def charged(record: Mapping[str, Any], charges: Mapping[Charge, tuple[str, ...]]) -> tuple[str, ...]:
    """The live pods charged to ``record``'s group (by its LWS UID and group index)."""
    spec = as_map(record.get("spec"))
    uid, index = spec.get("leaderWorkerSetUID"), spec.get("groupIndex")
    if not isinstance(uid, str) or type(index) is not int:
        return ()
    return charges.get((str(meta(record).get("namespace") or ""), uid, index), ())


def resize_refusal(pod: Mapping[str, Any], old: Mapping[str, Any]) -> str | None:
    """Why the in-place resize of ``old`` into ``pod`` is refused, in words for who asked it;
    None when ``old`` was not let through by the gatekeeper or the pod asks no more of any
    resource than before (its effective requests; the pod overhead left out)."""
    if charged_to(old) is None:
        return None
    name = meta(pod).get("name") or meta(old).get("name") or ""

    def asks(obj: Mapping[str, Any]) -> dict[str, int]:
        return pod_requests({k: v for k, v in as_map(obj.get("spec")).items() if k != "overhead"})

    try:
        after, before = asks(pod), asks(old)
    except (ValueError, ArithmeticError) as exc:
        return f"pod {name}: its requests cannot be read ({exc})"
    more = {r: v for r, v in after.items() if v > before.get(r, 0)}
    if not more:
        return None
    return (
        f"pod {name} was let through on the admission of its group and is charged to it at what it "
        f"asked then ({format_resources(before) or 'nothing'}): a resize may lower its requests, not "
        f"raise them ({format_resources(more)} asked); change the LeaderWorkerSet instead, its new "
        "revision is admitted anew"
    )

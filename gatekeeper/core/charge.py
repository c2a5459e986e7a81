"""The charge follows the pods: a reservation is held while any pod let through on it lives.

Why this exists: the decisions find a group's pods by their labels (the LWS name, the
group index, the pool label), and a tenant may change the labels of a running pod, delete
its LWS with ``--cascade=orphan`` and create another: the first group's pods run on,
unseen, and its reservation would be given to the second. So every pod the gatekeeper
lets through (a pass lifting its gate, or the webhook making it ungated) gets a
toleration that names its group, :data:`~gatekeeper.core.keys.CHARGE_KEY` with value
``<LWS UID>.<group index>`` (:func:`charge_toleration`). The API server lets no update
remove or change a toleration, so it is a mark the tenant cannot wipe. A toleration of a
taint no node has, it changes nothing of where the pod may run.

:func:`live_charges` reads those marks from every pod the pass sees (the opted-in pods and
the view of every bound pod), :func:`charged` says whether a record's group still has one
live. A backend keeps a record that it would release (its LWS gone or replaced, its group
scaled away, the record deleted) while its group is charged, and holds its recorded
demand. Only pods in the record's namespace count: a tenant who copies another's mark
onto its own pod only holds its own namespace's records.

Not seen: a pod let through, not yet bound, whose labels were changed (the labelled pods'
informer no longer has it, the bound pods' view not yet); the policy
``lws-gatekeeper-member-labels`` refuses that change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gatekeeper.core.keys import CHARGE_KEY
from gatekeeper.core.objects import as_list, as_map, is_live, meta

__all__ = ["Charge", "charge_toleration", "charged", "charged_to", "live_charges"]

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

"""The Volcano PodGroup of one LWS group: how the ``volcano`` backend makes it and reads it back.

Why this exists: with ``--backend=volcano`` Volcano's scheduler decides, by its Queue,
whether a group may start; the gatekeeper writes one PodGroup per group and lifts the
group's gates once Volcano has put it ``Inqueue`` (and the whole group fits the nodes).
This module is *what* a PodGroup of ours is, and what Volcano's answer on it says; the
decision of *when* to write it is the caller's (``decide``). Pure: no I/O.

What a PodGroup of ours is:

* Named ``<lws>-<index>-gk`` (``pod_group_name``), in the LWS's namespace, owned by the
  group's ``GroupAdmission`` record (so it goes when the record goes), labelled with the
  LWS name, the group index and the pool label (``lws-gatekeeper.io/pool``, which names the Volcano Queue).
* ``spec.queue`` is the pool label's value; ``spec.minResources`` is the whole group's
  demand from the LWS spec (leader and every worker, counted before the workers exist),
  so Volcano's enqueue action reserves room in the Queue for the whole group.
* ``spec.minMember`` is what Volcano must place together: the group's size, or ``1`` under
  ``startupPolicy: LeaderReady``, where the workers are only made once the leader runs
  (Volcano's gang plugin finds a PodGroup with fewer pods than ``minMember`` invalid and
  never enqueues it). The workers still have their room: ``minResources`` is the whole
  group's, and Volcano keeps ``minResources`` less what is placed reserved in the Queue
  while the PodGroup runs.
* ``spec.priorityClassName`` is the leader template's, when it names one.

What Volcano's answer says (``volcano_state``): ``status.phase`` ``Inqueue`` (or later:
``Running``, ``Completed``, and ``Unknown`` once placed pods run) means Volcano found room
in the Queue; ``Pending`` means it did not, and the reason is in Volcano's own words: the
``Unschedulable`` condition's message, else the last warning it gave.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gatekeeper.core.backends.volcano.keys import (
    VOLCANO_API_VERSION,
    VOLCANO_GROUP_ANNOTATION,
    VOLCANO_INQUEUE,
    VOLCANO_RUNNING,
    VOLCANO_SCHEDULER_NAME,
)
from gatekeeper.core.kube.keys import (
    GATEKEEPER_API_VERSION,
    GROUP_INDEX_LABEL,
    LWS_NAME_LABEL,
    LWS_UID_ANNOTATION,
    POOL_LABEL,
    RECORD_KIND,
)
from gatekeeper.core.kube.objects import as_list, as_map, json_pointer, labels, meta
from gatekeeper.core.kube.quantity import format_amount
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.groups import GroupState
from gatekeeper.core.model.lws import LEADER_READY, size, startup_policy, templates

__all__ = [
    "ADMITTED_PHASES",
    "MAX_MESSAGE",
    "VolcanoState",
    "min_member",
    "min_resources",
    "new_pod_group",
    "pod_group_belongs",
    "pod_group_name",
    "volcano_pod_patch",
    "volcano_state",
]

#: PodGroup phases in which Volcano has found the group room in its Queue.
ADMITTED_PHASES = frozenset({VOLCANO_INQUEUE, VOLCANO_RUNNING, "Completed", "Unknown"})

#: The longest message of Volcano's copied into a record (a user's object can make it long).
MAX_MESSAGE = 1024


def min_member(lws: Mapping[str, Any]) -> int:
    """The pods Volcano must place together: the group's size, ``1`` under LeaderReady."""
    return 1 if startup_policy(lws) == LEADER_READY else size(lws)


def min_resources(demand: GroupDemand) -> dict[str, str]:
    """The whole group's demand as PodGroup ``minResources`` quantities (``cpu`` in millicores)."""
    out: dict[str, str] = {}
    for name in sorted(demand.total):
        units = demand.total[name]
        out[name] = f"{units}m" if name == "cpu" and units % 1000 else format_amount(name, units)
    out["pods"] = str(demand.pod_count)
    return out


def pod_group_name(lws_name: str, index: int) -> str:
    """The PodGroup of group ``index`` of LWS ``lws_name``: ``<lws>-<index>-gk``, at most 253 characters.

    Computed from the pod's labels alone, so the webhook can name it on a pod being made
    (the record's name needs the LWS's UID, which a pod does not carry). The suffix keeps
    it apart from the PodGroups of LWS's own Volcano provider (``<lws>-<index>-<revision>``).
    """
    tail = f"-{index}-gk"
    return f"{lws_name[: 253 - len(tail)]}{tail}"


def _group_index(pod: Mapping[str, Any]) -> int | None:
    """The pod's group index: its label, else (a leader before LWS's own webhook labelled it)
    the ordinal ending its name ``<lws>-<index>``, as LWS's webhook itself reads it."""
    pod_labels = labels(pod)
    raw = pod_labels.get(GROUP_INDEX_LABEL)
    if raw is None:
        lws_name, name = pod_labels.get(LWS_NAME_LABEL), meta(pod).get("name")
        if isinstance(lws_name, str) and isinstance(name, str) and name.startswith(f"{lws_name}-"):
            raw = name[len(lws_name) + 1 :]
    if isinstance(raw, str) and raw.isdigit() and len(raw) <= 9:  # bounded: at most 10^9 groups
        return int(raw)
    return None


def volcano_pod_patch(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Patch ops that hand a pod of an opted-in LWS to Volcano: ``schedulerName: volcano`` and
    the annotation naming its group's PodGroup. Empty for a pod that is no LWS group's.

    The webhook adds these to the gate on CREATE with the volcano backend only, so only the
    opted-in LWSs' pods (the webhook sees no other) go to Volcano: no global switch.
    """
    lws_name = labels(pod).get(LWS_NAME_LABEL)
    index = _group_index(pod)
    if not isinstance(lws_name, str) or not lws_name or index is None:
        return []
    ops: list[dict[str, Any]] = [
        {"op": "add", "path": "/spec/schedulerName", "value": VOLCANO_SCHEDULER_NAME}
    ]
    group = pod_group_name(lws_name, index)
    annotations = meta(pod).get("annotations")
    if not isinstance(annotations, Mapping):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {VOLCANO_GROUP_ANNOTATION: group}})
    else:
        ops.append(
            {
                "op": "add",
                "path": f"/metadata/annotations/{json_pointer(VOLCANO_GROUP_ANNOTATION)}",
                "value": group,
            }
        )
    return ops


def new_pod_group(group: GroupState, lws: Mapping[str, Any], record_uid: str) -> dict[str, Any]:
    """The PodGroup of one group, owned by its record; ValueError when its demand is unreadable."""
    if not isinstance(group.demand, GroupDemand):
        raise ValueError(f"group {group.key.index} has no readable demand: {group.demand}")
    spec: dict[str, Any] = {
        "queue": group.pool,
        "minMember": min_member(lws),
        "minResources": min_resources(group.demand),
    }
    leader, _ = templates(lws)
    prio = as_map(leader.get("spec")).get("priorityClassName")
    if isinstance(prio, str) and prio:
        spec["priorityClassName"] = prio
    return {
        "apiVersion": VOLCANO_API_VERSION,
        "kind": "PodGroup",
        "metadata": {
            "name": pod_group_name(group.key.name, group.key.index),
            "namespace": group.key.namespace,
            "labels": {
                LWS_NAME_LABEL: group.key.name,
                GROUP_INDEX_LABEL: str(group.key.index),
                POOL_LABEL: group.pool,
            },
            "annotations": {LWS_UID_ANNOTATION: group.lws_uid},
            "ownerReferences": [
                {
                    "apiVersion": GATEKEEPER_API_VERSION,
                    "kind": RECORD_KIND,
                    "name": group.record,
                    "uid": record_uid,
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": spec,
    }


def pod_group_belongs(pg: Mapping[str, Any], name: str, uid: str, index: int) -> bool:
    """Is ``pg`` the PodGroup of group ``index`` of this LWS incarnation?"""
    pg_labels = labels(pg)
    annotations = as_map(meta(pg).get("annotations"))
    return (
        pg_labels.get(LWS_NAME_LABEL) == name
        and pg_labels.get(GROUP_INDEX_LABEL) == str(index)
        and annotations.get(LWS_UID_ANNOTATION, uid) == uid
    )


@dataclass(frozen=True)
class VolcanoState:
    """What Volcano said about one PodGroup."""

    admitted: bool
    """Volcano found the group room in its Queue (phase Inqueue or later)."""
    phase: str
    reason: str
    """Volcano's reason (``Unschedulable``, ``NotEnoughResources``...) or the phase."""
    message: str
    """Volcano's words, bounded to MAX_MESSAGE characters."""


def _bounded(text: object) -> str:
    value = text if isinstance(text, str) else ""
    return value if len(value) <= MAX_MESSAGE else value[: MAX_MESSAGE - 1] + "…"


def volcano_state(pg: Mapping[str, Any], events: tuple[Mapping[str, Any], ...] = ()) -> VolcanoState:
    """Volcano's answer on ``pg``: admitted or not, and why, in Volcano's words.

    ``events`` are the Events whose involved object is this PodGroup (any order). The
    latest one Volcano gave (the enqueue action's, when the Queue has no room) speaks
    first, then the PodGroup's ``Unschedulable`` condition (the gang plugin's); the reason
    is the Event's, else the condition's. A malformed status reads as not yet evaluated.
    """
    status = as_map(pg.get("status"))
    phase = status.get("phase")
    phase = phase if isinstance(phase, str) and phase else "Pending"
    if phase in ADMITTED_PHASES:
        return VolcanoState(True, phase, phase, "")
    said: list[str] = []
    reason = ""
    latest = _latest_event(events)
    if latest is not None:  # the enqueue action's words: "queue resource quota insufficient"
        said.append(_bounded(latest.get("message")))
        reason = _bounded(latest.get("reason"))
    for cond in as_list(status.get("conditions")):
        cond = as_map(cond)
        if cond.get("type") == "Unschedulable" and cond.get("status") == "True" and cond.get("message"):
            said.append(_bounded(cond.get("message")))  # the gang plugin's words
            reason = reason or _bounded(cond.get("reason")) or "Unschedulable"
            break
    words = "; ".join(dict.fromkeys(w for w in said if w))
    return VolcanoState(False, phase, reason or phase, _bounded(words))


def _latest_event(events: tuple[Mapping[str, Any], ...]) -> Mapping[str, Any] | None:
    """The latest Normal Event Volcano gave (its enqueue action's), else the latest Warning
    (the gang plugin's, which the condition says too)."""

    def when(ev: Mapping[str, Any]) -> tuple[int, str]:
        stamp = (
            ev.get("lastTimestamp")
            or ev.get("eventTime")
            or as_map(ev.get("metadata")).get("creationTimestamp")
        )
        return (0 if ev.get("type") == "Warning" else 1, stamp if isinstance(stamp, str) else "")

    spoken = [ev for ev in events if isinstance(ev.get("message"), str) and ev.get("message")]
    return max(spoken, key=when) if spoken else None

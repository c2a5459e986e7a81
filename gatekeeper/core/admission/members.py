"""Which pods an LWS made: group membership by the owner chain, not by labels alone.

Why this exists: pods are grouped by the LWS labels (``leaderworkerset.sigs.k8s.io/name``
and ``.../group-index``), and labels are written by whoever creates the pod. A tenant who
may create pods in a namespace could make a pod that claims an admitted group by its
labels, of any size, and have it let through on that group's reservation. So a pod counts
as a member of an LWS's group only when the LWS made it, as the LWS controller does:

* a leader pod's controller ownerReference is the group's leader StatefulSet (named after
  the LWS), whose controller ownerReference is the LWS;
* a worker pod's controller ownerReference is its group's worker StatefulSet, whose
  controller ownerReference is the group's leader pod, made as above.

References are compared by UID. A gated pod that claims an LWS's group by its labels and
was made by anyone else is a *stranger*: it is never counted in, held for or let through
on any group, and it stays gated.

The owner chain alone is not enough: a tenant who may scale the group's worker
StatefulSet (``kubectl scale sts/<lws>-0 --replicas=4``) has the LWS's own chain make
more workers than the LWS's ``size`` says. A gated pod whose worker index is not below its
LWS's ``size`` is a stranger too (``Stranger.size`` says so): the group is what its LWS
said, and its reservation holds ``size`` pods.

Only gated pods are judged. Every opted-in pod is born gated (the webhook fails closed)
and only the gatekeeper lifts the gate, so a pod without it was judged when it was let
through. Its chain may since have broken without anything being wrong: when a leader pod
is replaced, its worker StatefulSet goes with it, and a worker still terminating (an old
pod of a rolling update, held by a finalizer) then has no StatefulSet; it must still count
as the group's old pod. Pods whose LWS is not there (deleted, with its pods left running)
are not judged either: such a group is only held until its pods are gone, never admitted
again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gatekeeper.core.admission.messages import beyond_size, not_as_admitted, not_made_by
from gatekeeper.core.admission.reasons import Reason
from gatekeeper.core.kube.keys import LWS_KIND, LWS_NAME_LABEL
from gatekeeper.core.kube.objects import as_list, as_map, labels, meta, name_of
from gatekeeper.core.model.lws import group_index, is_gated, worker_index

__all__ = ["Stranger", "controller_uid", "split_members", "strangers_said"]

_MAX_DEPTH = 4
"""pod -> worker StatefulSet -> leader pod -> leader StatefulSet -> LWS."""


@dataclass(frozen=True)
class Stranger:
    """A pod that claims group ``index`` of LWS ``lws`` by its labels, which that LWS did not make."""

    namespace: str
    lws: str
    index: int
    pod: str
    size: int = 0
    """0: its LWS did not make it; else it was made through the LWS's chain but its worker
    index (``worker``) is not below the LWS's ``size`` (a worker StatefulSet scaled past it)."""
    worker: int = 0
    why: str = ""
    """Set for a pod made by its LWS within its size that does not ask what its role was
    admitted with (``core.admission.conformance``): why, in words."""


def strangers_said(strangers: Sequence[Stranger]) -> tuple[Reason, str]:
    """The reason and words for a group's strangers: ``NotMadeByLeaderWorkerSet`` when any
    was not made by its LWS, else ``NotAsAdmitted`` when any asks other than its role, else
    ``BeyondGroupSize``."""
    if not strangers:
        raise ValueError("no strangers to speak of")
    lws = strangers[0].lws
    foreign = sorted(s.pod for s in strangers if not s.size and not s.why)
    extra = sorted((s for s in strangers if s.size), key=lambda s: (s.worker, s.pod))
    departed = sorted((s for s in strangers if s.why), key=lambda s: s.pod)
    said = [not_made_by(foreign, lws)] if foreign else []
    said.extend(not_as_admitted(s.why) for s in departed)
    if extra:
        said.append(beyond_size([(s.pod, s.worker) for s in extra], lws, extra[0].size))
    if foreign:
        return Reason.NOT_MADE_BY_LWS, "; ".join(said)
    return (Reason.NOT_AS_ADMITTED if departed else Reason.BEYOND_GROUP_SIZE), "; ".join(said)


def controller_uid(obj: Mapping[str, Any], kind: str | None = None) -> str:
    """The UID of the object's controller ownerReference (of ``kind``, when given); "" if none."""
    for ref in as_list(meta(obj).get("ownerReferences")):
        ref = as_map(ref)
        if ref.get("controller") is True and (kind is None or ref.get("kind") == kind):
            return str(ref.get("uid") or "")
    return ""


def _made_by(
    pod: Mapping[str, Any],
    lws_uid: str,
    statefulsets: Mapping[str, Mapping[str, Any]],
    pods: Mapping[str, Mapping[str, Any]],
) -> bool:
    current = pod
    for _ in range(_MAX_DEPTH):
        sts = statefulsets.get(controller_uid(current, "StatefulSet"))
        if sts is None:
            return False
        if controller_uid(sts, LWS_KIND) == lws_uid:
            return True
        leader = pods.get(controller_uid(sts, "Pod"))
        if leader is None or leader is current:
            return False
        current = leader
    return False


def _in_role(
    pod: Mapping[str, Any], lws: str, index: int, lws_uid: str, statefulsets: Mapping[str, Mapping[str, Any]]
) -> bool:
    """Was the pod made by the StatefulSet of the role its labels claim? A leader (worker
    index 0) by the LWS's leader StatefulSet (named as the LWS, controlled by it); a worker
    by its group's worker StatefulSet (named ``<lws>-<group index>``, controlled by a pod).
    A worker StatefulSet whose ``spec.ordinals.start`` was set to 0 makes a pod that claims
    to be its group's leader: it is no member."""
    sts = statefulsets.get(controller_uid(pod, "StatefulSet"))
    if sts is None:
        return False
    if worker_index(pod) == 0:
        return name_of(sts) == lws and controller_uid(sts, LWS_KIND) == lws_uid
    return name_of(sts) == f"{lws}-{index}" and bool(controller_uid(sts, "Pod"))


def split_members(
    pods: Iterable[Mapping[str, Any]],
    lws_uids: Mapping[tuple[str, str], str],
    statefulsets: Iterable[Mapping[str, Any]],
    sizes: Mapping[tuple[str, str], int] | None = None,
) -> tuple[list[Mapping[str, Any]], list[Stranger]]:
    """(pods to group as before, strangers) of the opted-in pods.

    ``lws_uids`` maps (namespace, LWS name) to the UID of the LWS there now, ``sizes`` to
    its ``size`` (pods per group). A pod that names one of them by its labels and still
    carries the gate is kept only if that LWS made it and its worker index is below the
    size.
    """
    pod_list = list(pods)
    by_uid = {str(meta(p).get("uid")): p for p in pod_list if meta(p).get("uid")}
    sts_by_uid = {str(meta(s).get("uid")): s for s in statefulsets if meta(s).get("uid")}
    kept: list[Mapping[str, Any]] = []
    strangers: list[Stranger] = []
    for pod in pod_list:
        ns = str(meta(pod).get("namespace") or "")
        lws = str(labels(pod).get(LWS_NAME_LABEL) or "")
        uid = lws_uids.get((ns, lws))
        index = group_index(pod)
        if not uid or index is None or not is_gated(pod):
            kept.append(pod)
        elif not _made_by(pod, uid, sts_by_uid, by_uid) or not _in_role(pod, lws, index, uid, sts_by_uid):
            strangers.append(Stranger(ns, lws, index, name_of(pod)))
        elif sizes is not None and (worker := worker_index(pod)) >= (size := sizes.get((ns, lws), 1)):
            strangers.append(Stranger(ns, lws, index, name_of(pod), size=size, worker=worker))
        else:
            kept.append(pod)
    return kept, strangers

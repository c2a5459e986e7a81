"""Does a gated pod ask what its role was admitted with? Checked before its gate is lifted.

Why this exists: a group is admitted from its LWS's templates, and its pods are made by
StatefulSets that a tenant with ``edit`` in the namespace may change: a worker
StatefulSet's template edited to ask 2 GPUs (its revision label kept) makes pods through
the LWS's own chain that ask more than the group's reservation holds. So a gated pod is let
through on its group's admission only when, against its role's template in the LWS:

* it asks no more of any resource than the role does (its containers' effective requests
  and its pod overhead, as the demand counts the overhead of the RuntimeClass it names). A
  resource the role's template does not ask at all is judged only when it is an extended
  resource (a name with a ``/``, as ``nvidia.com/gpu``): a LimitRange of the namespace may
  give a container default CPU and memory requests its template does not have, which a
  pass cannot tell from ones written by hand;
* it runs the RuntimeClass the template names (or none where it names none);
* it has the PriorityClass the template names, where the template names one; where it
  names none, the API server gives the pod the cluster's default class (the one with
  ``globalDefault``), so its priority may be no higher than that class's value (0 without
  one): a class set by hand would let it preempt other tenants' pods;
* it carries no toleration of a closed pool's taint (``core.model.closed``): the gatekeeper adds
  those itself as it lifts the gate, so a gated pod with one had it written by a tenant.

A pod that stays so is its group's own (made by its LWS, within its size), so the group
cannot be whole on its admission while its let-through pods hold their nodes: after
``DEPARTED_GRACE_SECONDS`` (``overdue``) every backend gives the group back, its pods made
again from the LWS's templates (``departed_message`` says so).

Called by every backend's decision (``core.backends``) for the pods of a group whose
admitted demand is the LWS's demand now; pods of a group in the middle of a rolling update
that changes its demand are told apart by their revision (``backends.pools.changed``)
instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from gatekeeper.core.admission.members import Stranger
from gatekeeper.core.kube.objects import EPOCH, as_map, parse_time
from gatekeeper.core.kube.quantity import format_resources
from gatekeeper.core.model.claims import asked_claims
from gatekeeper.core.model.closed import what_opens
from gatekeeper.core.model.demand import GroupDemand, pod_requests
from gatekeeper.core.model.groups import GroupState
from gatekeeper.core.model.lws import GroupPod, templates

__all__ = ["DEPARTED_GRACE_SECONDS", "Departed", "conforming", "departed_message", "departure", "overdue"]

DEPARTED_GRACE_SECONDS = 5
"""How long an admitted group's own gated pod may ask other than its role was admitted with
before the group is given back: long enough for the caches of one pass to catch up with an
LWS changed a moment before its pods (their templates are compared with the LWS as the pass
read it), short enough that the group's bound pods do not sit idle."""


@dataclass(frozen=True)
class Departed:
    """The first of a group's own pods that has not asked what its role was admitted with for
    the grace: ``why`` in words, for ``seconds`` since it was made."""

    pod: str
    why: str
    seconds: int


def departure(
    pod: GroupPod, lws: Mapping[str, Any], demand: GroupDemand, default_priority: int = 0
) -> str | None:
    """Why ``pod`` (gated) may not go through on its group's admission at ``demand``, in
    words that name it; None when it asks what its role was admitted with.
    ``default_priority`` is the value of the cluster's default PriorityClass (0 without one)."""
    if pod.spec is None:
        return None
    leader = pod.worker == 0
    role = demand.pods[0] if leader or len(demand.pods) == 1 else demand.pods[1]
    template = as_map(as_map(templates(lws)[0 if leader else 1]).get("spec"))
    spec = pod.spec
    what = "leader" if leader else "worker"
    claims = asked_claims(spec)
    if claims:
        shown = ", ".join(claims[:5])
        return f"pod {pod.name} asks devices through DRA claims ({shown}), which no admission counts"
    try:
        asks = pod_requests(spec)
    except (ValueError, ArithmeticError) as exc:
        return f"pod {pod.name} has requests that cannot be read ({exc})"
    more = {r: v for r, v in asks.items() if v > role.requests.get(r, 0) and (r in role.requests or "/" in r)}
    if more:
        return (
            f"pod {pod.name} asks {format_resources(asks) or 'nothing'}, more than its role ({what}) "
            f"was admitted with ({format_resources(role.requests) or 'nothing'})"
        )
    runtime, wanted_runtime = spec.get("runtimeClassName") or "", template.get("runtimeClassName") or ""
    if runtime != wanted_runtime:
        return (
            f"pod {pod.name} runs RuntimeClass {runtime or '(none)'} where its LeaderWorkerSet's "
            f"{what} template says {wanted_runtime or '(none)'}"
        )
    wanted_class = template.get("priorityClassName") or ""
    has_class = spec.get("priorityClassName") or ""
    if wanted_class and has_class != wanted_class:
        return (
            f"pod {pod.name} has PriorityClass {has_class or '(none)'} where its LeaderWorkerSet's "
            f"{what} template says {wanted_class}"
        )
    value = spec.get("priority")
    if (
        not wanted_class
        and isinstance(value, int)
        and not isinstance(value, bool)
        and value > default_priority
    ):
        return (
            f"pod {pod.name} has priority {value} (PriorityClass {has_class or '(none)'}) where its "
            f"LeaderWorkerSet's {what} template names no PriorityClass, which gives it at most "
            f"{default_priority} (the cluster's default)"
        )
    opens = what_opens(spec)
    if opens:
        return f"pod {pod.name}: {opens}; remove it from the LeaderWorkerSet's {what} template"
    return None


def conforming(
    state: GroupState,
    pods: Sequence[GroupPod],
    lws: Mapping[str, Any],
    demand: GroupDemand,
    default_priority: int = 0,
) -> tuple[GroupState, list[Stranger]]:
    """``state`` with only the gated pods that ask what their role was admitted with left in
    ``gated``, and the others as strangers (reported, kept gated)."""
    off = [
        (p, why)
        for p in pods
        if p.gated and not p.terminating and (why := departure(p, lws, demand, default_priority))
    ]
    if not off:
        return state, []
    names = {p.name for p, _ in off}
    ns, lws_name, index = state.key.namespace, state.key.name, state.key.index
    strangers = [Stranger(ns, lws_name, index, p.name, worker=p.worker, why=why) for p, why in off]
    return replace(state, gated=tuple(n for n in state.gated if n not in names)), strangers


def overdue(
    pods: Sequence[GroupPod],
    strangers: Sequence[Stranger],
    now: datetime | None,
    grace: int = DEPARTED_GRACE_SECONDS,
) -> Departed | datetime | None:
    """Of a group's ``strangers``, those that are its own pods not as admitted (made by its LWS,
    within its size: ``Stranger.why``): the first that has waited ``grace`` seconds since it
    was made; else the moment that is due (a pass should look again then); None when there
    is none (or no time to judge by). A pod whose time cannot be read is judged from now."""
    whys = {x.pod: x.why for x in strangers if x.why and not x.size}
    if now is None or not whys:
        return None
    made = [(parse_time(p.created), p.name) for p in pods if p.name in whys and p.gated and not p.terminating]
    if not made:
        return None
    first, name = min((now if at == EPOCH else at, n) for at, n in made)
    due_at = first + timedelta(seconds=grace)
    if now < due_at:
        return due_at
    return Departed(name, whys[name], int((now - first).total_seconds()))


def departed_message(index: int, departed: Departed, delay: int) -> str:
    """What a group given back for its own pod not as admitted says, on its record and Event."""
    return (
        f"group {index} was given back, retried in {delay} s: {departed.why}, for "
        f"{departed.seconds} s, so the group cannot be whole on its admission (its StatefulSet's "
        "template edited by hand?); its pods are made again from the LeaderWorkerSet's templates"
    )

"""Does a gated pod ask what its role was admitted with? Checked before its gate is lifted.

Why this exists: a group is admitted from its LWS's templates, and its pods are made by
StatefulSets that a tenant with ``edit`` in the namespace may change: a worker
StatefulSet's template edited to ask 2 GPUs (its revision label kept) makes pods through
the LWS's own chain that ask more than the group's reservation holds. So a gated pod is let
through on its group's admission only when, against its role's template in the LWS:

* it asks no more of any resource than the role does (its containers' effective requests,
  its pod overhead, as the demand counts the overhead of the RuntimeClass it names, and the
  devices its DRA claims ask: the claims made for it, which a template swapped after the
  admission may have made larger; a pod whose claims are not made yet waits for them). A
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
from gatekeeper.core.model.claims import NO_CLAIMS, ClaimBook, Unmade, pod_counts
from gatekeeper.core.model.closed import what_opens
from gatekeeper.core.model.demand import GroupDemand, pod_requests
from gatekeeper.core.model.groups import GroupState
from gatekeeper.core.model.lws import GroupPod, templates

__all__ = [
    "DEPARTED_GRACE_SECONDS",
    "Departed",
    "conforming",
    "departed_message",
    "departure",
    "over_record",
    "overdue",
]

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
    pod: GroupPod,
    lws: Mapping[str, Any],
    demand: GroupDemand,
    default_priority: int = 0,
    claim_book: ClaimBook = NO_CLAIMS,
) -> str | None:
    """Why ``pod`` (gated) may not go through on its group's admission at ``demand``, in
    words that name it; None when it asks what its role was admitted with.
    ``default_priority`` is the value of the cluster's default PriorityClass (0 without one);
    ``claim_book`` what DRA claims ask. Raises ``Unmade`` while its claims are not made."""
    if not pod.gated or pod.spec is None:  # let through already: judged when it was gated
        return None
    leader = pod.worker == 0
    role = demand.pods[0] if leader or len(demand.pods) == 1 else demand.pods[1]
    template = as_map(as_map(templates(lws)[0 if leader else 1]).get("spec"))
    spec = pod.spec
    what = "leader" if leader else "worker"
    try:
        asks = pod_requests(spec)
        if spec.get("resourceClaims"):
            namespace = str(as_map(lws.get("metadata")).get("namespace") or "")
            for resource, count in pod_counts(namespace, spec, pod.claims_made, claim_book).items():
                asks[resource] = asks.get(resource, 0) + count
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
    claim_book: ClaimBook = NO_CLAIMS,
) -> tuple[GroupState, list[Stranger]]:
    """``state`` with only the gated pods that ask what their role was admitted with left in
    ``gated``, and the others as strangers (reported, kept gated); a pod whose DRA claims are
    not made yet is kept gated for now, and is no stranger."""
    off: list[tuple[GroupPod, str]] = []
    unmade: set[str] = set()
    for p in pods:
        if not p.gated or p.terminating:
            continue
        try:
            why = departure(p, lws, demand, default_priority, claim_book)
        except Unmade:
            unmade.add(p.name)
            continue
        if why:
            off.append((p, why))
    if not off and not unmade:
        return state, []
    names = {p.name for p, _ in off} | unmade
    ns, lws_name, index = state.key.namespace, state.key.name, state.key.index
    strangers = [Stranger(ns, lws_name, index, p.name, worker=p.worker, why=why) for p, why in off]
    return replace(state, gated=tuple(n for n in state.gated if n not in names)), strangers


def _asks(pod: GroupPod, namespace: str, claim_book: ClaimBook) -> dict[str, int]:
    """What a pod asks of each resource, its DRA claims as made for it included."""
    spec = pod.spec or {}
    asks = pod_requests(spec)
    if spec.get("resourceClaims"):
        for resource, count in pod_counts(namespace, spec, pod.claims_made, claim_book).items():
            asks[resource] = asks.get(resource, 0) + count
    return asks


def over_record(
    state: GroupState,
    pods: Sequence[GroupPod],
    let_through: Sequence[str],
    recorded: Mapping[str, int],
    claim_book: ClaimBook = NO_CLAIMS,
) -> tuple[list[str], list[Stranger]]:
    """Of the gated pods ``let_through`` on a group's recorded admission while its LWS asks
    another demand (``backends.pools.changed``): those that still may go, and the others as
    strangers. They were made from the LWS's template as it was (its revision), but what they
    ask also comes from objects beside it, a ResourceClaimTemplate swapped, a LimitRange
    changed: so they go only while the group's pods that hold or would hold nodes (let
    through, and those to let through) ask no more of an extended resource than the record
    holds (``recorded``: its total). A pod whose claims are not made yet waits, no stranger;
    while a pod let through holds claims that cannot be read (going, their claim gone from
    the caches), none goes."""
    ns = state.key.namespace
    asked: dict[str, int] = {}
    going: list[str] = []
    unknown = False
    off: list[tuple[GroupPod, str]] = []
    for p in pods:
        if not p.live or (p.gated and p.name not in let_through):
            continue
        try:
            asks = _asks(p, ns, claim_book)
        except Unmade:
            if not p.gated:  # it holds devices no claim read says: nothing goes beside it yet
                unknown = True
            continue  # a gated one's claim comes: it is looked at again then
        except (ValueError, ArithmeticError) as exc:
            if p.gated:
                off.append((p, f"pod {p.name} has requests that cannot be read ({exc})"))
            continue
        if p.gated:
            going.append(p.name)
        for resource, amount in asks.items():
            asked[resource] = asked.get(resource, 0) + amount
    more = {r: v for r, v in asked.items() if "/" in r and v > recorded.get(r, 0)}
    if more:
        why = (
            f"the pods of group {state.key.index} would ask {format_resources(more)}, more than its "
            f"record holds ({format_resources(recorded) or 'nothing'})"
        )
        off.extend((p, f"pod {p.name}: {why}") for p in pods if p.name in going)
        going = []
    elif unknown:
        going = []
    strangers = [
        Stranger(ns, state.key.name, state.key.index, p.name, worker=p.worker, why=why) for p, why in off
    ]
    return going, strangers


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
        "template edited by hand, or a ResourceClaimTemplate its pods name changed since?); its pods "
        "are made again from the LeaderWorkerSet's templates"
    )

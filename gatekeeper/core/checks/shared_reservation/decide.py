"""The shared-reservation Kueue AdmissionCheck: admit a Workload once the hub granted its claim.

Why this exists: a Kueue user whose clusters share one capacity reservation wants Kueue's
own queues and integrations, not the gatekeeper's Pools, and still never two clusters on
half the machines each. A ClusterQueue that requires an AdmissionCheck whose
``spec.controllerName`` is ``lws-gatekeeper.io/shared-reservation`` and whose
``spec.parameters`` name a Reservation on the hub (``apiGroup: lws-gatekeeper.io``,
``kind: Reservation``, ``name: <it>``) admits a Workload only once this check is ``Ready``,
and the check is ``Ready`` only once the hub granted the Workload's claim. The hub decides
(``core.reservation``); this is the member's part, with no I/O. The rules:

* Only Workloads with quota reserved (``QuotaReserved=True`` and ``status.admission``),
  not finished and not being evicted, have a claim. Its demand is the whole Workload's
  (each pod set's count, from ``podSetAssignments`` when Kueue admits part, times its
  pod's requests), its priority the Workload's, its age the Workload's creation time; it
  is named for the Workload's UID and labelled ``SOURCE_LABEL``.
* A Workload without a claim gets one (check ``Pending``: "claimed on the hub"); a
  Pending claim keeps the check ``Pending`` with the hub's numbers in words; a Granted (or
  Orphaned) claim makes it ``Ready``. A check once ``Ready`` is never moved back.
* Every other claim of this check (its Workload finished, evicted, deleted, or no longer
  asking) is deleted: its room goes back to the hub at once. A claim the hub released is
  deleted too, and the Workload, if it still asks, claims again.
* While the hub cannot be reached (or was not read yet), no claim is written and checks
  not yet ``Ready`` stay ``Pending``, saying since when.
* An AdmissionCheck whose parameters do not name a Reservation is marked ``Active=False``
  with why, and its Workloads' checks say so; a check state is written only when it
  changes.

Claims of the ``pools`` backend (no ``SOURCE_LABEL``) are never touched here, nor these
by it. Called by ``controller.checks.shared_reservation``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.core.checks.states import CheckUpdate
from gatekeeper.core.kube.keys import (
    ACTIVE,
    API_GROUP,
    CHECK_PENDING,
    CHECK_READY,
    CHECK_REJECTED,
    CHECK_RETRY,
    EVICTED,
    FINISHED,
    GROUP_INDEX_LABEL,
    LWS_NAME_LABEL,
    QUOTA_RESERVED,
    SHARED_RESERVATION_ACTIVE_REASON,
    SHARED_RESERVATION_CONTROLLER,
    SHARED_RESERVATION_INVALID_REASON,
)
from gatekeeper.core.kube.objects import as_list, as_map, condition, is_true, meta, parse_time
from gatekeeper.core.model.demand import pod_demand
from gatekeeper.core.plugin.decided import Decided
from gatekeeper.core.reservation import (
    SOURCE_CHECK,
    SOURCE_LABEL,
    Claim,
    ClaimState,
    ClaimWrites,
    HubView,
    claim_body,
    group_waits,
    hub_unreachable,
    parse_claim,
    parse_shares,
)

__all__ = ["Activation", "SharedReservationActions", "decide_shared_reservation"]

MAX_WORKLOAD_PODS = 10_000
"""A Workload asking for more pods is not claimed (its check says why): any tenant's Job can
ask for billions, and a claim's demand must stay a number the hub can hold."""
_KUEUE_OWNED = frozenset({CHECK_RETRY, CHECK_REJECTED})


@dataclass(frozen=True)
class Activation:
    """The ``Active`` condition one of our AdmissionChecks must show."""

    name: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True, kw_only=True)
class SharedReservationActions(Decided):
    """What one pass decided: AdmissionChecks to mark, check states to change, claims to
    write on the hub, Workloads Ready and Pending after it, and objects ignored (in words)."""

    activate: tuple[Activation, ...] = ()
    updates: tuple[CheckUpdate, ...] = ()
    claims: ClaimWrites = field(default_factory=ClaimWrites)
    ready: int = 0
    pending: int = 0


def _parameters(check: Mapping[str, Any]) -> tuple[str, str]:
    """(the Reservation its parameters name, "") or ("", what is wrong with them)."""
    params = as_map(as_map(check.get("spec")).get("parameters"))
    name = params.get("name")
    if params.get("apiGroup") != API_GROUP or params.get("kind") != "Reservation":
        return "", (
            f"spec.parameters must name a Reservation on the hub: apiGroup {API_GROUP}, kind "
            f"Reservation, name <the Reservation>"
        )
    if not isinstance(name, str) or not name or len(name) > 253:
        return "", "spec.parameters.name: the name of a Reservation on the hub"
    return name, ""


def _activation(name: str, reservation: str, problem: str) -> Activation:
    if problem:
        return Activation(name, "False", SHARED_RESERVATION_INVALID_REASON, problem)
    message = (
        f"lws-gatekeeper admits a workload once reservation {reservation} on the hub granted "
        f"the workload's whole demand"
    )
    return Activation(name, "True", SHARED_RESERVATION_ACTIVE_REASON, message)


def _shows(check: Mapping[str, Any], want: Activation) -> bool:
    cond = condition(check, ACTIVE)
    return bool(
        cond
        and cond.get("status") == want.status
        and cond.get("reason") == want.reason
        and cond.get("message") == want.message
    )


def _demand(wl: Mapping[str, Any]) -> tuple[dict[str, int], str]:
    """The Workload's whole demand in scheduler units, or ({}, why it cannot be claimed)."""
    status, spec = as_map(wl.get("status")), as_map(wl.get("spec"))
    assigned = {
        str(as_map(a).get("name")): as_map(a)
        for a in as_list(as_map(status.get("admission")).get("podSetAssignments"))
    }
    total: dict[str, int] = {}
    pods = 0
    for raw in as_list(spec.get("podSets")):
        ps = as_map(raw)
        name = str(ps.get("name") or "")
        count = as_map(assigned.get(name)).get("count", ps.get("count", 1))
        if type(count) is not int or count < 0:
            return {}, f"pod set {name[:63]}: count {str(count)[:20]!r} is not a number of pods"
        pods += count
        if pods > MAX_WORKLOAD_PODS:
            return {}, f"more than {MAX_WORKLOAD_PODS} pods: not claimed"
        try:
            pod = pod_demand(name, as_map(as_map(ps.get("template")).get("spec")))
        except (ValueError, ArithmeticError) as err:
            return {}, f"pod set {name[:63]}: {str(err)[:300]}"
        for resource, amount in pod.requests.items():
            total[resource] = total.get(resource, 0) + amount * count
    return total, ""


def _live(wl: Mapping[str, Any]) -> bool:
    """Asking now: quota reserved, not finished, not being evicted."""
    admission = as_map(as_map(wl.get("status")).get("admission"))
    return (
        bool(admission)
        and is_true(wl, QUOTA_RESERVED)
        and not is_true(wl, FINISHED)
        and not is_true(wl, EVICTED)
    )


def _group(labels: Mapping[str, Any]) -> int:
    raw = labels.get(GROUP_INDEX_LABEL)
    return int(raw) if isinstance(raw, str) and raw.isdigit() and len(raw) <= 5 else 0


def decide_shared_reservation(
    workloads: Iterable[Mapping[str, Any]], checks: Iterable[Mapping[str, Any]], hub: HubView
) -> SharedReservationActions:
    """One pass over the Workloads with our checks, this cluster's claims and the hub's view."""
    ours: dict[str, tuple[str, str]] = {}
    activate: list[Activation] = []
    problems: list[str] = []
    for check in checks:
        if as_map(check.get("spec")).get("controllerName") != SHARED_RESERVATION_CONTROLLER:
            continue
        name = str(meta(check).get("name") or "")
        reservation, problem = _parameters(check)
        ours[name] = (reservation, problem)
        if problem:
            problems.append(f"AdmissionCheck {name}: {problem}")
        want = _activation(name, reservation, problem)
        if not _shows(check, want):
            activate.append(want)
    mine: dict[str, list[Claim]] = {}
    stray: list[tuple[str, str]] = []
    for obj in hub.claims:
        labels = as_map(meta(obj).get("labels"))
        if labels.get(SOURCE_LABEL) != SOURCE_CHECK or str(meta(obj).get("uid") or "") in hub.given_back:
            continue
        c = parse_claim(obj)
        if c.cluster != hub.cluster:
            continue
        if isinstance(c, Claim):
            mine.setdefault(c.lws_uid, []).append(c)
        elif c.name:
            stray.append((c.name, c.uid))
    keep: set[str] = set()
    updates: list[CheckUpdate] = []
    create: list[dict[str, Any]] = []
    ready = pending = 0
    for wl in workloads:
        m = meta(wl)
        ns, name, uid = str(m.get("namespace") or ""), str(m.get("name") or ""), str(m.get("uid") or "")
        states = {
            str(as_map(e).get("name")): as_map(e)
            for e in as_list(as_map(wl.get("status")).get("admissionChecks"))
            if as_map(e).get("name") in ours
        }
        if not states or not uid or not _live(wl):
            continue
        for check_name, entry in sorted(states.items()):
            state, said = str(entry.get("state") or ""), str(entry.get("message") or "")
            if state in _KUEUE_OWNED:
                continue
            reservation, problem = ours[check_name]
            claim = next(
                (
                    c
                    for c in mine.get(uid, ())
                    if c.reservation == reservation and c.state is not ClaimState.RELEASED
                ),
                None,
            )
            if claim is not None:
                keep.add(claim.name)
            if state == CHECK_READY:
                ready += 1
                if claim is None and hub.reachable and reservation:
                    body, _ = _claim(wl, reservation, hub.cluster)
                    if body is not None:
                        create.append(body)  # claimed again: the hub counts it once more
                continue
            verdict, message = _verdict(wl, check_name, reservation, problem, claim, hub, create)
            ready += verdict == CHECK_READY
            pending += verdict == CHECK_PENDING
            if (state, said) != (verdict, message):
                updates.append(CheckUpdate(ns, name, check_name, verdict, message))
    delete = sorted(
        {(c.name, c.uid) for group in mine.values() for c in group if c.name not in keep} | set(stray)
    )
    claims = ClaimWrites(tuple(create), tuple(delete)) if hub.reachable else ClaimWrites()
    return SharedReservationActions(
        activate=tuple(activate),
        updates=tuple(updates),
        claims=claims,
        ready=ready,
        pending=pending,
        problems=tuple(problems),
    )


def _claim(wl: Mapping[str, Any], reservation: str, cluster: str) -> tuple[dict[str, Any] | None, str]:
    m = meta(wl)
    demand, why = _demand(wl)
    if why:
        return None, why
    labels = as_map(m.get("labels"))
    priority = as_map(wl.get("spec")).get("priority")
    body = claim_body(
        reservation=reservation,
        cluster=cluster,
        namespace=str(m.get("namespace") or ""),
        lws=str(labels.get(LWS_NAME_LABEL) or m.get("name") or "")[:253],
        lws_uid=str(m.get("uid") or ""),
        group=_group(labels),
        demand=demand,
        priority=priority if type(priority) is int else 0,
        created=parse_time(m.get("creationTimestamp")),
    )
    body["metadata"]["labels"][SOURCE_LABEL] = SOURCE_CHECK
    return body, ""


def _verdict(
    wl: Mapping[str, Any],
    check: str,
    reservation: str,
    problem: str,
    claim: Claim | None,
    hub: HubView,
    create: list[dict[str, Any]],
) -> tuple[str, str]:
    """(state, message) of a check not yet Ready; appends the claim to create, if any."""
    if problem:
        return CHECK_PENDING, f"AdmissionCheck {check}: {problem}"
    subject = f"workload {meta(wl).get('name')}"
    if not hub.reachable:
        return CHECK_PENDING, hub_unreachable(0, reservation, hub.unreachable_since, hub.error).replace(
            "group 0", subject, 1
        )
    if claim is not None and claim.state.holds:
        return CHECK_READY, f"granted by reservation {reservation} on the hub (claim {claim.name})"
    if claim is None:
        body, why = _claim(wl, reservation, hub.cluster)
        if body is None:
            return CHECK_PENDING, f"{subject} cannot be claimed on reservation {reservation}: {why}"
        create.append(body)
        demand = body["spec"]["demandSummary"]
        return (
            CHECK_PENDING,
            f"{subject} claimed {demand} of reservation {reservation} on the hub; waiting for its grant",
        )
    judged = bool(claim.reason)
    shares = parse_shares(hub.reservations.get(reservation)) if judged else None
    return CHECK_PENDING, group_waits(
        0, reservation, claim.demand, shares, claim.reason, claim.message, subject=subject
    )

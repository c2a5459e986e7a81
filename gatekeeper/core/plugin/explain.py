"""Why an LWS is not running, in one answer: what ``lws-gatekeeper why`` says.

Why this exists: the gatekeeper writes each group's state and reason on its record, and
each pool's usage on the Pool (or Kueue on its ClusterQueue), but the question an
operator asks ("why is my LWS not running?") spans them all: the LWS's groups and their
pods, who holds the pool, the queue ahead, and what would have to free up for the next
group. This module puts those objects together without any I/O; ``gatekeeper.why``
reads them from the cluster and prints the answer (text, or JSON for scripts). It
judges nothing afresh: the states and reasons are the gatekeeper's own, from the
records; only the arithmetic of "what must free up" is done here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from gatekeeper.core.admission.queue import WaitingGroup, queue_order
from gatekeeper.core.kube.keys import ADMITTED, POOL_LABEL
from gatekeeper.core.kube.objects import as_map, condition, is_terminating, meta, parse_time
from gatekeeper.core.kube.quantity import format_amount, format_resources, parse_units
from gatekeeper.core.model.group import GroupKey
from gatekeeper.core.model.lws import group_index, is_gated, pool_of, priority, replicas, size
from gatekeeper.core.model.record import held_in, recorded_demand

__all__ = [
    "GroupView",
    "Holder",
    "LwsAnswer",
    "PoolView",
    "PoolViewer",
    "Reader",
    "amounts",
    "by_admission",
    "explain_lws",
    "explain_pool",
    "formatted",
    "holder",
    "is_admitted",
    "lines_for_lws",
    "lines_for_pool",
    "waiting_order",
]

MAX_LISTED = 20
"""Holders and waiting groups listed by name in text (JSON lists them all)."""


@dataclass(frozen=True)
class Holder:
    """A group that holds (or waits for) room in a pool."""

    namespace: str
    lws: str
    group: int
    demand: str
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class PoolView:
    """A pool as the gatekeeper (or Kueue) last reported it."""

    name: str
    kind: str
    """What the pool is to its backend (``Pool``, ``ClusterQueue``, ``Queue``, ...) or ``missing``."""
    quota: Mapping[str, str] = field(default_factory=dict)
    used: Mapping[str, str] = field(default_factory=dict)
    free: Mapping[str, str] = field(default_factory=dict)
    admitted: tuple[Holder, ...] = ()
    """Groups that hold room, oldest admission first."""
    waiting: tuple[Holder, ...] = ()
    """Groups that wait, in the order the gatekeeper serves them (if ``ordered``)."""
    ordered: bool = True
    """``waiting`` is in the order the groups are served (else by name: the backend's own
    queue decides, and its order is not read)."""
    not_shown: tuple[str, ...] = ()
    """What the reader's rights did not let ``why`` read (as ``LwsAnswer.not_shown``)."""


@dataclass(frozen=True)
class GroupView:
    """One group of the LWS: its state, the gatekeeper's reason and words, its pods."""

    group: int
    state: str
    """``admitted``, ``waiting`` or ``unrecorded`` (the gatekeeper has not written its record yet)."""
    reason: str
    message: str
    demand: str
    since: str
    pods: Mapping[str, int]
    """running, bound (not running yet), pending (ungated, not bound), gated, terminating."""


@dataclass(frozen=True)
class LwsAnswer:
    """Everything ``why`` says about one LWS."""

    namespace: str
    name: str
    pool: str
    replicas: int
    size: int
    groups: tuple[GroupView, ...]
    pool_view: PoolView | None
    next_group: str
    """What would have to free up for this LWS's next waiting group (empty: none waits)."""
    not_shown: tuple[str, ...] = ()
    """What the reader's rights did not let ``why`` read (a tenant's: the Pool, other
    namespaces' groups), each with the API server's words naming the permission."""

    @property
    def waiting(self) -> bool:
        """Some group of the LWS is not admitted (yet)."""
        return any(g.state != "admitted" for g in self.groups)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Reader(Protocol):
    """What ``why`` reads with, on the user's own kubeconfig (list and get, nothing written):
    a backend's pool viewer asks through it for the objects it shows, and ``gatekeeper.why``
    gives it one on its client, so no client lives here.

    ``kind`` is a resource as kubectl names it (``clusterqueues.kueue.x-k8s.io``); an API the
    cluster does not serve reads as nothing."""

    async def one(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None: ...

    async def every(self, kind: str, **selectors: Any) -> list[dict[str, Any]]:
        """Every object of ``kind`` in every namespace (``selectors`` as kr8s takes them)."""
        ...

    async def opted_in(self, pool: str) -> list[dict[str, Any]]:
        """The LWSs, in every namespace, whose pool label is ``pool``."""
        ...

    async def classes(self) -> Mapping[str, int]:
        """The PriorityClasses' values by name."""
        ...


PoolViewer = Callable[[Reader, str, str | None, Sequence[Mapping[str, Any]]], Awaitable["PoolView | None"]]
"""``(read, pool, namespace, records)``: a backend's view of the pool an LWS's label names
(``namespace`` is the LWS's; None when ``why pool`` asks by name alone), or None when that
name is no pool of this backend's. ``records`` are every namespace's GroupAdmissions."""


def amounts(raw: object) -> dict[str, int]:
    out: dict[str, int] = {}
    for resource, value in as_map(raw).items():
        try:
            out[str(resource)] = parse_units(str(resource), value)
        except (ValueError, TypeError, ArithmeticError):
            continue
    return out


def _summary(raw: object) -> str:
    return format_resources(amounts(raw))


def holder(record: Mapping[str, Any]) -> Holder:
    spec, status = as_map(record.get("spec")), as_map(record.get("status"))
    said = condition(record, ADMITTED)
    index = spec.get("groupIndex")
    return Holder(
        namespace=str(meta(record).get("namespace") or ""),
        lws=str(spec.get("leaderWorkerSet") or ""),
        group=index if type(index) is int else -1,
        demand=str(status.get("demandSummary") or "") or format_resources(recorded_demand(record).total),
        reason=str(said.get("reason") or ""),
        message=str(said.get("message") or ""),
    )


def is_admitted(record: Mapping[str, Any]) -> bool:
    return condition(record, ADMITTED).get("status") == "True"


def by_admission(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Admitted records, oldest admission first."""
    return sorted(
        records,
        key=lambda r: (
            str(as_map(r.get("status")).get("admittedAt") or ""),
            holder(r).namespace,
            holder(r).lws,
        ),
    )


def waiting_order(
    records: Iterable[Mapping[str, Any]],
    lwss: Mapping[tuple[str, str], Mapping[str, Any]],
    classes: Mapping[str, int],
) -> list[Mapping[str, Any]]:
    """Waiting records in the order the planner serves their groups (``core.admission.queue``)."""
    keyed: list[tuple[tuple[int, Any, str, str, int], Mapping[str, Any]]] = []
    for record in records:
        h = holder(record)
        lws = lwss.get((h.namespace, h.lws))
        created = parse_time(meta(lws or record).get("creationTimestamp"))
        order = priority(lws, classes).order if lws is not None else 0
        group = WaitingGroup(
            GroupKey(h.namespace, h.lws, h.group), "", recorded_demand(record), created, order
        )
        keyed.append((queue_order(group), record))
    return [r for _, r in sorted(keyed, key=lambda kr: kr[0])]


def explain_pool(
    pool: Mapping[str, Any] | None,
    name: str,
    records: Iterable[Mapping[str, Any]],
    lwss: Iterable[Mapping[str, Any]] = (),
    classes: Mapping[str, int] | None = None,
) -> PoolView:
    """The ``pools`` backend's pool ``name``: its reported usage, who holds it, who waits.

    ``records`` are every namespace's records: the admitted ones that hold its room (its own,
    and those of its cohort's other pools that borrow it, ``status.borrowedFrom``) and the
    waiting ones whose ``status.pool`` is ``name`` count. ``lwss`` (the opted-in LWSs) give the
    waiting groups their queue order.
    """
    live = [r for r in records if not is_terminating(r)]
    by_key = {(str(meta(o).get("namespace") or ""), str(meta(o).get("name") or "")): o for o in lwss}
    held = by_admission(r for r in live if is_admitted(r) and _room_of(r) == name)
    mine = (r for r in live if not is_admitted(r) and as_map(r.get("status")).get("pool") == name)
    waiting = waiting_order(mine, by_key, classes or {})
    if pool is None:
        return PoolView(
            name, "missing", admitted=tuple(map(holder, held)), waiting=tuple(map(holder, waiting))
        )
    status = as_map(pool.get("status"))
    quota = as_map(status.get("quota")) or as_map(as_map(pool.get("spec")).get("quota"))
    return PoolView(
        name,
        "Pool",
        quota={str(k): str(v) for k, v in quota.items()},
        used={str(k): str(v) for k, v in as_map(status.get("used")).items()},
        free={str(k): str(v) for k, v in as_map(status.get("free")).items()},
        admitted=tuple(map(holder, held)),
        waiting=tuple(map(holder, waiting)),
    )


def _room_of(record: Mapping[str, Any]) -> str:
    """The pool whose room an admitted record's group holds: its lender's, else its own."""
    pool, lender = held_in(record, "")
    return lender or pool


def formatted(amounts: Mapping[str, int]) -> dict[str, str]:
    return {k: format_amount(k, v) for k, v in sorted(amounts.items())}


def _pod_counts(pods: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    counts = {"running": 0, "bound": 0, "pending": 0, "gated": 0, "terminating": 0}
    for pod in pods:
        if is_terminating(pod):
            counts["terminating"] += 1
        elif is_gated(pod):
            counts["gated"] += 1
        elif as_map(pod.get("status")).get("phase") == "Running":
            counts["running"] += 1
        elif as_map(pod.get("spec")).get("nodeName"):
            counts["bound"] += 1
        else:
            counts["pending"] += 1
    return {k: v for k, v in counts.items() if v}


def _next_group(namespace: str, lws: str, group: GroupView, view: PoolView | None) -> str:
    """What must free up before ``group`` (the LWS's first waiting group) can go."""
    if view is None or view.kind == "missing":
        return f"group {group.group} waits: {group.message or group.reason}"
    need = amounts(_demand_map(group.demand))
    limited = amounts(view.quota)
    # Only what the group asks and the pool limits: the rest is not why it waits.
    free = {r: amounts(view.free).get(r, 0) for r in need if r in limited}
    short = {r: n - free[r] for r, n in need.items() if r in free and n > free[r]}
    ahead = next(
        (
            i
            for i, w in enumerate(view.waiting)
            if (w.namespace, w.lws, w.group) == (namespace, lws, group.group)
        ),
        None,
    )
    queue = f"; {_count(ahead, 'waiting group')} ahead of it" if ahead else ""
    if short:
        return (
            f"group {group.group} needs {group.demand}; {view.kind.lower()} {view.name} has "
            f"{format_resources(free) or 'nothing'} free: {format_resources(short)} must be freed "
            f"(a group that holds it scales away or ends, or the quota grows){queue}"
        )
    return (
        f"group {group.group} needs {group.demand}, within what {view.kind.lower()} {view.name} has free "
        f"({format_resources(free) or 'nothing'}); it waits for: {group.message or group.reason}{queue}"
    )


def _demand_map(summary: str) -> dict[str, str]:
    """``"2 cpu, 2 nvidia.com/gpu"`` -> ``{"cpu": "2", "nvidia.com/gpu": "2"}``."""
    out: dict[str, str] = {}
    for part in summary.split(","):
        amount, _, resource = part.strip().partition(" ")
        if resource:
            out[resource] = amount
    return out


def explain_lws(
    lws: Mapping[str, Any],
    records: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    pool_view: PoolView | None,
) -> LwsAnswer:
    """One LWS: each group's state and the gatekeeper's words, and what its next group needs.

    ``records`` and ``pods`` may hold other LWSs' too: only this LWS's count (by name and,
    for records, UID).
    """
    m = meta(lws)
    ns, name, uid = str(m.get("namespace") or ""), str(m.get("name") or ""), str(m.get("uid") or "")
    mine: dict[int, Mapping[str, Any]] = {}
    for rec in records:
        spec = as_map(rec.get("spec"))
        index = spec.get("groupIndex")
        if (
            spec.get("leaderWorkerSet") == name
            and spec.get("leaderWorkerSetUID") in (None, uid)
            and type(index) is int
            and str(meta(rec).get("namespace") or "") == ns
        ):
            mine[index] = rec
    pods_of: dict[int, list[Mapping[str, Any]]] = {}
    for pod in pods:
        index = group_index(pod)
        lbl = as_map(meta(pod).get("labels"))
        if index is not None and lbl.get("leaderworkerset.sigs.k8s.io/name") == name:
            pods_of.setdefault(index, []).append(pod)
    try:
        count = replicas(lws)
    except ValueError:
        count = 0  # unreadable or too many: the records say so (InvalidSpec); list what exists
    indices = sorted(set(range(count)) | set(mine) | set(pods_of))
    groups: list[GroupView] = []
    for index in indices:
        record: Mapping[str, Any] | None = mine.get(index)
        said = condition(record, ADMITTED)
        if record is None:
            state, reason, message, demand, since = "unrecorded", "", "no record yet", "", ""
        else:
            h = holder(record)
            state = "admitted" if is_admitted(record) else "waiting"
            reason, message, demand = h.reason, h.message, h.demand
            since = str(said.get("lastTransitionTime") or "")
        groups.append(
            GroupView(index, state, reason, message, demand, since, _pod_counts(pods_of.get(index, [])))
        )
    first_waiting = next((g for g in groups if g.state == "waiting"), None)
    return LwsAnswer(
        namespace=ns,
        name=name,
        pool=pool_of(lws),
        replicas=count,
        size=size(lws),
        groups=tuple(groups),
        pool_view=pool_view,
        next_group=_next_group(ns, name, first_waiting, pool_view) if first_waiting is not None else "",
    )


def _resources(values: Mapping[str, str]) -> str:
    return ", ".join(f"{v} {k}" for k, v in sorted(values.items())) or "-"


def _listed(holders: Sequence[Holder], words: bool) -> list[str]:
    out = []
    for h in holders[:MAX_LISTED]:
        line = f"    {h.namespace}/{h.lws} group {h.group}: {h.demand or '?'}"
        out.append(f"{line} ({h.reason}: {h.message})" if words and h.message else line)
    if len(holders) > MAX_LISTED:
        out.append(f"    ... and {len(holders) - MAX_LISTED} more (-o json lists them all)")
    return out


def lines_for_pool(
    view: PoolView, *, kinds: Sequence[str] = ("Pool",), waiting_words: bool = True
) -> list[str]:
    """A pool's usage, the groups that hold it and those that wait, as text lines; ``kinds``
    name what was looked for, for a pool that is not there."""
    if view.kind == "missing":
        return [f"pool {view.name}: not found (no {_either(kinds)} of that name)"]
    out = [
        f"{view.kind} {view.name}: quota {_resources(view.quota)}; used {_resources(view.used)}; "
        f"free {_resources(view.free)}; {len(view.admitted)} admitted, {len(view.waiting)} waiting"
    ]
    if view.admitted:
        out.append("  held by:")
        out.extend(_listed(view.admitted, False))
    if view.waiting:
        out.append("  waiting, in the order they are served:" if view.ordered else "  waiting:")
        out.extend(_listed(view.waiting, waiting_words))
    return out


def _either(words: Sequence[str]) -> str:
    return words[0] if len(words) < 2 else f"{', '.join(words[:-1])} or {words[-1]}"


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _since(value: str) -> str:
    return f" since {value}" if value else ""


def lines_for_lws(answer: LwsAnswer, *, kinds: Sequence[str] = ("Pool",)) -> list[str]:
    """The whole answer for an LWS as text lines (``kinds``: as ``lines_for_pool`` takes them)."""
    out = [
        f"LeaderWorkerSet {answer.namespace}/{answer.name}: {_count(answer.replicas, 'group')} of "
        f"{_count(answer.size, 'pod')}, {POOL_LABEL}={answer.pool or '(none)'}"
    ]
    for g in answer.groups:
        pods = ", ".join(f"{n} {k}" for k, n in g.pods.items()) or "no pods"
        head = f"  group {g.group}: {g.state}{' (' + g.reason + ')' if g.reason else ''}{_since(g.since)}"
        out.append(f"{head}; {g.demand or 'demand unknown'}; {pods}")
        if g.message:
            out.append(f"    {g.message}")
    if answer.pool_view is not None:
        out.extend(lines_for_pool(answer.pool_view, kinds=kinds, waiting_words=False))
    if answer.next_group:
        out.append(f"next: {answer.next_group}")
    elif answer.groups and all(g.state == "admitted" for g in answer.groups):
        out.append("every group is admitted")
    return out

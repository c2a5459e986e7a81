"""The groups of an opted-in LWS, as every backend sees them before it decides anything.

Why this exists: which groups an LWS has, which of its pods belong to each, which record is
each group's and whether a group is staying or on its way out are facts, not decisions of
one backend; both backends (and any to come) enumerate groups with ``lws_groups``:

* An opted-in LWS (label ``lws-gatekeeper.io/pool``) has groups ``0..replicas-1``, plus any
  index that still has a pod not in phase Succeeded/Failed (surge, or a scale-down in
  progress; a terminating pod still counts, it still holds its node).
* A group is *staying* when it is wanted (index below ``replicas``, or a surge group with a
  live pod) and its LWS is not being deleted; otherwise it is leaving.
* Its record is the one named by ``record_name``, unless that record's spec names another
  LWS UID (an earlier LWS of the same name): then it has none.
* When ``spec.replicas`` cannot be read, which groups are wanted is unknown: every group
  gets an ``InvalidSpec`` demand, and the backend names the indices that hold something
  (admitted records, or Workloads), so they are kept.

A group's demand is computed once per LWS generation, LimitRange defaults of its namespace,
overhead of the RuntimeClasses it names and version of the ResourceClaimTemplates it names:
``DemandMemo`` remembers it, owned by the loop that runs the passes (the spec cannot change
without a new generation). What a pass reads of each pod (``GroupPod``: its group, gate,
node, revision) is read once per pod version: ``PodReads``, which the ``DemandMemo`` holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gatekeeper.core.kube.keys import LWS_NAME_LABEL
from gatekeeper.core.kube.objects import as_list, as_map, is_terminating, meta
from gatekeeper.core.model.claims import NO_CLAIMS, ClaimBook
from gatekeeper.core.model.demand import GroupDemand, group_demand
from gatekeeper.core.model.group import GroupKey, InvalidDemand
from gatekeeper.core.model.limits import container_defaults
from gatekeeper.core.model.lws import (
    GroupPod,
    Subgroups,
    TopologyRequest,
    exclusive_topology,
    gang_of,
    gang_size,
    group_index,
    pool_of,
    replicas,
    subgroups,
    templates,
    topology_request,
)
from gatekeeper.core.model.overhead import runtime_overheads
from gatekeeper.core.model.record import record_belongs, record_name

__all__ = ["DemandMemo", "GroupState", "LwsGroup", "PodReads", "PodsByGroup", "lws_groups", "pods_by_group"]

PodsByGroup = Mapping[tuple[str, str], Mapping[int, Sequence[GroupPod]]]
"""Pods per (namespace, LWS name) and group index."""


@dataclass(frozen=True)
class GroupState:
    """What the pass found about one group, for its record and events."""

    key: GroupKey
    lws_uid: str
    pool: str
    record: str
    demand: GroupDemand | InvalidDemand
    pods: tuple[str, ...]
    gated: tuple[str, ...]
    revision: str = ""
    """The LWS template revision of the group's pods (its leader's when present)."""
    exclusive: str = ""
    """The node label key of its LWS's exclusive placement (one group to a domain), or ""."""
    topology: TopologyRequest | None = None
    """The topology level its LWS asks its groups to be placed in, or None."""
    subgroups: Subgroups | None = None
    """Its LWS's subgroup exclusive placement (each subgroup alone in a domain), or None."""
    gang: str = ""
    """The unit it is admitted in with groups of other LWSs (``core.model.lws.gang_of``), or ""."""
    gang_size: int = 0
    """How many LWSs its gang has, as its LWS says (``core.model.lws.gang_size``); 0: not said."""


@dataclass(frozen=True)
class LwsGroup:
    """One group of an LWS as every backend sees it, before it decides anything."""

    state: GroupState
    members: Sequence[GroupPod]
    """Every pod with the group's index, terminating ones included."""
    present: Sequence[GroupPod]
    """Those not terminating, by name."""
    staying: bool
    """Wanted (index below ``replicas``, or a surge group with a live pod) and its LWS not
    being deleted; a group that is not staying is on its way out."""
    record: Mapping[str, Any] | None
    """Its record, unless there is none or it belongs to an earlier LWS of that name."""


class DemandMemo:
    """Demands already computed, by LWS (uid, generation), its namespace's LimitRange
    defaults, the overhead of the RuntimeClasses its templates name and the versions of the
    ResourceClaimTemplates they name (with the DeviceClasses), bounded.

    Owned by a loop, so that nothing in the core is global state: a pass reads every
    opted-in LWS, and computing a demand from its templates is most of that. Each pass
    first gives it what the API server's admission adds to a pod (``use_cluster``).
    """

    def __init__(self, limit: int = 20_000) -> None:
        self.limit = limit
        self._seen: dict[tuple[Any, ...], GroupDemand | InvalidDemand] = {}
        self._defaults: dict[str, dict[str, Fraction]] = {}
        self._overheads: dict[str, dict[str, str]] = {}
        self._claims = NO_CLAIMS
        self.pods = PodReads()
        """What the passes read of each pod version (``pods_by_group``)."""

    def __len__(self) -> int:
        return len(self._seen)

    def use_cluster(
        self,
        limit_ranges: Iterable[Mapping[str, Any]] = (),
        runtime_classes: Iterable[Mapping[str, Any]] = (),
        claim_book: ClaimBook = NO_CLAIMS,
    ) -> None:
        """The LimitRanges whose container defaults, the RuntimeClasses whose pod overhead,
        and what DRA claims ask (``core.model.claims``), the demands from now on include."""
        self._defaults = container_defaults(limit_ranges)
        self._overheads = runtime_overheads(runtime_classes)
        self._claims = claim_book

    def demand(self, lws: Mapping[str, Any]) -> GroupDemand | InvalidDemand:
        """The demand of one group of ``lws``, or why it cannot be computed."""
        m = meta(lws)
        uid, generation = m.get("uid"), m.get("generation")
        given = self._defaults.get(str(m.get("namespace") or ""), {})
        key = (
            (uid, generation, tuple(sorted(given.items())), self._overhead_key(lws), self._claims_key(lws))
            if isinstance(uid, str) and uid and type(generation) is int
            else None
        )
        if key is not None and key in self._seen:
            return self._seen[key]
        try:
            demand: GroupDemand | InvalidDemand = group_demand(
                lws,
                container_defaults=given,
                runtime_class_overhead=self._overheads,
                claim_book=self._claims,
            )
        except (ValueError, ArithmeticError) as exc:  # one LWS's numbers never stop the pass
            demand = InvalidDemand(str(exc))
        if key is not None:
            if len(self._seen) >= self.limit:
                self._seen.clear()  # old generations pile up; starting afresh is cheap
            self._seen[key] = demand
        return demand

    def _overhead_key(self, lws: Mapping[str, Any]) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
        """The overhead of each RuntimeClass the templates name (none: ())."""
        if not self._overheads:
            return ()
        named = {str(as_map(t.get("spec")).get("runtimeClassName") or "") for t in templates(lws)}
        known = sorted(n for n in named if n in self._overheads)
        return tuple((n, tuple(sorted(self._overheads[n].items()))) for n in known)

    def _claims_key(self, lws: Mapping[str, Any]) -> tuple[Any, ...]:
        """The ResourceClaimTemplates the templates name, as ``ClaimBook.template_key``."""
        named = [
            str(as_map(c).get("resourceClaimTemplateName") or "")
            for t in templates(lws)
            for c in as_list(as_map(t.get("spec")).get("resourceClaims"))
        ]
        if not named:
            return ()
        return self._claims.template_key(str(meta(lws).get("namespace") or ""), named)


_Read = tuple[tuple[str, str], int, GroupPod] | None
"""A pod as ``pods_by_group`` reads it: its (namespace, LWS), group index and ``GroupPod``;
None when it is not ours to count."""


def _read_pod(pod: Mapping[str, Any]) -> _Read:
    m = meta(pod)
    pod_labels = as_map(m.get("labels"))
    index = group_index(pod)
    pod_name = m.get("name")
    if LWS_NAME_LABEL not in pod_labels or index is None or not isinstance(pod_name, str) or not pod_name:
        return None
    owner = (str(m.get("namespace") or ""), str(pod_labels[LWS_NAME_LABEL]))
    return owner, index, GroupPod.read(pod, pod_name)


class PodReads:
    """Pods as ``pods_by_group`` read them, by (uid, resourceVersion), from one pass to the
    next: a pod is read again only when the API server gave it a new version. Holds the pods
    of the last pass only (one entry a pod). Pods without a uid or a version are read every
    time. A pass reads every opted-in pod, and most have not changed since the last one."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], _Read] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def read(self, pods: Iterable[Mapping[str, Any]]) -> list[_Read]:
        seen: dict[tuple[str, str], _Read] = {}
        out: list[_Read] = []
        for pod in pods:
            m = meta(pod)
            uid, version = m.get("uid"), m.get("resourceVersion")
            if not (isinstance(uid, str) and uid and isinstance(version, str) and version):
                out.append(_read_pod(pod))
                continue
            key = (uid, version)
            one = self._seen[key] if key in self._seen else _read_pod(pod)
            seen[key] = one
            out.append(one)
        self._seen = seen
        return out


def pods_by_group(
    pods: Iterable[Mapping[str, Any]], reads: PodReads | None = None
) -> dict[tuple[str, str], dict[int, list[GroupPod]]]:
    """Pods per (namespace, LWS) and group index. Pods without the LWS labels (or a sane
    index) are not ours to count. ``reads`` remembers what was read of each pod version."""
    found: dict[tuple[str, str], dict[int, list[GroupPod]]] = {}
    for one in reads.read(pods) if reads is not None else map(_read_pod, pods):
        if one is not None:
            owner, index, pod = one
            found.setdefault(owner, {}).setdefault(index, []).append(pod)
    return found


def revision_of(pods: Sequence[GroupPod]) -> str:
    """The template revision of a group: its leader's, else its first pod's that has one."""
    for pod in sorted(pods, key=lambda p: p.worker):
        if pod.revision:
            return pod.revision
    return ""


def lws_groups(
    ns: str,
    name: str,
    lws: Mapping[str, Any],
    pods_of: PodsByGroup,
    records: Mapping[tuple[str, str], Mapping[str, Any]],
    held_when_unreadable: Callable[[str, str, str], set[int]],
    memo: DemandMemo,
    revision: str = "",
) -> list[LwsGroup]:
    """The groups of one LWS: ``0..replicas-1`` plus any index that still has a live pod.

    When ``spec.replicas`` cannot be read, every group gets an ``InvalidSpec`` demand and
    ``held_when_unreadable(ns, name, uid)`` names the indices that hold something. A group
    whose pods say no template revision has ``revision`` (``owned.leader_template_revision``).
    """
    uid = str(meta(lws).get("uid") or "")
    deleting = is_terminating(lws)
    demand = memo.demand(lws)
    pool = pool_of(lws)
    by_index = pods_of.get((ns, name), {})
    indices = {i for i, ps in by_index.items() if any(p.live for p in ps)}
    try:
        wanted = replicas(lws)
    except ValueError as exc:
        wanted = 0
        demand = InvalidDemand(f"LeaderWorkerSet {ns}/{name}: {exc}")
        indices |= held_when_unreadable(ns, name, uid)
    exclusive: str = ""
    topology: TopologyRequest | None = None
    parts: Subgroups | None = None
    size_of_gang = 0
    try:
        exclusive = exclusive_topology(lws)
        topology = topology_request(lws)
        parts = subgroups(lws)
        gang_of(lws, 0)
        size_of_gang = gang_size(lws)
    except ValueError as exc:
        if not isinstance(demand, InvalidDemand):
            demand = InvalidDemand(f"LeaderWorkerSet {ns}/{name}: {exc}")
    if not deleting:
        indices |= set(range(wanted))
    groups: list[LwsGroup] = []
    for index in sorted(indices):
        rname = record_name(name, uid, index)
        members = by_index.get(index, [])
        present = sorted((p for p in members if not p.terminating), key=lambda p: p.name)
        record = records.get((ns, rname))
        if record is not None and not record_belongs(record, name, uid, index):
            record = None  # an earlier incarnation's record: released, then created afresh
        state = GroupState(
            key=GroupKey(ns, name, index),
            lws_uid=uid,
            pool=pool,
            record=rname,
            demand=demand,
            pods=tuple(p.name for p in present),
            gated=tuple(p.name for p in present if p.gated),
            revision=revision_of([p for p in present if p.live]) or revision,
            exclusive=exclusive,
            topology=topology,
            subgroups=parts,
            gang=_gang(lws, index),
            gang_size=size_of_gang,
        )
        staying = not deleting and (index < wanted or any(p.live for p in present))
        groups.append(LwsGroup(state, members, present, staying, record))
    return groups


def _gang(lws: Mapping[str, Any], index: int) -> str:
    """``gang_of``, "" when its labels cannot be read (the LWS's demand says why, ``lws_groups``)."""
    try:
        return gang_of(lws, index)
    except ValueError:
        return ""

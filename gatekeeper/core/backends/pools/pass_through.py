"""Which groups of the ``pools`` backend the webhook may let new pods through for.

Why this exists: the ``pools`` backend admits a group from its LWS's spec, often before
the group's pods exist; the webhook then makes the group's new pods without the gate
(``core.admission.pass_through``: which pods, and what they are made with). This says
which groups, from the records: a group whose record says ``Admitted`` (reason
``Admitted``: not a changed template, not a stranger's claim, not a demand that cannot be
computed) into a Pool that can be read, at the demand its LWS asks now, is in the table,
its pods steered with the Pool's node selector and tolerations (those of the Pool of its
cohort it borrows from, ``status.borrowedFrom``, when it does). A group is released only
once none of its pods is left, when the LWS is not asking for it any more; a group given
back is taken out of the table before its record is written (``controller/backends/pools``).
The records are taken as this leader last wrote them while the informer lags (``as_known``).

Called by ``controller/backends/pools.py`` (``index``, then ``Index.entry`` for each record
after a pass and for each admission as it is answered).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gatekeeper.core.admission.pass_through import Owners, Passable, owners
from gatekeeper.core.kube.keys import ADMITTED
from gatekeeper.core.kube.objects import as_map, condition, is_terminating, meta, object_key
from gatekeeper.core.kube.quantity import format_amount
from gatekeeper.core.model.charge import charge_toleration
from gatekeeper.core.model.demand import GroupDemand
from gatekeeper.core.model.lws import replicas
from gatekeeper.core.model.lws import size as lws_size
from gatekeeper.core.model.pool import Pool
from gatekeeper.core.model.record import held_in, recorded_domain

__all__ = [
    "Index",
    "Written",
    "as_known",
    "build",
    "index",
    "written_after",
]


@dataclass(frozen=True)
class Index:
    """What a pass read, indexed for ``entry``: made once per pass (``index``)."""

    lwss: Mapping[tuple[str, str], Mapping[str, Any]]
    pools: Mapping[str, Pool]
    owners: Owners
    demand_of: Callable[[Mapping[str, Any]], object]

    def entry(self, record: Mapping[str, Any]) -> tuple[tuple[str, str, int], Passable] | None:
        """The table's entry for ``record``, if its group holds its admission as it should."""
        said = condition(record, ADMITTED)
        if said.get("status") != "True" or said.get("reason") != ADMITTED or is_terminating(record):
            return None
        ns = str(meta(record).get("namespace") or "")
        spec, status = as_map(record.get("spec")), as_map(record.get("status"))
        name, index, uid = spec.get("leaderWorkerSet"), spec.get("groupIndex"), spec.get("leaderWorkerSetUID")
        lws = self.lwss.get((ns, str(name)))
        own, lender = held_in(record, "")
        pool = self.pools.get(lender or own)  # its pods run on the lender's nodes when it borrows
        if lws is None or pool is None or type(index) is not int or uid != meta(lws).get("uid"):
            return None
        try:
            if index >= replicas(lws):
                return None  # leaving: its new pods (if any) wait for the pass
        except ValueError:
            return None
        demand = self.demand_of(lws)
        sts_uid = self.owners.leader_sts.get((ns, str(uid)))
        if not isinstance(demand, GroupDemand) or _total(status) != _total_of(demand):
            return None
        return (ns, str(name), index), Passable(
            lws_uid=str(uid),
            leader_sts_uid=sts_uid or "",
            leader_pod_uid=self.owners.leader_pods.get((ns, str(name), index), ""),
            leader=demand.pods[0].requests,
            worker=demand.pods[1].requests if len(demand.pods) > 1 else {},
            size=lws_size(lws),
            node_selector={**pool.node_selector, **dict(recorded_domain(record))},
            tolerations=(*pool.tolerations, charge_toleration(str(uid), index)),
        )


def index(
    lwss: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    statefulsets: Iterable[Mapping[str, Any]],
    pools: Iterable[Pool],
    demand_of: Callable[[Mapping[str, Any]], object],
) -> Index:
    """Index what a pass read (``demand_of``: the LWS's group demand; ``pools``: the readable
    Pools, an unreadable one admits nothing new, its groups' pods wait for the pass)."""
    pool_by_name: dict[str, Pool] = {}
    for parsed in pools:
        pool_by_name.setdefault(parsed.name, parsed)
    lws_by_key = {(str(meta(o).get("namespace") or ""), str(meta(o).get("name") or "")): o for o in lwss}
    return Index(lws_by_key, pool_by_name, owners(pods, statefulsets), demand_of)


def build(
    lwss: Iterable[Mapping[str, Any]],
    records: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    statefulsets: Iterable[Mapping[str, Any]],
    pools: Iterable[Pool],
    demand_of: Callable[[Mapping[str, Any]], object],
) -> dict[tuple[str, str, int], Passable]:
    """The whole table after a pass, from what the pass read."""
    idx = index(lwss, pods, statefulsets, pools, demand_of)
    return dict(e for e in map(idx.entry, records) if e is not None)


@dataclass(frozen=True)
class Written:
    """A record as this leader's last write of it was answered, kept until the informer
    shows that version (or any other one than the version the write was made on)."""

    before: str
    """The resourceVersion the write was made on ("" for the write that made the record)."""
    after: Mapping[str, Any]
    """The record as the API server answered the write."""
    at: float
    """When it was answered (the controller's monotonic clock)."""
    made_unseen: bool = False
    """This leader made the record and the informer has not shown it yet."""


def written_after(
    previous: Written | None, guard: str | None, answer: Mapping[str, Any], at: float, *, made: bool = False
) -> Written:
    """The ``Written`` of a record after one more write of it was answered: made (``made``),
    or written on the version ``guard`` (None: on the version this leader wrote last)."""
    if made:
        return Written("", answer, at, made_unseen=True)
    if guard is not None:
        before = guard
    else:
        before = str(meta(previous.after).get("resourceVersion") or "") if previous is not None else ""
    return Written(before, answer, at, made_unseen=previous.made_unseen if previous else False)


def as_known(
    records: Iterable[Mapping[str, Any]],
    written: Mapping[tuple[str, str], Written],
    now: float,
    max_age: float = 60.0,
) -> tuple[list[Mapping[str, Any]], dict[tuple[str, str], Written]]:
    """The records as this leader knows them, and the writes the informer does not show yet.

    The informer's copy of a record lags this leader's own writes by a watch event. A table
    built from it alone left out, for a pass, a group the last pass admitted whose watch
    event had not come yet, and put back a group just given back. So a record written by
    this leader is taken as written while the informer still shows it at the version the
    write was made on, or does not show one it made; any other version of it (or its
    absence, once seen) is newer, and wins.
    """
    by = {key: record for record in records if (key := object_key(record)) is not None}
    still: dict[tuple[str, str], Written] = {}
    for key, w in written.items():
        if now - w.at > max_age:
            continue
        seen = by.get(key)
        if seen is None:
            if w.made_unseen:
                by[key], still[key] = w.after, w
            continue
        version = str(meta(seen).get("resourceVersion") or "")
        if w.before and version == w.before:
            by[key], still[key] = w.after, Written(w.before, w.after, w.at)
    return list(by.values()), still


def _total(status: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in as_map(status.get("demand")).items() if v is not None}


def _total_of(demand: GroupDemand) -> dict[str, str]:
    return {r: format_amount(r, v) for r, v in demand.total.items()}

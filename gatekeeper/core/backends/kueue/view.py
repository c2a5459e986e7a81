"""What ``lws-gatekeeper why`` shows of a pool with the ``kueue`` backend: the ClusterQueue.

Why this exists: with this backend the pool label names a LocalQueue and Kueue's
ClusterQueue behind it holds the quota; this is the backend's part of ``core.plugin.explain``,
and ``pool_view`` is its ``why`` viewer (``core.plugin.backend.Backend.pool_view``), which reads them
through the reader ``why`` gives it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gatekeeper.core.kube.keys import KUEUE_API_VERSION, POOL_LABEL, WORKLOAD_PLURAL
from gatekeeper.core.kube.objects import as_list, as_map, is_terminating, meta
from gatekeeper.core.plugin.explain import Holder, PoolView, Reader, amounts, formatted, holder, is_admitted

__all__ = ["kueue_pool_view", "pool_view"]


def kueue_pool_view(
    cluster_queue: Mapping[str, Any] | None,
    name: str,
    workloads: Iterable[Mapping[str, Any]],
    records: Iterable[Mapping[str, Any]],
    local_queue: tuple[str, str] = ("", ""),
) -> PoolView:
    """With the ``kueue`` backend: the ClusterQueue ``name`` behind the LWS's LocalQueue,
    its nominal quota and usage summed over flavors, the groups of ours it admitted (our
    Workloads, read with their records), and the groups of ``local_queue`` (namespace,
    LocalQueue) that wait, with a Workload or for one (the gatekeeper offers an LWS's
    groups to Kueue a few at a time). Other LocalQueues may feed the same ClusterQueue;
    their waiting groups are not listed (which LocalQueue feeds which is not read)."""
    if cluster_queue is None:
        return PoolView(name, "missing")
    quota: dict[str, int] = {}
    for group in as_list(as_map(cluster_queue.get("spec")).get("resourceGroups")):
        for flavor in as_list(as_map(group).get("flavors")):
            for res in as_list(as_map(flavor).get("resources")):
                res = as_map(res)
                amount = amounts({str(res.get("name")): res.get("nominalQuota")})
                for k, v in amount.items():
                    quota[k] = quota.get(k, 0) + v
    used: dict[str, int] = {}
    for flavor in as_list(as_map(cluster_queue.get("status")).get("flavorsUsage")):
        for res in as_list(as_map(flavor).get("resources")):
            res = as_map(res)
            for k, v in amounts({str(res.get("name")): res.get("total")}).items():
                used[k] = used.get(k, 0) + v
    records = list(records)
    by_name = {(str(meta(r).get("namespace")), str(meta(r).get("name"))): r for r in records}
    held: list[Holder] = []
    waiting: list[Holder] = []
    for wl in workloads:
        key = (str(meta(wl).get("namespace")), str(meta(wl).get("name")))
        record = by_name.get(key)
        if record is None:
            continue
        admission = as_map(as_map(wl.get("status")).get("admission"))
        if admission.get("clusterQueue") == name and is_admitted(record):
            held.append(holder(record))
    for record in records:
        key = (str(meta(record).get("namespace")), str(meta(record).get("name")))
        status = as_map(record.get("status"))
        lq = (key[0], str(status.get("pool") or ""))
        mine = local_queue[1] and lq == local_queue
        if mine and not is_admitted(record) and not is_terminating(record):
            waiting.append(holder(record))
    fmt = formatted
    return PoolView(
        name,
        "ClusterQueue",
        quota=fmt(quota),
        used=fmt(used),
        free=fmt({k: max(0, v - used.get(k, 0)) for k, v in quota.items()}),
        admitted=tuple(sorted(held, key=lambda h: (h.namespace, h.lws, h.group))),
        waiting=tuple(sorted(waiting, key=lambda h: (h.namespace, h.lws, h.group))),
        ordered=False,
    )


_KUEUE = KUEUE_API_VERSION.split("/")[0]


async def pool_view(
    read: Reader, pool: str, namespace: str | None, records: Sequence[Mapping[str, Any]]
) -> PoolView | None:
    """The ClusterQueue behind the LocalQueue ``pool`` of ``namespace``, when records of this
    backend (they name a Workload) are there."""
    if namespace is None or not any(as_map(r.get("status")).get("workload") for r in records):
        return None
    local = await read.one(f"localqueues.{_KUEUE}", pool, namespace)
    cq_name = str(as_map(as_map(local).get("spec")).get("clusterQueue") or "")
    cq = await read.one(f"clusterqueues.{_KUEUE}", cq_name) if cq_name else None
    workloads = await read.every(f"{WORKLOAD_PLURAL}.{_KUEUE}", label_selector=POOL_LABEL)
    return kueue_pool_view(cq, cq_name or pool, workloads, records, (namespace, pool))

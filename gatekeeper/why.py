"""``lws-gatekeeper why`` (and ``kubectl lws-gatekeeper why``): why an LWS or a pool waits.

Why this exists: the answer to "why is my LWS not running?" spans the LWS, its pods, its
groups' records, the pool and the groups that hold it. This module reads those objects
with the user's own kubeconfig (read-only: list and get, nothing written) and hands them
to ``core.explain``, which puts the answer together; ``cli.py`` prints it as text or
JSON. It works for the three backends: with ``pools`` the pool is a ``Pool``; with
``kueue`` the LWS's label names a LocalQueue, and the pool shown is its ClusterQueue; with
``volcano`` the label names a Volcano Queue, shown with its capability and what Volcano
reports allocated in it. Called by ``cli.why_cmd`` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import kr8s
import kr8s.asyncio

from gatekeeper.core.explain import (
    LwsAnswer,
    PoolView,
    explain_lws,
    explain_pool,
    kueue_pool_view,
    volcano_queue_view,
)

__all__ = ["LwsAnswer", "NotFound", "PoolView", "as_json", "default_namespace", "why_lws", "why_pool"]
from gatekeeper.core.keys import LWS_NAME_LABEL, POOL_LABEL
from gatekeeper.core.objects import as_map, meta

LWS_KIND = "leaderworkersets.leaderworkerset.x-k8s.io"
RECORD_KIND = "groupadmissions.lws-gatekeeper.io"
POOL_KIND = "pools.lws-gatekeeper.io"
VOLCANO_QUEUE_KIND = "queues.scheduling.volcano.sh"


class NotFound(Exception):
    """The object asked about is not there (the message says which)."""


async def _list(api: kr8s.asyncio.Api, kind: str, **selectors: Any) -> list[dict[str, Any]]:
    try:
        return [o async for o in api.get(kind, raw=True, **selectors) if isinstance(o, dict)]
    except (kr8s.NotFoundError, ValueError):  # the API is not served (Kueue not installed, say)
        return []


async def _one(
    api: kr8s.asyncio.Api, kind: str, name: str, namespace: str | None = None
) -> dict[str, Any] | None:
    where = {"namespace": namespace} if namespace else {}
    found = await _list(api, kind, field_selector=f"metadata.name={name}", **where)
    return found[0] if found else None


async def _classes(api: kr8s.asyncio.Api) -> dict[str, int]:
    out: dict[str, int] = {}
    for pc in await _list(api, "priorityclasses.scheduling.k8s.io"):
        value = pc.get("value")
        if isinstance(value, int) and not isinstance(value, bool):
            out[str(meta(pc).get("name"))] = value
    return out


async def _pool_view(
    api: kr8s.asyncio.Api, pool: str, namespace: str, records: list[dict[str, Any]]
) -> PoolView:
    """The pool behind ``pool``: a Pool of that name, else the ClusterQueue of the LocalQueue
    (records with a Workload: the kueue backend), else a Volcano Queue of that name."""
    obj = await _one(api, POOL_KIND, pool)
    kueue = any(as_map(r.get("status")).get("workload") for r in records)
    if obj is not None or not kueue:
        lwss = await _list(api, LWS_KIND, namespace=kr8s.ALL, label_selector={POOL_LABEL: pool})
        queue = await _one(api, VOLCANO_QUEUE_KIND, pool) if obj is None else None
        if queue is not None:
            return volcano_queue_view(queue, pool, records, lwss, await _classes(api))
        return explain_pool(obj, pool, records, lwss, await _classes(api))
    local = await _one(api, "localqueues.kueue.x-k8s.io", pool, namespace)
    cq_name = str(as_map(as_map(local).get("spec")).get("clusterQueue") or "")
    cq = await _one(api, "clusterqueues.kueue.x-k8s.io", cq_name) if cq_name else None
    workloads = await _list(api, "workloads.kueue.x-k8s.io", namespace=kr8s.ALL, label_selector=POOL_LABEL)
    return kueue_pool_view(cq, cq_name or pool, workloads, records, (namespace, pool))


async def default_namespace(kubeconfig: str | None) -> str:
    """The namespace of the kubeconfig's current context, as kubectl takes it."""
    api = await kr8s.asyncio.api(kubeconfig=kubeconfig)
    return str(api.namespace or "default")


async def why_lws(kubeconfig: str | None, namespace: str, name: str) -> LwsAnswer:
    api = await kr8s.asyncio.api(kubeconfig=kubeconfig)
    lws = await _one(api, LWS_KIND, name, namespace)
    if lws is None:
        raise NotFound(f"LeaderWorkerSet {namespace}/{name} not found")
    pool = str(as_map(meta(lws).get("labels")).get(POOL_LABEL) or "")
    records = await _list(api, RECORD_KIND, namespace=kr8s.ALL)
    pods = await _list(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: name})
    view = await _pool_view(api, pool, namespace, records) if pool else None
    return explain_lws(lws, records, pods, view)


async def why_pool(kubeconfig: str | None, name: str) -> PoolView:
    api = await kr8s.asyncio.api(kubeconfig=kubeconfig)
    obj = await _one(api, POOL_KIND, name)
    records = await _list(api, RECORD_KIND, namespace=kr8s.ALL)
    queue = await _one(api, VOLCANO_QUEUE_KIND, name) if obj is None else None
    if queue is not None:
        lwss = await _list(api, LWS_KIND, namespace=kr8s.ALL, label_selector={POOL_LABEL: name})
        return volcano_queue_view(queue, name, records, lwss, await _classes(api))
    if obj is None and not any(as_map(r.get("status")).get("pool") == name for r in records):
        raise NotFound(f"Pool {name} not found")
    lwss = await _list(api, LWS_KIND, namespace=kr8s.ALL, label_selector={POOL_LABEL: name})
    return explain_pool(obj, name, records, lwss, await _classes(api))


def as_json(value: LwsAnswer | PoolView) -> Mapping[str, Any]:
    """The answer as plain data (``-o json``)."""
    return asdict(value)

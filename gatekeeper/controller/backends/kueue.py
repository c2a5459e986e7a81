"""The ``kueue`` backend's loop: Kueue Workloads for LWS groups, and gates that follow them.

Why this exists: with ``--backend=kueue`` Kueue's ClusterQueues decide admission; the
gatekeeper turns each group of an opted-in LWS into one Kueue Workload and keeps the
group's pods behind its own gate until Kueue admits that Workload. Every decision is
made by ``core.kueue.decide_kueue`` from the informers' caches; this module only carries
the actions out, in order: release groups that are gone, create records and Workloads,
lift gates (with the flavor's node labels) of admitted groups, stop the pods of evicted
ones and give their quota back, then say why each group waits. Like the ``pools``
loop, it keeps nothing only in memory: a restarted gatekeeper picks up from the records
and Workloads in the cluster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import anyio
from prometheus_client import Counter, Gauge, Histogram

from gatekeeper.controller import kube as k
from gatekeeper.controller.caches import Caches
from gatekeeper.controller.informer import Informer
from gatekeeper.controller.loop import Write
from gatekeeper.core.backends.kueue import (
    NEVER_FIT_RETRY_SECONDS,
    KueueActions,
    KueueSnapshot,
    RecordStatus,
    clear_admission_status,
    decide_kueue,
    new_workload,
)
from gatekeeper.core.demand import GroupDemand
from gatekeeper.core.gating import Ungate, ungate_patch
from gatekeeper.core.groups import DemandMemo, GroupState
from gatekeeper.core.keys import ADMITTED, POOL_LABEL
from gatekeeper.core.record import admitted_condition, demand_status, new_record

__all__ = ["KueueBackend"]

log = logging.getLogger("gatekeeper.kueue")


KUEUE_ADMISSIONS = Counter(
    "gatekeeper_kueue_admissions_total",
    "Groups whose Kueue Workload was admitted and whose gates were lifted",
)
KUEUE_STOPS = Counter(
    "gatekeeper_kueue_stopped_pods_total", "Pods deleted because their group's Workload is no longer admitted"
)
KUEUE_WAITING = Gauge("gatekeeper_kueue_waiting_groups", "Groups whose Workload Kueue has not admitted")
KUEUE_PASS_SECONDS = Histogram("gatekeeper_kueue_reconcile_seconds", "Duration of one kueue-backend pass")


class KueueBackend:
    """The ``kueue`` backend's parts for a ``PassLoop``: LWSs, their pods, records, our
    Workloads and flavors; decide; act."""

    log = log

    def __init__(self, kube: k.Kube, caches: Caches, *, retry_seconds: int = NEVER_FIT_RETRY_SECONDS) -> None:
        self.kube = kube
        self.caches = caches
        self.retry_seconds = retry_seconds
        self._last_event: dict[tuple[str, str, str], str] = {}
        self._problems: set[str] = set()
        self.demands = DemandMemo()

        self.lws = caches.informer(k.LWS, label_selector=POOL_LABEL)
        self.pods = caches.informer(k.PODS, label_selector=POOL_LABEL)
        self.records = caches.informer(k.RECORDS)
        self.workloads = caches.informer(k.WORKLOADS, label_selector=POOL_LABEL)
        self.flavors = caches.informer(k.RESOURCE_FLAVORS)
        self.priorities = caches.informer(k.PRIORITY_CLASSES)

    @property
    def informers(self) -> list[Informer]:
        return [self.lws, self.pods, self.records, self.workloads, self.flavors, self.priorities]

    def wake_on_change(self, poke: Callable[[str, Any], None]) -> None:
        for inf in self.informers:
            inf.listeners.append(poke)

    def snapshot(self) -> KueueSnapshot:
        return KueueSnapshot(
            lwss=self.lws.values(),
            pods=self.pods.values(),
            records=self.records.values(),
            workloads=self.workloads.values(),
            flavors=self.flavors.values(),
            priorities=self.caches.priorities(),
            now=datetime.now(UTC),
            retry_seconds=self.retry_seconds,
        )

    async def reconcile_once(self, limited: Write) -> KueueActions:
        start = time.monotonic()
        snap = self.snapshot()
        actions = decide_kueue(snap, self.demands)

        async with anyio.create_task_group() as tg:
            for ns, name in actions.release:
                tg.start_soon(limited, self._release, ns, name)
            for ns, name in actions.delete_workloads:
                tg.start_soon(limited, self.kube.delete, k.WORKLOADS, name, ns)
            for group in actions.create_records:
                tg.start_soon(limited, self._create_record, group, snap.priorities)
            for group, record_uid in actions.create_workloads:
                tg.start_soon(limited, self._create_workload, group, record_uid, snap.priorities)
        async with anyio.create_task_group() as tg:
            for ungate in actions.ungate:
                tg.start_soon(limited, self._ungate, ungate)
            for ns, pod in actions.stop:
                tg.start_soon(limited, self._stop, ns, pod)
            for ns, name in actions.clear_admission:
                tg.start_soon(limited, self._clear_admission, ns, name)
            for st in actions.statuses:
                tg.start_soon(limited, self._status, st)
        KUEUE_WAITING.set(sum(1 for st in actions.statuses if not st.admitted))
        problems = set(actions.problems)
        for problem in sorted(problems - self._problems):
            log.warning("ignored: %s", problem)
        self._problems = problems
        KUEUE_PASS_SECONDS.observe(time.monotonic() - start)
        return actions

    async def _release(self, ns: str, name: str) -> None:
        log.info("releasing %s/%s (Workload and record)", ns, name)
        await self.kube.delete(k.WORKLOADS, name, ns)
        await self.kube.delete(k.RECORDS, name, ns)

    async def _create_record(self, group: GroupState, priorities: Mapping[str, int]) -> None:
        lws = self.lws.get(group.key.namespace, group.key.name)
        if lws is None:
            return
        record = await self.kube.create(k.RECORDS, new_record(lws, group.key.index))
        if isinstance(group.demand, GroupDemand):  # its Workload at once, not one pass later
            await self._create_workload(group, str(record["metadata"]["uid"]), priorities, lws)

    async def _create_workload(
        self,
        group: GroupState,
        record_uid: str,
        priorities: Mapping[str, int],
        lws: dict[str, Any] | None = None,
    ) -> None:
        lws = lws or self.lws.get(group.key.namespace, group.key.name)
        if lws is None or not record_uid:
            return
        await self.kube.create(k.WORKLOADS, new_workload(group, lws, record_uid, priorities))
        log.info("created Workload %s/%s in LocalQueue %s", group.key.namespace, group.record, group.pool)

    async def _ungate(self, ungate: Ungate) -> None:
        pod = self.pods.get(ungate.namespace, ungate.pod)
        if pod is None:
            return
        ops = ungate_patch(pod, ungate)
        if ops is None:
            return
        await self.kube.json_patch(k.PODS, ungate.pod, ungate.namespace, ops)

    async def _stop(self, ns: str, pod: str) -> None:
        log.info("stopping %s/%s: its group's Workload is not admitted", ns, pod)
        KUEUE_STOPS.inc()
        await self.kube.delete(k.PODS, pod, ns)

    async def _clear_admission(self, ns: str, name: str) -> None:
        wl = self.workloads.get(ns, name)
        if wl is None:
            return
        log.info("giving back the quota of evicted Workload %s/%s", ns, name)
        await self.kube.patch_status(
            k.WORKLOADS,
            name,
            ns,
            clear_admission_status(wl, k.now_rfc3339()),
            resource_version=str(wl["metadata"].get("resourceVersion", "")) or None,
        )

    async def _status(self, st: RecordStatus) -> None:
        group = st.group
        record = self.records.get(group.key.namespace, group.record)
        if record is None:
            return
        before = record.get("status") or {}
        current: dict[str, Any] = next(
            (c for c in before.get("conditions", []) if c.get("type") == ADMITTED), {}
        )
        want = "True" if st.admitted else "False"
        same = current.get("status") == want and current.get("reason") == st.reason
        noted = st.revision is None or before.get("templateRevision") == st.revision
        retry = {"retryAt": st.retry_at, "retries": st.retries} if st.retries is not None else {}
        if st.admitted and before.get("retries") is not None:
            retry = {"retryAt": None, "retries": None}  # admitted at last: the count starts afresh
        if same and current.get("message") == st.message and noted and not retry:
            return
        status: dict[str, Any] = {
            **demand_status(group.pool, group.demand, before),
            "workload": st.workload,
            "conditions": [admitted_condition(st.admitted, st.reason, st.message, current, k.now_rfc3339())],
        }
        if st.admitted and current.get("status") != "True":
            status["admittedAt"] = k.now_rfc3339()
        if st.revision is not None:
            status["templateRevision"] = st.revision
        status.update(retry)
        await self.kube.patch_status(k.RECORDS, group.record, group.key.namespace, status)
        if same:
            return
        if st.admitted:
            KUEUE_ADMISSIONS.inc()
        lws = self.lws.get(group.key.namespace, group.key.name)
        if lws is None:
            return
        slot = (group.key.namespace, group.key.name, st.reason)
        if self._last_event.get(slot) == lws["metadata"].get("resourceVersion") and not st.admitted:
            return  # one event per LWS and reason, not one per group
        self._last_event[slot] = str(lws["metadata"].get("resourceVersion"))
        await self.kube.event(
            lws, kind="LeaderWorkerSet", reason=st.reason, message=st.message, warning=st.warning
        )

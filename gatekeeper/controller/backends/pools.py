"""The ``pools`` backend's controller: snapshot, decide (pure), act. Over and over.

Why this exists: with the ``pools`` backend it is the only place where the gatekeeper
changes the cluster. Each pass (run by ``loop.PassLoop``) takes a snapshot of the shared
caches, hands it to ``core.backends.pools.decide``
and carries out the actions in their required order: release records of groups that
are gone, create records of new groups, write ``Admitted=True`` on a group's record
and only then lift the gates of its pods, then write why every other group waits.
Nothing lives only in memory except what is safe to lose (the last event sent, to
avoid repeating it); a restarted controller picks up from the records.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import anyio
from prometheus_client import Counter, Gauge, Histogram

from gatekeeper.controller import kube as k
from gatekeeper.controller.caches import BOUND_PODS, Caches
from gatekeeper.controller.informer import Informer
from gatekeeper.controller.loop import Write
from gatekeeper.core.backends.pools import Actions, Admit, Snapshot, WaitStatus, decide
from gatekeeper.core.gating import ungate_patch
from gatekeeper.core.groups import DemandMemo, GroupState
from gatekeeper.core.keys import ADMITTED, POOL_LABEL
from gatekeeper.core.objects import replacing_map
from gatekeeper.core.planner import PoolStatus
from gatekeeper.core.quantity import format_amount, format_resources
from gatekeeper.core.record import admitted_condition, demand_status, new_record

__all__ = ["PoolsBackend"]

log = logging.getLogger("gatekeeper.reconciler")

ADMISSIONS = Counter("gatekeeper_admissions_total", "Groups admitted", ["pool"])
WAITING = Gauge("gatekeeper_waiting_groups", "Groups waiting for admission", ["pool"])
POOL_QUOTA = Gauge("gatekeeper_pool_quota", "Pool quota per resource (scheduler units)", ["pool", "resource"])
POOL_USED = Gauge("gatekeeper_pool_used", "Pool quota held by admitted groups", ["pool", "resource"])
WAIT_SECONDS = Histogram(
    "gatekeeper_admission_wait_seconds",
    "Time from a group's first pod to its admission",
    ["pool"],
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800, 7200),
)
PASS_SECONDS = Histogram("gatekeeper_reconcile_seconds", "Duration of one planning pass")

#: A waiting group's message is rewritten at most this often when only its numbers change.
MESSAGE_REFRESH_SECONDS = 10.0


def _time(value: object) -> float | None:
    if isinstance(value, str) and value:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return None


def _cond(status: Mapping[str, Any] | None) -> Mapping[str, Any]:
    for c in (status or {}).get("conditions") or []:
        if c.get("type") == ADMITTED:
            return dict(c)
    return {}


def _describe(st: PoolStatus) -> str:
    text = st.describe()
    if st.stranded:
        # Admitted whole, but the scheduler cannot place some of their pods now (room taken by
        # pods the gatekeeper does not control, or placement rules it does not model). The
        # reservation stays: the pods bind when room frees; people are told which groups.
        text += "; admitted groups whose pods fit no node now: " + ", ".join(map(str, st.stranded))
    return text


class PoolsBackend:
    """The ``pools`` backend's parts for a ``PassLoop``: its caches, its snapshot, its writes."""

    log = log

    def __init__(self, kube: k.Kube, caches: Caches) -> None:
        self.kube = kube
        self.caches = caches
        self._last_message_write: dict[str, float] = {}
        self._last_event: dict[tuple[str, str, str], str] = {}
        self._problems: set[str] = set()
        self.demands = DemandMemo()

        self.lws = caches.informer(k.LWS, label_selector=POOL_LABEL)
        self.pods = caches.informer(k.PODS, label_selector=POOL_LABEL)
        self.bound = caches.informer(k.PODS, field_selector=BOUND_PODS)
        self.nodes = caches.informer(k.NODES)
        self.pools = caches.informer(k.POOLS)
        self.records = caches.informer(k.RECORDS)
        self.priorities = caches.informer(k.PRIORITY_CLASSES)

    @property
    def informers(self) -> list[Informer]:
        return [self.lws, self.pods, self.bound, self.nodes, self.pools, self.records, self.priorities]

    def wake_on_change(self, poke: Callable[[str, Any], None]) -> None:
        for inf in self.informers:
            inf.listeners.append(poke)

    def snapshot(self) -> Snapshot:
        return Snapshot(
            lwss=self.lws.values(),
            pods=self.pods.values(),
            bound_pods=self.bound.values(),
            nodes=self.caches.nodes(),
            pools=self.pools.values(),
            records=self.records.values(),
            priorities=self.caches.priorities(),
        )

    async def reconcile_once(self, limited: Write) -> Actions:
        """One pass. Writes of different groups run concurrently (at most the loop's limit in
        flight); within a group the order holds: its record is admitted before its gates go."""
        start = time.monotonic()
        actions = decide(self.snapshot(), self.demands)

        async with anyio.create_task_group() as tg:
            for ns, name in actions.release:
                log.info("releasing %s/%s", ns, name)
                tg.start_soon(limited, self.kube.delete, k.RECORDS, name, ns)
        created: dict[tuple[str, str], dict[str, Any]] = {}
        async with anyio.create_task_group() as tg:
            for group in actions.create_records:
                tg.start_soon(limited, self._create_record, group, created)
        async with anyio.create_task_group() as tg:
            for admit in actions.admit:
                tg.start_soon(self._admit, admit, created, limited)
            for ns, pod in actions.ungate:
                tg.start_soon(limited, self._ungate, ns, pod)
            for wait in actions.waiting:
                tg.start_soon(limited, self._wait, wait, created)
            for held in actions.held_invalid:
                # Its record keeps Admitted=True (the reservation stays); only people are told.
                tg.start_soon(limited, self._held_invalid, held)
            for held in actions.held_changed:
                tg.start_soon(limited, self._held_changed, held)
            for ns, name, message in actions.restore_admitted:
                tg.start_soon(limited, self._say_admitted, ns, name, "Admitted", message)
            for ns, name, revision in actions.revisions:
                tg.start_soon(
                    limited, self.kube.patch_status, k.RECORDS, name, ns, {"templateRevision": revision}
                )
        problems = set(actions.problems)
        for problem in sorted(problems - self._problems):
            log.warning("ignored: %s", problem)
        self._problems = problems
        await self._pools(actions)
        PASS_SECONDS.observe(time.monotonic() - start)
        return actions

    async def _create_record(self, group: GroupState, created: dict[tuple[str, str], dict[str, Any]]) -> None:
        lws = self.lws.get(group.key.namespace, group.key.name)
        if lws is None:
            return
        try:
            obj = await self.kube.create(k.RECORDS, new_record(lws, group.key.index))
        except k.Conflict:
            return  # already there: the next pass sees it
        created[(group.key.namespace, group.record)] = obj

    async def _held_invalid(self, held: WaitStatus) -> None:
        await self._event_once(held.group, str(held.reason), held.message, warning=True)

    async def _held_changed(self, held: WaitStatus) -> None:
        group = held.group
        await self._say_admitted(group.key.namespace, group.record, str(held.reason), held.message)
        await self._event_once(group, str(held.reason), held.message, warning=False)

    async def _say_admitted(self, namespace: str, name: str, reason: str, message: str) -> None:
        """Rewrite an admitted record's reason and message; its status stays True."""
        record = self.records.get(namespace, name)
        if record is None:
            return
        current = _cond(record.get("status"))
        if current.get("status") != "True":
            return  # not admitted (any more): nothing to say here
        if current.get("reason") == reason and current.get("message") == message:
            return
        cond = admitted_condition(True, reason, message, current, k.now_rfc3339())
        await self.kube.patch_status(
            k.RECORDS,
            name,
            namespace,
            {"conditions": [cond]},
            resource_version=str(record["metadata"].get("resourceVersion", "")) or None,
        )

    def _record(
        self, group: GroupState, created: Mapping[tuple[str, str], dict[str, Any]]
    ) -> dict[str, Any] | None:
        return created.get((group.key.namespace, group.record)) or self.records.get(
            group.key.namespace, group.record
        )

    async def _admit(
        self,
        admit: Admit,
        created: Mapping[tuple[str, str], dict[str, Any]],
        limited: Write,
    ) -> None:
        group = admit.group
        record = self._record(group, created)
        if record is None:
            return
        placed = [n for n in admit.nodes if n]
        where = f" on {', '.join(placed)}" if placed else ""
        unplaced = len(admit.nodes) - len(placed)
        if unplaced:
            pods = "1 pod waits" if unplaced == 1 else f"{unplaced} pods wait"
            where += f"; {pods} Pending for new nodes (nodeFit QuotaOnly)"
        message = f"group {group.key.index} admitted into pool {group.pool}: {admit.summary}{where}"
        before = record.get("status") or {}
        now = k.now_rfc3339()
        status = {
            **demand_status(group.pool, group.demand, before),
            "placement": replacing_map(
                before.get("placement"), {str(i): n for i, n in enumerate(admit.nodes) if n}
            ),
            "templateRevision": group.revision or None,
            "admittedAt": now,
            "conditions": [admitted_condition(True, "Admitted", message, _cond(before), now)],
        }
        # The record first, guarded by its resourceVersion: never admitted twice.
        if not await limited(self._patch_record_status, group, status, record):
            return  # not recorded, so no gate is lifted; the next pass decides again
        log.info("admitted %s into %s on %s", group.key, group.pool, list(admit.nodes))
        ADMISSIONS.labels(group.pool).inc()
        first = [
            _time(p["metadata"].get("creationTimestamp"))
            for p in self.pods.values()
            if p["metadata"].get("namespace") == group.key.namespace and p["metadata"]["name"] in group.pods
        ]
        stamps = [t for t in first if t is not None]
        # Admitted before its first pod was even created: its pods never wait.
        WAIT_SECONDS.labels(group.pool).observe(max(0.0, time.time() - min(stamps)) if stamps else 0.0)
        # Then the gates, all of the group's pods together.
        async with anyio.create_task_group() as tg:
            for pod in group.gated:
                tg.start_soon(limited, self._ungate, group.key.namespace, pod)
        lws = self.lws.get(group.key.namespace, group.key.name)
        if lws is not None:
            await self.kube.event(lws, kind="LeaderWorkerSet", reason="Admitted", message=message)

    async def _patch_record_status(
        self, group: GroupState, status: Mapping[str, Any], record: Mapping[str, Any]
    ) -> None:
        await self.kube.patch_status(
            k.RECORDS,
            group.record,
            group.key.namespace,
            status,
            resource_version=str(record["metadata"].get("resourceVersion", "")) or None,
        )

    async def _ungate(self, namespace: str, name: str) -> None:
        pod = self.pods.get(namespace, name)
        ops = ungate_patch(pod) if pod is not None else None
        if ops is None:
            return
        await self.kube.json_patch(k.PODS, name, namespace, ops)  # a Conflict asks for another pass

    async def _wait(self, wait: WaitStatus, created: Mapping[tuple[str, str], dict[str, Any]]) -> None:
        group = wait.group
        record = self._record(group, created)
        if record is None:
            return
        current = _cond(record.get("status"))
        reason = str(wait.reason)
        same_reason = current.get("status") == "False" and current.get("reason") == reason
        if same_reason and current.get("message") == wait.message:
            return
        key = f"{group.key.namespace}/{group.record}"
        now = time.monotonic()
        if same_reason and now - self._last_message_write.get(key, 0.0) < MESSAGE_REFRESH_SECONDS:
            return  # only the numbers changed: a later pass (at most ``resync`` away) writes them
        status = {
            **demand_status(group.pool, group.demand, record.get("status")),
            "conditions": [admitted_condition(False, reason, wait.message, current, k.now_rfc3339())],
        }
        try:
            await self.kube.patch_status(k.RECORDS, group.record, group.key.namespace, status)
        except k.Conflict:
            return
        self._last_message_write[key] = now
        if not same_reason:
            await self._event_once(group, reason, wait.message, warning=wait.reason.permanent)

    async def _event_once(self, group: GroupState, reason: str, message: str, *, warning: bool) -> None:
        """One event per LWS and reason change, not one per group: 100 waiting groups, one line."""
        lws = self.lws.get(group.key.namespace, group.key.name)
        if lws is None:
            return
        slot = (group.key.namespace, group.key.name, reason)
        if self._last_event.get(slot) == lws["metadata"].get("resourceVersion"):
            return
        self._last_event[slot] = str(lws["metadata"].get("resourceVersion"))
        await self.kube.event(lws, kind="LeaderWorkerSet", reason=reason, message=message, warning=warning)

    async def _pools(self, actions: Actions) -> None:
        for obj in self.pools.values():
            name = obj["metadata"]["name"]
            st: PoolStatus | None = actions.pools.get(name)
            if st is None:
                if name in actions.invalid_pools:
                    desired: dict[str, Any] = {
                        "conditions": [
                            {
                                "type": "Valid",
                                "status": "False",
                                "reason": "InvalidSpec",
                                "message": actions.invalid_pools[name],
                            }
                        ]
                    }
                else:
                    continue
            else:
                WAITING.labels(name).set(st.waiting + st.inadmissible)
                for r, v in st.quota.items():
                    POOL_QUOTA.labels(name, r).set(v)
                for r, v in st.used.items():
                    POOL_USED.labels(name, r).set(v)
                desired = {
                    "nodes": st.nodes,
                    "quota": {r: format_amount(r, v) for r, v in sorted(st.quota.items())},
                    "used": {r: format_amount(r, v) for r, v in sorted(st.used.items())},
                    "free": {r: format_amount(r, v) for r, v in sorted(st.free.items())},
                    "quotaSummary": format_resources(st.quota),
                    "usedSummary": ", ".join(
                        f"{format_amount(r, st.used.get(r, 0))}/{format_amount(r, q)} {r}"
                        for r, q in sorted(st.quota.items())
                    ),
                    "admittedGroups": st.admitted,
                    "waitingGroups": st.waiting + st.inadmissible,
                    "strandedGroups": [str(key) for key in st.stranded],
                    "conditions": [
                        {"type": "Valid", "status": "True", "reason": "Valid", "message": _describe(st)}
                    ],
                }
            current = obj.get("status") or {}
            comparable = {kk: v for kk, v in current.items() if kk in desired}
            for c in comparable.get("conditions", []):
                c.pop("lastTransitionTime", None)
            if comparable == desired:
                continue
            for c in desired["conditions"]:
                c["lastTransitionTime"] = k.now_rfc3339()
            try:
                await self.kube.patch_status(k.POOLS, name, None, desired)
            except k.Conflict:
                continue

"""The ``volcano`` backend's controller: Volcano PodGroups for LWS groups, and gates that follow them.

Why this exists: with ``--backend=volcano`` Volcano's Queues decide admission; the
gatekeeper turns each group of an opted-in LWS into one PodGroup and keeps the group's
pods behind its own gate until Volcano puts that PodGroup ``Inqueue`` and the whole group
fits the nodes. Every decision is made by ``core.backends.volcano`` from the shared
caches (``decide_volcano``, then ``plan_writes``); this module only has ``act.execute``
send the plan. ``app.controllers`` makes it. It keeps nothing only in memory: a
restarted gatekeeper picks up from the records and PodGroups in the cluster.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

from gatekeeper.controller import kube as k
from gatekeeper.controller import resources as r
from gatekeeper.controller.caches import Caches
from gatekeeper.controller.held import report_held
from gatekeeper.controller.informer import Informer
from gatekeeper.controller.loop import Write as Writer
from gatekeeper.controller.plugin import ControllerPlugin, Term
from gatekeeper.controller.shell import GroupInformers, decide_and_act, memory_of_writes
from gatekeeper.core.admission.record_cap import DEFAULT_MAX_RECORDS_PER_NAMESPACE
from gatekeeper.core.backends.volcano import VolcanoActions, VolcanoSnapshot, decide_volcano, plan_writes
from gatekeeper.core.backends.volcano.keys import POD_GROUP_PLURAL, VOLCANO_API_VERSION
from gatekeeper.core.kube.keys import POOL_LABEL
from gatekeeper.core.model.groups import DemandMemo
from gatekeeper.core.model.pool import DEFAULT_ADMISSION_TIMEOUT
from gatekeeper.core.writes.plan import DEFAULT_EVENTS_PER_NAMESPACE_PER_MINUTE, Write
from gatekeeper.metrics import ADMISSIONS, RECONCILE, Series, waiting_series

__all__ = ["PLUGIN", "POD_GROUPS", "VolcanoBackend"]

log = logging.getLogger("gatekeeper.volcano")
BACKEND = "volcano"

POD_GROUPS = r.Resource(POD_GROUP_PLURAL, VOLCANO_API_VERSION)
"""Volcano's PodGroups: one of ours per group."""


class VolcanoBackend:
    """The ``volcano`` backend's parts for a ``PassLoop``: LWSs, their pods, records, our
    PodGroups and Volcano's Events on them, nodes and bound pods; decide and plan; execute."""

    log = log

    def __init__(
        self,
        kube: k.Kube,
        caches: Caches,
        *,
        retry_seconds: int = 60,
        max_records_per_namespace: int = DEFAULT_MAX_RECORDS_PER_NAMESPACE,
        admission_timeout: int = DEFAULT_ADMISSION_TIMEOUT,
        events_per_minute: int = DEFAULT_EVENTS_PER_NAMESPACE_PER_MINUTE,
    ) -> None:
        self.kube = kube
        self._waiting = Series()
        self.admission_timeout = admission_timeout
        self.max_records_per_namespace = max_records_per_namespace
        self.retry_seconds = retry_seconds
        self.caches = caches
        self.memory = memory_of_writes(events_per_minute)
        self.demands = DemandMemo()
        self.groups = GroupInformers(caches)
        self.pod_groups = caches.informer(POD_GROUPS, label_selector=POOL_LABEL)
        self.events = caches.informer(r.EVENTS, field_selector="involvedObject.kind=PodGroup")
        self.nodes = caches.informer(r.NODES)

    @property
    def informers(self) -> list[Informer]:
        return [*self.groups.informers, self.pod_groups, self.events, self.nodes]

    @property
    def side_informers(self) -> list[Informer]:
        """The DRA kinds': asked for passes, never waited for (``Caches.dra_informers``)."""
        return self.groups.dra

    def snapshot(self, now: datetime | None = None) -> VolcanoSnapshot:
        g = self.groups
        return VolcanoSnapshot(
            lwss=g.lws.values(),
            pods=g.pods.values(),
            records=g.records.values(),
            pod_groups=self.pod_groups.values(),
            events=self.events.values(),
            nodes=self.caches.nodes(),
            bound_pods=g.bound_pods(),
            priorities=self.caches.priorities(),
            default_priority=self.caches.default_priority(),
            statefulsets=g.statefulsets.values(),
            limit_ranges=g.limit_ranges.values(),
            runtime_classes=g.runtime_classes.values(),
            claim_book=self.caches.dra()[0],
            device_room=self.caches.dra()[1],
            max_records_per_namespace=self.max_records_per_namespace,
            now=now,
            retry_seconds=self.retry_seconds,
            admission_timeout=self.admission_timeout,
        )

    async def reconcile_once(self, write: Writer) -> VolcanoActions:
        """One pass: decide and plan (pure, off the event loop), then execute through ``write``."""
        start, now = time.monotonic(), datetime.now(UTC)
        snap = self.snapshot(now)
        actions = await decide_and_act(
            self.kube,
            write,
            self.memory,
            lambda: decide_volcano(snap, self.demands),
            lambda acts: plan_writes(acts, snap, self.memory, now, clock=start),
            self._done,
            kinds=(POD_GROUPS,),
        )
        self._waiting.publish(
            waiting_series(BACKEND, ((st.group.pool, not st.admitted) for st in actions.statuses))
        )
        report_held(st.reason for st in actions.statuses if st.admitted)
        RECONCILE.labels(BACKEND).observe(time.monotonic() - start)
        return actions

    def _done(self, one: Write) -> None:
        if one.tag == "admitted":
            ADMISSIONS.labels(BACKEND, one.labels[0] if one.labels else "").inc()
        elif one.tag == "podgroup":
            log.info("created PodGroup %s/%s in Volcano Queue %s", one.namespace, one.name, one.labels[0])
        elif one.tag == "retire":
            log.info(
                "deleted PodGroup %s/%s of a group given back: its Queue's room is free",
                one.namespace,
                one.name,
            )
        elif one.tag == "withdraw":
            log.info("withdrew PodGroup %s/%s for a group of a higher priority", one.namespace, one.name)
        elif one.tag == "release":
            log.info("released %s %s/%s", one.resource, one.namespace, one.name)


def _make(term: Term) -> VolcanoBackend:
    return VolcanoBackend(
        term.kube,
        term.caches,
        retry_seconds=term.retry_seconds,
        max_records_per_namespace=term.max_records_per_namespace,
        events_per_minute=term.events_per_minute,
        admission_timeout=term.admission_timeout,
    )


PLUGIN = ControllerPlugin("volcano", make=_make)

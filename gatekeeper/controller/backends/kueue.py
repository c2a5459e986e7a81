"""The ``kueue`` backend's controller: Kueue Workloads for LWS groups, and gates that follow them.

Why this exists: with ``--backend=kueue`` Kueue's ClusterQueues decide admission; the
gatekeeper turns each group of an opted-in LWS into one Kueue Workload and keeps the
group's pods behind its own gate until Kueue admits that Workload. Every decision is
made by ``core.backends.kueue`` from the shared caches (``decide_kueue``, then
``plan_writes``: groups released, records and Workloads made, gates lifted onto the
flavor's nodes, pods of evicted groups stopped and their quota given back, the records'
words); this module only has ``act.execute`` send the plan, and publishes the webhook's
table before it (the groups whose new pods are made as the pass lets their gated pods
through, ``core.backends.kueue.pass_through``), with the ``Lifter`` for pods born gated a
moment too early. Like the ``pools`` backend, it keeps nothing only in memory: a restarted
gatekeeper picks up from the records and Workloads in the cluster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from gatekeeper.controller import kube as k
from gatekeeper.controller import resources as r
from gatekeeper.controller.caches import Caches
from gatekeeper.controller.held import report_held
from gatekeeper.controller.informer import Informer
from gatekeeper.controller.lift import Lifter
from gatekeeper.controller.loop import Write as Writer
from gatekeeper.controller.plugin import ControllerPlugin, Term
from gatekeeper.controller.shell import GroupInformers, decide_and_act, memory_of_writes
from gatekeeper.core.admission.record_cap import DEFAULT_MAX_RECORDS_PER_NAMESPACE
from gatekeeper.core.backends.kueue import (
    NEVER_FIT_RETRY_SECONDS,
    KueueActions,
    KueueSnapshot,
    decide_kueue,
    plan_writes,
)
from gatekeeper.core.backends.kueue.urgency import KueueUrgency
from gatekeeper.core.kube.keys import KUEUE_API_VERSION, POOL_LABEL
from gatekeeper.core.model.groups import DemandMemo
from gatekeeper.core.model.pool import DEFAULT_ADMISSION_TIMEOUT
from gatekeeper.core.writes.plan import DEFAULT_EVENTS_PER_NAMESPACE_PER_MINUTE, Plan, Write, walk
from gatekeeper.metrics import ADMISSIONS, GIVE_BACKS, PODS_STOPPED, RECONCILE, Series, waiting_series
from gatekeeper.webhook.pass_through import PassThrough

__all__ = ["PLUGIN", "KueueBackend"]

log = logging.getLogger("gatekeeper.kueue")
BACKEND = "kueue"


class KueueBackend:
    """The ``kueue`` backend's parts for a ``PassLoop``: LWSs, their pods, records, our
    Workloads and flavors; decide and plan; execute."""

    log = log

    def __init__(
        self,
        kube: k.Kube,
        caches: Caches,
        *,
        pass_through: PassThrough | None = None,
        retry_seconds: int = NEVER_FIT_RETRY_SECONDS,
        max_records_per_namespace: int = DEFAULT_MAX_RECORDS_PER_NAMESPACE,
        admission_timeout: int = DEFAULT_ADMISSION_TIMEOUT,
        events_per_minute: int = DEFAULT_EVENTS_PER_NAMESPACE_PER_MINUTE,
    ) -> None:
        self.kube = kube
        self._waiting = Series()
        self.admission_timeout = admission_timeout
        self.max_records_per_namespace = max_records_per_namespace
        self.caches = caches
        self.retry_seconds = retry_seconds
        self.memory = memory_of_writes(events_per_minute)
        self.demands = DemandMemo()
        self.urgent = KueueUrgency()
        """Which watched changes call for a pass at once (the loop's ``urgent``)."""

        self.groups = GroupInformers(caches)
        self.workloads = caches.informer(r.WORKLOADS, label_selector=POOL_LABEL)
        self.flavors = caches.informer(r.RESOURCE_FLAVORS)
        self.pass_through = pass_through
        self.lifter = Lifter(kube, self.groups.pods, pass_through) if pass_through is not None else None
        """Lifts between passes the gates of pods born gated just before their group's table entry."""

    @property
    def informers(self) -> list[Informer]:
        return [*self.groups.informers, self.workloads, self.flavors]

    @property
    def side_tasks(self) -> list[Callable[[], Awaitable[None]]]:
        """What runs beside the pass loop for the term: the ``Lifter``."""
        return [self.lifter.run] if self.lifter is not None else []

    @property
    def side_informers(self) -> list[Informer]:
        """The DRA kinds': asked for passes, never waited for (``Caches.dra_informers``)."""
        return self.groups.dra

    def snapshot(self, now: datetime) -> KueueSnapshot:
        g = self.groups
        return KueueSnapshot(
            lwss=g.lws.values(),
            pods=g.pods.values(),
            records=g.records.values(),
            workloads=self.workloads.values(),
            flavors=self.flavors.values(),
            priorities=self.caches.priorities(),
            default_priority=self.caches.default_priority(),
            statefulsets=g.statefulsets.values(),
            limit_ranges=g.limit_ranges.values(),
            runtime_classes=g.runtime_classes.values(),
            claim_book=self.caches.dra()[0],
            device_room=self.caches.dra()[1],
            max_records_per_namespace=self.max_records_per_namespace,
            admission_timeout=self.admission_timeout,
            # Pods let through keep their group's Workload by the charge they carry (``core.model.charge``).
            bound_pods=g.bound_pods(),
            now=now,
            retry_seconds=self.retry_seconds,
        )

    async def reconcile_once(self, write: Writer) -> KueueActions:
        """One pass: decide and plan (pure), then execute the plan through ``write``."""
        start, now = time.monotonic(), datetime.now(UTC)
        snap = self.snapshot(now)
        actions = await decide_and_act(
            self.kube,
            write,
            self.memory,
            lambda: decide_kueue(snap, self.demands),
            lambda acts: plan_writes(acts, snap, self.memory, now, clock=start),
            self._done,
            before=self._publish,
            after=self._published,
        )
        self._waiting.publish(
            waiting_series(BACKEND, ((st.group.pool, not st.admitted) for st in actions.statuses))
        )
        report_held(st.reason for st in actions.statuses if st.admitted)
        RECONCILE.labels(BACKEND).observe(time.monotonic() - start)
        return actions

    def _publish(self, actions: KueueActions, writes: Plan, write: Writer) -> None:
        """Before the pass's writes: the webhook's table is this pass's (a group no longer
        passable is out of it before its pods are stopped), and the lifter waits for the
        pass's own gates and shares its slots."""
        if self.pass_through is None:
            return
        g = self.groups
        before = set(self.pass_through.keys())
        self.pass_through.publish(dict(actions.passable), g.statefulsets.get, g.pods.get)
        if self.lifter is not None:
            self.lifter.hold((w.namespace or "", w.name) for w in walk(writes) if w.tag == "ungate")
            self.lifter.share(write)
            for key, _ in actions.passable:
                if key not in before:
                    self.lifter.admitted(key)

    def _published(self) -> None:
        if self.lifter is not None:
            self.lifter.hold(())
            self.lifter.share(None)

    def _done(self, one: Write) -> None:
        if one.tag == "ungate" and self.lifter is not None:
            self.lifter.sent((one.namespace or "", one.name))
        if one.tag == "admitted":
            ADMISSIONS.labels(BACKEND, one.labels[0] if one.labels else "").inc()
        elif one.tag == "stop":
            log.info("stopped %s/%s: its group's Workload is not admitted", one.namespace, one.name)
            PODS_STOPPED.labels(BACKEND).inc()
        elif one.tag == "workload":
            log.info("created Workload %s/%s in LocalQueue %s", one.namespace, one.name, one.labels[0])
        elif one.tag == "give-back":
            log.info("gave back the quota of evicted Workload %s/%s", one.namespace, one.name)
            GIVE_BACKS.labels(BACKEND, one.labels[0] if one.labels else "", "Evicted").inc()
        elif one.tag == "release":
            log.info("released %s %s/%s", one.resource, one.namespace, one.name)


_KUEUE = KUEUE_API_VERSION.split("/")[0]


def _make(term: Term) -> KueueBackend:
    return KueueBackend(
        term.kube,
        term.caches,
        pass_through=term.pass_through,
        retry_seconds=term.retry_seconds,
        max_records_per_namespace=term.max_records_per_namespace,
        events_per_minute=term.events_per_minute,
        admission_timeout=term.admission_timeout,
    )


PLUGIN = ControllerPlugin("kueue", make=_make)

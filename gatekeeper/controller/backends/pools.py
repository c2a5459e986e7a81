"""The ``pools`` backend's controller: snapshot, decide, plan the writes (all pure), execute.

Why this exists: with the ``pools`` backend this is where the gatekeeper changes the
cluster. Each pass (run by ``loop.PassLoop``) takes a snapshot of the shared caches,
hands it to ``core.backends.pools.decide``, turns what it decided into writes with
``plan_writes`` (records released, records made, ``Admitted=True`` on a group's record
and only then the gates of its pods, why every other group waits, the Pools' status) and
has ``act.execute`` send them. With a hub (``hub_link.HubLink``), admissions into Pools
with ``spec.reservation`` first wait for the hub's grant (``core.backends.pools.hub_member``), and this
cluster's claims are created and given back there. It keeps only what is safe to lose (which Event it posted,
when it last rewrote a waiting message); a restarted controller picks up from the records.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import anyio.to_thread
from prometheus_client import Gauge

from gatekeeper.controller import kube as k
from gatekeeper.controller import resources as r
from gatekeeper.controller.act import execute
from gatekeeper.controller.caches import Caches
from gatekeeper.controller.held import report_held
from gatekeeper.controller.hub_link import HubLink
from gatekeeper.controller.informer import Informer
from gatekeeper.controller.lift import Lifter
from gatekeeper.controller.loop import Write as Writer
from gatekeeper.controller.plugin import ControllerPlugin, Term
from gatekeeper.controller.shell import memory_of_writes
from gatekeeper.core.admission.record_cap import DEFAULT_MAX_RECORDS_PER_NAMESPACE
from gatekeeper.core.backends.pools import Actions, PassInputs, Snapshot, decide, hold_node_pools, plan_writes
from gatekeeper.core.backends.pools import pass_through as admitted
from gatekeeper.core.backends.pools.hub_member import HubView, charge_reservations
from gatekeeper.core.backends.pools.outcome import PoolStatus
from gatekeeper.core.backends.pools.provisioning import InstanceType, parse_node_claim, parse_node_pool
from gatekeeper.core.backends.pools.urgency import Urgency
from gatekeeper.core.kube.keys import LWS_NAME_LABEL, POOL_LABEL, RECORD_PLURAL
from gatekeeper.core.kube.objects import labels, meta, name_of
from gatekeeper.core.kube.parsed import ParseMemo
from gatekeeper.core.model.daemons import parse_daemon_set
from gatekeeper.core.model.groups import DemandMemo
from gatekeeper.core.model.pool import parse_pool
from gatekeeper.core.reservation import asked_of
from gatekeeper.core.writes.plan import DEFAULT_EVENTS_PER_NAMESPACE_PER_MINUTE, Write, walk
from gatekeeper.metrics import (
    ADMISSION_WAIT,
    ADMISSIONS,
    GIVE_BACKS,
    POOL_LENT,
    POOL_QUOTA,
    POOL_USED,
    RECONCILE,
    RECONCILE_STAGE,
    WAITING_GROUPS,
    Series,
    base_value,
)
from gatekeeper.webhook.pass_through import PassThrough

__all__ = ["PLUGIN", "PoolsBackend"]

log = logging.getLogger("gatekeeper.reconciler")

NO_HUB = HubView(cluster="", reachable=False, error="this gatekeeper runs without --hub-kubeconfig")
BACKEND = "pools"


def _stage(name: str, since: float) -> float:
    now = time.monotonic()
    RECONCILE_STAGE.labels(BACKEND, name).inc(now - since)
    return now


class PoolsBackend:
    """The ``pools`` backend's parts for a ``PassLoop``: its caches, its snapshot, its plan."""

    log = log

    def __init__(
        self,
        kube: k.Kube,
        caches: Caches,
        hub: HubLink | None = None,
        instance_types: Sequence[InstanceType] | None = None,
        *,
        pass_through: PassThrough | None = None,
        retry_seconds: int = 60,
        exempt_namespaces: Sequence[str] = ("kube-system",),
        max_records_per_namespace: int = DEFAULT_MAX_RECORDS_PER_NAMESPACE,
        events_per_minute: int = DEFAULT_EVENTS_PER_NAMESPACE_PER_MINUTE,
    ) -> None:
        self.kube = kube
        self.max_records_per_namespace = max_records_per_namespace
        """Group records one namespace may have (``core.admission.record_cap``)."""
        self.retry_seconds = retry_seconds
        """First delay before a group given back (``spec.admissionTimeout``) is tried again."""
        self.exempt_namespaces = frozenset(exempt_namespaces)
        """Namespaces whose pods on a closed pool's nodes are not held against its quota."""
        # Karpenter's NodePools and NodeClaims are read only when the instance types are
        # known (``--karpenter-instance-types``): without them nothing can be planned on
        # them, and a cluster without Karpenter serves neither kind.
        self.instance_types = tuple(instance_types or ())
        self.node_pools = caches.informer(r.NODE_POOLS) if instance_types is not None else None
        self.node_claims = caches.informer(r.NODE_CLAIMS) if instance_types is not None else None
        self.daemon_sets = caches.informer(r.DAEMON_SETS) if instance_types is not None else None
        """The DaemonSets, whose pods take room on every node Karpenter launches."""
        self.caches = caches
        self.hub = hub
        """With ``--hub-kubeconfig``: Pools with spec.reservation are charged to the hub too."""
        self.pass_through = pass_through
        self._written: dict[tuple[str, str], admitted.Written] = {}
        """(namespace, record) -> the record as this leader's last write of it was answered,
        while the informer does not show it yet (``core.backends.pools.pass_through.as_known``)."""
        self._lift_after: list[tuple[str, str, int]] = []
        self._series = Series()
        """The pools' gauge series this replica reported last pass (``pool_series``)."""
        """The groups this pass admitted, as the webhook's table names them."""
        self._index: admitted.Index | None = None
        self.memory = memory_of_writes(events_per_minute)
        self.demands = DemandMemo()
        # Pools and Karpenter's objects are read here, at the edge, once per resourceVersion.
        self.read_pools = ParseMemo(parse_pool)
        self.read_node_pools = ParseMemo(parse_node_pool)
        self.read_node_claims = ParseMemo(parse_node_claim)
        self.read_daemon_sets = ParseMemo(parse_daemon_set)

        self.lws = caches.informer(r.LWS, label_selector=POOL_LABEL)
        self.pods, self.bound = caches.bound_informers()
        """Pods of opted-in LWSs, and every other pod on a node (``Caches.bound_pods``)."""
        self.nodes = caches.informer(r.NODES)
        self.pools = caches.informer(r.POOLS)
        self.records = caches.informer(r.RECORDS)
        self.priorities = caches.informer(r.PRIORITY_CLASSES)
        self.namespaces = caches.informer(r.NAMESPACES)
        # The LWS controller labels its StatefulSets with the LWS's name: only those are read.
        self.statefulsets = caches.informer(r.STATEFULSETS, label_selector=LWS_NAME_LABEL)
        self.limit_ranges = caches.informer(r.LIMIT_RANGES)
        """The requests a container that names none gets: part of a group's demand."""
        self.runtime_classes = caches.informer(r.RUNTIME_CLASSES)
        """The overhead a pod that names a RuntimeClass gets: part of a group's demand."""
        self.dra = caches.dra_informers()
        """What DRA claims ask, and the devices of each node: side informers (``Caches.dra``)."""
        self.urgent = Urgency()
        """Which watched changes call for a pass at once (the loop's ``urgent``)."""
        self.lifter = Lifter(kube, self.pods, pass_through) if pass_through is not None else None
        """Lifts between passes the gates of pods born gated just before their group's admission."""

    @property
    def informers(self) -> list[Informer]:
        return [
            self.lws,
            self.pods,
            self.bound,
            self.nodes,
            self.pools,
            self.records,
            self.priorities,
            self.namespaces,
            self.statefulsets,
            self.limit_ranges,
            self.runtime_classes,
        ]

    @property
    def side_informers(self) -> list[Informer]:
        """The hub's caches, Karpenter's and the DRA kinds': a change there asks for a pass, but
        the loop never waits for them (a hub down, or Karpenter's or DRA's API missing, must not
        stop every pool)."""
        karpenter = [i for i in (self.node_pools, self.node_claims, self.daemon_sets) if i is not None]
        hub = self.hub.informers if self.hub is not None else []
        return [*hub, *karpenter, *self.dra]

    @property
    def side_tasks(self) -> list[Callable[[], Awaitable[None]]]:
        """What runs beside the pass loop for the term: the ``Lifter``."""
        return [self.lifter.run] if self.lifter is not None else []

    def karpenter_unreadable(self) -> str:
        """Why Karpenter's NodePools and NodeClaims cannot be planned on now ("" when they can):
        they, or the DaemonSets whose pods a new node runs, cannot be read."""
        for inf in (i for i in (self.node_pools, self.node_claims, self.daemon_sets) if i is not None):
            if inf.failing_since:
                since = datetime.fromtimestamp(inf.failing_since, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                return f"{inf.resource.plural}: {inf.last_error[:200]} (since {since})"
            if not inf.synced.is_set():
                return f"{inf.resource.plural}: not listed yet"
        return ""

    def snapshot(self, hub: HubView = NO_HUB) -> Snapshot:
        """What the pass decides on; ``hub``: what this member knows of the hub now (the claims
        it asks back)."""
        return Snapshot(
            lwss=self.lws.values(),
            pods=self.pods.values(),
            bound_pods=self.caches.bound_pods(),
            nodes=self.caches.nodes(),
            pools=self.read_pools(self.pools.values()),
            records=self.records.values(),
            priorities=self.caches.priorities(),
            default_priority=self.caches.default_priority(),
            never_preempt=self.caches.never_preempt(),
            namespaces=namespace_labels(self.namespaces.values()),
            statefulsets=self.statefulsets.values(),
            limit_ranges=self.limit_ranges.values(),
            runtime_classes=self.runtime_classes.values(),
            claim_book=self.caches.dra()[0],
            device_room=self.caches.dra()[1],
            node_pools=self.read_node_pools(self.node_pools.values() if self.node_pools is not None else ()),
            node_claims=self.read_node_claims(
                self.node_claims.values() if self.node_claims is not None else ()
            ),
            instance_types=self.instance_types,
            daemon_sets=self.read_daemon_sets(
                self.daemon_sets.values() if self.daemon_sets is not None else ()
            ),
            now=datetime.now(UTC),
            retry_seconds=self.retry_seconds,
            exempt_namespaces=self.exempt_namespaces,
            max_records_per_namespace=self.max_records_per_namespace,
            asked_back=asked_of(
                (c for c in hub.claims if str(meta(c).get("uid") or "") not in hub.given_back), hub.cluster
            ),
        )

    async def reconcile_once(self, write: Writer) -> Actions:
        """One pass: decide and plan (pure), then execute the plan through ``write``."""
        start = time.monotonic()
        # What this member knows of the hub, read once for the pass: the claims it asks back
        # (the snapshot) and what admissions into reservation pools wait for (after decide).
        view = self.hub.view() if self.hub is not None else NO_HUB
        snap = self.snapshot(view)
        took = time.monotonic()
        RECONCILE_STAGE.labels(BACKEND, "snapshot").inc(took - start)
        # The decision runs in a worker thread: a pass over a large cluster must not hold up
        # the webhook, the probes and the Lease renewals served by this event loop.
        actions = await anyio.to_thread.run_sync(decide, snap, self.demands, self.caches.requests)
        took = _stage("decide", took)
        # Pools charged to a hub Reservation admit nothing new without a hub to charge it on.
        actions, claims = charge_reservations(actions, snap, view)
        # Pools that plan on Karpenter admit nothing new while its objects cannot be read.
        actions = hold_node_pools(actions, snap, self.karpenter_unreadable())
        inputs = PassInputs(snap, self.memory, datetime.now(UTC), start)
        plan = await anyio.to_thread.run_sync(plan_writes, actions, inputs)
        took = _stage("plan", took)
        self._lift_after = []
        if self.pass_through is not None:
            for give in actions.give_back:  # before the record is written and the pods deleted
                key = give.group.key
                self.pass_through.withdraw((key.namespace, key.name, key.index))
        if self.pass_through is not None:
            self._index = await anyio.to_thread.run_sync(
                admitted.index, snap.lwss, snap.pods, snap.statefulsets, snap.pools.ok, self.demands.demand
            )
        if self.lifter is not None:
            self.lifter.hold((w.namespace or "", w.name) for w in walk(plan) if w.tag == "ungate")
            self.lifter.share(write)
        try:
            await execute(self.kube, plan, write, self.memory, self._done, self._answered)
        finally:
            if self.lifter is not None:
                self.lifter.hold(())
                self.lifter.share(None)
        took = _stage("execute", took)
        if self.hub is not None:
            await self.hub.execute(claims, write)
        if self.pass_through is not None and self._index is not None:
            records, self._written = admitted.as_known(snap.records, self._written, time.monotonic())
            entry = self._index.entry
            table = await anyio.to_thread.run_sync(
                lambda: dict(e for e in map(entry, records) if e is not None)
            )
            self.pass_through.publish(table, self.statefulsets.get, self.pods.get)
            if self.lifter is not None:  # a term's first table is published only now
                for group in self._lift_after:
                    self.lifter.admitted(group)
            _stage("publish", took)
        report_held(str(said.reason) for said in actions.strangers)
        self._series.publish(pool_series(actions.pools))
        RECONCILE.labels(BACKEND).observe(time.monotonic() - start)
        return actions

    def _answered(self, one: Write, answer: Mapping[str, Any]) -> None:
        """A record this pass made, admitted or gave back: kept as answered until the
        informer shows it. An admission goes into the webhook's table at once, not at the
        end of the pass (a LeaderReady group's workers follow its leader closely)."""
        if one.tag not in ("create", "admit", "give-back") or one.resource != RECORD_PLURAL:
            return
        if meta(answer).get("name") != one.name:
            return  # no object in the answer: the informer's copy stands
        key = (one.namespace or "", one.name)
        self._written[key] = admitted.written_after(
            self._written.get(key),
            None if one.guard_from_parent else one.guard,
            answer,
            time.monotonic(),
            made=one.tag == "create",
        )
        if one.tag != "admit" or self.pass_through is None or self._index is None:
            return
        entry = self._index.entry(answer)
        if entry is not None:
            self.pass_through.add(*entry)
            self._lift_after.append(entry[0])
            if self.lifter is not None:
                self.lifter.admitted(entry[0])

    def _done(self, one: Write) -> None:
        if one.tag == "ungate" and self.lifter is not None:
            self.lifter.sent((one.namespace or "", one.name))
        if one.tag == "admit":
            log.info("admitted %s/%s into %s", one.namespace, one.name, one.labels[0])
            ADMISSIONS.labels(BACKEND, one.labels[0]).inc()
            ADMISSION_WAIT.labels(BACKEND, one.labels[0]).observe(one.measure)
        elif one.tag == "give-back":
            log.info("gave back %s/%s of %s (%s)", one.namespace, one.name, one.labels[0], one.labels[-1])
            GIVE_BACKS.labels(BACKEND, one.labels[0], one.labels[-1]).inc()
        elif one.tag == "release":
            log.info("released %s/%s", one.namespace, one.name)


def namespace_labels(namespaces: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, str]]:
    """Namespace name -> its labels."""
    return {name_of(ns): {str(k): str(v) for k, v in labels(ns).items()} for ns in namespaces}


def _make(term: Term) -> PoolsBackend:
    return PoolsBackend(
        term.kube,
        term.caches,
        term.hub,
        term.instance_types,
        pass_through=term.pass_through,
        retry_seconds=term.retry_seconds,
        exempt_namespaces=term.exempt_namespaces,
        max_records_per_namespace=term.max_records_per_namespace,
        events_per_minute=term.events_per_minute,
    )


PLUGIN = ControllerPlugin("pools", make=_make)


def pool_series(pools: Mapping[str, PoolStatus]) -> list[tuple[Gauge, tuple[str, ...], float]]:
    """Each pool's gauge values after a pass, in base units: its waiting groups, its quota and
    what admitted groups hold of it, and in a cohort what it lent. A pool or resource not here
    leaves the scrape (``metrics.Series``)."""
    out: list[tuple[Gauge, tuple[str, ...], float]] = []
    for name, st in pools.items():
        out.append((WAITING_GROUPS, (BACKEND, name), st.waiting + st.inadmissible))
        out.extend((POOL_QUOTA, (name, res), base_value(res, amount)) for res, amount in st.quota.items())
        out.extend((POOL_USED, (name, res), base_value(res, amount)) for res, amount in st.used.items())
        if st.cohort:
            out.extend((POOL_LENT, (name, res), base_value(res, st.lent.get(res, 0))) for res in st.quota)
    return out

"""The controller of Kueue AdmissionChecks ``lws-gatekeeper.io/shared-reservation``: watch, decide, write.

Why this exists: a Kueue user whose clusters share a capacity reservation lists this
check in a ClusterQueue; Kueue then admits a Workload only once the Reservation on the
hub granted the Workload's whole demand. The gatekeeper runs it with ``--hub-kubeconfig``
and ``--shared-reservation-check`` (with either backend): it claims on the hub through
the member's connection there (``hub_link.HubLink``, the same one the ``pools`` backend
uses), whose caches ask this loop for passes but are never waited for, so a hub down
leaves Ready checks Ready and new Workloads Pending with ``HubUnreachable``'s words.

Each pass hands the Workloads, AdmissionChecks and the hub's view to
``core.checks.shared_reservation`` (``decide_shared_reservation``, then ``plan_writes``),
has ``act.execute`` send the member's writes, then the hub link the claim writes.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

from prometheus_client import Counter, Gauge, Histogram

from gatekeeper.controller import kube as k
from gatekeeper.controller import resources as r
from gatekeeper.controller.act import execute
from gatekeeper.controller.caches import Caches
from gatekeeper.controller.hub_link import HubLink
from gatekeeper.controller.informer import Informer
from gatekeeper.controller.loop import Write as Writer
from gatekeeper.controller.plugin import CheckPlugin, Term
from gatekeeper.core.checks.shared_reservation import (
    SharedReservationActions,
    decide_shared_reservation,
    plan_writes,
)
from gatekeeper.core.kube.keys import SHARED_RESERVATION_CONTROLLER
from gatekeeper.core.reservation import HubView
from gatekeeper.core.writes.plan import Memory, Write

__all__ = ["PLUGIN", "SharedReservationCheck"]

log = logging.getLogger("gatekeeper.shared_reservation")

CHECKS = Gauge(
    "gatekeeper_shared_reservation_workloads",
    "Workloads with quota reserved whose shared-reservation checks are Ready or Pending",
    ["state"],
)
WRITES = Counter(
    "gatekeeper_shared_reservation_check_writes_total", "Shared-reservation check states written", ["state"]
)
PASS_SECONDS = Histogram(
    "gatekeeper_shared_reservation_pass_seconds", "Duration of one shared-reservation pass"
)
NO_HUB = HubView(cluster="", reachable=False, error="this gatekeeper runs without --hub-kubeconfig")


class SharedReservationCheck:
    """The shared-reservation check's parts for a ``PassLoop``."""

    log = log

    def __init__(self, kube: k.Kube, caches: Caches, hub: HubLink | None) -> None:
        self.kube = kube
        self.hub = hub
        self.memory = Memory()
        self.workloads = caches.informer(r.WORKLOADS)
        self.checks = caches.informer(r.ADMISSION_CHECKS)

    @property
    def informers(self) -> list[Informer]:
        return [self.workloads, self.checks]

    @property
    def side_informers(self) -> list[Informer]:
        """The hub's caches: a change there asks for a pass, but the loop never waits for them."""
        return self.hub.informers if self.hub is not None else []

    async def reconcile_once(self, write: Writer) -> SharedReservationActions:
        start = time.monotonic()
        workloads, checks = self.workloads.values(), self.checks.values()
        view = self.hub.view() if self.hub is not None else NO_HUB
        actions = decide_shared_reservation(workloads, checks, view)
        plan = plan_writes(actions, workloads, checks, datetime.now(UTC))
        await execute(self.kube, plan, write, self.memory, self._done)
        if self.hub is not None:
            await self.hub.execute(actions.claims, write)
        CHECKS.labels("Ready").set(actions.ready)
        CHECKS.labels("Pending").set(actions.pending)
        PASS_SECONDS.observe(time.monotonic() - start)
        return actions

    def _done(self, one: Write) -> None:
        if one.tag == "activate":
            log.info("AdmissionCheck %s: Active written", one.name)
            return
        WRITES.labels(one.tag).inc()
        if one.labels:
            log.info("Workload %s/%s: check -> %s: %s", one.namespace, one.name, one.tag, one.labels[1])


def _make(term: Term) -> SharedReservationCheck:
    return SharedReservationCheck(term.kube, term.caches, term.hub)


PLUGIN = CheckPlugin(SHARED_RESERVATION_CONTROLLER, "shared_reservation_check", _make)

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

from gatekeeper.controller import kube as k
from gatekeeper.controller.caches import Caches
from gatekeeper.controller.checks.shell import CheckController, check_metrics
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

__all__ = ["PLUGIN", "SharedReservationCheck"]

log = logging.getLogger("gatekeeper.shared_reservation")

METRICS = check_metrics("shared-reservation")
NO_HUB = HubView(cluster="", reachable=False, error="this gatekeeper runs without --hub-kubeconfig")


class SharedReservationCheck(CheckController):
    """The shared-reservation check's parts for a ``PassLoop``."""

    def __init__(self, kube: k.Kube, caches: Caches, hub: HubLink | None) -> None:
        super().__init__(kube, caches, METRICS, log)
        self.hub = hub

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
        await self.send(plan_writes(actions, workloads, checks, datetime.now(UTC)), write)
        if self.hub is not None:
            await self.hub.execute(actions.claims, write)
        self.count(actions, time.monotonic() - start)
        return actions


def _make(term: Term) -> SharedReservationCheck:
    return SharedReservationCheck(term.kube, term.caches, term.hub)


PLUGIN = CheckPlugin(SHARED_RESERVATION_CONTROLLER, "shared_reservation_check", _make)

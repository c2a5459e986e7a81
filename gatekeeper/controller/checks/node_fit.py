"""The controller of Kueue AdmissionChecks ``lws-gatekeeper.io/node-fit``: watch, decide, write.

Why this exists: Kueue admits a Workload by quota alone, so a group whose pods fit the
quota but no node is admitted and left Unschedulable, holding the quota. A ClusterQueue
that requires a node-fit AdmissionCheck waits for this controller to say ``Ready``.
It serves every Workload with such a check (Kueue's own LWS and Job integrations, and
the gatekeeper's ``kueue`` backend alike).

Each pass takes the shared caches (Workloads, AdmissionChecks, ResourceFlavors, Nodes,
bound Pods), hands them to ``core.checks.node_fit`` (``decide_node_fit``, then
``plan_writes``: ``Active=True`` on our AdmissionChecks, the changed check states as
server-side applies guarded by the Workload's resourceVersion) and has ``act.execute``
send them. Failed writes are logged and retried by a later pass; the loop never stops
on them.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

import anyio.to_thread

from gatekeeper.controller import kube as k
from gatekeeper.controller import resources as r
from gatekeeper.controller.caches import Caches
from gatekeeper.controller.checks.shell import CheckController, check_metrics
from gatekeeper.controller.informer import Informer
from gatekeeper.controller.loop import Write as Writer
from gatekeeper.controller.plugin import CheckPlugin
from gatekeeper.core.checks.node_fit import NodeFitActions, decide_node_fit, plan_writes
from gatekeeper.core.checks.node_fit.urgency import NodeFitUrgency
from gatekeeper.core.kube.keys import NODE_FIT_CONTROLLER

__all__ = ["PLUGIN", "NodeFitCheck"]

log = logging.getLogger("gatekeeper.nodefit")

METRICS = check_metrics("node-fit")


class NodeFitCheck(CheckController):
    """The node-fit check's parts for a ``PassLoop``: Workloads, AdmissionChecks, flavors, nodes
    and bound pods; decide and plan; execute."""

    def __init__(self, kube: k.Kube, caches: Caches) -> None:
        super().__init__(kube, caches, METRICS, log)
        self.caches = caches
        self.urgent = NodeFitUrgency()
        """Which watched changes call for a pass at once (the loop's ``urgent``)."""

        self.flavors = caches.informer(r.RESOURCE_FLAVORS)
        self.nodes = caches.informer(r.NODES)
        self.pods, self.bound = caches.bound_informers()
        """Every pod on a node, anyone's, once (``Caches.bound_pods``): the opted-in pods' watch
        (shared with the kueue backend's loop) and the others'."""
        self.dra = caches.dra_informers()
        """The DRA devices of each node (``Caches.dra``): side informers."""

    @property
    def informers(self) -> list[Informer]:
        return [self.workloads, self.checks, self.flavors, self.nodes, self.pods, self.bound]

    @property
    def side_informers(self) -> list[Informer]:
        """The DRA kinds': the devices of each node (``Caches.dra``), never waited for."""
        return self.dra

    async def reconcile_once(self, write: Writer) -> NodeFitActions:
        """One pass: decide and plan from the caches (pure), then execute the plan."""
        start = time.monotonic()
        workloads, checks = self.workloads.values(), self.checks.values()
        # In a worker thread, off the event loop that serves the webhook and the Lease.
        actions = await anyio.to_thread.run_sync(
            decide_node_fit,
            workloads,
            checks,
            self.flavors.values(),
            self.caches.nodes(),
            self.caches.bound_pods(),
            self.caches.requests,
            self.caches.dra()[1],
        )
        await self.send(plan_writes(actions, workloads, checks, datetime.now(UTC)), write)
        self.count(actions, time.monotonic() - start)
        return actions


PLUGIN = CheckPlugin(NODE_FIT_CONTROLLER, "node_fit", lambda term: NodeFitCheck(term.kube, term.caches))

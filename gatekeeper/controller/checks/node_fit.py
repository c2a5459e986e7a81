"""The controller of Kueue AdmissionChecks ``lws-gatekeeper.io/node-fit``: watch, decide, write.

Why this exists: Kueue admits a Workload by quota alone, so a group whose pods fit the
quota but no node is admitted and left Unschedulable, holding the quota. A ClusterQueue
that requires a node-fit AdmissionCheck waits for this controller to say ``Ready``.
It serves every Workload with such a check (Kueue's own LWS and Job integrations, and
the gatekeeper's ``kueue`` backend alike).

Each pass takes the informers' caches (Workloads, AdmissionChecks, ResourceFlavors,
Nodes, bound Pods), hands them to ``core.nodefit.decide_node_fit`` and writes what it
decided: ``Active=True`` on our AdmissionCheck objects, and the changed check states.
A check state is written with server-side apply on the Workload's ``status``
subresource (field manager ``lws-gatekeeper-node-fit``): ``status.admissionChecks`` is
a list-map keyed by ``name``, so the apply owns only our entry and keeps Kueue's
fields and the other checks' entries. The apply carries the cached
``resourceVersion``: if the Workload changed since (Kueue evicted it, say), it is
refused and the next pass decides again on fresh state. Failed writes are logged and
retried by a later pass; the loop never stops on them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from prometheus_client import Counter, Gauge, Histogram

from gatekeeper.controller import kube as k
from gatekeeper.controller.caches import BOUND_PODS, Caches
from gatekeeper.controller.informer import Informer
from gatekeeper.controller.loop import Write
from gatekeeper.controller.resources import Resource
from gatekeeper.core.checks.node_fit import CheckUpdate, NodeFitActions, decide_node_fit
from gatekeeper.core.keys import (
    KUEUE_API_VERSION,
    NODE_FIT_ACTIVE_MESSAGE,
    NODE_FIT_ACTIVE_REASON,
    NODE_FIT_FIELD_MANAGER,
)

__all__ = ["NodeFitCheck"]

log = logging.getLogger("gatekeeper.nodefit")


CHECKS = Gauge(
    "gatekeeper_node_fit_workloads",
    "Workloads with quota reserved whose node-fit checks are Ready or Pending",
    ["state"],
)
WRITES = Counter("gatekeeper_node_fit_check_writes_total", "Node-fit check states written", ["state"])
PASS_SECONDS = Histogram("gatekeeper_node_fit_pass_seconds", "Duration of one node-fit pass")


class NodeFitCheck:
    """The node-fit check's parts for a ``PassLoop``: Workloads, AdmissionChecks, flavors, nodes
    and bound pods; decide; write check states."""

    log = log

    def __init__(self, kube: k.Kube, caches: Caches) -> None:
        self.kube = kube
        self.caches = caches
        self._problems: set[str] = set()

        self.workloads = caches.informer(k.WORKLOADS)
        self.checks = caches.informer(k.ADMISSION_CHECKS)
        self.flavors = caches.informer(k.RESOURCE_FLAVORS)
        self.nodes = caches.informer(k.NODES)
        self.bound = caches.informer(k.PODS, field_selector=BOUND_PODS)

    @property
    def informers(self) -> list[Informer]:
        return [self.workloads, self.checks, self.flavors, self.nodes, self.bound]

    def wake_on_change(self, poke: Callable[[str, Any], None]) -> None:
        for inf in self.informers:
            inf.listeners.append(poke)

    async def reconcile_once(self, limited: Write) -> NodeFitActions:
        """One pass: decide from the caches, then write (at most the loop's limit in flight)."""
        start = time.monotonic()
        actions = decide_node_fit(
            self.workloads.values(),
            self.checks.values(),
            self.flavors.values(),
            self.caches.nodes(),
            self.bound.values(),
        )

        async with anyio.create_task_group() as tg:
            for name in actions.activate:
                tg.start_soon(limited, self._activate, name)
            for update in actions.updates:
                tg.start_soon(limited, self._write_check, update)
        problems = set(actions.problems)
        for problem in sorted(problems - self._problems):
            log.warning("node fit: %s", problem)
        self._problems = problems
        CHECKS.labels("Ready").set(actions.ready)
        CHECKS.labels("Pending").set(actions.pending)
        PASS_SECONDS.observe(time.monotonic() - start)
        return actions

    async def _apply_status(
        self, res: Resource, name: str, namespace: str | None, body: Mapping[str, Any]
    ) -> None:
        """Server-side apply ``body`` to the object's ``status`` subresource, as our field manager."""
        await self.kube.apply_status(res, name, namespace, body, field_manager=NODE_FIT_FIELD_MANAGER)

    async def _activate(self, name: str) -> None:
        obj = self.checks.get("", name)
        generation = (obj or {}).get("metadata", {}).get("generation")
        condition: dict[str, Any] = {
            "type": "Active",
            "status": "True",
            "reason": NODE_FIT_ACTIVE_REASON,
            "message": NODE_FIT_ACTIVE_MESSAGE,
            "lastTransitionTime": k.now_rfc3339(),
        }
        if isinstance(generation, int):
            condition["observedGeneration"] = generation
        log.info("AdmissionCheck %s: marking it Active", name)
        await self._apply_status(
            k.ADMISSION_CHECKS,
            name,
            None,
            {
                "apiVersion": KUEUE_API_VERSION,
                "kind": "AdmissionCheck",
                "metadata": {"name": name},
                "status": {"conditions": [condition]},
            },
        )

    async def _write_check(self, update: CheckUpdate) -> None:
        wl = self.workloads.get(update.namespace, update.workload)
        if wl is None:
            return
        old: Mapping[str, Any] = next(
            (
                e
                for e in wl.get("status", {}).get("admissionChecks") or []
                if isinstance(e, Mapping) and e.get("name") == update.check
            ),
            {},
        )
        same_state = old.get("state") == update.state and old.get("lastTransitionTime")
        entry = {
            "name": update.check,
            "state": update.state,
            "message": update.message[:32768],
            "lastTransitionTime": old["lastTransitionTime"] if same_state else k.now_rfc3339(),
        }
        if not same_state:
            log.info(
                "Workload %s/%s: check %s %s -> %s: %s",
                update.namespace,
                update.workload,
                update.check,
                old.get("state"),
                update.state,
                update.message,
            )
        await self._apply_status(
            k.WORKLOADS,
            update.workload,
            update.namespace,
            {
                "apiVersion": KUEUE_API_VERSION,
                "kind": "Workload",
                "metadata": {
                    "name": update.workload,
                    "namespace": update.namespace,
                    "resourceVersion": wl["metadata"].get("resourceVersion"),
                },
                "status": {"admissionChecks": [entry]},
            },
        )
        WRITES.labels(update.state).inc()

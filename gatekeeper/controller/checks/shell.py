"""What every Kueue AdmissionCheck controller of the gatekeeper does around its decision.

Why this exists: a check's pass decides (pure, in ``core.checks``) and plans its writes
(``core.checks.states``, shared); around that, every check controller watches the same two
kinds (Workloads, AdmissionChecks), sends its plan with ``act.execute``, logs and counts
each write, and reports its Ready and Pending Workloads and the pass's time in metrics
labelled with the check. That part is written once here; ``node_fit`` and
``shared_reservation`` subclass `CheckController` and keep only what they watch besides
and how they decide.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from gatekeeper.controller import kube as k
from gatekeeper.controller import resources as r
from gatekeeper.controller.act import execute
from gatekeeper.controller.caches import Caches
from gatekeeper.controller.loop import Write as Writer
from gatekeeper.core.writes.plan import Memory, Plan, Write
from gatekeeper.metrics import CHECK_RECONCILE, CHECK_WORKLOADS, CHECK_WRITES

__all__ = ["CheckController", "CheckMetrics", "check_metrics"]


@dataclass(frozen=True)
class CheckMetrics:
    """A check's series of ``lws_gatekeeper_check_workloads``, ``_check_writes_total`` and
    ``_check_reconcile_duration_seconds``: labelled ``check="<title>"``."""

    check: str


def check_metrics(check: str) -> CheckMetrics:
    """The metrics of the check ``check`` (``node-fit``, their ``check`` label); their series
    appear once the check's controller runs."""
    return CheckMetrics(check)


class Counted(Protocol):
    """What a check's actions count: Workloads whose check is Ready, and Pending."""

    @property
    def ready(self) -> int: ...

    @property
    def pending(self) -> int: ...


class CheckController:
    """A check's parts for a ``PassLoop`` that every check shares: the Workloads and
    AdmissionChecks it watches, the memory of its writes, and the tail of a pass (`send`,
    then `count`). A subclass adds its ``informers`` and ``reconcile_once``."""

    def __init__(self, kube: k.Kube, caches: Caches, metrics: CheckMetrics, log: logging.Logger) -> None:
        self.kube = kube
        self.metrics = metrics
        for state in ("Ready", "Pending"):
            CHECK_WORKLOADS.labels(metrics.check, state).set(0)
        self.log = log
        self.memory = Memory()
        self.workloads = caches.informer(r.WORKLOADS)
        self.checks = caches.informer(r.ADMISSION_CHECKS)

    async def send(self, plan: Plan, write: Writer) -> None:
        """Send the pass's plan of writes; each one done is logged and counted."""
        await execute(self.kube, plan, write, self.memory, self._done)

    def count(self, actions: Counted, seconds: float) -> None:
        """The pass's Ready and Pending Workloads, and how long it took."""
        check = self.metrics.check
        CHECK_WORKLOADS.labels(check, "Ready").set(actions.ready)
        CHECK_WORKLOADS.labels(check, "Pending").set(actions.pending)
        CHECK_RECONCILE.labels(check).observe(seconds)

    def _done(self, one: Write) -> None:
        if one.tag == "activate":
            self.log.info("AdmissionCheck %s: marked Active", one.name)
            return
        CHECK_WRITES.labels(self.metrics.check, one.tag).inc()
        if one.labels:
            self.log.info(
                "Workload %s/%s: check %s -> %s: %s",
                one.namespace,
                one.name,
                one.labels[0],
                one.tag,
                one.labels[1],
            )

"""What every Kueue AdmissionCheck controller of the gatekeeper does around its decision.

Why this exists: a check's pass decides (pure, in ``core.checks``) and plans its writes
(``core.checks.states``, shared); around that, every check controller watches the same two
kinds (Workloads, AdmissionChecks), sends its plan with ``act.execute``, logs and counts
each write, and reports its Ready and Pending Workloads and the pass's time under metric
names of one pattern. That part is written once here; ``node_fit`` and
``shared_reservation`` subclass `CheckController` and keep only what they watch besides
and how they decide.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import Counter, Gauge, Histogram

from gatekeeper.controller import kube as k
from gatekeeper.controller import resources as r
from gatekeeper.controller.act import execute
from gatekeeper.controller.caches import Caches
from gatekeeper.controller.loop import Write as Writer
from gatekeeper.core.writes.plan import Memory, Plan, Write

__all__ = ["CheckController", "CheckMetrics", "check_metrics"]


@dataclass(frozen=True)
class CheckMetrics:
    """A check's metrics: ``gatekeeper_<name>_workloads{state}``,
    ``gatekeeper_<name>_check_writes_total{state}``, ``gatekeeper_<name>_pass_seconds``."""

    workloads: Gauge
    writes: Counter
    pass_seconds: Histogram


def check_metrics(name: str, title: str) -> CheckMetrics:
    """The metrics of the check ``name`` (``node_fit``), said in help texts as ``title``
    (``node-fit``). Registered once per process: call it at import."""
    return CheckMetrics(
        Gauge(
            f"gatekeeper_{name}_workloads",
            f"Workloads with quota reserved whose {title} checks are Ready or Pending",
            ["state"],
        ),
        Counter(
            f"gatekeeper_{name}_check_writes_total", f"{title.capitalize()} check states written", ["state"]
        ),
        Histogram(f"gatekeeper_{name}_pass_seconds", f"Duration of one {title} pass"),
    )


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
        self.log = log
        self.memory = Memory()
        self.workloads = caches.informer(r.WORKLOADS)
        self.checks = caches.informer(r.ADMISSION_CHECKS)

    async def send(self, plan: Plan, write: Writer) -> None:
        """Send the pass's plan of writes; each one done is logged and counted."""
        await execute(self.kube, plan, write, self.memory, self._done)

    def count(self, actions: Counted, seconds: float) -> None:
        """The pass's Ready and Pending Workloads, and how long it took."""
        self.metrics.workloads.labels("Ready").set(actions.ready)
        self.metrics.workloads.labels("Pending").set(actions.pending)
        self.metrics.pass_seconds.observe(seconds)

    def _done(self, one: Write) -> None:
        if one.tag == "activate":
            self.log.info("AdmissionCheck %s: marked Active", one.name)
            return
        self.metrics.writes.labels(one.tag).inc()
        if one.labels:
            self.log.info(
                "Workload %s/%s: check %s -> %s: %s",
                one.namespace,
                one.name,
                one.labels[0],
                one.tag,
                one.labels[1],
            )

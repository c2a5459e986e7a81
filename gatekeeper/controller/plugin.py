"""What a backend or a check is to the controller: the I/O half of its plug-in contract.

Why this exists: ``core.plugin.backend.Backend`` is what the CLI, the webhook, ``render`` and ``why``
know of a backend; this is the rest: how to make its controller loop for a term
(``app.controllers``). Each
backend's controller module declares one ``ControllerPlugin`` as ``PLUGIN``;
``controller.backends.PLUGINS`` lists them, and a unit test checks that it names the same
backends as ``core.backends.BACKENDS``, in the same order. A Kueue AdmissionCheck the
gatekeeper serves is a ``CheckPlugin`` in ``controller.checks.CHECKS`` the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gatekeeper.controller.caches import Caches
from gatekeeper.controller.hub_link import HubLink
from gatekeeper.controller.kube import Kube
from gatekeeper.controller.loop import Controller
from gatekeeper.core.admission.record_cap import DEFAULT_MAX_RECORDS_PER_NAMESPACE
from gatekeeper.core.backends.pools.provisioning import InstanceType
from gatekeeper.core.model.pool import DEFAULT_ADMISSION_TIMEOUT
from gatekeeper.core.writes.plan import DEFAULT_EVENTS_PER_NAMESPACE_PER_MINUTE
from gatekeeper.webhook.pass_through import PassThrough

__all__ = ["CheckPlugin", "ControllerPlugin", "MakeController", "Term"]


@dataclass(frozen=True)
class Term:
    """What a backend's controller is made from, once per leader term (``app.controllers``)."""

    kube: Kube
    caches: Caches
    """The term's caches, shared by every controller of the term."""
    hub: HubLink | None = None
    """The link to a hub (``--hub-kubeconfig``); None: no hub."""
    pass_through: PassThrough | None = None
    """The webhook's table of admitted groups, for a backend that publishes one."""
    retry_seconds: int = 60
    """``--never-fit-retry-seconds``."""
    instance_types: Sequence[InstanceType] | None = None
    """``--karpenter-instance-types``; None: Karpenter's NodePools are not read."""
    exempt_namespaces: Sequence[str] = ("kube-system",)
    """``--closed-pool-exempt-namespaces``."""
    max_records_per_namespace: int = DEFAULT_MAX_RECORDS_PER_NAMESPACE
    """``--max-records-per-namespace``."""
    admission_timeout: int = DEFAULT_ADMISSION_TIMEOUT
    """``--admission-timeout-seconds``: where no Pool says how long an admitted group may take."""
    events_per_minute: int = DEFAULT_EVENTS_PER_NAMESPACE_PER_MINUTE
    """``--max-events-per-namespace-per-minute``."""


MakeController = Callable[[Term], Controller]


@dataclass(frozen=True)
class ControllerPlugin:
    """A backend's controller and ``why`` view."""

    name: str
    """As in ``core.backends.BACKENDS``."""
    make: MakeController


@dataclass(frozen=True)
class CheckPlugin:
    """A Kueue AdmissionCheck controller the gatekeeper can run beside its backend.

    A check is not a backend: Kueue still decides, and the check is one more opinion it waits
    for on every Workload whose ClusterQueue lists it. Each check's controller module declares
    one as ``PLUGIN``; ``controller.checks.CHECKS`` lists them, and ``app.controllers`` runs
    those whose ``option`` is on."""

    name: str
    """Its AdmissionCheck ``controllerName``."""
    option: str
    """The ``app.Options`` field (a ``run`` flag) that turns it on."""
    make: MakeController

"""The components a sandbox runs beside its cluster on request, in the order they start.

Why this exists: ``Sandbox.up`` starts each of Kueue, Karpenter, Volcano's scheduler,
Prometheus and the OCI registry when asked (``with_kueue=True``...), on a fresh sandbox
and on a running one alike; this table says, once, what each is built from, what its
process is called and how it starts, so ``up`` loops over it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gatekeeper_lab.sandbox import build, karpenter, kueue, prometheus, registry, volcano
from gatekeeper_lab.sandbox.kubectl import Kubectl
from gatekeeper_lab.sandbox.pki import Pki
from gatekeeper_lab.sandbox.process import Runner

__all__ = ["Side", "sides_of"]


@dataclass(frozen=True)
class Side:
    """A component that runs beside the cluster on request."""

    component: str
    """Its ``pins.toml`` component."""
    process: str
    """Its process in the sandbox's state and logs."""
    start: Callable[[dict[str, Any], build.Installed], None]
    """How to start it, given the state being built and what was built."""


def sides_of(
    runner: Runner,
    kubectl: Kubectl,
    pki: Pki,
    with_kueue: bool,
    with_karpenter: bool,
    with_volcano: bool,
    with_prometheus: bool,
    with_registry: bool,
) -> list[Side]:
    """The components asked for, in the order they start."""
    table = [
        (
            with_kueue,
            Side("kueue", kueue.COMPONENT, lambda st, b: kueue.start_kueue(runner, st, b, pki, kubectl)),
        ),
        (
            with_karpenter,
            Side(
                "karpenter",
                karpenter.COMPONENT,
                lambda st, b: karpenter.start_karpenter(runner, st, b, kubectl),
            ),
        ),
        (
            with_volcano,
            Side("volcano", volcano.COMPONENT, lambda st, b: volcano.start_volcano(runner, st, b, kubectl)),
        ),
        (
            with_prometheus,
            Side("prometheus", prometheus.COMPONENT, lambda st, _: prometheus.start_prometheus(runner, st)),
        ),
        (with_registry, Side("crane", registry.COMPONENT, lambda st, _: registry.start_registry(runner, st))),
    ]
    return [side for wanted, side in table if wanted]

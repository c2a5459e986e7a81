"""The gatekeeper in the sandbox: ``lws-gatekeeper run`` from this Python, its webhook on loopback.

Why this exists: the end-to-end tests, the demo and the benchmarks judge the gatekeeper
as it runs in a cluster: its own process, its Lease, its mutating webhook registered by
URL, its ``/metrics``. ``cluster.py`` installs its objects (:func:`install_objects`) and
runs it (:func:`start`) at the end of ``up``; ``Sandbox.start_gatekeeper`` (tests that
restart it, add a replica or change its flags) and ``Sandbox.metrics`` call here too.
"""

from __future__ import annotations

import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from gatekeeper.sandbox.kubectl import Kubectl
from gatekeeper.sandbox.manifests import GATEKEEPER_NAMESPACE, crd_manifests
from gatekeeper.sandbox.pki import Pki
from gatekeeper.sandbox.process import Runner, free_ports, ready
from gatekeeper.webhook.config import mutating_webhook_configuration

__all__ = ["COMPONENT", "PORTS", "install_objects", "metrics", "start"]

#: The process name of the sandbox's own gatekeeper (extra replicas get other names).
COMPONENT = "gatekeeper"

#: Its ports, by their names in the state's ``ports``.
PORTS = ("gk_webhook", "gk_metrics")


def install_objects(kubectl: Kubectl) -> None:
    """The CRDs (Pool objects can be applied with or without the gatekeeper) and its namespace."""
    kubectl.apply(crd_manifests())
    kubectl.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": GATEKEEPER_NAMESPACE}}])


def start(
    runner: Runner,
    pki: Pki,
    kubectl: Kubectl,
    name: str = COMPONENT,
    *,
    backend: str,
    register: bool = True,
    kubeconfig: Path | None = None,
    args: Sequence[str] = (),
) -> None:
    """Run a gatekeeper process as ``name``, wait for its ``/readyz``, register its webhook.

    Only the process named :data:`COMPONENT` uses the sandbox's gatekeeper ports and, if
    ``register``, its webhook; others get fresh ports. ``backend`` is ``pools`` or
    ``kueue``. See ``Sandbox.start_gatekeeper``.
    """
    state = runner.load()
    p = state["ports"]
    if "gk_webhook" not in p:  # a sandbox started by an older version, without a gatekeeper
        p["gk_webhook"], p["gk_metrics"] = free_ports(2)
    webhook_port = p["gk_webhook"] if name == COMPONENT else free_ports(1)[0]
    metrics_port = p["gk_metrics"] if name == COMPONENT else free_ports(1)[0]
    runner.start(
        state,
        name,
        [
            sys.executable,
            "-m",
            "gatekeeper",
            "run",
            f"--kubeconfig={kubeconfig or runner.kubeconfig}",
            f"--cert-dir={pki.webhook_dir}",
            "--webhook-host=127.0.0.1",
            f"--webhook-port={webhook_port}",
            "--metrics-host=127.0.0.1",
            f"--metrics-port={metrics_port}",
            f"--lease-namespace={GATEKEEPER_NAMESPACE}",
            f"--identity={name}",
            f"--backend={backend}",
            *args,
        ],
    )
    state["processes"][name]["metrics"] = metrics_port
    state["processes"][name]["backend"] = backend
    runner.save(state)
    readyz = f"http://127.0.0.1:{metrics_port}/readyz"
    runner.wait(name, lambda: ready(readyz), timeout=60, what="/readyz")
    if register and name == COMPONENT:
        kubectl.apply(
            [
                mutating_webhook_configuration(
                    url=f"https://127.0.0.1:{webhook_port}", ca_bundle=pki.ca_crt.read_bytes()
                )
            ]
        )


def metrics(runner: Runner, name: str = COMPONENT) -> str:
    """The ``/metrics`` text of the gatekeeper process ``name``."""
    port = runner.load()["processes"][name]["metrics"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return str(r.read().decode())

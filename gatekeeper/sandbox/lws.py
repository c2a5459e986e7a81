"""The LeaderWorkerSet controller in the sandbox, its webhooks served on loopback.

Why this exists: the gatekeeper gates the pods of real LeaderWorkerSets, so the sandbox
runs the LWS controller built from its pinned module. It runs outside the cluster, so
its internal certificate management is off: it serves its webhooks on a loopback port
with the sandbox's webhook certificate, and its webhook configurations (from the
module's ``config/``, see :func:`~gatekeeper.sandbox.manifests.lws_webhooks`) point there
by URL. ``cluster.py`` calls :func:`start` after KWOK.
"""

from __future__ import annotations

from typing import Any

import yaml

from gatekeeper.sandbox import build
from gatekeeper.sandbox.kubectl import Kubectl
from gatekeeper.sandbox.manifests import lws_webhooks
from gatekeeper.sandbox.pki import Pki
from gatekeeper.sandbox.process import Runner, ready

__all__ = ["COMPONENT", "PORTS", "lws_config", "start"]

#: The process name in the sandbox's state and logs.
COMPONENT = "lws-controller"

#: Its ports, by their names in the state's ``ports``.
PORTS = ("lws_webhook", "lws_health")


def lws_config(ports: dict[str, int], pki: Pki) -> dict[str, Any]:
    """The LWS controller's Configuration: one replica, no leader election, loopback only."""
    return {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": ports["lws_webhook"], "host": "127.0.0.1", "certDir": str(pki.webhook_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['lws_health']}"},
        "clientConnection": {"qps": 200, "burst": 400},
    }


def start(runner: Runner, state: dict[str, Any], lws: build.Installed, pki: Pki, kubectl: Kubectl) -> None:
    """Install LWS's CRDs, run its controller, wait for ``/readyz``, register its webhooks."""
    p = state["ports"]
    crd_dir = lws.files / "config" / "crd" / "bases"
    kubectl.apply("\n---\n".join(f.read_text() for f in sorted(crd_dir.glob("*.yaml"))))
    runner.run_dir.mkdir(exist_ok=True)
    cfg_path = runner.run_dir / "lws-config.yaml"
    cfg_path.write_text(yaml.safe_dump(lws_config(p, pki)))
    runner.start(
        state,
        COMPONENT,
        [runner.program("lws-controller"), f"--config={cfg_path}", f"--kubeconfig={runner.kubeconfig}"],
    )
    readyz = f"http://127.0.0.1:{p['lws_health']}/readyz"
    runner.wait(COMPONENT, lambda: ready(readyz), timeout=60, what="/readyz")
    kubectl.apply(lws_webhooks(lws, f"https://127.0.0.1:{p['lws_webhook']}", pki.ca_crt.read_bytes()))

"""The LeaderWorkerSet controller in the sandbox, its webhooks served on loopback.

Why this exists: the gatekeeper gates the pods of real LeaderWorkerSets, so the sandbox
runs the LWS controller built from its pinned module. It runs outside the cluster, so
its internal certificate management is off: it serves its webhooks on a loopback port
with the sandbox's webhook certificate, and its webhook configurations (from the
module's ``config/``, see :func:`~gatekeeper_lab.sandbox.manifests.lws_webhooks`) point there
by URL. ``cluster.py`` calls :func:`start` after KWOK.

LWS's own gang scheduling (``sandbox up --lws-gang-scheduling volcano``): LWS v0.9.0's
Configuration has ``gangSchedulingManagement.schedulerProvider`` (``api/config/v1alpha1``;
``volcano`` is the one provider its ``pkg/schedulerprovider`` knows). With it set, LWS's
pod webhook gives every pod of every LWS the annotation ``scheduling.k8s.io/group-name``
(``<lws>-<group>-<revision>``) and its pod controller, on each leader pod, creates that
Volcano PodGroup (owned by the leader pod): ``minResources`` the whole group,
``minMember`` the group's size, or 1 under ``startupPolicy: LeaderReady``, and the Queue
of the LWS's annotation ``scheduling.volcano.sh/queue-name``. It does not set
``schedulerName``: the LWS's templates must say ``volcano``. The switch is for the whole
cluster, so :func:`reconfigure` restarts the controller to turn it on or off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gatekeeper_lab.sandbox import build
from gatekeeper_lab.sandbox.kubectl import Kubectl
from gatekeeper_lab.sandbox.manifests import lws_webhooks
from gatekeeper_lab.sandbox.pki import Pki, identity_kubeconfig
from gatekeeper_lab.sandbox.process import Runner, ours, ready, stop

__all__ = ["COMPONENT", "GANG_SCHEDULERS", "PORTS", "lws_config", "reconfigure", "start"]

#: The process name in the sandbox's state and logs.
COMPONENT = "lws-controller"
CONTROLLER_USER = "system:serviceaccount:lws-system:lws-controller-manager"
"""The controller's user: that of the ServiceAccount LWS's own manifests run it as (the
StatefulSet guard lets it, and only it, change an LWS's StatefulSets)."""

#: Its ports, by their names in the state's ``ports``.
PORTS = ("lws_webhook", "lws_health")

#: The values LWS v0.9.0 takes as ``gangSchedulingManagement.schedulerProvider``
#: (``SupportedSchedulerProviders``; its config validation refuses any other).
GANG_SCHEDULERS = ("volcano",)

#: Where the sandbox's state records the provider the controller runs with (absent: none).
STATE_KEY = "lws_gang_scheduler"


def lws_config(ports: dict[str, int], pki: Pki, gang_scheduler: str | None = None) -> dict[str, Any]:
    """The LWS controller's Configuration: one replica, no leader election, loopback only;
    with ``gang_scheduler`` (one of :data:`GANG_SCHEDULERS`), LWS's own gang scheduling on."""
    cfg: dict[str, Any] = {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": ports["lws_webhook"], "host": "127.0.0.1", "certDir": str(pki.webhook_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['lws_health']}"},
        "clientConnection": {"qps": 200, "burst": 400},
    }
    if gang_scheduler is not None:
        if gang_scheduler not in GANG_SCHEDULERS:
            raise ValueError(
                f"LWS gang scheduling {gang_scheduler!r}: LWS v0.9.0 knows {', '.join(GANG_SCHEDULERS)}"
            )
        cfg["gangSchedulingManagement"] = {"schedulerProvider": gang_scheduler}
    return cfg


def _write_config(runner: Runner, state: dict[str, Any], pki: Pki, gang_scheduler: str | None) -> Path:
    runner.run_dir.mkdir(exist_ok=True)
    cfg_path = runner.run_dir / "lws-config.yaml"
    cfg_path.write_text(yaml.safe_dump(lws_config(state["ports"], pki, gang_scheduler)))
    if gang_scheduler is None:
        state.pop(STATE_KEY, None)
    else:
        state[STATE_KEY] = gang_scheduler
    return cfg_path


def _wait_ready(runner: Runner, state: dict[str, Any]) -> None:
    readyz = f"http://127.0.0.1:{state['ports']['lws_health']}/readyz"
    runner.wait(COMPONENT, lambda: ready(readyz), timeout=60, what="/readyz")


def start(
    runner: Runner,
    state: dict[str, Any],
    lws: build.Installed,
    pki: Pki,
    kubectl: Kubectl,
    *,
    gang_scheduler: str | None = None,
) -> None:
    """Install LWS's CRDs, run its controller, wait for ``/readyz``, register its webhooks."""
    p = state["ports"]
    crd_dir = lws.files / "config" / "crd" / "bases"
    texts = [f.read_text() for f in sorted(crd_dir.glob("*.yaml"))]
    kubectl.apply("\n---\n".join(texts))  # as its text: YAML 1.1 would read some strings otherwise
    # Established before the controller starts: one started on CRDs still being set up retries its
    # informers only every 10 s, and reconciled no LWS for the first 11 s of a new sandbox.
    kubectl.wait_established([yaml.safe_load(t)["metadata"]["name"] for t in texts])
    cfg_path = _write_config(runner, state, pki, gang_scheduler)
    kubeconfig = identity_kubeconfig(pki, runner.dir, p["apiserver"], COMPONENT, CONTROLLER_USER)
    runner.start(
        state,
        COMPONENT,
        [runner.program("lws-controller"), f"--config={cfg_path}", f"--kubeconfig={kubeconfig}"],
    )
    _wait_ready(runner, state)
    kubectl.apply(lws_webhooks(lws, f"https://127.0.0.1:{p['lws_webhook']}", pki.ca_crt.read_bytes()))


def reconfigure(runner: Runner, state: dict[str, Any], pki: Pki, gang_scheduler: str | None) -> None:
    """Run the controller again with ``gang_scheduler`` (``None``: LWS's gang scheduling off).

    ``state`` is the running sandbox's; the controller is stopped and started with the
    command it was started with, which reads the rewritten configuration file.
    """
    _write_config(runner, state, pki, gang_scheduler)
    info = state["processes"].get(COMPONENT)
    if info is not None and ours(info):
        stop(int(info["pid"]))
    runner.restart(state, COMPONENT)
    _wait_ready(runner, state)

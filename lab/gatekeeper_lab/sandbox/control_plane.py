"""The Kubernetes control plane of the sandbox: kube-apiserver, kube-controller-manager, kube-scheduler.

Why this exists: these three are the real programs built from the pinned Kubernetes
module, run on loopback with the sandbox's certificates (``pki.py``) and its admin
kubeconfig. ``cluster.py`` writes the kubeconfig (:func:`write_kubeconfig`), starts them
in order after etcd and asks :func:`apiserver_ready` whether the sandbox is up.
"""

from __future__ import annotations

import ssl
from typing import Any

import yaml

from gatekeeper_lab.sandbox.pki import Pki, identity_kubeconfig, write_kubeconfig
from gatekeeper_lab.sandbox.process import Runner, ready

__all__ = [
    "APISERVER",
    "AUDIT_LOG",
    "CONTROLLER_MANAGER",
    "FLAGGED_BY",
    "NATIVE_GANG",
    "NATIVE_GANG_API",
    "NATIVE_GANG_GATE",
    "PORTS",
    "SCHEDULER",
    "apiserver_ready",
    "start_apiserver",
    "start_controller_manager",
    "start_scheduler",
    "write_kubeconfig",
]

#: The process names in the sandbox's state and logs.
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"

#: Their ports, by their names in the state's ``ports``.
PORTS = ("apiserver", "scheduler", "kcm")

#: The state key of Kubernetes' native gang scheduling (the Workload API: Workload and PodGroup
#: in ``scheduling.k8s.io/v1beta1``, a pod's ``spec.schedulingGroup``). Beta and off by default
#: in Kubernetes 1.37: the API server serves it with the gate and the API version on, the
#: scheduler gang-schedules a PodGroup (its GangScheduling plugin) and the controller manager
#: runs the PodGroup protection controller with the gate on. Without the gate a scheduler
#: places such pods one by one, and an API server drops ``schedulingGroup`` from new pods.
NATIVE_GANG = "native_gang"
NATIVE_GANG_GATE = "GenericWorkload"
NATIVE_GANG_API = "scheduling.k8s.io/v1beta1"

#: Which programs each control-plane setting of the state changes the flags of.
FLAGGED_BY = {
    "audit": (APISERVER,),
    NATIVE_GANG: (APISERVER, CONTROLLER_MANAGER, SCHEDULER),
}

#: The API server's audit log (JSON lines, in the log folder) when the sandbox was started
#: with ``audit``: one line per write (create, update, patch, delete) by anyone, with its
#: user, user agent and time, and no request bodies. Reads are not logged.
AUDIT_LOG = "audit.log"

_AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "verbs": ["get", "list", "watch"]},
        {"level": "Metadata"},
    ],
}


def _audit_flags(runner: Runner) -> list[str]:
    runner.run_dir.mkdir(exist_ok=True)
    policy = runner.run_dir / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(_AUDIT_POLICY))
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={runner.log_dir / AUDIT_LOG}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
    ]


def apiserver_ready(port: int | None, pki: Pki) -> bool:
    """Does the API server on ``port`` answer ``/readyz`` to the admin?"""
    if not port:
        return False
    ctx = ssl.create_default_context(cafile=str(pki.ca_crt))
    ctx.load_cert_chain(str(pki.admin_crt), str(pki.admin_key))
    return ready(f"https://127.0.0.1:{port}/readyz", context=ctx, timeout=2)


def _gates(state: dict[str, Any], *, apiserver: bool = False) -> list[str]:
    """The feature-gate (and, for the API server, API version) flags the state asks."""
    if not state.get(NATIVE_GANG):
        return []
    flags = [f"--feature-gates={NATIVE_GANG_GATE}=true"]
    return [*flags, f"--runtime-config={NATIVE_GANG_API}=true"] if apiserver else flags


def start_apiserver(runner: Runner, state: dict[str, Any], pki: Pki) -> None:
    """Run the API server against etcd and wait until it answers ``/readyz``; with the
    state's ``audit`` set, it writes :data:`AUDIT_LOG`."""
    p = state["ports"]
    runner.start(
        state,
        APISERVER,
        [
            runner.program("kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # A loopback advertise address is refused by the endpoint reconciler; nothing
            # reaches the API server through the `kubernetes` Service here anyway.
            "--endpoint-reconciler-type=none",
            f"--secure-port={p['apiserver']}",
            f"--tls-cert-file={pki.apiserver_crt}",
            f"--tls-private-key-file={pki.apiserver_key}",
            f"--client-ca-file={pki.ca_crt}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            "--enable-priority-and-fairness=false",
            "--max-requests-inflight=1000",
            "--max-mutating-requests-inflight=500",
            "--profiling=false",
            "--event-ttl=2h",
            *(_audit_flags(runner) if state.get("audit") else []),
            *_gates(state, apiserver=True),
        ],
    )
    runner.wait(
        APISERVER,
        lambda: apiserver_ready(p["apiserver"], pki),
        timeout=90,
        what="the API server to answer /readyz",
    )


CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
"""kube-controller-manager's user, as a real cluster's (the garbage collector acts as it)."""


def start_controller_manager(runner: Runner, state: dict[str, Any], pki: Pki) -> None:
    """Run every controller of kube-controller-manager (it signs tokens with the sandbox's key)."""
    kubeconfig = identity_kubeconfig(
        pki, runner.dir, state["ports"]["apiserver"], "kube-controller-manager", CONTROLLER_MANAGER_USER
    )
    runner.start(
        state,
        CONTROLLER_MANAGER,
        [
            runner.program("kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={state['ports']['kcm']}",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca_crt}",
            "--use-service-account-credentials=false",
            "--controllers=*",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            "--concurrent-statefulset-syncs=10",
            "--concurrent-gc-syncs=20",
            *_gates(state),
        ],
    )


def start_scheduler(runner: Runner, state: dict[str, Any]) -> None:
    """Run kube-scheduler with the admin identity."""
    runner.start(
        state,
        SCHEDULER,
        [
            runner.program("kube-scheduler"),
            f"--kubeconfig={runner.kubeconfig}",
            f"--authentication-kubeconfig={runner.kubeconfig}",
            f"--authorization-kubeconfig={runner.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={state['ports']['scheduler']}",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            *_gates(state),
        ],
    )

"""The real Volcano scheduler in the sandbox: its CRDs and ``vc-scheduler`` against our API server.

Why this exists: the ``volcano`` backend is judged against the real Volcano, so
``sandbox up --with-volcano`` runs Volcano's scheduler built from its Go module
(``pins.toml``, component ``volcano``), the way ``kueue.py`` runs Kueue. ``cluster.py``
only calls :func:`start_volcano`.

What is run, and why only that: Volcano's scheduler alone gang-schedules a PodGroup.
Its cache reads PodGroups and Queues, its ``enqueue`` action moves a PodGroup from
``Pending`` to ``Inqueue`` when ``minResources`` fits the Queue (the ``proportion``
plugin), ``allocate`` binds its pods when ``minMember`` of them fit the nodes (``gang``),
and it writes the PodGroup's status, conditions and events itself. It also makes the
Queue ``default`` when it is missing. The controller-manager (vcjob, a PodGroup for a
pod that has none, Queue status counts) and the webhook-manager (admission of vcjobs,
PodGroups and Queues) are not needed for PodGroups that someone else writes, and are not
built.

Kubernetes 1.37 and a scheduler built against the 1.30 libraries: of the APIs its
informers read, only ``storage.k8s.io/v1beta1`` CSIStorageCapacities is gone (it is
served no more since 1.27); the scheduler reads it only with ``--csi-storage``, which is
off by default and is passed as off here, so no informer waits for an API that is not
served. Leader election is off (one replica), so is the cache dumper (it would write
to ``/tmp`` on a signal); its health server binds loopback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gatekeeper_lab.sandbox import build
from gatekeeper_lab.sandbox.kubectl import Kubectl
from gatekeeper_lab.sandbox.process import Runner, free_ports, ready

__all__ = [
    "COMPONENT",
    "SCHEDULER_NAME",
    "scheduler_config",
    "start_volcano",
    "volcano_crds",
]

#: The process name in the sandbox's state and logs (``logs/volcano-scheduler.log``).
COMPONENT = "volcano-scheduler"

#: ``spec.schedulerName`` of the pods Volcano schedules.
SCHEDULER_NAME = "volcano"


def scheduler_config() -> dict[str, Any]:
    """Volcano's scheduler configuration: enqueue, allocate, backfill; gang and proportion.

    The first tier orders and gangs jobs (``priority``, ``gang``, ``conformance``); the
    second shares Queues by their ``capability`` (``proportion``) and places pods
    (``predicates``, ``nodeorder``, ``binpack``). As Volcano's own chart, less ``drf``
    and ``overcommit``: overcommit would let ``enqueue`` admit PodGroups beyond the
    cluster's size, which the sandbox's tests must see refused.
    """
    return {
        "actions": "enqueue, allocate, backfill",
        "tiers": [
            {
                "plugins": [
                    {"name": "priority"},
                    {"name": "gang", "enablePreemptable": False},
                    {"name": "conformance"},
                ]
            },
            {
                "plugins": [
                    {"name": "proportion"},
                    {"name": "predicates"},
                    {"name": "nodeorder"},
                    {"name": "binpack"},
                ]
            },
        ],
    }


def volcano_crds(installed: build.Installed) -> list[Path]:
    """The CRD files the module ships (PodGroup, Queue, vcjob, Command, Numatopology)."""
    folder = installed.files / "config" / "crd" / "volcano" / "bases"
    return sorted(folder.glob("*.yaml"))


def start_volcano(
    runner: Runner, state: dict[str, Any], installed: build.Installed, kubectl: Kubectl
) -> None:
    """Install Volcano's CRDs, run ``vc-scheduler`` as ``volcano-scheduler``, wait for /healthz.

    ``state`` is the sandbox's state being built by ``up``; Volcano's port is added to it.
    """
    ports = state["ports"]
    if "volcano_health" not in ports:
        ports["volcano_health"] = free_ports(1)[0]
    crds = volcano_crds(installed)
    kubectl.apply("\n---\n".join(f.read_text() for f in crds))
    names = [f"crd/{yaml.safe_load(f.read_text())['metadata']['name']}" for f in crds]
    kubectl.wait_established(names)

    run = runner.run_dir
    run.mkdir(exist_ok=True)
    conf = run / "volcano-scheduler.conf"
    conf.write_text(yaml.safe_dump(scheduler_config(), sort_keys=False))
    runner.start(
        state,
        COMPONENT,
        [
            runner.program("vc-scheduler"),
            f"--kubeconfig={runner.kubeconfig}",
            f"--scheduler-conf={conf}",
            f"--scheduler-name={SCHEDULER_NAME}",
            "--leader-elect=false",
            "--csi-storage=false",
            "--cache-dumper=false",
            "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{ports['volcano_health']}",
            "--schedule-period=1s",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            "--logtostderr",
            "-v=3",
        ],
    )
    runner.save(state)
    healthz = f"http://127.0.0.1:{ports['volcano_health']}/healthz"
    runner.wait(COMPONENT, lambda: ready(healthz), timeout=90, what="/healthz")

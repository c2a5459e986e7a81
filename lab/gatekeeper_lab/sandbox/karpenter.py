"""The real Karpenter in the sandbox: its CRDs, its KWOK cloud provider, GPU instance types.

Why this exists: autoscaled pools are judged against a real node autoscaler, and Karpenter
is one that builds from its Go module here (``pins.toml``; Cluster Autoscaler does not).
Its KWOK cloud provider (the module's ``kwok/`` main package) turns each NodeClaim into a
Node annotated ``kwok.x-k8s.io/node=fake``, the annotation the sandbox's KWOK manages
(``kwok.py``), so a node Karpenter buys turns Ready like the sandbox's static ones and
pods bind on it. ``sandbox up --with-karpenter`` calls :func:`start_karpenter`; the
end-to-end tests make NodePools over :data:`NODE_CLASS`.

How it is run, as read from the module's source (v1.14.1):

- Instance types come from a JSON file (``--instance-types-file-path``), read once at
  start; every offering in it is made available (``setDefaultOptions``), so a type can be
  taken away only by a new file and a restart. :func:`instance_types` writes the GPU
  types below, each offered on-demand and spot in :data:`ZONE`.
- Leader election is off (one replica, nothing to elect). The core operator has no
  system-namespace setting and no check of the Kubernetes version (that check lives in
  the AWS provider), so it runs against Kubernetes 1.37 as it is.
- The metrics and health servers bind every interface on the given ports (the operator
  formats ``:<port>``; there is no host setting); the sandbox picks free ports.
- A KWOKNodeClass is Ready by its CRD's status default; Karpenter refuses to launch for a
  NodePool whose node class is missing, so ``up`` makes :data:`NODE_CLASS`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gatekeeper_lab.sandbox import build
from gatekeeper_lab.sandbox.kubectl import Kubectl
from gatekeeper_lab.sandbox.process import Runner, free_ports, ready

__all__ = [
    "COMPONENT",
    "GPU_TYPES",
    "NODE_CLASS",
    "ZONE",
    "InstanceType",
    "instance_types",
    "karpenter_argv",
    "karpenter_crds",
    "node_class",
    "start_karpenter",
    "types_file_of",
]

#: The process name in the sandbox's state and logs (``logs/karpenter.log``).
COMPONENT = "karpenter"

#: The one zone every offering is in.
ZONE = "sandbox-zone-a"

#: The KWOKNodeClass ``up`` makes; a NodePool names it in ``spec.template.spec.nodeClassRef``.
NODE_CLASS = "default"

#: Karpenter's API groups.
NODE_CLASS_GROUP = "karpenter.kwok.sh"
NODE_CLASS_KIND = "KWOKNodeClass"


InstanceType = dict[str, Any]

#: What Karpenter's KWOK provider reserves on each node it makes (``helpers.go``: kube-reserved).
KWOK_OVERHEAD = {"cpu": "100m", "memory": "10Mi"}


def _offering(capacity_type: str, price: float) -> dict[str, Any]:
    return {
        "Price": price,
        "Available": True,
        "Requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [capacity_type]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [ZONE]},
        ],
    }


def _gpu_type(name: str, *, cpu: int, memory: str, gpus: int, on_demand: float, spot: float) -> InstanceType:
    return {
        "name": name,
        "offerings": [_offering("on-demand", on_demand), _offering("spot", spot)],
        "architecture": "amd64",
        "operatingSystems": ["linux"],
        "resources": {
            "cpu": str(cpu),
            "memory": memory,
            "ephemeral-storage": "100Gi",
            "pods": "110",
            "nvidia.com/gpu": str(gpus),
        },
        # What the KWOK provider keeps on each node it makes (its kube-reserved): the
        # gatekeeper reads it here, the provider ignores the field.
        "overhead": KWOK_OVERHEAD,
    }


#: The GPU instance types of the sandbox's cloud: AWS's g4dn.xlarge (1 T4) and
#: g4dn.metal (8 T4), at their on-demand prices and a spot price below.
GPU_TYPES: tuple[InstanceType, ...] = (
    _gpu_type("g4dn.xlarge", cpu=4, memory="16Gi", gpus=1, on_demand=0.526, spot=0.2104),
    _gpu_type("g4dn.metal", cpu=96, memory="384Gi", gpus=8, on_demand=7.824, spot=3.1296),
)


def instance_types() -> str:
    """The instance-type file Karpenter's KWOK provider reads (the format of its ``examples/``)."""
    return json.dumps(list(GPU_TYPES), indent=2)


def node_class(name: str = NODE_CLASS) -> dict[str, Any]:
    """A KWOKNodeClass that registers its nodes at once (no ``nodeRegistrationDelay``)."""
    return {"apiVersion": f"{NODE_CLASS_GROUP}/v1alpha1", "kind": NODE_CLASS_KIND, "metadata": {"name": name}}


def karpenter_crds(installed: build.Installed) -> list[str]:
    """Paths of the CRDs the module ships: NodePool, NodeClaim, NodeOverlay, CapacityBuffer, KWOKNodeClass.

    All of ``pkg/apis/crds`` goes in, not only the two the provisioner needs: the
    operator's caches may index the others, and an API that is not served stops it.
    """
    folders = (installed.files / "pkg" / "apis" / "crds", installed.files / "kwok" / "apis" / "crds")
    return [str(p) for folder in folders for p in sorted(folder.glob("*.yaml"))]


def types_file_of(runner: Runner) -> Path:
    """Where ``up`` writes the instance-type file (the gatekeeper reads it too)."""
    return runner.run_dir / "karpenter-instance-types.json"


def karpenter_argv(runner: Runner, ports: dict[str, int], types_file: str) -> list[str]:
    """The command that runs Karpenter with the KWOK provider against the sandbox."""
    return [
        runner.program("karpenter"),
        f"--instance-types-file-path={types_file}",
        "--disable-leader-election",
        f"--metrics-port={ports['karpenter_metrics']}",
        f"--health-probe-port={ports['karpenter_health']}",
        # Pods that turn Pending together are planned together; a short batch keeps the
        # tests' launches quick (defaults: 10 s at most, 1 s idle).
        "--batch-max-duration=3s",
        "--batch-idle-duration=1s",
        "--log-level=info",
    ]


def start_karpenter(
    runner: Runner, state: dict[str, Any], installed: build.Installed, kubectl: Kubectl
) -> None:
    """Install Karpenter's CRDs, run it as ``karpenter``, wait for ``/readyz``, make the node class.

    ``state`` is the sandbox's state being built by ``up``; Karpenter's ports are added to it.
    KUBECONFIG (the runner's environment) is how it finds the API server.
    """
    ports = state["ports"]
    names = [n for n in ("karpenter_metrics", "karpenter_health") if n not in ports]
    ports.update(zip(names, free_ports(len(names)), strict=True))
    crds = karpenter_crds(installed)
    kubectl.run(
        "apply", "--server-side", "--force-conflicts", "--field-manager=sandbox", *(f"-f={p}" for p in crds)
    )
    kubectl.wait_established(
        ["nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "kwoknodeclasses.karpenter.kwok.sh"]
    )
    kubectl.apply([node_class()])
    runner.run_dir.mkdir(exist_ok=True)
    types_file = types_file_of(runner)
    types_file.write_text(instance_types())
    runner.start(state, COMPONENT, karpenter_argv(runner, ports, str(types_file)))
    readyz = f"http://127.0.0.1:{ports['karpenter_health']}/readyz"
    runner.wait(COMPONENT, lambda: ready(readyz), timeout=120, what="/readyz (its caches synced)")

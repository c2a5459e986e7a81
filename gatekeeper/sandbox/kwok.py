"""KWOK in the sandbox: fake nodes whose pods turn Running and Ready without a kubelet.

Why this exists: the gatekeeper's claims are about pods being scheduled onto GPU nodes
and becoming Ready, and our machines run no kubelet. KWOK manages only the nodes that
carry :data:`~gatekeeper.sandbox.manifests.KWOK_NODE_ANNOTATION` (made by
:func:`~gatekeeper.sandbox.manifests.fake_node`) and plays their pods through the fast
stages shipped in its module. ``cluster.py`` calls :func:`start` once the control plane runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gatekeeper.sandbox import build
from gatekeeper.sandbox.manifests import KWOK_NODE_ANNOTATION
from gatekeeper.sandbox.process import Runner

__all__ = ["COMPONENT", "stage_files", "start"]

#: The process name in the sandbox's state and logs.
COMPONENT = "kwok"


def stage_files(kwok: build.Installed) -> list[Path]:
    """KWOK's stage configurations the sandbox uses: fast nodes with leases, fast pods."""
    stages = kwok.files / "kustomize" / "stage"
    files = (
        sorted((stages / "node" / "fast").glob("*.yaml"))
        + sorted((stages / "node" / "heartbeat-with-lease").glob("*.yaml"))
        + sorted((stages / "pod" / "fast").glob("*.yaml"))
    )
    return [p for p in files if p.name != "kustomization.yaml"]


def start(runner: Runner, state: dict[str, Any], kwok: build.Installed) -> None:
    """Run KWOK for the annotated nodes with the stages of :func:`stage_files`."""
    runner.start(
        state,
        COMPONENT,
        [
            runner.program("kwok"),
            f"--kubeconfig={runner.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
            "--node-lease-duration-seconds=40",
            "--cidr=10.244.0.1/16",
            *[f"--config={p}" for p in stage_files(kwok)],
        ],
    )

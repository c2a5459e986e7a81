"""KWOK in the sandbox: fake nodes whose pods turn Running and Ready without a kubelet.

Why this exists: the gatekeeper's claims are about pods being scheduled onto GPU nodes
and becoming Ready, and our machines run no kubelet. KWOK manages only the nodes that
carry :data:`~gatekeeper_lab.sandbox.manifests.KWOK_NODE_ANNOTATION` (made by
:func:`~gatekeeper_lab.sandbox.manifests.fake_node`) and plays their pods through the fast
stages shipped in its module, with one change: a pod turns Ready after the delay its
annotation :data:`READY_DELAY_ANNOTATION` names (none by default), as a model server turns
Ready only once it has loaded its weights. ``cluster.py`` calls :func:`start` once the
control plane runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gatekeeper_lab.sandbox import build
from gatekeeper_lab.sandbox.manifests import KWOK_NODE_ANNOTATION
from gatekeeper_lab.sandbox.process import Runner

__all__ = ["COMPONENT", "READY_DELAY_ANNOTATION", "ready_after", "stage_files", "start"]

#: The process name in the sandbox's state and logs.
COMPONENT = "kwok"

READY_DELAY_ANNOTATION = "pod-ready.stage.kwok.x-k8s.io/delay"
"""A pod annotation: how long after it is bound its pod turns Ready (a Go duration, ``8s``).
KWOK's own general stages read the same key; the sandbox's fast ones are given it."""


def ready_after(stage: dict[str, Any]) -> dict[str, Any]:
    """KWOK's fast ``pod-ready`` stage, made to wait for the pod's
    :data:`READY_DELAY_ANNOTATION` (no wait without it)."""
    spec = dict(stage["spec"])
    spec["delay"] = {
        "durationMilliseconds": 0,
        "durationFrom": {"jq": {"expression": f'.metadata.annotations["{READY_DELAY_ANNOTATION}"]'}},
    }
    return {**stage, "spec": spec}


def stage_files(kwok: build.Installed, scratch: Path) -> list[Path]:
    """KWOK's stage configurations the sandbox uses: fast nodes with leases, fast pods (their
    ``pod-ready`` stage rewritten by :func:`ready_after` into ``scratch``)."""
    stages = kwok.files / "kustomize" / "stage"
    files = (
        sorted((stages / "node" / "fast").glob("*.yaml"))
        + sorted((stages / "node" / "heartbeat-with-lease").glob("*.yaml"))
        + sorted((stages / "pod" / "fast").glob("*.yaml"))
    )
    used: list[Path] = []
    for path in files:
        if path.name == "kustomization.yaml":
            continue
        if path == stages / "pod" / "fast" / "pod-ready.yaml":
            scratch.mkdir(parents=True, exist_ok=True)
            rewritten = scratch / "kwok-pod-ready.yaml"
            rewritten.write_text(
                yaml.safe_dump(ready_after(yaml.safe_load(path.read_text())), sort_keys=False)
            )
            path = rewritten
        used.append(path)
    return used


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
            *[f"--config={p}" for p in stage_files(kwok, runner.run_dir)],
        ],
    )

"""Kubernetes' native gang scheduling in the sandbox (``sandbox up --native-gang``): the real
kube-scheduler binds a PodGroup's pods all together or none.

Why this exists: atomic binding through the Workload API (``scheduling.k8s.io/v1beta1``
PodGroup, a pod's ``spec.schedulingGroup``; Beta and off by default in Kubernetes 1.37) is
what a gang-scheduling mode of the gatekeeper would build on. These tests pin down, on the
sandbox's own control plane, what that mode may rely on: the API is served, a pod keeps its
``schedulingGroup``, a gang of four on three nodes' room binds none (where four plain pods
bind three), and it binds whole once a fourth node comes.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from gatekeeper_lab.sandbox.cluster import Sandbox, fake_node

GANG_API = "scheduling.k8s.io/v1beta1"
HELD_SECONDS = 8
"""How long a gang that cannot fit is watched unbound: several scheduling attempts."""


def _pod(name: str, ns: str, tag: str, group: str | None) -> dict[str, Any]:
    res = {"nvidia.com/gpu": "1", "cpu": "100m"}
    spec: dict[str, Any] = {
        "nodeSelector": {"gang-test": tag},
        "containers": [{"name": "c", "image": "x", "resources": {"requests": res, "limits": res}}],
    }
    if group is not None:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def _pods(sb: Sandbox, ns: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(sb.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)[
        "items"
    ]
    return found


def _bound(sb: Sandbox, ns: str, prefix: str) -> int:
    return sum(
        1 for p in _pods(sb, ns) if p["metadata"]["name"].startswith(prefix) and p["spec"].get("nodeName")
    )


def _wait(what: str, probe: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def test_a_pod_group_binds_all_its_pods_or_none(native_gang_sandbox: Sandbox) -> None:
    sb = native_gang_sandbox
    tag = "g" + uuid.uuid4().hex[:6]
    served = sb.kubectl("api-resources", f"--api-group={GANG_API.split('/')[0]}", "-o", "name").stdout.split()
    assert "podgroups.scheduling.k8s.io" in served and "workloads.scheduling.k8s.io" in served, served
    ns = f"gang-{tag}"
    sb.kubectl("create", "namespace", ns)
    sb.create_nodes([fake_node(f"{tag}-{i}", gpus=1, labels={"gang-test": tag}) for i in range(3)])
    group = {
        "apiVersion": GANG_API,
        "kind": "PodGroup",
        "metadata": {"name": "four", "namespace": ns},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}},
    }
    sb.apply([group, *(_pod(f"gang-{i}", ns, tag, "four") for i in range(4))])
    made = {p["metadata"]["name"]: p for p in _pods(sb, ns)}
    assert all(made[f"gang-{i}"]["spec"].get("schedulingGroup") == {"podGroupName": "four"} for i in range(4))

    # Four plain pods on the same three nodes' room beside them would bind three: the gang binds none.
    time.sleep(HELD_SECONDS)
    assert _bound(sb, ns, "gang-") == 0, [
        (p["metadata"]["name"], p["spec"].get("nodeName")) for p in _pods(sb, ns)
    ]

    sb.create_nodes([fake_node(f"{tag}-3", gpus=1, labels={"gang-test": tag})])
    _wait("the gang bound whole once a fourth node came", lambda: _bound(sb, ns, "gang-") == 4)


def test_plain_pods_beside_it_bind_one_by_one(native_gang_sandbox: Sandbox) -> None:
    """The same four pods without a PodGroup, on three nodes' room: three bind, one waits."""
    sb = native_gang_sandbox
    tag = "p" + uuid.uuid4().hex[:6]
    ns = f"plain-{tag}"
    sb.kubectl("create", "namespace", ns)
    sb.create_nodes([fake_node(f"{tag}-{i}", gpus=1, labels={"gang-test": tag}) for i in range(3)])
    sb.apply([_pod(f"plain-{i}", ns, tag, None) for i in range(4)])
    _wait("three plain pods bound", lambda: _bound(sb, ns, "plain-") == 3)
    time.sleep(2)
    assert _bound(sb, ns, "plain-") == 3

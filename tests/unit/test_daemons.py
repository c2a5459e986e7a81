"""``core.model.daemons``: the DaemonSets' pods on a node Karpenter would launch take its room.

A DaemonSet's pod goes to a node its node selector, required node affinity and tolerations
allow (condition taints aside: DaemonSet pods tolerate them); its requests and one pod slot
come off the node's allocatable, on every type a NodePool may launch and on a NodeClaim
still coming up. A group that fits a type only without them is not launched onto it. A
DaemonSet that cannot be read is named, and the others still count; the cached view gives
the same answer as the object.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_core_provisioning import GPU, TYPES, accepts_all, claim, node_pool, pods

from gatekeeper.core.backends.pools.provisioning import (
    Launcher,
    coming_up,
    parse_node_claim,
    parse_node_pool,
    read_launcher,
)
from gatekeeper.core.kube.parsed import Parsed, ParseMemo
from gatekeeper.core.kube.selectors import parse_taints
from gatekeeper.core.model.daemons import daemon_overhead, daemon_set_view, less_daemons, parse_daemon_set
from gatekeeper.core.model.nodes import Node


def daemon_set(name: str, cpu: str = "1", memory: str = "1Gi", **spec: Any) -> dict[str, Any]:
    container = {"name": "agent", "image": "agent", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    pod_spec: dict[str, Any] = {"containers": [container], **spec}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system", "uid": f"u-{name}", "resourceVersion": "1"},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": {"metadata": {}, "spec": pod_spec}},
    }


GPU_NODE = Node(
    "n",
    {"pool": "a", "kubernetes.io/os": "linux"},
    {"cpu": 4000, "memory": 16 * 1024**3, GPU: 1, "pods": 110},
    parse_taints(
        [
            {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        ]
    ),
)
TOLERATES_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.mark.parametrize(
    ("daemon", "takes"),
    [
        pytest.param(daemon_set("logs", tolerations=TOLERATES_GPU), True, id="tolerates-the-taint"),
        pytest.param(daemon_set("logs"), False, id="kept-off-by-the-taint"),
        pytest.param(
            daemon_set("logs", tolerations=[{"operator": "Exists"}]), True, id="tolerates-everything"
        ),
        pytest.param(
            daemon_set("logs", tolerations=TOLERATES_GPU, nodeSelector={"pool": "b"}),
            False,
            id="another-pool",
        ),
        pytest.param(
            daemon_set(
                "logs",
                tolerations=TOLERATES_GPU,
                affinity={
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "kubernetes.io/os", "operator": "In", "values": ["windows"]}
                                    ]
                                }
                            ]
                        }
                    }
                },
            ),
            False,
            id="affinity-elsewhere",
        ),
    ],
)
def test_a_daemon_set_takes_room_on_the_nodes_it_goes_to(daemon: dict[str, Any], takes: bool) -> None:
    pod = parse_daemon_set(daemon)
    assert daemon_overhead([pod], GPU_NODE) == ({"cpu": 1000, "memory": 1024**3, "pods": 1} if takes else {})
    room = less_daemons(GPU_NODE, [pod]).allocatable
    assert room["cpu"] == (3000 if takes else 4000) and room["pods"] == (109 if takes else 110)
    assert parse_daemon_set(daemon_set_view(daemon)) == pod, "the cached view reads the same"


def _launcher(daemons: list[dict[str, Any]], problems: list[str] | None = None) -> Launcher:
    """The NodePool ``np`` (16 GPUs, untainted) with these DaemonSets, as the pass reads them."""
    pools = ParseMemo(parse_node_pool)([node_pool(gpus=16)])
    parsed = ParseMemo(parse_daemon_set)(daemons)
    return read_launcher(pools, Parsed(), TYPES, [], problems if problems is not None else [], parsed)[0]


def test_a_group_that_fits_a_type_only_without_the_daemons_is_not_launched_onto_it() -> None:
    """The 1-GPU type has 3.9 cpu for pods (4 less the KWOK overhead): a pod asking 3 cpu
    fits it alone, not beside a DaemonSet pod of 1 cpu; then only the 8-GPU type holds it."""
    group = pods(1, resources={"requests": {"cpu": "3"}})
    alone = _launcher([]).launch(["np"], group.pods, accepts_all)
    assert isinstance(alone, tuple) and alone[0].instance_type == "g4dn.xlarge"
    crowded = _launcher([daemon_set("agent", tolerations=[{"operator": "Exists"}])]).launch(
        ["np"], group.pods, accepts_all
    )
    assert isinstance(crowded, tuple) and crowded[0].instance_type == "g4dn.metal"
    assert crowded[0].node.allocatable["cpu"] == 96_000 - 100 - 1000, "the node's room is less the agent"


def test_a_node_claim_coming_up_loses_the_room_its_daemons_will_take() -> None:
    agent = parse_daemon_set(daemon_set("agent", cpu="900m", tolerations=[{"operator": "Exists"}]))
    [up] = coming_up([parse_node_claim(claim("c1", registered=False))], [], [agent])
    assert up.allocatable["cpu"] == 3000 and up.allocatable["pods"] == 109


def test_an_unreadable_daemon_set_is_named_and_the_others_count() -> None:
    problems: list[str] = []
    karp = _launcher(
        [daemon_set("bad", cpu="lots"), daemon_set("agent", cpu="3", tolerations=[{"operator": "Exists"}])],
        problems,
    )
    assert any("kube-system/bad" in p for p in problems), problems
    got = karp.launch(["np"], pods(1, resources={"requests": {"cpu": "1"}}).pods, accepts_all)
    assert isinstance(got, tuple) and got[0].instance_type == "g4dn.metal", "the readable agent still counts"

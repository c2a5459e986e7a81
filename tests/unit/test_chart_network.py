"""The chart's NetworkPolicy: only the webhook and metrics ports are open, the pod CIDRs kept out."""

from __future__ import annotations

from pathlib import Path

import pytest

from gatekeeper_lab.sandbox import build
from tests.unit.test_chart import one, template


@pytest.fixture(scope="module")
def helm() -> Path:
    return build.build_all(["helm"])["helm"].bin / "helm"


def test_network_policy_opens_only_the_two_ports(helm: Path) -> None:
    objects = template(helm, "--set", "webhook.networkPolicy.podCIDRs={10.244.0.0/16}")
    policy = one(objects, "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    webhook, metrics = policy["ingress"]
    assert webhook["ports"] == [{"port": 9443, "protocol": "TCP"}]
    assert webhook["from"] == [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/16"]}}]
    assert metrics == {"ports": [{"port": 8080, "protocol": "TCP"}], "from": [{"namespaceSelector": {}}]}


def test_network_policy_can_be_left_out(helm: Path) -> None:
    objects = template(helm, "--set", "webhook.networkPolicy.enabled=false")
    assert not [o for o in objects if o["kind"] == "NetworkPolicy"]

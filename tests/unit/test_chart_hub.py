"""The chart with ``role=hub``: what the cluster holding the shared Reservations gets.

Rendered by the real helm (as ``test_chart.py`` renders the member): the hub's CRDs, the hub
gatekeeper (``run --role=hub``, no webhook), its RBAC and nothing more, the members' RBAC for
their group, and the policies of ``policies/hub-member-claims.yaml``. That these objects let a
hub grant claims, and hold members to their own, is shown on the sandbox's hub by
``tests/e2e/test_chart_hub.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_chart import NAMESPACE, kinds, one, refusal, rules, template, without_chart_metadata

from gatekeeper.render.admission import HUB_POLICY_FILES, load_policies
from gatekeeper_lab.sandbox import build
from gatekeeper_lab.sandbox.manifests import hub_member_rbac

HUB = ("--set", "role=hub")


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    return build.build_all(["helm"])["helm"].bin / "helm"


@pytest.fixture(scope="session")
def hub(helm_bin: Path) -> list[dict[str, Any]]:
    return template(helm_bin, *HUB)


def test_a_hub_release_has_the_hubs_objects_and_no_members(hub: list[dict[str, Any]]) -> None:
    assert kinds(hub) == sorted(
        [
            *["ClusterRole", "ClusterRoleBinding"] * 2,
            *["CustomResourceDefinition"] * 2,
            "Deployment",
            "NetworkPolicy",
            "PodDisruptionBudget",
            *["Role", "RoleBinding"] * 2,
            "Service",
            "ServiceAccount",
            *["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 3,
        ]
    )
    crds = sorted(o["metadata"]["name"] for o in hub if o["kind"] == "CustomResourceDefinition")
    assert crds == ["reservationclaims.lws-gatekeeper.io", "reservations.lws-gatekeeper.io"]


def test_the_hub_gatekeeper_runs_the_hub_role_only(hub: list[dict[str, Any]]) -> None:
    [c] = one(hub, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert c["args"] == [
        "run",
        "--role=hub",
        "--metrics-port=8080",
        "--leader-elect",
        "--lease-name=lws-gatekeeper",
        "--identity=$(POD_NAME)",
        "--resync-seconds=10",
        "--drain-seconds=20",
        "--log-level=INFO",
        "--log-format=json",
    ]
    assert [p["name"] for p in c["ports"]] == ["metrics"]
    assert [m["mountPath"] for m in c["volumeMounts"]] == ["/tmp"]


def test_the_hub_gatekeepers_rbac_is_what_the_hub_controller_uses(hub: list[dict[str, Any]]) -> None:
    """controller/hub.py: informers on Reservations, claims and the members' heartbeat Leases;
    status patches; a claim it is unsure of read and fenced (get, patch); its own Lease."""
    own = [o for o in hub if o["metadata"]["name"] == "lws-gatekeeper"]
    assert rules(own, "ClusterRole") == sorted(
        [
            ("coordination.k8s.io", "leases", ("list", "watch"), ()),
            ("lws-gatekeeper.io", "reservationclaims", ("list", "watch", "get", "patch"), ()),
            ("lws-gatekeeper.io", "reservationclaims/status", ("patch",), ()),
            ("lws-gatekeeper.io", "reservations", ("list", "watch"), ()),
            ("lws-gatekeeper.io", "reservations/status", ("patch",), ()),
        ]
    )
    assert rules(own, "Role") == [
        ("coordination.k8s.io", "leases", ("create",), ()),
        ("coordination.k8s.io", "leases", ("get", "update"), ("lws-gatekeeper",)),
    ]


def test_the_members_rbac_is_bound_to_their_group(helm_bin: Path) -> None:
    objs = template(helm_bin, *HUB, "--set", "hub.membersGroup=fleet:members")
    member = [o for o in objs if o["metadata"]["name"] == "lws-gatekeeper-member"]
    assert rules(member, "ClusterRole") == sorted(
        [
            ("lws-gatekeeper.io", "reservationclaims", ("get", "list", "watch", "create", "delete"), ()),
            ("lws-gatekeeper.io", "reservations", ("get", "list", "watch"), ()),
        ]
    )
    assert rules(member, "Role") == [("coordination.k8s.io", "leases", ("get", "create", "update"), ())]
    assert one(member, "Role")["metadata"]["namespace"] == NAMESPACE, "heartbeats in the hub's namespace"
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        assert one(member, kind)["subjects"] == [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "fleet:members"}
        ]


def test_the_hub_policies_are_the_files_of_policies(hub: list[dict[str, Any]]) -> None:
    rendered = [without_chart_metadata(o) for o in hub if o["kind"].startswith("ValidatingAdmissionPolicy")]
    assert sorted(rendered, key=str) == sorted(load_policies(HUB_POLICY_FILES), key=str)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--set", "hub.clusterName=a", "--set", "hub.kubeconfigSecret=s"), "are a member's"),
        (("--set", "role=both"), "role"),
    ],
)
def test_a_hub_release_refuses_a_members_values(helm_bin: Path, args: tuple[str, ...], said: str) -> None:
    assert said in refusal(helm_bin, *HUB, *args)


def test_the_sandbox_hubs_member_rbac_is_the_charts(hub: list[dict[str, Any]]) -> None:
    """The sandbox's hub grants its members what the chart grants them, rule for rule, so the
    e2e tests that act as a member test the chart's RBAC (the sandbox writes its own copy: it
    installs no release on its hub)."""
    chart = [o for o in hub if o["metadata"]["name"] == "lws-gatekeeper-member"]
    lab = hub_member_rbac()
    for kind in ("ClusterRole", "Role"):
        assert rules(lab, kind) == rules(chart, kind), kind
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        assert one(lab, kind)["subjects"] == one(chart, kind)["subjects"], kind
        assert one(lab, kind)["roleRef"]["name"] == one(chart, kind)["roleRef"]["name"], kind

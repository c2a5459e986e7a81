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
from test_chart import METRICS_AUTH_RULES, kinds, one, refusal, rules, template, without_chart_metadata

from gatekeeper.render.admission import HUB_POLICY_FILES, load_policies
from gatekeeper_lab.sandbox import build
from gatekeeper_lab.sandbox.manifests import hub_member_namespace, hub_member_rbac

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
            *["ClusterRole"] * 4,
            *["ClusterRoleBinding"] * 2,
            *["CustomResourceDefinition"] * 2,
            "Deployment",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
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
        "--metrics-secure",
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
            *METRICS_AUTH_RULES,
        ]
    )
    assert rules(own, "Role") == [
        ("coordination.k8s.io", "leases", ("create",), ()),
        ("coordination.k8s.io", "leases", ("get", "update"), ("lws-gatekeeper",)),
    ]


def test_the_members_rbac_is_bound_to_their_group(helm_bin: Path) -> None:
    objs = template(helm_bin, *HUB, "--set", "hub.membersGroup=fleet:members")
    member = [o for o in objs if o["metadata"]["name"] == "lws-gatekeeper-member"]
    assert rules(member, "ClusterRole") == [
        ("lws-gatekeeper.io", "reservations", ("get", "list", "watch"), ())
    ]
    assert one(member, "ClusterRoleBinding")["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "fleet:members"}
    ]
    assert not [
        o
        for o in objs
        if o["kind"] in ("Namespace", "RoleBinding") and o["metadata"]["name"] == "lws-gatekeeper-member"
    ]


def test_each_listed_member_gets_its_namespace_and_only_its_claims_there(helm_bin: Path) -> None:
    """A member reads and writes claims and its heartbeat in its own namespace and nowhere
    else (claims of every member in one place would tell each the others' LWSs and demands)."""
    objs = template(helm_bin, *HUB, "--set", "hub.members={cluster-a,cluster-b}")
    claims = [o for o in objs if o["metadata"]["name"] == "lws-gatekeeper-member-claims"]
    assert rules(claims, "ClusterRole") == sorted(
        [
            ("coordination.k8s.io", "leases", ("get", "create", "update"), ()),
            ("lws-gatekeeper.io", "reservationclaims", ("get", "list", "watch", "create", "delete"), ()),
        ]
    )
    namespaces = [o for o in objs if o["kind"] == "Namespace"]
    assert [n["metadata"]["name"] for n in namespaces] == [
        "lws-gatekeeper-member-cluster-a",
        "lws-gatekeeper-member-cluster-b",
    ]
    assert all(n["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"} for n in namespaces)
    bindings = [
        o for o in objs if o["kind"] == "RoleBinding" and o["metadata"]["name"] == "lws-gatekeeper-member"
    ]
    assert [(b["metadata"]["namespace"], b["subjects"], b["roleRef"]["name"]) for b in bindings] == [
        (
            f"lws-gatekeeper-member-{c}",
            [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": f"lws-gatekeeper:member:{c}"}],
            "lws-gatekeeper-member-claims",
        )
        for c in ("cluster-a", "cluster-b")
    ]
    assert not [
        o for o in objs if o["kind"] in ("ClusterRoleBinding",) and o["roleRef"]["name"].endswith("-claims")
    ]


@pytest.mark.parametrize("name", ["Cluster-A", "a" * 42, "-a"])
def test_a_member_name_that_cannot_name_its_namespace_is_refused(helm_bin: Path, name: str) -> None:
    assert "/hub/members/0" in refusal(helm_bin, *HUB, "--set", f"hub.members={{{name}}}")


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


def test_the_sandbox_hubs_member_rbac_is_the_charts(helm_bin: Path) -> None:
    """The sandbox's hub grants its members what the chart grants them, rule for rule, so the
    e2e tests that act as a member test the chart's RBAC (the sandbox writes its own copy: it
    installs no release on its hub)."""
    chart = template(helm_bin, *HUB, "--set", "hub.members={cluster-a}")
    lab = [*hub_member_rbac(), *hub_member_namespace("cluster-a")]
    for name in ("lws-gatekeeper-member", "lws-gatekeeper-member-claims"):
        ours = [o for o in lab if o["metadata"]["name"] == name]
        theirs = [o for o in chart if o["metadata"]["name"] == name]
        assert rules(ours, "ClusterRole") == rules(theirs, "ClusterRole"), name
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        ours = [o for o in lab if o["kind"] == kind]
        theirs = [o for o in chart if o["kind"] == kind and o["metadata"]["name"] == "lws-gatekeeper-member"]
        assert [(o["subjects"], o["roleRef"]["name"], o["metadata"].get("namespace")) for o in ours] == [
            (o["subjects"], o["roleRef"]["name"], o["metadata"].get("namespace")) for o in theirs
        ], kind
    assert [o["metadata"]["name"] for o in lab if o["kind"] == "Namespace"] == [
        o["metadata"]["name"] for o in chart if o["kind"] == "Namespace"
    ]

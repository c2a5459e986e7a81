"""The objects the sandbox applies: fake nodes, its admission policies, CRDs, webhook configurations.

Why this exists: what ``up`` installs is plain data, built the same way whether a
component is running or not, and tested without a cluster (``tests/unit``). Keeping the
builders apart from the processes lets the component modules (``lws.py``, ``kueue.py``,
``gatekeeper.py``, ``kwok.py``) and ``cluster.py`` share them without importing each
other. Nothing here starts a process or talks to the API server.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from importlib import resources
from typing import Any

import yaml

from gatekeeper.core.kube.keys import KWOK_NODE, SANDBOX_POLICIES_LABEL, SANDBOX_POLICIES_OFF
from gatekeeper.core.reservation import CLUSTER_LABEL, member_namespace
from gatekeeper.render.admission import (
    CLOSED_POOLS,
    GATE_PROTECTION,
    GATEKEEPER_SCOPE,
    MEMBER_LABELS,
    PRIORITY_CLASSES,
    RECORD_PROTECTION,
    load_policies,
    service_account_username,
)
from gatekeeper_lab.sandbox import build
from gatekeeper_lab.sandbox.process import SandboxError

__all__ = [
    "GATEKEEPER_NAMESPACE",
    "HUB_MEMBERS_GROUP",
    "HUB_MEMBER_USER_PREFIX",
    "KWOK_NODE_ANNOTATION",
    "POLICIES_LABEL",
    "POLICIES_OFF",
    "as_json_list",
    "crd_manifests",
    "fake_node",
    "hub_member_namespace",
    "hub_member_rbac",
    "lws_webhooks",
    "sandbox_policies",
    "webhooks_by_url",
]

#: Annotation that tells KWOK to manage a node.
KWOK_NODE_ANNOTATION = KWOK_NODE

#: Namespace of the gatekeeper's Lease in the sandbox (the chart uses its release namespace).
GATEKEEPER_NAMESPACE = "lws-gatekeeper-system"

#: Namespaces labelled ``<this>=off`` (POLICIES_OFF) are left out of the sandbox's policies.
POLICIES_LABEL = SANDBOX_POLICIES_LABEL
POLICIES_OFF = SANDBOX_POLICIES_OFF


def as_json_list(objects: Iterable[dict[str, Any]]) -> str:
    """Objects as one ``v1/List`` in JSON, for ``kubectl apply|create -f -``."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})


def fake_node(
    name: str,
    *,
    gpus: int = 1,
    cpu: str = "8",
    memory: str = "32Gi",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    pods: int = 110,
) -> dict[str, Any]:
    """A Node object that KWOK manages, with ``nvidia.com/gpu`` capacity and room for ``pods`` pods."""
    resources = {"cpu": cpu, "memory": memory, "pods": str(pods)}
    if gpus:
        resources["nvidia.com/gpu"] = str(gpus)
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok", **(labels or {})},
        },
        "status": {"allocatable": dict(resources), "capacity": dict(resources)},
    }
    if taints:
        node["spec"] = {"taints": taints}
    return node


def sandbox_policies() -> list[dict[str, Any]]:
    """The validating policies of ``policies/`` as ``up`` installs them: as a chart install does.

    Gate protection, record protection, the pool-label, member-labels and closed-pools checks
    and the gatekeeper's scope, enforced in every namespace (a chart install binds them
    cluster-wide). Who counts as the gatekeeper (may remove the gate, write records and
    Pool status, add a closed pool's toleration): the sandbox's
    gatekeeper, which runs with the admin certificate (CN=sandbox-admin), and the chart's
    default ServiceAccount in GATEKEEPER_NAMESPACE (the chart's tests run the gatekeeper as
    that account). The scope policy holds only that ServiceAccount, as the chart names it:
    holding the admin would hold every test too. Pools are also written by system:masters
    (the chart's default). Not the gate-injection policies: the sandbox gates with the webhook.

    A namespace labelled POLICIES_LABEL=off is left out of all of them: a test that needs a
    policy off (the policy tests install and prove their own copies in their own
    namespaces, which these would overrule) labels its namespace so and says why. Their
    names end in ``-sandbox``, so that the files' own objects (the chart's) can still be
    created beside.
    """
    chart_account = service_account_username(GATEKEEPER_NAMESPACE, "lws-gatekeeper")
    objects = load_policies(
        [
            GATE_PROTECTION,
            "pool-label",
            PRIORITY_CLASSES,
            RECORD_PROTECTION,
            GATEKEEPER_SCOPE,
            MEMBER_LABELS,
            CLOSED_POOLS,
        ],
        allowed_usernames=["sandbox-admin", chart_account],
        # statefulSetControllers as the files say: the sandbox's kube-controller-manager runs as
        # system:kube-controller-manager (its own user in a cluster, control_plane.py); and
        # exemptNamespaces (kube-system).
        lists={"gatekeeperUsernames": [chart_account]},
    )
    for obj in objects:
        obj["metadata"]["name"] += "-sandbox"
        if obj["kind"].endswith("Binding"):
            obj["spec"]["policyName"] += "-sandbox"
            match = obj["spec"].setdefault("matchResources", {})
            match["namespaceSelector"] = {
                "matchExpressions": [{"key": POLICIES_LABEL, "operator": "NotIn", "values": [POLICIES_OFF]}]
            }
    return objects


def crd_manifests(folder: str = "crds") -> str:
    """The project's CRDs (Pool, GroupAdmission) as one YAML stream; ``crds/hub``: the hub's
    (Reservation, ReservationClaim)."""
    base = resources.files("gatekeeper").joinpath(*folder.split("/"))
    return "\n---\n".join(
        base.joinpath(name).read_text()
        for name in sorted(p.name for p in base.iterdir())
        if name.endswith(".yaml")
    )


#: The user and group a member cluster's gatekeeper has on the hub (``hub.Hub.join``).
HUB_MEMBER_USER_PREFIX = "lws-gatekeeper:member:"
HUB_MEMBERS_GROUP = "lws-gatekeeper:members"


def hub_member_rbac() -> list[dict[str, Any]]:
    """What every member may do on the hub, as the chart's ``role=hub`` grants it: read
    Reservations (its group, cluster-wide); and the ClusterRole each member is bound to in its
    own namespace (``hub_member_namespace``): create, delete and read ReservationClaims, renew
    its heartbeat Lease (the policy ``hub-member-claims`` narrows it to its own)."""
    name = "lws-gatekeeper-member"
    members = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": HUB_MEMBERS_GROUP}]
    role = "rbac.authorization.k8s.io/v1"
    return [
        {
            "apiVersion": role,
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [
                {
                    "apiGroups": ["lws-gatekeeper.io"],
                    "resources": ["reservations"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        },
        {
            "apiVersion": role,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": members,
        },
        {
            "apiVersion": role,
            "kind": "ClusterRole",
            "metadata": {"name": f"{name}-claims"},
            "rules": [
                {
                    "apiGroups": ["lws-gatekeeper.io"],
                    "resources": ["reservationclaims"],
                    "verbs": ["get", "list", "watch", "create", "delete"],
                },
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "create", "update"],
                },
            ],
        },
    ]


def hub_member_namespace(cluster: str) -> list[dict[str, Any]]:
    """A member's namespace on the hub and its RoleBinding there, as the chart makes them for
    each of ``hub.members``: the member's claims and heartbeat, no other member's."""
    namespace = member_namespace(cluster)
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {CLUSTER_LABEL: cluster}},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "lws-gatekeeper-member", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "lws-gatekeeper-member-claims",
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": HUB_MEMBER_USER_PREFIX + cluster,
                }
            ],
        },
    ]


def lws_webhooks(lws: build.Installed, base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """LWS's webhook configurations (its manifests and kustomize patches), pointed at a URL."""
    webhook_dir = lws.files / "config" / "webhook"
    docs = [d for d in yaml.safe_load_all((webhook_dir / "manifests.yaml").read_text()) if d]
    patches = {
        "MutatingWebhookConfiguration": webhook_dir / "mutating-patch.yaml",
        "ValidatingWebhookConfiguration": webhook_dir / "validating-patch.yaml",
    }
    for doc in docs:
        patch_file = patches.get(doc["kind"])
        if patch_file is not None and patch_file.exists():
            for op in yaml.safe_load(patch_file.read_text()):
                parts = op["path"].strip("/").split("/")
                if op["op"] != "replace" or len(parts) != 2 or parts[0] != "webhooks":
                    raise SandboxError(f"unexpected patch in {patch_file}: {op}")
                doc["webhooks"][int(parts[1])] = op["value"]
    return webhooks_by_url(docs, prefix="lws-", base_url=base_url, ca_pem=ca_pem)


def webhooks_by_url(
    docs: list[dict[str, Any]], *, prefix: str, base_url: str, ca_pem: bytes
) -> list[dict[str, Any]]:
    """Webhook configurations made for an in-cluster Service, sent to ``base_url`` instead.

    Each webhook keeps its Service's path and trusts ``ca_pem``; each configuration's name
    gets ``prefix`` (as its project's kustomize namePrefix does). Changes ``docs`` in place.
    """
    ca = base64.b64encode(ca_pem).decode()
    for doc in docs:
        doc["metadata"]["name"] = prefix + doc["metadata"]["name"]
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": base_url + path, "caBundle": ca}
    return docs

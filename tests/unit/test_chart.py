"""The Helm chart rendered by the real helm: lint, the main value combinations, the schema.

Why this exists: a chart is code that runs in someone else's cluster. These tests render
it with ``helm template`` (helm built from its pinned Go module, like the sandbox's
components) and check what matters in the objects: the restricted security context, the
probes, the budget, RBAC without wildcards and exactly the rules the controller needs,
the webhook configuration equal to the one the Python code builds, the policies equal
to the files in ``policies/``, the ``kueue`` backend and the node-fit AdmissionCheck
controller with the Kueue rules only when the values need them, and values that are
refused with a clear message. No cluster is needed; ``tests/e2e/test_chart.py`` sends the
same objects to the sandbox's API server.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from gatekeeper.core.backends.pools.provisioning import parse_instance_types
from gatekeeper.core.kube.keys import NODE_FIT_CONTROLLER, POOL_LABEL
from gatekeeper.render.admission import load_policies, service_account_username
from gatekeeper.webhook import mutating_webhook_configuration
from gatekeeper.webhook.config import validating_webhook_configuration
from gatekeeper_lab.sandbox import build
from gatekeeper_lab.sandbox.karpenter import GPU_TYPES

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "lws-gatekeeper"
RELEASE, NAMESPACE = "lws-gatekeeper", "lws-gatekeeper-system"
SA_USERNAME = service_account_username(NAMESPACE, "lws-gatekeeper")
MAP_API = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"

IMAGE_REPOSITORY = "registry.example/lws-gatekeeper"
IMAGE = ("--set", f"image.repository={IMAGE_REPOSITORY}")
"""The image every render names (the chart names none of its own); a test's own ``--set`` wins."""

Render = Callable[..., list[dict[str, Any]]]
Rule = tuple[str, str, tuple[str, ...], tuple[str, ...]]


@pytest.fixture(scope="session")
def helm() -> Path:
    """The helm binary of pins.toml (built once, then taken from the cache)."""
    return build.build_all(["helm"])["helm"].bin / "helm"


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, check=False)


def template(
    helm: Path, *args: str, release: str = RELEASE, namespace: str = NAMESPACE
) -> list[dict[str, Any]]:
    """``helm template`` of the chart with ``args`` (``--set``, ``--api-versions``...), as objects."""
    res = run_helm(helm, "template", release, str(CHART), "--namespace", namespace, *IMAGE, *args)
    assert res.returncode == 0, res.stderr
    return [doc for doc in yaml.safe_load_all(res.stdout) if doc]


@pytest.fixture(scope="session")
def render(helm: Path) -> Render:
    def go(*args: str, **kw: str) -> list[dict[str, Any]]:
        return template(helm, *args, **kw)

    return go


def refusal(helm: Path, *args: str, image: tuple[str, ...] = IMAGE) -> str:
    res = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *image, *args)
    assert res.returncode != 0, f"helm template {' '.join(args)} was accepted"
    return res.stderr


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


USER_ROLES = ("-groupadmission-viewer", "-pool-reader", "-metrics-reader")
"""Name ends of the ClusterRoles for the cluster's users (``templates/rbac/users.yaml``)."""


def for_users(obj: dict[str, Any]) -> bool:
    return obj["kind"] == "ClusterRole" and obj["metadata"]["name"].endswith(USER_ROLES)


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The one object of ``kind`` (of ClusterRoles, the gatekeeper's own)."""
    [obj] = [o for o in by_kind(objects, kind) if not for_users(o)]
    return obj


def kinds(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(o["kind"] for o in objects)


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    [c] = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return dict(c)


def without_chart_metadata(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without what the chart adds for itself (labels, annotations)."""
    out = dict(obj)
    out["metadata"] = {k: v for k, v in obj["metadata"].items() if k not in ("labels", "annotations")}
    return out


def rules(objects: list[dict[str, Any]], kind: str) -> list[Rule]:
    """Every (apiGroup, resource, verbs, resourceNames) the Role or ClusterRole grants."""
    return rules_of(one(objects, kind))


def rules_of(role: dict[str, Any]) -> list[Rule]:
    """Every (apiGroup, resource, verbs, resourceNames) ``role`` grants."""
    out = []
    for rule in role["rules"] or []:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.append((group, resource, tuple(rule["verbs"]), tuple(rule.get("resourceNames", ()))))
    return sorted(out)


# What the controller does against the API (see gatekeeper/controller/): informers list and
# watch, the reconciler writes records (made, their finalizer lifted, deleted), statuses, pods'
# gates and Events, and deletes the pods of a group given back (a Pool's admissionTimeout).
CLUSTER_RULES: list[Rule] = [
    ("", "events", ("create",), ()),
    ("", "limitranges", ("list", "watch"), ()),
    ("", "namespaces", ("list", "watch"), ()),
    ("", "nodes", ("list", "watch"), ()),
    ("", "pods", ("list", "watch", "patch", "delete"), ()),
    ("apps", "statefulsets", ("list", "watch"), ()),
    ("leaderworkerset.x-k8s.io", "leaderworkersets", ("list", "watch"), ()),
    ("lws-gatekeeper.io", "groupadmissions", ("list", "watch", "create", "patch", "delete"), ()),
    ("lws-gatekeeper.io", "groupadmissions/status", ("patch",), ()),
    ("lws-gatekeeper.io", "pools", ("list", "watch"), ()),
    ("lws-gatekeeper.io", "pools/status", ("patch",), ()),
    ("node.k8s.io", "runtimeclasses", ("list", "watch"), ()),
    ("resource.k8s.io", "deviceclasses", ("list", "watch"), ()),
    ("resource.k8s.io", "resourceclaims", ("list", "watch"), ()),
    ("resource.k8s.io", "resourceclaimtemplates", ("list", "watch"), ()),
    ("resource.k8s.io", "resourceslices", ("list", "watch"), ()),
    ("scheduling.k8s.io", "priorityclasses", ("list", "watch"), ()),
]
SELF_SIGNED_CLUSTER_RULES: list[Rule] = [
    ("admissionregistration.k8s.io", kind, ("get", "patch"), ("lws-gatekeeper",))
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
]


METRICS_AUTH_RULES: list[Rule] = [
    ("authentication.k8s.io", "tokenreviews", ("create",), ()),
    ("authorization.k8s.io", "subjectaccessreviews", ("create",), ()),
]
"""Secure metrics (the default): who a scrape's token is, and whether it may get /metrics."""


def with_guard(cluster_rules: list[Rule]) -> list[Rule]:
    """The rules with the StatefulSet guard's read of the StatefulSet behind a scale."""
    return [
        (g, r, ("get", *vs) if (g, r) == ("apps", "statefulsets") else vs, names)
        for g, r, vs, names in cluster_rules
    ]


LEASE_RULES: list[Rule] = [
    ("coordination.k8s.io", "leases", ("create",), ()),
    ("coordination.k8s.io", "leases", ("get", "update"), ("lws-gatekeeper",)),
]
SECRET_RULE: Rule = ("", "secrets", ("get", "update"), ("lws-gatekeeper-webhook-cert",))
# The kueue backend (gatekeeper/controller/backends/kueue.py) instead of Pools and nodes: its
# informers (StatefulSets too: which pods an LWS made), its Workloads (created, their
# finalizer lifted and deleted when a group goes), the
# quota reservation of an evicted Workload cleared (status patch) and that group's pods stopped.
KUEUE_CLUSTER_RULES: list[Rule] = [
    ("", "events", ("create",), ()),
    ("", "limitranges", ("list", "watch"), ()),
    ("", "pods", ("list", "watch", "patch", "delete"), ()),
    ("apps", "statefulsets", ("list", "watch"), ()),
    ("kueue.x-k8s.io", "resourceflavors", ("list", "watch"), ()),
    ("kueue.x-k8s.io", "workloads", ("list", "watch", "create", "patch", "delete"), ()),
    ("kueue.x-k8s.io", "workloads/status", ("patch",), ()),
    ("leaderworkerset.x-k8s.io", "leaderworkersets", ("list", "watch"), ()),
    ("lws-gatekeeper.io", "groupadmissions", ("list", "watch", "create", "patch", "delete"), ()),
    ("lws-gatekeeper.io", "groupadmissions/status", ("patch",), ()),
    ("node.k8s.io", "runtimeclasses", ("list", "watch"), ()),
    ("resource.k8s.io", "deviceclasses", ("list", "watch"), ()),
    ("resource.k8s.io", "resourceclaims", ("list", "watch"), ()),
    ("resource.k8s.io", "resourceclaimtemplates", ("list", "watch"), ()),
    ("resource.k8s.io", "resourceslices", ("list", "watch"), ()),
    ("scheduling.k8s.io", "priorityclasses", ("list", "watch"), ()),
]
# The node-fit AdmissionCheck controller (gatekeeper/controller/checks/node_fit.py): informers on
# Workloads, AdmissionChecks, flavors, nodes and bound pods; server-side apply of its check's
# entry in a Workload's status and of its AdmissionChecks' Active condition.
NODE_FIT_CLUSTER_RULES: list[Rule] = [
    ("", "nodes", ("list", "watch"), ()),
    ("", "pods", ("list", "watch"), ()),
    ("kueue.x-k8s.io", "admissionchecks", ("list", "watch"), ()),
    ("kueue.x-k8s.io", "admissionchecks/status", ("patch",), ()),
    ("kueue.x-k8s.io", "resourceflavors", ("list", "watch"), ()),
    ("kueue.x-k8s.io", "workloads", ("list", "watch"), ()),
    ("kueue.x-k8s.io", "workloads/status", ("patch",), ()),
]


# Pools with spec.nodePools (gatekeeper/controller/backends/pools.py, with instance types):
# informers on Karpenter's NodePools and NodeClaims, and on the DaemonSets.
KARPENTER_CLUSTER_RULES: list[Rule] = [
    ("apps", "daemonsets", ("list", "watch"), ()),
    ("karpenter.sh", "nodeclaims", ("list", "watch"), ()),
    ("karpenter.sh", "nodepools", ("list", "watch"), ()),
]
# The sandbox's instance types, as Karpenter's KWOK provider reads them.
KARPENTER = ["--set-json", f"karpenter.instanceTypes={json.dumps(list(GPU_TYPES))}"]


def merged(*rule_lists: list[Rule]) -> list[Rule]:
    """The rules of several concerns as one ClusterRole grants them: one rule per resource,
    the verbs of the first concern, then the others' that it lacks."""
    verbs: dict[tuple[str, str, tuple[str, ...]], tuple[str, ...]] = {}
    for rule_list in rule_lists:
        for group, resource, vs, names in rule_list:
            have = verbs.get((group, resource, names), ())
            verbs[(group, resource, names)] = have + tuple(v for v in vs if v not in have)
    return sorted((g, r, vs, names) for (g, r, names), vs in verbs.items())


# ---- helm itself ------------------------------------------------------------------------------


def test_helm_is_the_pinned_version(helm: Path) -> None:
    res = run_helm(helm, "version", "--template={{.Version}}")
    assert res.stdout == build.load_pins()["helm"].version


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["--set", "certManager.enabled=true"],
        ["--set", "gateInjection=policy"],
        ["--set", "manager.replicas=1", "--set", "metrics.serviceMonitor.enabled=true"],
        ["--set", "backend=kueue", "--set", "nodeFit.admissionCheck.create=true"],
        ["--set", "backend=kueue", "--set", "nodeFit.enabled=false"],
        ["--set", "nodeFit.enabled=true"],
        KARPENTER,
        ["--set", "metrics.dashboard.enabled=true"],
    ],
    ids=[
        "default",
        "cert-manager",
        "policy",
        "one-replica-servicemonitor",
        "kueue-admission-check",
        "kueue-no-node-fit",
        "pools-node-fit",
        "pools-karpenter",
        "dashboard",
    ],
)
def test_helm_lint_strict(helm: Path, values: list[str]) -> None:
    res = run_helm(helm, "lint", "--strict", str(CHART), *values)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in res.stdout


def test_the_crds_are_the_packages_crds() -> None:
    """One source of truth: the chart's files/crds/ is a link to gatekeeper/crds/."""
    crds = CHART / "files" / "crds"
    assert crds.is_symlink() and crds.resolve() == (ROOT / "gatekeeper" / "crds").resolve()
    assert not (CHART / "crds").exists(), "Helm installs crds/ once and never upgrades it"


def test_the_crds_are_templates_kept_on_uninstall_and_the_files_themselves(
    default: list[dict[str, Any]], render: Render
) -> None:
    """Rendered as templates (so `helm upgrade` upgrades them), each the file of gatekeeper/crds
    with the chart's labels and Helm's keep policy, and none with crds.enabled=false."""
    crds = {o["metadata"]["name"]: o for o in by_kind(default, "CustomResourceDefinition")}
    files = {
        obj["metadata"]["name"]: obj
        for obj in (
            yaml.safe_load(p.read_text()) for p in sorted((ROOT / "gatekeeper" / "crds").glob("*.yaml"))
        )
    }
    assert sorted(crds) == sorted(files) == ["groupadmissions.lws-gatekeeper.io", "pools.lws-gatekeeper.io"]
    for name, crd in crds.items():
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert without_chart_metadata(crd) == without_chart_metadata(files[name]), name
    assert not by_kind(render("--set", "crds.enabled=false"), "CustomResourceDefinition")


def test_the_readme_is_generated_from_the_values() -> None:
    res = subprocess.run(
        [str(ROOT / "scripts" / "chart-docs"), "--dry-run"], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == (CHART / "README.md").read_text().strip(), (
        "charts/lws-gatekeeper/README.md is out of date: run scripts/chart-docs"
    )


def _leaves(values: Any, path: str = "") -> Iterator[str]:
    if isinstance(values, dict) and values:
        for key, value in values.items():
            yield from _leaves(value, f"{path}.{key}" if path else key)
    else:
        yield path


def test_every_value_is_documented() -> None:
    """helm-docs lists only commented values: every value (or an object above it) is in the table."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    documented = {line.split("|")[1].strip() for line in readme.splitlines() if line.startswith("| ")}
    missing = [
        leaf for leaf in _leaves(values) if not any(leaf == d or leaf.startswith(d + ".") for d in documented)
    ]
    assert not missing, f"values without a `# --` comment: {missing}"


# ---- the default installation -------------------------------------------------------------------


@pytest.fixture(scope="session")
def default(render: Render) -> list[dict[str, Any]]:
    return render()


def test_a_tenant_reads_its_groups_and_an_admin_may_let_it_read_the_pools(
    render: Render, default: list[dict[str, Any]]
) -> None:
    """Reading GroupAdmissions goes into the built-in view, edit and admin roles (reading
    only: their status stays the gatekeeper's to write); the pool reader is shipped unbound."""
    users = {o["metadata"]["name"].removeprefix(f"{RELEASE}-"): o for o in default if for_users(o)}
    assert set(users) == {"groupadmission-viewer", "pool-reader", "metrics-reader"}
    viewer, pools = users["groupadmission-viewer"], users["pool-reader"]
    assert rules_of(viewer) == [("lws-gatekeeper.io", "groupadmissions", ("get", "list", "watch"), ())]
    aggregated = {k for k, v in viewer["metadata"]["labels"].items() if v == "true"}
    assert aggregated == {f"rbac.authorization.k8s.io/aggregate-to-{r}" for r in ("view", "edit", "admin")}
    assert rules_of(pools) == [
        ("lws-gatekeeper.io", r, ("get", "list", "watch"), ()) for r in ("pools", "pools/status")
    ]
    assert not any("aggregate-to" in k for k in pools["metadata"]["labels"]), "an admin binds it"
    bound = {b["roleRef"]["name"] for b in default if b["kind"] in ("RoleBinding", "ClusterRoleBinding")}
    assert not bound & {o["metadata"]["name"] for o in users.values()}
    off = render(
        "--set", "users.aggregateToDefaultRoles=false", "--set", "users.poolReaderRole=false"
    )  # fmt: skip
    assert [o["metadata"]["name"] for o in off if for_users(o)] == [f"{RELEASE}-metrics-reader"]


def test_default_objects(default: list[dict[str, Any]]) -> None:
    assert kinds(default) == sorted(
        [
            *["ClusterRole"] * 4,
            "ClusterRoleBinding",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "Deployment",
            "MutatingWebhookConfiguration",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Secret",
            "Service",
            "Service",
            "ServiceAccount",
            *["ValidatingAdmissionPolicy"] * 10,
            *["ValidatingAdmissionPolicyBinding"] * 10,
            "ValidatingWebhookConfiguration",
        ]
    )
    cluster_scoped = (
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    )
    for obj in default:
        if obj["kind"] not in cluster_scoped and "AdmissionPolicy" not in obj["kind"]:
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["kind"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"


def test_deployment_is_highly_available_and_restricted(default: list[dict[str, Any]]) -> None:
    deploy = one(default, "Deployment")
    spec = deploy["spec"]["template"]["spec"]
    assert deploy["spec"]["replicas"] == 2
    assert spec["serviceAccountName"] == "lws-gatekeeper"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = container(default)
    assert c["securityContext"] == {
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics", "scheme": "HTTPS"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics", "scheme": "HTTPS"}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"webhook": 9443, "metrics": 8080}
    assert c["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    assert c["resources"]["limits"] == {"memory": "512Mi"}
    assert c["image"] == f"{IMAGE_REPOSITORY}:0.1.0"
    assert c["args"] == [
        "run",
        "--backend=pools",
        "--no-node-fit",
        "--metrics-port=8080",
        "--metrics-secure",
        "--closed-pool-exempt-namespaces=kube-system",
        "--webhook-port=9443",
        "--cert-dir=/certs",
        "--self-signed-certs-secret=lws-gatekeeper-webhook-cert",
        "--webhook-config-name=lws-gatekeeper",
        "--webhook-service-name=lws-gatekeeper-webhook",
        "--leader-elect",
        "--lease-name=lws-gatekeeper",
        "--identity=$(POD_NAME)",
        "--resync-seconds=10",
        "--drain-seconds=20",
        "--max-records-per-namespace=10000",
        "--max-events-per-namespace-per-minute=120",
        "--admission-timeout-seconds=600",
        "--log-level=INFO",
        "--log-format=json",
    ]
    assert {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]} == {
        "POD_NAMESPACE": "metadata.namespace",
        "POD_NAME": "metadata.name",
    }
    # The only writable places: /tmp and the folder the gatekeeper writes its certificates to.
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert {m["mountPath"]: volumes[m["name"]] for m in c["volumeMounts"]} == {
        "/tmp": {"name": "tmp", "emptyDir": {}},
        "/certs": {"name": "certs", "emptyDir": {}},
    }
    [spread] = spec["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["maxSkew"] == 1
    assert spread["labelSelector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize(("grace", "drain"), [(30, 20), (120, 110), (5, 0)])
def test_a_stopping_pass_gets_the_grace_period_but_its_last_10_seconds(
    render: Render, grace: int, drain: int
) -> None:
    """The pass in flight finishes within ``--drain-seconds``; the Lease and the webhook's
    requests have the rest before the kubelet's SIGKILL."""
    objs = render("--set", f"manager.terminationGracePeriodSeconds={grace}")
    deploy = one(objs, "Deployment")
    assert deploy["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == grace
    assert f"--drain-seconds={drain}" in container(objs)["args"]


def test_the_budget_keeps_one_replica(default: list[dict[str, Any]]) -> None:
    pdb = one(default, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == one(default, "Deployment")["spec"]["selector"]


KUEUE = ["--set", "backend=kueue"]


@pytest.mark.parametrize(
    ("values", "cluster_rules"),
    [
        ([], CLUSTER_RULES),
        (["--set", "certManager.enabled=true"], CLUSTER_RULES),
        (["--set", "gateInjection=policy"], CLUSTER_RULES),
        (["--set", "manager.replicas=1", "--set", "manager.leaderElection.enabled=false"], CLUSTER_RULES),
        (["--set", "nodeFit.enabled=false"], CLUSTER_RULES),
        (["--set", "nodeFit.enabled=true"], merged(CLUSTER_RULES, NODE_FIT_CLUSTER_RULES)),
        (KUEUE, merged(KUEUE_CLUSTER_RULES, NODE_FIT_CLUSTER_RULES)),
        ([*KUEUE, "--set", "nodeFit.enabled=true"], merged(KUEUE_CLUSTER_RULES, NODE_FIT_CLUSTER_RULES)),
        ([*KUEUE, "--set", "nodeFit.enabled=false"], KUEUE_CLUSTER_RULES),
        ([*KUEUE, "--set", "gateInjection=policy"], merged(KUEUE_CLUSTER_RULES, NODE_FIT_CLUSTER_RULES)),
        (KARPENTER, merged(CLUSTER_RULES, KARPENTER_CLUSTER_RULES)),
        ([*KUEUE, *KARPENTER], merged(KUEUE_CLUSTER_RULES, NODE_FIT_CLUSTER_RULES)),
    ],
    ids=[
        "default",
        "cert-manager",
        "policy",
        "no-leader-election",
        "pools-no-node-fit",
        "pools-node-fit",
        "kueue",
        "kueue-node-fit",
        "kueue-no-node-fit",
        "kueue-policy",
        "pools-karpenter",
        "kueue-ignores-karpenter",
    ],
)
def test_rbac_has_no_wildcards_and_exactly_what_the_controller_uses(
    render: Render, values: list[str], cluster_rules: list[Rule]
) -> None:
    objects = render(*values)
    for role in by_kind(objects, "ClusterRole") + by_kind(objects, "Role"):
        for rule in role["rules"] or []:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), f"{role['kind']} {field}: {rule}"
    webhook = "gateInjection=policy" not in values
    self_signed = "certManager.enabled=true" not in values and webhook
    assert rules(objects, "ClusterRole") == sorted(
        (with_guard(cluster_rules) if webhook else cluster_rules)
        + (SELF_SIGNED_CLUSTER_RULES if self_signed else [])
        + METRICS_AUTH_RULES
    )
    leases = [] if "manager.leaderElection.enabled=false" in values else LEASE_RULES
    assert rules(objects, "Role") == sorted(leases + ([SECRET_RULE] if self_signed else []))
    sa = {"kind": "ServiceAccount", "name": "lws-gatekeeper", "namespace": NAMESPACE}
    assert one(objects, "ClusterRoleBinding")["subjects"] == [sa]
    assert one(objects, "RoleBinding")["subjects"] == [sa]
    assert (
        one(objects, "ClusterRoleBinding")["roleRef"]["name"]
        == one(objects, "ClusterRole")["metadata"]["name"]
    )
    assert one(objects, "RoleBinding")["roleRef"]["name"] == one(objects, "Role")["metadata"]["name"]


def test_the_webhook_configuration_is_the_python_one(default: list[dict[str, Any]]) -> None:
    rendered = one(default, "MutatingWebhookConfiguration")
    expected = mutating_webhook_configuration(
        name="lws-gatekeeper", service=(NAMESPACE, "lws-gatekeeper-webhook", 443), ca_bundle=b""
    )
    assert without_chart_metadata(rendered) == expected
    webhook_service = next(
        s for s in by_kind(default, "Service") if s["metadata"]["name"].endswith("-webhook")
    )
    assert webhook_service["spec"]["ports"] == [
        {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}
    ]
    assert (
        webhook_service["spec"]["selector"] == one(default, "Deployment")["spec"]["selector"]["matchLabels"]
    )


def test_the_webhook_configuration_follows_release_and_port(render: Render) -> None:
    objects = render("--set", "webhook.servicePort=8443", release="gk", namespace="infra")
    rendered = one(objects, "MutatingWebhookConfiguration")
    expected = mutating_webhook_configuration(
        name="gk-lws-gatekeeper", service=("infra", "gk-lws-gatekeeper-webhook", 8443), ca_bundle=b""
    )
    assert without_chart_metadata(rendered) == expected
    assert "--webhook-service-name=gk-lws-gatekeeper-webhook" in container(objects)["args"]


def test_the_statefulset_guard_is_the_python_one(default: list[dict[str, Any]], render: Render) -> None:
    rendered = one(default, "ValidatingWebhookConfiguration")
    expected = validating_webhook_configuration(
        name="lws-gatekeeper", service=(NAMESPACE, "lws-gatekeeper-webhook", 443), ca_bundle=b""
    )
    assert without_chart_metadata(rendered) == expected
    objects = render(
        "--set", "statefulSetGuard.exemptUsers={lws-controller}", release="gk", namespace="infra"
    )
    expected = validating_webhook_configuration(
        name="gk-lws-gatekeeper",
        service=("infra", "gk-lws-gatekeeper-webhook", 443),
        ca_bundle=b"",
        exempt_users=["lws-controller"],
    )
    assert without_chart_metadata(one(objects, "ValidatingWebhookConfiguration")) == expected


def test_the_statefulset_guard_can_be_turned_off(render: Render) -> None:
    assert not by_kind(render("--set", "statefulSetGuard.enabled=false"), "ValidatingWebhookConfiguration")
    assert not by_kind(render("--set", "gateInjection=policy"), "ValidatingWebhookConfiguration")


def test_the_self_signed_secret_is_made_empty(default: list[dict[str, Any]]) -> None:
    secret = one(default, "Secret")
    assert secret["metadata"]["name"] == "lws-gatekeeper-webhook-cert"
    assert "data" not in secret and "stringData" not in secret, "the gatekeeper owns its data"


def test_the_policies_are_the_files_of_policies(default: list[dict[str, Any]]) -> None:
    """Gate protection allows exactly the chart's ServiceAccount; the pool-label, member-labels and
    closed-pools checks are as written (the last with its exempt namespaces)."""
    rendered = [
        without_chart_metadata(o) for o in default if o["kind"].startswith("ValidatingAdmissionPolicy")
    ]
    expected = load_policies(
        [
            "gate-protection",
            "pool-label",
            "priority-classes",
            "record-protection",
            "gatekeeper-scope",
            "member-labels",
            "closed-pools",
        ],
        allowed_usernames=[SA_USERNAME],
        lists={
            "exemptNamespaces": ["kube-system"],
            "gatekeeperUsernames": [SA_USERNAME],
            "poolAdminUsernames": [],
            "poolAdminGroups": ["system:masters"],
        },
    )
    assert sorted(rendered, key=str) == sorted(expected, key=str)
    assert not by_kind(default, "MutatingAdmissionPolicy")


def test_metrics_service(default: list[dict[str, Any]]) -> None:
    service = next(s for s in by_kind(default, "Service") if s["metadata"]["name"].endswith("-metrics"))
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]
    assert not by_kind(default, "ServiceMonitor")


# ---- the other combinations ------------------------------------------------------------------------


def test_cert_manager(render: Render) -> None:
    """The chart's own CA: self-signed Issuer -> CA Certificate -> CA Issuer -> serving Certificate."""
    objects = render("--set", "certManager.enabled=true")
    certs = {c["metadata"]["name"]: c["spec"] for c in by_kind(objects, "Certificate")}
    issuers = {i["metadata"]["name"]: i["spec"] for i in by_kind(objects, "Issuer")}
    ca, cert = certs.pop("lws-gatekeeper-ca"), certs.pop("lws-gatekeeper")
    assert not certs and issuers == {
        "lws-gatekeeper-selfsigned": {"selfSigned": {}},
        "lws-gatekeeper-ca": {"ca": {"secretName": ca["secretName"]}},
    }
    assert ca["isCA"] is True and ca["issuerRef"]["name"] == "lws-gatekeeper-selfsigned"
    assert cert["issuerRef"]["name"] == "lws-gatekeeper-ca" and "isCA" not in cert
    assert cert["secretName"] == "lws-gatekeeper-webhook-cert" != ca["secretName"]
    assert cert["dnsNames"] == [
        f"lws-gatekeeper-webhook.{NAMESPACE}.svc",
        f"lws-gatekeeper-webhook.{NAMESPACE}.svc.cluster.local",
    ]
    config = one(objects, "MutatingWebhookConfiguration")
    # The caBundle is the CA (not the serving certificate): a renewal never changes it.
    assert config["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": f"{NAMESPACE}/lws-gatekeeper-ca"
    }
    expected = mutating_webhook_configuration(
        name="lws-gatekeeper", service=(NAMESPACE, "lws-gatekeeper-webhook", 443), ca_bundle=b""
    )
    assert without_chart_metadata(config) == expected
    c = container(objects)
    assert not [
        a for a in c["args"] if a.startswith(("--self-signed", "--webhook-config", "--webhook-service"))
    ]
    spec = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "certs", "secret": {"secretName": "lws-gatekeeper-webhook-cert"}} in spec["volumes"]
    assert not by_kind(objects, "Secret")


def test_cert_manager_with_an_existing_issuer(render: Render) -> None:
    objects = render(
        "--set", "certManager.enabled=true",
        "--set", "certManager.issuerRef.name=corp-ca",
        "--set", "certManager.issuerRef.kind=ClusterIssuer",
    )  # fmt: skip
    assert not by_kind(objects, "Issuer")
    assert one(objects, "Certificate")["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer"}
    annotations = one(objects, "MutatingWebhookConfiguration")["metadata"]["annotations"]
    assert annotations == {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/lws-gatekeeper"}


def test_cert_manager_auto_follows_the_cluster(render: Render) -> None:
    assert by_kind(render("--api-versions", "cert-manager.io/v1"), "Certificate")
    assert not by_kind(render(), "Certificate")
    assert not by_kind(
        render("--api-versions", "cert-manager.io/v1", "--set", "certManager.enabled=false"), "Certificate"
    )


def test_policies_off(render: Render) -> None:
    objects = render(
        "--set", "policies.gateProtection.enabled=false", "--set", "policies.poolLabel.enabled=false",
        "--set", "policies.priorityClasses.enabled=false",
        "--set", "policies.recordProtection.enabled=false", "--set", "policies.gatekeeperScope.enabled=false",
        "--set", "policies.memberLabels.enabled=false", "--set", "policies.closedPools.enabled=false",
    )  # fmt: skip
    assert not [o for o in objects if "AdmissionPolicy" in o["kind"]]
    assert by_kind(objects, "MutatingWebhookConfiguration")


def test_gate_protection_allows_the_chosen_service_account_and_extras(render: Render) -> None:
    objects = render(
        "--set", "serviceAccount.create=false",
        "--set", "serviceAccount.name=gk-robot",
        "--set", "policies.gateProtection.extraAllowedUsernames={ops-admin,system:serviceaccount:x:y}",
        "--set", "policies.poolLabel.enabled=false", "--set", "policies.priorityClasses.enabled=false",
        "--set", "policies.recordProtection.enabled=false", "--set", "policies.gatekeeperScope.enabled=false",
        "--set", "policies.memberLabels.enabled=false", "--set", "policies.closedPools.enabled=false",
    )  # fmt: skip
    assert not by_kind(objects, "ServiceAccount")
    usernames = [service_account_username(NAMESPACE, "gk-robot"), "ops-admin", "system:serviceaccount:x:y"]
    rendered = [without_chart_metadata(o) for o in objects if "AdmissionPolicy" in o["kind"]]
    expected = load_policies(["gate-protection"], allowed_usernames=usernames)
    assert sorted(rendered, key=str) == sorted(expected, key=str)
    assert one(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "gk-robot"


def test_closed_pools_exempt_the_chosen_namespaces(render: Render) -> None:
    objects = render("--set", "policies.closedPools.exemptNamespaces={kube-system,gpu-operator}")
    rendered = [
        without_chart_metadata(o) for o in objects if o["metadata"]["name"] == "lws-gatekeeper-closed-pools"
    ]
    expected = load_policies(
        ["closed-pools"],
        allowed_usernames=[SA_USERNAME],
        lists={"exemptNamespaces": ["kube-system", "gpu-operator"]},
    )
    assert sorted(rendered, key=str) == sorted(expected, key=str)
    # the gatekeeper holds pods on a closed pool's nodes against its quota outside the same namespaces
    assert "--closed-pool-exempt-namespaces=kube-system,gpu-operator" in container(objects)["args"]
    none = render("--set-json", "policies.closedPools.exemptNamespaces=[]")
    assert "--closed-pool-exempt-namespaces=" in container(none)["args"]


def test_gate_injection_by_policy_has_no_webhook(render: Render) -> None:
    objects = render("--set", "gateInjection=policy")
    assert not {"MutatingWebhookConfiguration", "Secret", "Certificate", "Issuer"} & set(kinds(objects))
    assert [s["metadata"]["name"] for s in by_kind(objects, "Service")] == ["lws-gatekeeper-metrics"]
    mutating = [without_chart_metadata(o) for o in objects if o["kind"].startswith("MutatingAdmissionPolicy")]
    assert sorted(mutating, key=str) == sorted(load_policies(["gate-injection"]), key=str)
    c = container(objects)
    assert not [a for a in c["args"] if a.startswith(("--cert-dir", "--webhook", "--self-signed"))]
    assert [p["name"] for p in c["ports"]] == ["metrics"]
    assert [m["mountPath"] for m in c["volumeMounts"]] == ["/tmp"]


def test_gate_injection_auto_follows_the_cluster(render: Render) -> None:
    with_map = render("--set", "gateInjection=auto", "--api-versions", MAP_API)
    assert len(by_kind(with_map, "MutatingAdmissionPolicy")) == 2
    assert not by_kind(with_map, "MutatingWebhookConfiguration")
    without = render("--set", "gateInjection=auto")
    assert not by_kind(without, "MutatingAdmissionPolicy")
    assert by_kind(without, "MutatingWebhookConfiguration")
    # The default is the webhook, whatever the cluster serves.
    assert by_kind(render("--api-versions", MAP_API), "MutatingWebhookConfiguration")


def test_service_monitor(render: Render) -> None:
    objects = render(
        "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.labels.release=prom"
    )
    monitor = one(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"] == [
        {
            "port": "metrics",
            "path": "/metrics",
            "scheme": "https",
            "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
            "tlsConfig": {"insecureSkipVerify": True},
            "interval": "30s",
            "scrapeTimeout": "10s",
        }
    ]
    service = next(s for s in by_kind(objects, "Service") if s["metadata"]["name"].endswith("-metrics"))
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


def test_secure_metrics_by_default_and_plain_http_as_an_option(render: Render) -> None:
    """As Kueue's chart: /metrics over HTTPS, each scrape's token reviewed; the probes over
    HTTPS too (unauthenticated); ``metrics.secure=false`` serves plain HTTP to anyone."""
    for secure, values in ((True, []), (False, ["--set", "metrics.secure=false"])):
        objects = render("--set", "metrics.serviceMonitor.enabled=true", *values)
        c = container(objects)
        assert ("--metrics-secure" if secure else "--no-metrics-secure") in c["args"]
        for probe in ("livenessProbe", "readinessProbe"):
            assert c[probe]["httpGet"]["scheme"] == ("HTTPS" if secure else "HTTP")
        [endpoint] = one(objects, "ServiceMonitor")["spec"]["endpoints"]
        assert endpoint["scheme"] == ("https" if secure else "http")
        assert ("bearerTokenFile" in endpoint) == secure
        granted = set(rules(objects, "ClusterRole"))
        assert (set(METRICS_AUTH_RULES) <= granted) == secure
        readers = [
            o for o in by_kind(objects, "ClusterRole") if o["metadata"]["name"].endswith("-metrics-reader")
        ]
        assert [r["rules"] for r in readers] == (
            [[{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]] if secure else []
        )
    assert not [
        b for b in by_kind(render(), "ClusterRoleBinding") if "metrics-reader" in b["metadata"]["name"]
    ]
    prometheus = {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}
    bound = render("--set-json", f"metrics.reader.subjects=[{json.dumps(prometheus)}]")
    [binding] = [
        b for b in by_kind(bound, "ClusterRoleBinding") if b["metadata"]["name"].endswith("-metrics-reader")
    ]
    assert binding["subjects"] == [prometheus]
    assert binding["roleRef"]["name"] == f"{RELEASE}-metrics-reader"


def test_one_replica_has_no_budget(render: Render) -> None:
    objects = render("--set", "manager.replicas=1")
    assert one(objects, "Deployment")["spec"]["replicas"] == 1
    assert not by_kind(objects, "PodDisruptionBudget")


def test_extra_args_and_image(render: Render) -> None:
    objects = render(
        "--set", "image.repository=registry.example/gk",
        "--set", "image.tag=1.2.3",
        "--set", "manager.extraArgs={--metrics-host=0.0.0.0}",
        "--set", "manager.logLevel=DEBUG",
        "--set", "manager.logFormat=text",
    )  # fmt: skip
    c = container(objects)
    assert c["image"] == "registry.example/gk:1.2.3"
    assert c["args"][-3:] == ["--log-level=DEBUG", "--log-format=text", "--metrics-host=0.0.0.0"]


DIGEST = "sha256:" + "0123456789abcdef" * 4


def test_an_image_digest_pins_the_image_and_a_malformed_one_is_refused(helm: Path, render: Render) -> None:
    objects = render(
        "--set", "image.repository=registry.example/gk",
        "--set", "image.tag=1.2.3",
        "--set", f"image.digest={DIGEST}",
    )  # fmt: skip
    assert container(objects)["image"] == f"registry.example/gk@{DIGEST}"
    for bad in ("sha256:abc", "latest", f"sha512:{DIGEST[7:]}"):
        said = refusal(helm, "--set", f"image.digest={bad}")
        assert "digest" in said and "does not match pattern" in said, said


def test_without_an_image_the_chart_refuses_and_says_how_to_get_one(helm: Path) -> None:
    said = refusal(helm, image=())
    assert "image.repository is not set" in said and "./scripts/image" in said, said
    assert "global.imageRegistry" in said and "docs/install.md" in said, said


@pytest.mark.parametrize(
    ("values", "image"),
    [
        ({"global.imageRegistry": "reg.example"}, "reg.example/lws-gatekeeper:0.1.0"),
        (
            {"global.imageRegistry": "reg.example/", "image.repository": "team/gk"},
            "reg.example/team/gk:0.1.0",
        ),
        ({"image.repository": "reg.example/gk", "image.tag": "2.0"}, "reg.example/gk:2.0"),
        (
            {"global.imageRegistry": "reg.example", "image.digest": DIGEST},
            f"reg.example/lws-gatekeeper@{DIGEST}",
        ),
    ],
    ids=["registry only", "registry before repository", "repository and tag", "registry and digest"],
)
def test_the_image_is_named_from_the_registry_repository_tag_and_digest(
    helm: Path, values: dict[str, str], image: str
) -> None:
    sets = [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]
    objects = [doc for doc in yaml.safe_load_all(_template_without_image(helm, *sets)) if doc]
    assert container(objects)["image"] == image


def _template_without_image(helm: Path, *args: str) -> str:
    res = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_karpenter_instance_types_go_to_the_gatekeeper(render: Render, default: list[dict[str, Any]]) -> None:
    objects = render(*KARPENTER)
    [config] = [c for c in by_kind(objects, "ConfigMap") if c["metadata"]["name"].endswith("-karpenter")]
    types = parse_instance_types(json.loads(config["data"]["instance-types.json"]))
    assert [t.name for t in types] == ["g4dn.xlarge", "g4dn.metal"]
    c = container(objects)
    path = "/etc/lws-gatekeeper/karpenter/instance-types.json"
    assert f"--karpenter-instance-types={path}" in c["args"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["karpenter"] == {"name": "karpenter", "mountPath": path.rsplit("/", 1)[0], "readOnly": True}
    volumes = {v["name"]: v for v in one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["karpenter"]["configMap"]["name"] == config["metadata"]["name"]
    assert not any("karpenter" in a for a in container(default)["args"]), "off without instance types"
    assert not [
        c for c in by_kind(render(*KUEUE, *KARPENTER), "ConfigMap") if "karpenter" in c["metadata"]["name"]
    ]


HUB = ["--set", "hub.clusterName=cluster-a", "--set", "hub.kubeconfigSecret=hub-member"]


def test_a_hub_of_shared_reservations(render: Render, default: list[dict[str, Any]]) -> None:
    objects = render(*HUB, "--set", "hub.heartbeatSeconds=20", "--set", "hub.kubeconfigKey=member.yaml")
    c = container(objects)
    assert {
        "--hub-kubeconfig=/etc/lws-gatekeeper/hub/kubeconfig",
        "--cluster-name=cluster-a",
        "--hub-heartbeat-seconds=20",
    } <= set(c["args"])
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["hub"] == {"name": "hub", "mountPath": "/etc/lws-gatekeeper/hub", "readOnly": True}
    volumes = {v["name"]: v for v in one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["hub"]["secret"] == {
        "secretName": "hub-member",
        "items": [{"key": "member.yaml", "path": "kubeconfig"}],
    }
    assert not any("hub" in a for a in container(default)["args"]), "off by default"
    # the chart makes no RBAC of its own for the hub: its identity there is the Secret's
    assert by_kind(objects, "ClusterRole") == by_kind(default, "ClusterRole")


def test_the_shared_reservation_check_gets_its_flag_and_kueue_rules(
    render: Render, default: list[dict[str, Any]]
) -> None:
    objects = render(*HUB, "--set", "hub.sharedReservationCheck=true")
    assert "--shared-reservation-check" in container(objects)["args"]
    rules = {
        (rule["resources"][0], tuple(rule["verbs"]))
        for rule in one(objects, "ClusterRole")["rules"]
        if rule["apiGroups"] == ["kueue.x-k8s.io"]
    }
    assert {
        ("workloads", ("list", "watch")),
        ("workloads/status", ("patch",)),
        ("admissionchecks", ("list", "watch")),
        ("admissionchecks/status", ("patch",)),
    } <= rules
    assert "--shared-reservation-check" not in container(render(*HUB))["args"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "hub.clusterName=cluster-a"], "hub.clusterName needs hub.kubeconfigSecret"),
        (["--set", "hub.kubeconfigSecret=s"], "hub.kubeconfigSecret needs hub.clusterName"),
        (["--set", "hub.sharedReservationCheck=true"], "hub.sharedReservationCheck needs hub.clusterName"),
        (["--set", "hub.clusterName=Cluster_A"], "at '/hub/clusterName'"),
        (["--set", "hub.heartbeatSeconds=1"], "at '/hub/heartbeatSeconds': minimum: got 1, want 5"),
    ],
)
def test_hub_values_that_cannot_work_are_refused(helm: Path, values: list[str], message: str) -> None:
    assert message in refusal(helm, *values)


# ---- the kueue backend and the node-fit AdmissionCheck controller ------------------------------


def notes(helm: Path, *args: str) -> str:
    """The NOTES.txt an install with ``args`` prints (a client-side dry run: no cluster)."""
    res = run_helm(
        helm, "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client", *IMAGE, *args
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.split("NOTES:", 1)[1]


def test_the_backends_are_the_programs() -> None:
    """The schema's backends are exactly the choices of `lws-gatekeeper run --backend`; the chart's
    flags exist."""
    from gatekeeper.cli import run_cmd

    params = {p.name: p for p in run_cmd.params}
    schema = json.loads((CHART / "values.schema.json").read_text())
    choice = params["backend"].type
    assert isinstance(choice, click.Choice)
    assert schema["properties"]["backend"]["enum"] == list(choice.choices)
    assert params["node_fit"].opts == ["--node-fit"] and params["node_fit"].secondary_opts == [
        "--no-node-fit"
    ]


@pytest.mark.parametrize(
    ("values", "flags"),
    [
        ([], ["--backend=pools", "--no-node-fit"]),
        (["--set", "nodeFit.enabled=false"], ["--backend=pools", "--no-node-fit"]),
        (["--set", "nodeFit.enabled=true"], ["--backend=pools", "--node-fit"]),
        (KUEUE, ["--backend=kueue", "--node-fit"]),
        ([*KUEUE, "--set", "nodeFit.enabled=auto"], ["--backend=kueue", "--node-fit"]),
        ([*KUEUE, "--set", "nodeFit.enabled=true"], ["--backend=kueue", "--node-fit"]),
        ([*KUEUE, "--set", "nodeFit.enabled=false"], ["--backend=kueue", "--no-node-fit"]),
    ],
    ids=[
        "default",
        "pools-no-node-fit",
        "pools-node-fit",
        "kueue",
        "kueue-auto",
        "kueue-node-fit",
        "kueue-no-node-fit",
    ],
)
def test_backend_and_node_fit_flags(render: Render, values: list[str], flags: list[str]) -> None:
    args = container(render(*values))["args"]
    assert args[:3] == ["run", *flags]
    assert not [a for a in args[3:] if a.startswith(("--backend", "--node-fit", "--no-node-fit"))]


def test_kueue_backend_installs_the_same_objects(render: Render, default: list[dict[str, Any]]) -> None:
    """No Kueue object unless asked: the backend changes the flags and the ClusterRole only."""
    objects = render(*KUEUE)
    assert kinds(objects) == kinds(default)
    changed = {
        o["kind"] for o, d in zip(objects, default, strict=True) if o != d and o["kind"] != "Deployment"
    }
    assert changed == {"ClusterRole"}
    assert one(objects, "Deployment")["spec"]["template"]["spec"] == {
        **one(default, "Deployment")["spec"]["template"]["spec"],
        "containers": [
            {
                **container(default),
                "args": ["run", "--backend=kueue", "--node-fit", *container(default)["args"][3:]],
            }
        ],
    }


def test_the_kueue_rules_come_only_with_kueue_or_node_fit(render: Render) -> None:
    def groups(*values: str) -> set[str]:
        return {group for group, *_ in rules(render(*values), "ClusterRole")}

    assert "kueue.x-k8s.io" not in groups()
    assert "kueue.x-k8s.io" not in groups("--set", "nodeFit.enabled=false")
    assert "kueue.x-k8s.io" in groups("--set", "nodeFit.enabled=true")
    assert "kueue.x-k8s.io" in groups(*KUEUE, "--set", "nodeFit.enabled=false")
    # Pools belong to the pools backend only; nodes to it and to the node-fit check.
    kueue_only = {r for _, r, *_ in rules(render(*KUEUE, "--set", "nodeFit.enabled=false"), "ClusterRole")}
    assert not {"pools", "pools/status", "nodes", "admissionchecks"} & kueue_only


@pytest.mark.parametrize(
    "values",
    [
        [*KUEUE, "--set", "nodeFit.admissionCheck.create=true"],
        ["--set", "nodeFit.enabled=true", "--set", "nodeFit.admissionCheck.create=true"],
    ],
    ids=["kueue", "pools-node-fit"],
)
def test_the_node_fit_admission_check(render: Render, values: list[str]) -> None:
    check = one(render(*values), "AdmissionCheck")
    assert without_chart_metadata(check) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": "node-fit"},
        "spec": {"controllerName": NODE_FIT_CONTROLLER},
    }
    assert check["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    named = render(*values, "--set", "nodeFit.admissionCheck.name=gpu-node-fit")
    assert one(named, "AdmissionCheck")["metadata"]["name"] == "gpu-node-fit"


def test_no_admission_check_by_default(render: Render) -> None:
    assert not by_kind(render(*KUEUE), "AdmissionCheck")
    assert not by_kind(render("--set", "nodeFit.enabled=true"), "AdmissionCheck")


@pytest.mark.parametrize(
    "values",
    [
        ["--set", "nodeFit.admissionCheck.create=true"],
        [*KUEUE, "--set", "nodeFit.enabled=false", "--set", "nodeFit.admissionCheck.create=true"],
    ],
    ids=["pools", "kueue-no-node-fit"],
)
def test_an_admission_check_nobody_serves_is_refused(helm: Path, values: list[str]) -> None:
    err = refusal(helm, *values)
    assert "nodeFit.admissionCheck.create=true needs the node-fit controller" in err


def test_the_notes_say_how_to_use_each_backend(helm: Path) -> None:
    pools = notes(helm)
    assert "backend pools" in pools and "kind: Pool" in pools
    assert "node-fit): off" in pools and "LocalQueue" not in pools
    kueue = notes(helm, *KUEUE)
    assert "backend kueue" in kueue and "kind: Pool" not in kueue
    assert f"{POOL_LABEL}=<local-queue>" in kueue and "LocalQueue" in kueue
    assert "node-fit): on" in kueue and "nodeFit.admissionCheck.create=true" in kueue
    made = notes(helm, *KUEUE, "--set", "nodeFit.admissionCheck.create=true")
    assert "AdmissionCheck node-fit created" in made and '[{"name":"node-fit"}]' in made
    assert "node-fit): off" in notes(helm, *KUEUE, "--set", "nodeFit.enabled=false")


# ---- wrong values are refused, and say why ----------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("manager.replicas=two", "at '/manager/replicas': got string, want integer"),
        ("gateInjection=sometimes", "at '/gateInjection': value must be one of 'webhook', 'policy', 'auto'"),
        ("backend=yunikorn", "at '/backend': value must be one of 'pools', 'kueue', 'volcano'"),
        ("nodeFit.enabled=sometimes", "at '/nodeFit/enabled': value must be one of 'auto', true, false"),
        (
            "nodeFit.admissionCheck.create=yes",
            "at '/nodeFit/admissionCheck/create': got string, want boolean",
        ),
        (
            "nodeFit.admissionCheck.name=Node_Fit",
            "at '/nodeFit/admissionCheck/name': 'Node_Fit' does not match",
        ),
        ("nodeFit.check=x", "at '/nodeFit': additional properties 'check' not allowed"),
        ("certManager.enabled=maybe", "at '/certManager/enabled': value must be one of 'auto', true, false"),
        ("manager.replicas=0", "at '/manager/replicas': minimum: got 0, want 1"),
        ("manager.logLevel=LOUD", "at '/manager/logLevel': value must be one of"),
        ("manager.replica=2", "at '/manager': additional properties 'replica' not allowed"),
        (
            "policies.gateProtection.extraAllowedUsernames={a'b}",
            "/policies/gateProtection/extraAllowedUsernames/0",
        ),
        ("policies.closedPools.exemptNamespaces={Kube_System}", "/policies/closedPools/exemptNamespaces/0"),
        ("metrics.serviceMonitor.interval=often", "at '/metrics/serviceMonitor/interval'"),
        ("metrics.dashboard.enabled=yes", "at '/metrics/dashboard/enabled'"),
        ("metrics.dashboard.namespace=Not_A_Namespace", "at '/metrics/dashboard/namespace'"),
    ],
)
def test_the_schema_refuses_wrong_values(helm: Path, value: str, message: str) -> None:
    err = refusal(helm, "--set", value)
    assert "values don't meet the specifications of the schema" in err
    assert message in err


def test_two_replicas_need_leader_election(helm: Path) -> None:
    err = refusal(helm, "--set", "manager.leaderElection.enabled=false")
    assert "manager.leaderElection.enabled=false needs manager.replicas=1" in err


def test_a_missing_service_account_name_is_refused(helm: Path) -> None:
    err = refusal(helm, "--set", "serviceAccount.create=false")
    assert "serviceAccount.name is required when serviceAccount.create is false" in err


def test_the_opt_in_label_is_the_contract() -> None:
    """The chart's webhook selects the same label as the code (its template spells it out)."""
    text = (CHART / "templates" / "webhook" / "mutatingwebhookconfiguration.yaml").read_text()
    assert f"key: {POOL_LABEL}" in text


def test_the_packaged_chart_carries_the_linked_files(helm: Path, tmp_path: Path) -> None:
    """`helm package` resolves the links (files/crds/, files/policies/): the archive renders the same."""
    res = run_helm(helm, "package", str(CHART), "--destination", str(tmp_path))
    assert res.returncode == 0, res.stderr
    [archive] = tmp_path.glob("lws-gatekeeper-*.tgz")
    packaged = run_helm(helm, "template", RELEASE, str(archive), "--namespace", NAMESPACE, *IMAGE)
    assert packaged.returncode == 0, packaged.stderr
    objects = [doc for doc in yaml.safe_load_all(packaged.stdout) if doc]
    assert objects == template(helm)
    assert len(by_kind(objects, "CustomResourceDefinition")) == 2

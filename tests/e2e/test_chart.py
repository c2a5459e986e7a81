"""The chart against the sandbox's API server: its objects are accepted, and its RBAC is enough and no more.

Why this exists: ``helm template`` proves the chart renders; only an API server proves that
what it renders is valid (schemas of every kind, CEL of the policies, RBAC references),
and only running the gatekeeper *as the chart's ServiceAccount* proves that the
ClusterRole and Role grant what it needs. So:

- every object of the default, of the ``gateInjection=policy`` and of the
  ``metrics.dashboard.enabled=true`` (the Grafana dashboard's ConfigMap) installation passes a
  server-side dry run (server-side apply, as Helm 4 does), and so does the ``backend=kueue``
  installation with its AdmissionCheck, on the sandbox with Kueue (``kueue_sandbox``: the
  session sandbox has no Kueue CRDs); cert-manager and ServiceMonitor kinds are absent
  from the sandboxes, so those combinations are only rendered (``tests/unit/test_chart.py``);
- a real ``helm install`` and ``helm uninstall`` (policies off: the sandbox installs its own);
- the RBAC proof: the chart's ServiceAccount, ClusterRole, Role and bindings from
  ``helm template``, a token for that account (TokenRequest), the sandbox's gatekeeper
  restarted with it, an LWS of two groups on a Pool that fits one (one admitted and running,
  one gated with its reason), in a namespace where the sandbox enforces gate protection;
  then the things that identity must not do, each refused by the API server;
- the same proof for ``backend=kueue`` on the sandbox with Kueue, with node fit and
  without: the gatekeeper as the chart's ServiceAccount makes a Kueue Workload per group,
  serves the chart's node-fit AdmissionCheck (Active, then Ready on the admitted Workload)
  and lifts the admitted group's gates; what the kueue ClusterRole does not grant (and,
  without node fit, nodes and AdmissionChecks) is refused;
- the self-signed certificate path with the chart's identity: its Secret and its webhook
  configuration written, nothing else.
"""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import kr8s.asyncio
import pytest
import yaml

from gatekeeper.controller.certs import CA_CRT, TLS_CRT, SelfSignedCerts
from gatekeeper.controller.kube import Kube
from gatekeeper.core.kube.keys import POOL_LABEL, SCHEDULING_GATE
from gatekeeper_lab.sandbox import build
from gatekeeper_lab.sandbox.cluster import GATEKEEPER_NAMESPACE, Sandbox
from gatekeeper_lab.sandbox.observe import GROUP_INDEX_LABEL, LWS_NAME_LABEL
from gatekeeper_lab.sandbox.replay import list_raw, settle

from .conftest import (
    Cluster,
    MakeNodes,
    MakePool,
    admitted,
    condition,
    eventually,
    gatekeeper_running_as,
    records,
)
from .kueue_support import (
    NODE_FIT_CONTROLLER,
    check_state,
    get,
    is_true,
    items,
    lws,
    make_namespace,
    make_queue,
    new_tag,
    pods,
    wait,
    workloads,
)
from .test_admission import create_lws, events_for, lws_body
from .test_policies import kubectl, ok, refused, user_kubeconfig

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "lws-gatekeeper"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def gatekeepers(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The gatekeeper's own RBAC of ``objects``: not the ClusterRoles the chart ships for the
    cluster's users (``templates/rbac/users.yaml``: ``test_why_tenant.py`` proves those; the
    metrics reader: ``test_image.py``)."""
    users = ("-groupadmission-viewer", "-pool-reader", "-metrics-reader")
    return [
        o
        for o in objects
        if o["kind"] in RBAC_KINDS
        and not (o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith(users))
    ]


@pytest.fixture(scope="module")
def helm() -> Path:
    return build.build_all(["helm"])["helm"].bin / "helm"


IMAGE_REPOSITORY = "lws-gatekeeper/lws-gatekeeper"
"""The image the tests name (the chart names none of its own): the sandbox runs the image's
files, not a pulled image (``test_image.py``); a test's own ``--set`` wins."""


def template(helm: Path, release: str, namespace: str, *args: str) -> list[dict[str, Any]]:
    image = ("--set", f"image.repository={IMAGE_REPOSITORY}")
    res = subprocess.run(
        [str(helm), "template", release, str(CHART), "--namespace", namespace, *image, *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    return [doc for doc in yaml.safe_load_all(res.stdout) if doc]


def sandbox(cluster: Cluster) -> Any:
    assert cluster.sandbox is not None, "the chart tests drive the sandbox's gatekeeper"
    return cluster.sandbox


# ---- every rendered object is accepted ---------------------------------------------------------


async def passes_a_server_side_dry_run(cluster: Cluster, objects: list[dict[str, Any]]) -> None:
    """Every object accepted by a server-side dry run of a server-side apply, as Helm 4 sends it."""
    code, out, err = await kubectl(
        cluster,
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=helm",
        "--dry-run=server",
        "-f",
        "-",
        input=yaml.safe_dump_all(objects),
    )
    assert code == 0, err
    assert "would violate PodSecurity" not in err, err
    lines = out.splitlines()
    assert len(lines) == len(objects), out
    assert all(line.endswith("(server dry run)") for line in lines), out


@pytest.mark.parametrize(
    "values",
    [[], ["--set", "gateInjection=policy"], ["--set", "metrics.dashboard.enabled=true"]],
    ids=["default", "policy", "dashboard"],
)
async def test_every_rendered_object_passes_a_server_side_dry_run(
    cluster: Cluster, helm: Path, namespace: str, values: list[str]
) -> None:
    # The restricted Pod Security Standard, enforced: its admission warns about a Deployment
    # whose pods would violate it.
    for mode in ("enforce", "warn"):
        await ok(cluster, "label", "namespace", namespace, f"pod-security.kubernetes.io/{mode}=restricted")
    objects = template(helm, "e2e", namespace, *values)
    await passes_a_server_side_dry_run(cluster, objects)
    kinds = {o["kind"] for o in objects}
    assert {
        "Deployment",
        "ClusterRole",
        "Role",
        "ValidatingAdmissionPolicy",
        "CustomResourceDefinition",
    } <= kinds
    if "gateInjection=policy" in values:
        assert "MutatingAdmissionPolicy" in kinds and "MutatingWebhookConfiguration" not in kinds
    else:
        assert "MutatingWebhookConfiguration" in kinds
    assert ("ConfigMap" in kinds) == ("metrics.dashboard.enabled=true" in values), "the Grafana dashboard"


def kueue_cluster(sb: Sandbox) -> Cluster:
    """The sandbox with Kueue, as the helpers of these tests reach a cluster."""
    return Cluster(kubeconfig=sb.kubeconfig, kind="sandbox", own=sb)


@pytest.mark.parametrize(
    "values",
    [
        ["--set", "nodeFit.admissionCheck.create=true"],
        ["--set", "gateInjection=policy", "--set", "nodeFit.enabled=false"],
    ],
    ids=["kueue-admission-check", "kueue-policy-no-node-fit"],
)
async def test_the_kueue_installation_passes_a_server_side_dry_run(
    kueue_sandbox: Sandbox, helm: Path, values: list[str]
) -> None:
    cluster = kueue_cluster(kueue_sandbox)
    namespace = f"chart-kueue-{new_tag()}"
    make_namespace(kueue_sandbox, namespace, managed=False)
    try:
        for mode in ("enforce", "warn"):
            await ok(
                cluster, "label", "namespace", namespace, f"pod-security.kubernetes.io/{mode}=restricted"
            )
        objects = template(helm, "e2e", namespace, "--set", "backend=kueue", *values)
        await passes_a_server_side_dry_run(cluster, objects)
        args = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"][
            "containers"
        ][0]["args"]
        assert "--backend=kueue" in args
        checks = [o for o in objects if o["kind"] == "AdmissionCheck"]
        if "nodeFit.enabled=false" in values:
            assert "--no-node-fit" in args and not checks
        else:
            assert "--node-fit" in args
            assert [c["spec"]["controllerName"] for c in checks] == [NODE_FIT_CONTROLLER]
    finally:
        await ok(cluster, "delete", "namespace", namespace, "--wait=false")


async def test_helm_install_and_uninstall(cluster: Cluster, helm: Path, namespace: str) -> None:
    """The real thing. Its policies stay off: cluster-wide, its gate protection would refuse the
    sandbox's gatekeeper in every namespace meanwhile (the dry run above proves them)."""
    # The release's webhook calls a Service nobody serves (no image runs here) and fails
    # closed: it exists only until the uninstall below, while no test creates opted-in pods.
    args = [
        "--kubeconfig", str(cluster.kubeconfig), "--namespace", namespace,
        "--set", "policies.gateProtection.enabled=false", "--set", "policies.poolLabel.enabled=false",
        "--set", f"image.repository={IMAGE_REPOSITORY}",
        # The sandbox's CRDs are not Helm's: test_chart_upgrade.py adopts such CRDs.
        "--set", "crds.enabled=false",
    ]  # fmt: skip
    try:
        res = await anyio.run_process([str(helm), "install", "e2e", str(CHART), *args], check=False)
        assert res.returncode == 0, res.stderr.decode()
        assert "STATUS: deployed" in res.stdout.decode()
        await ok(
            cluster,
            "get",
            "deployment/e2e-lws-gatekeeper",
            "secret/e2e-lws-gatekeeper-webhook-cert",
            "-n",
            namespace,
        )
        config = json.loads(
            await ok(cluster, "get", "mutatingwebhookconfiguration", "e2e-lws-gatekeeper", "-o", "json")
        )
        assert [w["name"] for w in config["webhooks"]] == [
            "pods.lws-gatekeeper.io",
            "leaderworkersets.lws-gatekeeper.io",
        ]
    finally:
        res = await anyio.run_process([str(helm), "uninstall", "e2e", *args[:4]], check=False)
    assert res.returncode == 0, res.stderr.decode()
    code, _, _ = await kubectl(cluster, "get", "mutatingwebhookconfiguration", "e2e-lws-gatekeeper")
    assert code != 0, "uninstall removes the webhook configuration"


# ---- the RBAC proof -------------------------------------------------------------------------------


@contextlib.contextmanager
def installed(cluster: Cluster, objects: list[dict[str, Any]]) -> Iterator[None]:
    """Objects applied as the admin, deleted afterwards."""
    text = yaml.safe_dump_all(objects)
    sandbox(cluster).kubectl("apply", "-f", "-", input=text)
    try:
        yield
    finally:
        sandbox(cluster).kubectl(
            "delete", "--ignore-not-found", "--wait=false", "-f", "-", input=text, check=False
        )


@pytest.fixture
async def chart_identity(cluster: Cluster, helm: Path, tmp_path: Path) -> AsyncIterator[Path]:
    """The chart's RBAC installed as `helm install lws-gatekeeper -n lws-gatekeeper-system` makes it,
    and a kubeconfig with a token of its ServiceAccount."""
    objects = gatekeepers(template(helm, "lws-gatekeeper", GATEKEEPER_NAMESPACE))
    assert sorted(o["kind"] for o in objects) == sorted(RBAC_KINDS)
    with installed(cluster, objects):
        yield await user_kubeconfig(cluster, GATEKEEPER_NAMESPACE, "lws-gatekeeper", tmp_path)


@pytest.fixture
def gatekeeper_as(cluster: Cluster, chart_identity: Path) -> Iterator[Path]:
    """The sandbox's gatekeeper restarted with the chart's identity (its webhook still registered)."""
    with gatekeeper_running_as(sandbox(cluster), kubeconfig=chart_identity):
        yield chart_identity


async def test_the_gatekeeper_runs_as_the_charts_service_account_and_no_more(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    gatekeeper_as: Path,
    tmp_path: Path,
) -> None:
    as_gatekeeper = gatekeeper_as
    who = await ok(
        cluster, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}", kubeconfig=as_gatekeeper
    )
    assert who == f"system:serviceaccount:{GATEKEEPER_NAMESPACE}:lws-gatekeeper"
    # The sandbox enforces its policies here as everywhere: only the gatekeeper may lift a
    # gate, write records and Pool status, and it may change nothing else of a pod.

    # An LWS of two groups (2 pods of 1 GPU each) on a pool of two 1-GPU nodes: one fits.
    nodes = await fake_nodes(2, gpus=1)
    pool = await make_pool(nodes)
    await create_lws(api, namespace, lws_body("vllm", pool, nodes, replicas=2))
    verdict = await settle(api, namespace, "vllm", expected_pods=4, size=2, timeout=120)
    assert sorted(g.index for g in verdict.groups.values() if g.whole(2)) == [0]
    waiting = verdict.groups[("vllm", 1)]
    assert (waiting.pods, waiting.gated, waiting.bound) == (2, 2, 0), "group 1 waits whole, gated"

    recs = await records(api, namespace)
    assert admitted(recs[0]) and not admitted(recs[1])
    assert condition(recs[1])["reason"] == "WaitingForQuota"
    assert condition(recs[1])["message"].startswith("group 1 needs 2 nvidia.com/gpu on 2 nodes")
    # Group 0's pods run; group 1's keep their gate.
    pods = await list_raw(api, "pods", namespace=namespace, label_selector={LWS_NAME_LABEL: "vllm"})
    for pod in pods:
        group = pod["metadata"]["labels"][GROUP_INDEX_LABEL]
        gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
        if group == "0":
            assert gates == [] and pod["status"]["phase"] == "Running", pod["metadata"]["name"]
        else:
            assert gates == [SCHEDULING_GATE], pod["metadata"]["name"]

    # The gate protection is on here: a tenant who may patch pods cannot lift group 1's gate.
    await ok(cluster, "create", "serviceaccount", "tenant", "-n", namespace)
    await ok(
        cluster, "create", "rolebinding", "tenant-edit", "--clusterrole=edit",
        f"--serviceaccount={namespace}:tenant", "-n", namespace,
    )  # fmt: skip
    as_tenant = await user_kubeconfig(cluster, namespace, "tenant", tmp_path)
    gated = next(p for p in pods if p["metadata"]["labels"][GROUP_INDEX_LABEL] == "1")
    remove = json.dumps([{"op": "remove", "path": "/spec/schedulingGates/0"}])
    patch = ("patch", "pod", gated["metadata"]["name"], "-n", namespace, "--type=json", "-p", remove)
    err = await refused(cluster, *patch, kubeconfig=as_tenant)
    assert f"system:serviceaccount:{namespace}:tenant may not remove it" in err

    # What it wrote with that identity: an Event on the LWS, the Pool's status.
    async def written() -> bool:
        pools = {p["metadata"]["name"]: p for p in await list_raw(api, "pools.lws-gatekeeper.io")}
        status = pools[pool].get("status", {})
        events = {e["reason"] for e in await events_for(api, namespace, "vllm")}
        return status.get("admittedGroups") == 1 and status.get("waitingGroups") == 1 and "Admitted" in events

    await eventually(written, timeout=30, what="the Pool's status and the Admitted event")
    lease = json.loads(
        await ok(cluster, "get", "lease", "lws-gatekeeper", "-n", GATEKEEPER_NAMESPACE, "-o", "json")
    )
    assert lease["spec"]["holderIdentity"] == "gatekeeper"

    # And what it must not do, refused by the API server. It may delete pods (a group given
    # back), but the policy lws-gatekeeper-scope-pods holds it to the pods of an LWS.
    await ok(cluster, "run", "bystander", "--image=pause", "-n", namespace)
    sa = f"system:serviceaccount:{GATEKEEPER_NAMESPACE}:lws-gatekeeper"
    for args in (
        ("delete", "node", nodes.names[0]),
        ("delete", "pod", "bystander", "-n", namespace),
        ("get", "secrets", "-n", "kube-system"),
        ("get", "secrets", "-n", GATEKEEPER_NAMESPACE),
        ("patch", "lws", "vllm", "-n", namespace, "--type=merge", "-p", '{"spec":{"replicas":5}}'),
        ("create", "namespace", "not-by-the-gatekeeper"),
        # Its own webhook configuration only (by name), not LWS's.
        (
            "patch",
            "mutatingwebhookconfiguration",
            "lws-mutating-webhook-configuration",
            "--type=merge",
            "-p",
            '{"metadata":{"labels":{"x":"y"}}}',
        ),
        ("get", "pools.lws-gatekeeper.io", pool),  # informers list and watch; a get is not needed
    ):
        err = await refused(cluster, *args, kubeconfig=as_gatekeeper)
        assert "forbidden" in err.lower() and sa in err, f"{args}: {err}"
    assert (await kubectl(cluster, "auth", "can-i", "*", "*", kubeconfig=as_gatekeeper))[1].strip() == "no"


# ---- the RBAC proof of the kueue backend -----------------------------------------------------------


def _groups(sb: Sandbox, ns: str) -> dict[str, list[str]]:
    """Per group index, each live pod's state: running, gated (our gate) or pending."""
    out: dict[str, list[str]] = {}
    for pod in pods(sb, ns):
        if pod["metadata"].get("deletionTimestamp"):
            continue
        gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
        phase = pod.get("status", {}).get("phase")
        state = "gated" if SCHEDULING_GATE in gates else "running" if phase == "Running" else "pending"
        out.setdefault(pod["metadata"]["labels"][GROUP_INDEX_LABEL], []).append(state)
    return out


@pytest.fixture(params=[True, False], ids=["node-fit", "no-node-fit"])
async def kueue_chart_identity(
    request: pytest.FixtureRequest, kueue_sandbox: Sandbox, helm: Path, tmp_path: Path
) -> AsyncIterator[tuple[Path, str | None]]:
    """The sandbox-with-Kueue's gatekeeper restarted as the chart's ServiceAccount, with the RBAC
    of `helm install lws-gatekeeper -n lws-gatekeeper-system --set backend=kueue` and either
    node fit on (the default) with the chart's AdmissionCheck
    (`--set nodeFit.admissionCheck.create=true`), or `--set nodeFit.enabled=false`; yields its
    kubeconfig and the AdmissionCheck's name (None without node fit)."""
    sb = kueue_sandbox
    cluster = kueue_cluster(sb)
    node_fit: bool = request.param
    check = f"node-fit-{new_tag()}" if node_fit else None
    values = (
        ["--set", "nodeFit.admissionCheck.create=true", "--set", f"nodeFit.admissionCheck.name={check}"]
        if node_fit
        else ["--set", "nodeFit.enabled=false"]
    )
    rendered = template(helm, "lws-gatekeeper", GATEKEEPER_NAMESPACE, "--set", "backend=kueue", *values)
    wanted = (*RBAC_KINDS, *(["AdmissionCheck"] if node_fit else []))
    objects = [*gatekeepers(rendered), *(o for o in rendered if o["kind"] == "AdmissionCheck")]
    assert sorted(o["kind"] for o in objects) == sorted(wanted)
    deployment = next(o for o in rendered if o["kind"] == "Deployment")
    flags = deployment["spec"]["template"]["spec"]["containers"][0]["args"][1:3]
    assert flags == ["--backend=kueue", "--node-fit" if node_fit else "--no-node-fit"]
    with installed(cluster, objects):
        kubeconfig = await user_kubeconfig(cluster, GATEKEEPER_NAMESPACE, "lws-gatekeeper", tmp_path)
        # The chart's flags.
        with gatekeeper_running_as(sb, kubeconfig=kubeconfig, backend="kueue", args=flags[1:]):
            yield kubeconfig, check


async def test_the_kueue_backend_runs_as_the_charts_service_account_and_no_more(
    kueue_sandbox: Sandbox, kueue_chart_identity: tuple[Path, str | None]
) -> None:
    sb = kueue_sandbox
    cluster = kueue_cluster(sb)
    as_gatekeeper, check = kueue_chart_identity
    sa = f"system:serviceaccount:{GATEKEEPER_NAMESPACE}:lws-gatekeeper"

    who = await ok(
        cluster, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}", kubeconfig=as_gatekeeper
    )
    assert who == sa
    # A ClusterQueue of 2 GPUs over two 1-GPU nodes that, with node fit, requires the chart's
    # check: make_queue waits until it is Active, so until the chart's identity marked it Active.
    checks = [check] if check else []
    q = make_queue(sb, gpus=2, nodes=2, gpus_per_node=1, managed=False, admission_checks=checks)
    if check:
        assert is_true(get(sb, "admissionchecks.kueue.x-k8s.io", check), "Active")
    # The sandbox enforces its policies here as everywhere: only the gatekeeper may lift a gate.

    # Two groups of 2 one-GPU pods in that LocalQueue: one is admitted whole, the other waits gated.
    sb.apply([lws("vllm", q.namespace, {POOL_LABEL: q.local_queue}, replicas=2, size=2, gpus_per_pod=1)])

    def settled() -> dict[str, list[str]] | None:
        groups = _groups(sb, q.namespace)
        states = sorted(tuple(sorted(v)) for v in groups.values())
        return groups if states == [("gated", "gated"), ("running", "running")] else None

    try:
        groups = wait("one whole group Running, the other whole group gated", settled, timeout=120)
    finally:
        print(sb.kubectl("get", "workloads.kueue.x-k8s.io,groupadmissions,pods", "-n", q.namespace).stdout)
    [running] = [g for g, states in groups.items() if states == ["running", "running"]]
    wls = workloads(sb, q.namespace)
    assert len(wls) == 2, "one Workload per group, made by the chart's identity"
    by_group = {w["metadata"]["labels"][GROUP_INDEX_LABEL]: w for w in wls}
    assert is_true(by_group[running], "Admitted")
    if check:
        assert check_state(by_group[running], check)["state"] == "Ready", "node fit said Ready, as the chart"
    [waiting] = [w for g, w in by_group.items() if g != running]
    assert not is_true(waiting, "Admitted")
    records = {r["spec"]["groupIndex"]: r for r in items(sb, "groupadmissions", "-n", q.namespace)}
    assert sorted(str(i) for i in records) == sorted(by_group)
    assert all(r.get("status", {}).get("workload") for r in records.values()), "record statuses written"

    # What the kueue ClusterRole does not grant, refused by the API server.
    pod = pods(sb, q.namespace)[0]["metadata"]["name"]
    for args in (
        ("delete", "clusterqueue.kueue.x-k8s.io", q.cluster_queue),
        ("delete", "resourceflavor.kueue.x-k8s.io", q.flavor),
        # Its Workloads: created and deleted, their status patched, never their spec.
        (
            "patch",
            "workload.kueue.x-k8s.io",
            waiting["metadata"]["name"],
            "-n",
            q.namespace,
            "--type=merge",
            "-p",
            '{"spec":{"active":false}}',
        ),
        ("get", "workload.kueue.x-k8s.io", waiting["metadata"]["name"], "-n", q.namespace),
        (
            "patch",
            "admissioncheck.kueue.x-k8s.io",
            check or "any",
            "--type=merge",
            "-p",
            '{"metadata":{"labels":{"x":"y"}}}',
        ),
        ("get", "localqueues.kueue.x-k8s.io", "-n", q.namespace),
        ("get", "pools.lws-gatekeeper.io"),  # the pools backend's, not the kueue backend's
        ("patch", "lws", "vllm", "-n", q.namespace, "--type=merge", "-p", '{"spec":{"replicas":5}}'),
        ("delete", "node", f"kq-{q.labels['kueue-test-pool']}-0"),
        ("get", "secrets", "-n", "kube-system"),
        ("get", "pod", pod, "-n", q.namespace),
        # Without node fit, the kueue backend needs neither nodes nor AdmissionChecks.
        *([] if check else [("get", "nodes"), ("get", "admissionchecks.kueue.x-k8s.io")]),
    ):
        err = await refused(cluster, *args, kubeconfig=as_gatekeeper)
        assert "forbidden" in err.lower() and sa in err, f"{args}: {err}"
    assert (await kubectl(cluster, "auth", "can-i", "*", "*", kubeconfig=as_gatekeeper))[1].strip() == "no"
    # And what it may do that the pools backend may not: stop a pod (the evicted groups' pods).
    can = await ok(cluster, "auth", "can-i", "delete", "pods", "-n", q.namespace, kubeconfig=as_gatekeeper)
    assert can.strip() == "yes"


# ---- the self-signed certificates with the chart's identity --------------------------------------


async def test_the_self_signed_certificates_need_only_their_secret_and_their_webhook(
    cluster: Cluster, helm: Path, namespace: str, tmp_path: Path
) -> None:
    release = "gkcerts"
    rendered = template(
        helm, release, namespace,
        "--set", "policies.gateProtection.enabled=false", "--set", "policies.poolLabel.enabled=false",
    )  # fmt: skip
    wanted = (*RBAC_KINDS, "Secret", "MutatingWebhookConfiguration")
    objects = [o for o in rendered if o["kind"] in wanted]
    # Its webhooks would call a Service nobody serves and fail closed: select a test-only label.
    config = next(o for o in objects if o["kind"] == "MutatingWebhookConfiguration")
    test_label = f"e2e-{namespace}.lws-gatekeeper.io/pool"
    for hook in config["webhooks"]:
        assert hook["objectSelector"]["matchExpressions"][0]["key"] == POOL_LABEL
        hook["objectSelector"]["matchExpressions"][0]["key"] = test_label
    account = f"{release}-lws-gatekeeper"
    with installed(cluster, objects):
        as_gatekeeper = await user_kubeconfig(cluster, namespace, account, tmp_path)
        sa_api = await kr8s.asyncio.api(kubeconfig=str(as_gatekeeper))
        certs = SelfSignedCerts(
            Kube(sa_api),
            namespace=namespace,
            secret=f"{account}-webhook-cert",
            service=f"{account}-webhook",
            webhook_config=account,
            cert_dir=tmp_path / "certs",
        )
        with anyio.fail_after(30):
            assert await certs.ensure()
        secret = json.loads(
            await ok(cluster, "get", "secret", f"{account}-webhook-cert", "-n", namespace, "-o", "json")
        )
        ca = base64.b64decode(secret["data"][CA_CRT])
        assert (tmp_path / "certs" / TLS_CRT).read_bytes() == base64.b64decode(secret["data"][TLS_CRT])
        live = json.loads(await ok(cluster, "get", "mutatingwebhookconfiguration", account, "-o", "json"))
        assert {base64.b64decode(w["clientConfig"]["caBundle"]) for w in live["webhooks"]} == {ca}
        # Nothing else: not another Secret of its own namespace, not another webhook configuration.
        await ok(cluster, "create", "secret", "generic", "other", "-n", namespace, "--from-literal=k=v")
        for args in (
            ("get", "secret", "other", "-n", namespace),
            (
                "patch",
                "mutatingwebhookconfiguration",
                "lws-gatekeeper",
                "--type=merge",
                "-p",
                '{"metadata":{"labels":{"x":"y"}}}',
            ),
            ("create", "secret", "generic", "mine", "-n", namespace, "--from-literal=k=v"),
        ):
            err = await refused(cluster, *args, kubeconfig=as_gatekeeper)
            assert "forbidden" in err.lower(), f"{args}: {err}"

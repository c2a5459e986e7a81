"""The admission policies of ``policies/`` against the real API server: each does what it says.

Every test installs its own copy of a policy and its binding, named uniquely, with the
binding narrowed to the test's namespace, and removes them afterwards (they are
cluster-scoped: a leftover would act on every later test). A policy takes effect a
moment after it is created, so each test first waits until a server-side dry run shows
the policy acting, then does the real thing.

The sandbox already runs the gatekeeper's webhook, which gates pods labelled
``lws-gatekeeper.io/pool`` and copies that label into LWS templates, exactly what the
webhook-free injection policies do. To see the *policies* act, the injection test
installs them with the opt-in label key replaced by a test key
(``e2e-<id>.lws-gatekeeper.io/pool``) that the webhook (and the gatekeeper's controller,
which watches the same label) does not select: same CEL, same selectors, other key. A pod
gated there was gated by the policy, nothing else. The gate name is the real one. The
gate-protection test uses plain pods with the gate written in (the third way of gating),
so neither the webhook nor the controller touches them either.

The sandbox enforces its own copies of the validating policies in every namespace, as a
chart install does. A test whose copy differs from the sandbox's (another identity may
remove the gate; an LWS with an empty label made before the policy) must have the
sandbox's off in its namespace, and says so with ``sandbox_policies_off``.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from gatekeeper.core.kube.keys import POOL_LABEL, SCHEDULING_GATE
from gatekeeper.render.admission import load_policies, service_account_username
from gatekeeper_lab.sandbox.cluster import POLICIES_LABEL, POLICIES_OFF

from .conftest import Cluster

Install = Callable[..., Awaitable[list[dict[str, Any]]]]

ACTIVATION_TIMEOUT = 30.0


# ---- helpers ----------------------------------------------------------------------------


async def kubectl(
    cluster: Cluster, *args: str, kubeconfig: Path | None = None, input: str | None = None
) -> tuple[int, str, str]:
    """Run kubectl (as the admin, or with ``kubeconfig``): exit code, stdout, stderr; never raises."""
    binary = cluster.kubectl_binary
    res = await anyio.run_process(
        [binary, f"--kubeconfig={kubeconfig or cluster.kubeconfig}", *args],
        input=input.encode() if input is not None else None,
        check=False,
    )
    return res.returncode, res.stdout.decode(), res.stderr.decode()


async def ok(cluster: Cluster, *args: str, kubeconfig: Path | None = None, input: str | None = None) -> str:
    code, out, err = await kubectl(cluster, *args, kubeconfig=kubeconfig, input=input)
    assert code == 0, f"kubectl {' '.join(args)}: {err}"
    return out


async def refused(
    cluster: Cluster, *args: str, kubeconfig: Path | None = None, input: str | None = None
) -> str:
    """The command must fail; returns its error output."""
    code, out, err = await kubectl(cluster, *args, kubeconfig=kubeconfig, input=input)
    assert code != 0, f"kubectl {' '.join(args)} was accepted: {out}"
    return err


async def eventually(
    check: Callable[[], Awaitable[bool]], what: str, timeout: float = ACTIVATION_TIMEOUT
) -> None:
    with anyio.move_on_after(timeout):
        while not await check():
            await anyio.sleep(0.25)
        return
    pytest.fail(f"not within {timeout:.0f}s: {what}")


async def get(cluster: Cluster, namespace: str, kind: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(await ok(cluster, "get", kind, name, "-n", namespace, "-o", "json"))
    return result


def gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def pod(name: str, *, labels: dict[str, str] | None = None, gates: Sequence[str] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "registry.example/app:1"}]}
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def lws(name: str, *, labels: dict[str, str], leader: bool = True, replicas: int = 1) -> dict[str, Any]:
    container = {"name": "c", "image": "registry.example/app:1"}
    template: dict[str, Any] = {"size": 2, "workerTemplate": {"spec": {"containers": [container]}}}
    if leader:
        template["leaderTemplate"] = {
            "metadata": {"labels": {"role": "leader"}},
            "spec": {"containers": [container]},
        }
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": template},
    }


def template_labels(obj: dict[str, Any]) -> dict[str, dict[str, str] | None]:
    lwt = obj["spec"]["leaderWorkerTemplate"]
    return {
        name: (lwt[name].get("metadata") or {}).get("labels", {}) if name in lwt else None
        for name in ("leaderTemplate", "workerTemplate")
    }


def for_test(objects: list[dict[str, Any]], suffix: str, namespace: str) -> list[dict[str, Any]]:
    """The policies renamed with ``suffix``, their bindings acting in ``namespace`` only."""
    out = json.loads(json.dumps(objects))
    for obj in out:
        obj["metadata"]["name"] += f"-{suffix}"
        if obj["kind"].endswith("Binding"):
            obj["spec"]["policyName"] += f"-{suffix}"
            match = obj["spec"].setdefault("matchResources", {})
            assert "namespaceSelector" not in match, "the shipped binding already narrows namespaces"
            match["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    return list(out)


def with_label_key(objects: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """The policies with the opt-in label key replaced everywhere (CEL and selectors alike)."""
    text = json.dumps(objects)
    assert POOL_LABEL in text
    replaced = json.loads(text.replace(POOL_LABEL, key))
    assert set(_contract_names(json.dumps(replaced))) <= {SCHEDULING_GATE}, (
        "only the gate keeps its real name"
    )
    return list(replaced)


def _contract_names(text: str) -> list[str]:
    """The contract names in ``text``, not counting them as the tail of a longer key."""
    return re.findall(r"(?<![.\w-])lws-gatekeeper\.io/[a-z]+", text)


@pytest.fixture
async def install(cluster: Cluster) -> AsyncIterator[Install]:
    """Factory: ``await install(objects)`` applies admission objects; all are deleted after the test."""
    installed: list[dict[str, Any]] = []

    async def apply(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        installed.extend(objects)
        await ok(cluster, "apply", "-f", "-", input=yaml.safe_dump_all(objects))
        return objects

    yield apply
    # Bindings first, so that a policy never outlives its binding's reference for long.
    for obj in sorted(installed, key=lambda o: not o["kind"].endswith("Binding")):
        with contextlib.suppress(AssertionError):
            await ok(
                cluster, "delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found", "--wait=false"
            )


async def user_kubeconfig(cluster: Cluster, namespace: str, account: str, where: Path) -> Path:
    """A kubeconfig that authenticates as ServiceAccount ``account`` (TokenRequest), nothing else."""
    token = (await ok(cluster, "create", "token", account, "-n", namespace, "--duration=1h")).strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    server = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [server],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": account, "context": {"cluster": server["name"], "user": account}}],
        "current-context": account,
    }
    path = where / f"{account}.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


async def sandbox_policies_off(cluster: Cluster, namespace: str) -> None:
    """Leave ``namespace`` out of the sandbox's own policies (the test proves its own copy)."""
    await ok(cluster, "label", "namespace", namespace, f"{POLICIES_LABEL}={POLICIES_OFF}")


def suffix() -> str:
    return "x" + uuid.uuid4().hex[:5]  # a letter first: 3e8145 would read as a number in YAML


# ---- the shipped files ------------------------------------------------------------------


async def test_the_policy_files_are_accepted_as_written(cluster: Cluster) -> None:
    """The API server compiles and type-checks every CEL expression at create: a dry run proves them."""
    out = await ok(
        cluster, "create", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(load_policies())
    )
    for name in (
        "validatingadmissionpolicy.admissionregistration.k8s.io/lws-gatekeeper-gate-protection",
        "mutatingadmissionpolicy.admissionregistration.k8s.io/lws-gatekeeper-gate-injection",
        "mutatingadmissionpolicy.admissionregistration.k8s.io/lws-gatekeeper-template-label",
        "validatingadmissionpolicy.admissionregistration.k8s.io/lws-gatekeeper-pool-label",
    ):
        assert f"{name} created (server dry run)" in out


async def test_mutating_admission_policy_is_served_as_v1(cluster: Cluster) -> None:
    """The injection policies use admissionregistration.k8s.io/v1, which v1.37 serves by default."""
    out = await ok(cluster, "api-resources", "--api-group=admissionregistration.k8s.io", "-o", "name")
    assert "mutatingadmissionpolicies.admissionregistration.k8s.io" in out.split()
    versions = await ok(cluster, "api-versions")
    assert "admissionregistration.k8s.io/v1" in versions.split()


# ---- gate protection --------------------------------------------------------------------


async def test_only_the_gatekeeper_removes_the_gate(
    cluster: Cluster, namespace: str, install: Install, tmp_path: Path
) -> None:
    # Two identities with the same rights (the `edit` ClusterRole lets both patch pods):
    # a tenant, and a stand-in for the chart's ServiceAccount, the only one allowed. The
    # sandbox's gate protection (which allows the real gatekeeper only) is off here.
    await sandbox_policies_off(cluster, namespace)
    for account in ("tenant", "gatekeeper"):
        await ok(cluster, "create", "serviceaccount", account, "-n", namespace)
        await ok(
            cluster,
            "create",
            "rolebinding",
            f"{account}-edit",
            "--clusterrole=edit",
            f"--serviceaccount={namespace}:{account}",
            "-n",
            namespace,
        )
    gatekeeper = service_account_username(namespace, "gatekeeper")
    tenant = service_account_username(namespace, "tenant")
    await install(
        for_test(load_policies(["gate-protection"], allowed_usernames=[gatekeeper]), suffix(), namespace)
    )
    as_tenant = await user_kubeconfig(cluster, namespace, "tenant", tmp_path)
    as_gatekeeper = await user_kubeconfig(cluster, namespace, "gatekeeper", tmp_path)

    body = pod("waiting", gates=[SCHEDULING_GATE, "example.com/other"])
    await ok(cluster, "create", "-n", namespace, "-f", "-", input=json.dumps(body))
    remove_ours = json.dumps(
        [
            {"op": "test", "path": "/spec/schedulingGates/0/name", "value": SCHEDULING_GATE},
            {"op": "remove", "path": "/spec/schedulingGates/0"},
        ]
    )
    patch = ("patch", "pod", "waiting", "-n", namespace)

    async def tenant_is_refused() -> bool:
        code, _, _ = await kubectl(
            cluster, *patch, "--type=json", "-p", remove_ours, "--dry-run=server", kubeconfig=as_tenant
        )
        return code != 0

    await eventually(tenant_is_refused, "the gate-protection policy refuses the tenant's dry run")

    # The tenant cannot remove the gate, neither by JSON patch nor by emptying the list ...
    err = await refused(cluster, *patch, "--type=json", "-p", remove_ours, kubeconfig=as_tenant)
    assert (
        f"only the lws-gatekeeper may remove the scheduling gate {SCHEDULING_GATE} from pod waiting: "
        "it does so when the whole group of the pod is admitted into its pool; "
        f"{tenant} may not remove it"
    ) in err
    assert "Forbidden" in err or "forbidden" in err
    err = await refused(
        cluster, *patch, "--type=merge", "-p", '{"spec":{"schedulingGates":[]}}', kubeconfig=as_tenant
    )
    assert f"{tenant} may not remove it" in err
    # ... not even the cluster's admin (system:masters skips RBAC, not admission policies) ...
    err = await refused(cluster, *patch, "--type=json", "-p", remove_ours)
    assert "may not remove it" in err
    # ... while the tenant still patches everything else of the pod, other gates included.
    await ok(cluster, "label", "pod", "waiting", "-n", namespace, "team=a", kubeconfig=as_tenant)
    await ok(cluster, "annotate", "pod", "waiting", "-n", namespace, "note=hello", kubeconfig=as_tenant)
    remove_other = json.dumps(
        [
            {"op": "test", "path": "/spec/schedulingGates/1/name", "value": "example.com/other"},
            {"op": "remove", "path": "/spec/schedulingGates/1"},
        ]
    )
    await ok(cluster, *patch, "--type=json", "-p", remove_other, kubeconfig=as_tenant)
    assert gates(await get(cluster, namespace, "pod", "waiting")) == [SCHEDULING_GATE]

    # The gatekeeper's identity removes it.
    await ok(cluster, *patch, "--type=json", "-p", remove_ours, kubeconfig=as_gatekeeper)
    after = await get(cluster, namespace, "pod", "waiting")
    assert gates(after) == []
    assert after["metadata"]["labels"] == {"team": "a"}


# ---- webhook-free gate injection ------------------------------------------------------------


async def test_policies_gate_opted_in_lws_pods_without_the_webhook(
    cluster: Cluster, namespace: str, install: Install
) -> None:
    key = f"e2e-{suffix()}.lws-gatekeeper.io/pool"
    await install(for_test(with_label_key(load_policies(["gate-injection"]), key), suffix(), namespace))

    async def probe_gated() -> bool:
        out = await ok(
            cluster,
            "create",
            "-n",
            namespace,
            "--dry-run=server",
            "-o",
            "json",
            "-f",
            "-",
            input=json.dumps(pod("probe", labels={key: "probe"})),
        )
        return SCHEDULING_GATE in gates(json.loads(out))

    async def probe_labelled() -> bool:
        out = await ok(
            cluster,
            "create",
            "-n",
            namespace,
            "--dry-run=server",
            "-o",
            "json",
            "-f",
            "-",
            input=json.dumps(lws("probe", labels={key: "probe"})),
        )
        return template_labels(json.loads(out))["workerTemplate"] == {key: "probe"}

    await eventually(probe_gated, "the pod policy gates a dry-run pod")
    await eventually(probe_labelled, "the LWS policy labels a dry-run LWS's templates")

    # An opted-in LWS: the LWS policy labels its templates, the LWS controller makes its
    # pods from them, the pod policy gates every one of them.
    await ok(cluster, "create", "-n", namespace, "-f", "-", input=json.dumps(lws("vllm", labels={key: "a"})))
    made = await get(cluster, namespace, "lws", "vllm")
    assert template_labels(made) == {
        "leaderTemplate": {"role": "leader", key: "a"},
        "workerTemplate": {key: "a"},
    }

    async def two_pods() -> bool:
        out = await ok(
            cluster,
            "get",
            "pods",
            "-n",
            namespace,
            "-l",
            "leaderworkerset.sigs.k8s.io/name=vllm",
            "-o",
            "json",
        )
        return len(json.loads(out)["items"]) == 2

    await eventually(two_pods, "the LWS controller creates the leader and its worker", timeout=60)
    out = await ok(
        cluster, "get", "pods", "-n", namespace, "-l", "leaderworkerset.sigs.k8s.io/name=vllm", "-o", "json"
    )
    for item in json.loads(out)["items"]:
        name, labels = item["metadata"]["name"], item["metadata"]["labels"]
        assert gates(item) == [SCHEDULING_GATE], f"{name} was born gated"
        assert labels[key] == "a"
        # The webhook selects only the real label: this gate can only be the policy's.
        assert POOL_LABEL not in labels, f"{name} carries the real opt-in label"

    # An LWS without a leaderTemplate does not get one (that would change what the leader runs).
    await ok(
        cluster,
        "create",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps(lws("workers-only", labels={key: "a"}, leader=False, replicas=0)),
    )
    assert template_labels(await get(cluster, namespace, "lws", "workers-only")) == {
        "leaderTemplate": None,
        "workerTemplate": {key: "a"},
    }

    # Relabelled, the templates follow; unlabelled, they lose the label.
    await ok(cluster, "label", "lws", "vllm", "-n", namespace, f"{key}=b", "--overwrite")
    assert template_labels(await get(cluster, namespace, "lws", "vllm")) == {
        "leaderTemplate": {"role": "leader", key: "b"},
        "workerTemplate": {key: "b"},
    }
    await ok(cluster, "label", "lws", "vllm", "-n", namespace, f"{key}-")
    assert template_labels(await get(cluster, namespace, "lws", "vllm")) == {
        "leaderTemplate": {"role": "leader"},
        "workerTemplate": {},
    }

    # A labelled pod keeps its own gates and gets ours; an unlabelled pod is not touched.
    await ok(
        cluster,
        "create",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps(pod("own-gate", labels={key: "a"}, gates=["example.com/mine"])),
    )
    assert gates(await get(cluster, namespace, "pod", "own-gate")) == ["example.com/mine", SCHEDULING_GATE]
    await ok(cluster, "create", "-n", namespace, "-f", "-", input=json.dumps(pod("unrelated")))
    assert gates(await get(cluster, namespace, "pod", "unrelated")) == []


# ---- an opted-in LWS must name its pool -------------------------------------------------------


async def test_an_lws_with_an_empty_pool_label_is_refused(
    cluster: Cluster, namespace: str, install: Install
) -> None:
    # Made before the policy exists: an LWS whose label is already empty is not locked.
    # So the sandbox's own pool-label check, which would refuse it, is off here.
    await sandbox_policies_off(cluster, namespace)
    await ok(
        cluster,
        "create",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps(lws("legacy", labels={POOL_LABEL: ""}, replicas=0)),
    )
    await install(for_test(load_policies(["pool-label"]), suffix(), namespace))
    empty = json.dumps(lws("empty", labels={POOL_LABEL: ""}, replicas=0))

    async def probe_refused() -> bool:
        code, _, _ = await kubectl(
            cluster, "create", "-n", namespace, "--dry-run=server", "-f", "-", input=empty
        )
        return code != 0

    await eventually(probe_refused, "the pool-label policy refuses a dry-run LWS")

    err = await refused(cluster, "create", "-n", namespace, "-f", "-", input=empty)
    assert (
        f"LeaderWorkerSet empty: the label {POOL_LABEL} must name a pool "
        f"(for example {POOL_LABEL}=on-demand); it is empty"
    ) in err
    # A named pool passes (dry run: nothing for the sandbox's gatekeeper to act on).
    named = json.dumps(lws("named", labels={POOL_LABEL: "on-demand"}, replicas=0))
    await ok(cluster, "create", "-n", namespace, "--dry-run=server", "-f", "-", input=named)
    # Emptying the label of an existing LWS is refused; dropping it (opting out) is not.
    await ok(
        cluster, "create", "-n", namespace, "-f", "-", input=json.dumps(lws("plain", labels={}, replicas=0))
    )
    err = await refused(cluster, "label", "lws", "plain", "-n", namespace, f"{POOL_LABEL}=")
    assert "must name a pool" in err
    await ok(cluster, "label", "lws", "plain", "-n", namespace, f"{POOL_LABEL}=on-demand")
    await ok(cluster, "label", "lws", "plain", "-n", namespace, f"{POOL_LABEL}-")
    # The legacy LWS can still be updated (annotations, finalizers on deletion, ...).
    await ok(cluster, "annotate", "lws", "legacy", "-n", namespace, "note=still-editable")

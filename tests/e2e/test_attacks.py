"""Attacks on the gatekeeper, as a tenant would try them, against the sandbox as it runs.

Two tenants of one namespace: one holds the built-in ``edit`` ClusterRole there, the other
``*`` on everything in it (a RoleBinding). Each tries to jump the queue by writing what
the admission pass reads (a record's Admitted condition and pool, a Pool), by removing the
scheduling gate, or to starve the webhook (64 concurrent 16 MiB AdmissionReviews, sent on
loopback as a pod in the cluster would). And the gatekeeper's own identity (the chart's
ServiceAccount) tries to do more than it does: change a pod's labels or image, widen its
webhook's rules. The sandbox enforces its policies in every namespace, as a chart install
does; nothing here turns one off.

Each attack adds a row (attack, expected, seen: what the tenant is told) to the run's
attack table (``attack_table``), printed at the end of the run with the rows of the other
files that attack the boundary; the namespace is watched meanwhile (``attack_watch``) for
the GPUs bound against the quota and the GPUs stranded, and another tenant's group must run
after it.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import kr8s.asyncio
import pytest

from gatekeeper.core.kube.keys import CHARGE_KEY, POOL_LABEL, SCHEDULING_GATE
from gatekeeper.webhook.config import PODS_PATH
from gatekeeper_lab.sandbox.cluster import GATEKEEPER_NAMESPACE, Sandbox
from gatekeeper_lab.sandbox.replay import list_raw, settle

from . import attack_table
from .attack_support import RESET, flood, memory, reset_peak, review, tenants
from .conftest import Cluster, MakeNodes, MakePool, admitted, records
from .test_admission import create_lws, lws_body
from .test_policies import get, kubectl, ok, pod, user_kubeconfig
from .watch import Watch

RECORDS = "only the lws-gatekeeper writes its admission records"
MIB = 1024 * 1024


def sandbox(cluster: Cluster) -> Sandbox:
    assert cluster.sandbox is not None, "the attack suite runs in the sandbox"
    return cluster.sandbox


def first_line(err: str) -> str:
    return next((line for line in err.splitlines() if line.strip()), err).strip()


async def attempt(
    cluster: Cluster,
    attack: str,
    kubeconfig: Path,
    *args: str,
    expect_refused: bool = True,
    says: str = "",
) -> str:
    """Run kubectl as an attacker; record the row; assert the outcome (and that the refusal ``says``)."""
    code, out, err = await kubectl(cluster, *args, kubeconfig=kubeconfig)
    seen = first_line(err) if code else "accepted: " + first_line(out)
    attack_table.add(attack, "refused" if expect_refused else "allowed", seen)
    assert (code != 0) == expect_refused, f"{attack}: {seen}"
    assert says in seen, f"{attack}: {seen}"
    return seen


async def test_tenants_cannot_admit_themselves(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    attack_watch: Watch,
    tmp_path: Path,
) -> None:
    # Two groups of 2 one-GPU pods on a pool of two 1-GPU nodes: group 0 runs, group 1 waits gated.
    nodes = await fake_nodes(2, gpus=1)
    pool = await make_pool(nodes)
    attack_watch.pool(nodes.selector, 2)  # no quota: the pool holds its 2 nodes' GPUs
    await create_lws(api, namespace, lws_body("vllm", pool, nodes, replicas=2))
    verdict = await settle(api, namespace, "vllm", expected_pods=4, size=2, timeout=120)
    assert sorted(g.index for g in verdict.groups.values() if g.whole(2)) == [0]
    as_ = await tenants(cluster, namespace, tmp_path)
    record = (await records(api, namespace))[1]
    name = record["metadata"]["name"]
    assert not admitted(record)

    admit = json.dumps(
        {
            "status": {
                "pool": pool,
                "conditions": [
                    {
                        "type": "Admitted",
                        "status": "True",
                        "reason": "Admitted",
                        "message": "by hand",
                        "lastTransitionTime": "2030-01-01T00:00:00Z",
                    }
                ],
            }
        }
    )
    record_args = ("-n", namespace, "groupadmission", name)
    for who in ("edit", "star"):
        await attempt(
            cluster,
            f"{who}: set record Admitted=True",
            as_[who],
            "patch",
            *record_args,
            "--subresource=status",
            "--type=merge",
            "-p",
            admit,
            says=RECORDS if who == "star" else "cannot get resource",
        )
    await attempt(
        cluster,
        "star: move the record to another pool",
        as_["star"],
        "patch",
        *record_args,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"pool":"other"}}',
        says=RECORDS,
    )
    await attempt(
        cluster,
        "star: change the record's spec",
        as_["star"],
        "patch",
        *record_args,
        "--type=merge",
        "-p",
        '{"spec":{"groupIndex":0}}',
        says="immutable",
    )
    await attempt(cluster, "star: delete the record", as_["star"], "delete", *record_args, says=RECORDS)
    # The garbage collector may drop a record's owner reference (delete --cascade=orphan); a tenant may not.
    await attempt(
        cluster,
        "star: drop the record's owner reference",
        as_["star"],
        "patch",
        *record_args,
        "--type=json",
        "-p",
        '[{"op": "remove", "path": "/metadata/ownerReferences"}]',
        says=RECORDS,
    )
    forged = dict(record)
    forged["metadata"] = {"name": "forged", "namespace": namespace}
    forged.pop("status", None)
    code, _, err = await kubectl(
        cluster, "create", "-f", "-", kubeconfig=as_["star"], input=json.dumps(forged)
    )
    attack_table.add("star: create a record", "refused", first_line(err) if code else "accepted")
    assert code != 0 and RECORDS in err, err

    patch_pool = ("patch", "pool", pool, "--type=merge", "-p", '{"spec":{"quota":{"nvidia.com/gpu":99}}}')
    for who in ("edit", "star"):
        await attempt(
            cluster, f"{who}: patch a Pool's quota", as_[who], *patch_pool, says="cannot get resource"
        )

    # An identity with cluster-wide rights on Pools (an operator, say) is still not a pool administrator.
    await ok(cluster, "create", "serviceaccount", "pool-operator", "-n", namespace)
    await ok(
        cluster,
        "create",
        "clusterrole",
        f"{namespace}-pools",
        "--verb=get,patch,update",
        "--resource=pools.lws-gatekeeper.io,pools.lws-gatekeeper.io/status",
    )
    await ok(
        cluster,
        "create",
        "clusterrolebinding",
        f"{namespace}-pools",
        f"--clusterrole={namespace}-pools",
        f"--serviceaccount={namespace}:pool-operator",
    )
    try:
        operator = await user_kubeconfig(cluster, namespace, "pool-operator", tmp_path)
        await attempt(
            cluster,
            "pool operator (cluster RBAC): patch a Pool's quota",
            operator,
            *patch_pool,
            says="only the pool administrators write Pools",
        )
        await attempt(
            cluster,
            "pool operator (cluster RBAC): patch a Pool's status",
            operator,
            "patch",
            "pool",
            pool,
            "--subresource=status",
            "--type=merge",
            "-p",
            '{"status":{"admittedGroups":9}}',
            says="only the lws-gatekeeper writes the status of a Pool",
        )
    finally:
        await kubectl(cluster, "delete", "clusterrolebinding,clusterrole", f"{namespace}-pools")

    pods = await list_raw(api, "pods", namespace=namespace)
    gated = next(
        p for p in pods if SCHEDULING_GATE in [g["name"] for g in p["spec"].get("schedulingGates") or []]
    )
    for who in ("edit", "star"):
        await attempt(
            cluster,
            f"{who}: remove the gate",
            as_[who],
            "patch",
            "pod",
            gated["metadata"]["name"],
            "-n",
            namespace,
            "--type=merge",
            "-p",
            '{"spec":{"schedulingGates":[]}}',
            says="only the lws-gatekeeper may remove the scheduling gate",
        )

    # Nothing moved: group 1 is still not admitted and its pods still gated.
    assert not admitted((await records(api, namespace))[1])
    after = await get(cluster, namespace, "pod", gated["metadata"]["name"])
    assert SCHEDULING_GATE in [g["name"] for g in after["spec"]["schedulingGates"]]


# ---- the gatekeeper's own identity --------------------------------------------------------


@pytest.fixture
async def as_gatekeeper(cluster: Cluster, namespace: str, tmp_path: Path) -> Any:
    """A token of the chart's ServiceAccount with the chart's pod and webhook rights (no more;
    delete of pods as the pools and kueue backends have it)."""
    sa = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "lws-gatekeeper", "namespace": GATEKEEPER_NAMESPACE},
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"{namespace}-gk"},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch", "delete"]},
            {
                "apiGroups": ["admissionregistration.k8s.io"],
                "resources": ["mutatingwebhookconfigurations"],
                "resourceNames": ["lws-gatekeeper"],
                "verbs": ["get", "patch"],
            },
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{namespace}-gk"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": f"{namespace}-gk",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "lws-gatekeeper", "namespace": GATEKEEPER_NAMESPACE}],
    }
    await ok(
        cluster, "apply", "-f", "-", input=json.dumps({"kind": "List", "apiVersion": "v1", "items": [sa]})
    )
    await ok(
        cluster,
        "create",
        "-f",
        "-",
        input=json.dumps({"kind": "List", "apiVersion": "v1", "items": [role, binding]}),
    )
    try:
        yield await user_kubeconfig(cluster, GATEKEEPER_NAMESPACE, "lws-gatekeeper", tmp_path)
    finally:
        await kubectl(cluster, "delete", "clusterrolebinding,clusterrole", f"{namespace}-gk")


async def test_the_gatekeepers_identity_changes_only_what_it_must(
    cluster: Cluster, namespace: str, as_gatekeeper: Path, attack_watch: Watch, tmp_path: Path
) -> None:
    attack_watch.quota = 0  # no pool: nothing here may hold a GPU
    # A pod gated by hand (not opted in: no controller touches it).
    body = pod("held", gates=[SCHEDULING_GATE])
    await ok(cluster, "create", "-n", namespace, "-f", "-", input=json.dumps(body))
    target = ("patch", "pod", "held", "-n", namespace)
    await attempt(
        cluster,
        "gatekeeper SA: relabel a pod",
        as_gatekeeper,
        *target,
        "--type=merge",
        "-p",
        '{"metadata":{"labels":{"team":"b"}}}',
        says="may change only the scheduling gate, node selector and tolerations",
    )
    await attempt(
        cluster,
        "gatekeeper SA: change a pod's image",
        as_gatekeeper,
        *target,
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/containers/0/image","value":"evil:1"}]',
        says="may change only the scheduling gate, node selector and tolerations",
    )
    await attempt(
        cluster,
        "gatekeeper SA: add a node selector, gate kept",
        as_gatekeeper,
        *target,
        "--type=merge",
        "-p",
        '{"spec":{"nodeSelector":{"pool":"other"}}}',
        says="may only remove the scheduling gate",
    )
    lift = [
        {"op": "test", "path": "/spec/schedulingGates/0/name", "value": SCHEDULING_GATE},
        {"op": "remove", "path": "/spec/schedulingGates/0"},
        {"op": "add", "path": "/spec/nodeSelector", "value": {"pool": "a"}},
        {"op": "add", "path": "/spec/tolerations", "value": [{"key": "pool", "operator": "Exists"}]},
    ]
    await attempt(
        cluster,
        "gatekeeper SA: lift the gate + steer (its job)",
        as_gatekeeper,
        *target,
        "--type=json",
        "-p",
        json.dumps(lift),
        expect_refused=False,
    )
    lifted = await get(cluster, namespace, "pod", "held")
    assert lifted["spec"]["nodeSelector"] == {"pool": "a"} and not lifted["spec"].get("schedulingGates")

    # It may delete pods (a group given back, an evicted group stopped), an LWS's only.
    member = pod("member")  # let through on a group's admission: it carries the charge mark
    member["spec"]["tolerations"] = [
        {"key": CHARGE_KEY, "operator": "Equal", "value": "uid.0", "effect": "NoSchedule"}
    ]
    await ok(cluster, "create", "-n", namespace, "-f", "-", input=json.dumps(member))
    await attempt(
        cluster,
        "gatekeeper SA: delete a pod of no LWS",
        as_gatekeeper,
        "delete", "pod", "held", "-n", namespace, "--wait=false",
        says="may delete only pods of a LeaderWorkerSet",
    )  # fmt: skip
    await attempt(
        cluster,
        "gatekeeper SA: delete a pod let through (its job: give back)",
        as_gatekeeper,
        "delete", "pod", "member", "-n", namespace, "--wait=false",
        expect_refused=False,
    )  # fmt: skip
    # The scope policy holds the gatekeeper's identity only: a tenant with edit still deletes
    # its own pod that the gatekeeper may not.
    as_tenant = await tenants(cluster, namespace, tmp_path)
    await attempt(
        cluster,
        "edit: delete its own pod of no LWS (the gatekeeper may not)",
        as_tenant["edit"],
        "delete", "pod", "held", "-n", namespace, "--wait=false",
        expect_refused=False,
    )  # fmt: skip

    hook = "mutatingwebhookconfiguration/lws-gatekeeper"
    config = json.loads(await ok(cluster, "get", hook, "-o", "json"))
    widen = [{"op": "replace", "path": "/webhooks/0/objectSelector", "value": {}}]
    await attempt(
        cluster,
        "gatekeeper SA: widen its webhook's selector",
        as_gatekeeper,
        "patch",
        hook,
        "--type=json",
        "-p",
        json.dumps(widen),
        says="may change only the caBundle",
    )
    rules = [{"op": "add", "path": "/webhooks/0/rules/0/operations/-", "value": "DELETE"}]
    await attempt(
        cluster,
        "gatekeeper SA: add to its webhook's rules",
        as_gatekeeper,
        "patch",
        hook,
        "--type=json",
        "-p",
        json.dumps(rules),
        says="may change only the caBundle",
    )
    same_ca = [
        {
            "op": "replace",
            "path": "/webhooks/0/clientConfig/caBundle",
            "value": config["webhooks"][0]["clientConfig"]["caBundle"],
        }
    ]
    await attempt(
        cluster,
        "gatekeeper SA: set its webhook's caBundle (its job)",
        as_gatekeeper,
        "patch",
        hook,
        "--type=json",
        "-p",
        json.dumps(same_ca),
        expect_refused=False,
    )


# ---- the webhook under a flood -------------------------------------------------------------


async def test_the_webhook_survives_a_flood(cluster: Cluster, namespace: str, attack_watch: Watch) -> None:
    attack_watch.quota = 0  # no pool: nothing here may hold a GPU
    sb = sandbox(cluster)
    state = sb.state()
    pid = state["processes"]["gatekeeper"]["pid"]
    url = f"https://127.0.0.1:{state['ports']['gk_webhook']}{PODS_PATH}"
    before = memory(pid)["VmRSS"]
    reset_peak(pid)

    answers = await flood(url, review(16 * MIB - 64), 64)
    peak = memory(pid)["VmHWM"] - before
    codes = Counter(code for code, _ in answers)
    seen = f"{dict(codes)}; peak RSS +{peak / MIB:.0f} MiB; {answers[0][1][:160]}"
    attack_table.add("64 concurrent 16 MiB reviews", "refused", seen)
    print(f"flood of 64 x 16 MiB: answers {dict(codes)}, peak RSS growth {peak / MIB:.1f} MiB")
    # Refused, every one: told 413 before the body is read, and the server drains what the
    # client still sends for up to 10 s so that it can read the answer. A client still
    # sending after that (64 x 16 MiB through TLS on a loaded machine) is cut off instead.
    assert set(codes) <= {413, RESET} and codes[413] >= 1, seen
    assert all("larger than the" in text for code, text in answers if code == 413), seen
    assert peak < 128 * MIB, f"the webhook held {peak / MIB:.0f} MiB for the flood"

    # Reviews under the size bound, 64 at once: some are served, the rest told to come back.
    reset_peak(pid)
    before = memory(pid)["VmRSS"]
    answers = await flood(url, review(3 * MIB), 64)
    peak = memory(pid)["VmHWM"] - before
    codes = Counter(code for code, _ in answers)
    busy = next((text for code, text in answers if code == 429), "")
    attack_table.add(
        "64 concurrent 3 MiB reviews",
        "bounded",
        f"{dict(codes)}; peak RSS +{peak / MIB:.0f} MiB; {busy[:120]}",
    )
    print(f"flood of 64 x 3 MiB: answers {dict(codes)}, peak RSS growth {peak / MIB:.1f} MiB")
    assert set(codes) <= {200, 429} and codes[200] >= 1, codes
    assert all("is busy" in text for code, text in answers if code == 429)
    assert peak < 256 * MIB, f"the webhook held {peak / MIB:.0f} MiB for the flood"

    # And it still gates an opted-in pod.
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
        input=json.dumps(pod("after", labels={POOL_LABEL: "any"})),
    )
    assert SCHEDULING_GATE in [g["name"] for g in json.loads(out)["spec"]["schedulingGates"]]


# ---- the webhook under slow clients ------------------------------------------------------------


class Held(NamedTuple):
    """How one slow client ended: ``in_handshake`` when the server reset its TLS handshake
    (the handshake deadline: on a loaded machine the handshakes of 108 clients queue, and
    those not done within it are closed before they are ever connected), else after its
    handshake; ``seconds`` from the connect (a reset) or from the handshake's end."""

    in_handshake: bool
    seconds: float


async def _hold(port: int, *, head: bytes | None) -> Held:
    """One slow client: a TLS connection that sends nothing (or only a request ``head``, its
    body never); how long until the server closed it (or answered it). The client's own
    handshake timeout (30 s) is longer than the server's, so a server that kept a handshake
    open would fail the test, not be counted as closed."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    start = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=context, ssl_handshake_timeout=30
        )
    except ConnectionResetError:
        return Held(True, time.monotonic() - start)
    start = time.monotonic()
    if head is not None:
        writer.write(head)
        await writer.drain()
    try:
        while await asyncio.wait_for(reader.read(4096), 60):
            pass
    except (ConnectionError, ssl.SSLError, TimeoutError):
        pass
    writer.close()
    return Held(False, time.monotonic() - start)


async def test_slow_clients_hold_no_connection_and_pods_are_still_made(
    cluster: Cluster, namespace: str, attack_watch: Watch
) -> None:
    """100 clients connect to the webhook and send nothing, 8 more send a review's head and
    never its body (enough to hold every review slot): each is closed within 15 s, and a
    tenant's opted-in pods are made meanwhile at their usual pace, each with its gate."""
    attack_watch.quota = 0
    sb = sandbox(cluster)
    await ok(cluster, "create", "serviceaccount", "tenant", "-n", namespace)
    await ok(
        cluster, "create", "rolebinding", "tenant-edit", "--clusterrole=edit",
        f"--serviceaccount={namespace}:tenant", "-n", namespace,
    )  # fmt: skip
    tenant = f"--as=system:serviceaccount:{namespace}:tenant"
    port = int(sb.state()["ports"]["gk_webhook"])
    head = f"POST {PODS_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n{{"
    slow = [
        *(asyncio.create_task(_hold(port, head=None)) for _ in range(100)),
        *(asyncio.create_task(_hold(port, head=head.encode())) for _ in range(8)),
    ]
    await asyncio.sleep(0.5)
    took: list[float] = []
    for i in range(20):
        start = time.monotonic()
        made = await ok(
            cluster, tenant, "create", "-n", namespace, "-o", "json", "-f", "-",
            input=json.dumps(pod(f"p{i}", labels={POOL_LABEL: "any"})),
        )  # fmt: skip
        took.append(time.monotonic() - start)
        gates = [g["name"] for g in json.loads(made)["spec"].get("schedulingGates") or []]
        assert gates == [SCHEDULING_GATE], f"p{i} was made without its gate: {gates}"
    ended = await asyncio.gather(*slow)
    held = [one.seconds for one in ended if not one.in_handshake]
    reset = [one.seconds for one in ended if one.in_handshake]
    took.sort()
    p99 = took[min(len(took) - 1, int(len(took) * 0.99))]
    seen = (
        f"closed after {max(held, default=0):.1f} s at most"
        + (f" ({len(reset)} reset in their handshake)" if reset else "")
        + f"; 20 pods made meanwhile, p99 {p99 * 1000:.0f} ms"
    )
    attack_table.add("100 clients that connect and send nothing, 8 that send no body", "closed", seen)
    print(seen)
    assert held, "no slow client got through its handshake: nothing was held to be closed"
    assert max(held) < 15, f"a slow client was held {max(held):.1f} s"
    assert p99 < 5, f"pods were made slowly while slow clients held on: p99 {p99:.1f} s"


# ---- the gatekeeper's memory against a tenant's large objects ----------------------------------


async def test_many_large_statefulsets_of_a_tenant_do_not_grow_the_gatekeeper(
    cluster: Cluster, namespace: str, attack_watch: Watch, tmp_path: Path
) -> None:
    """300 StatefulSets of ``replicas: 0`` with 100 KiB templates, labelled with an LWS's name
    (what the gatekeeper watches StatefulSets by), made by a tenant with ``edit``: the
    gatekeeper keeps only what it reads of each, so its memory grows by a few MiB, not with
    the objects' 30 MiB (kept whole, they grew it by 32 MiB)."""
    attack_watch.quota = 0
    sb = sandbox(cluster)
    pid = int(sb.state()["processes"]["gatekeeper"]["pid"])
    as_ = await tenants(cluster, namespace, tmp_path)
    padding = "x" * (100 * 1024)

    def sts(i: int) -> dict[str, Any]:
        labels = {"leaderworkerset.sigs.k8s.io/name": "vllm", "app": f"big-{i}"}
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": f"big-{i}", "namespace": namespace, "labels": labels},
            "spec": {
                "replicas": 0,
                "serviceName": "big",
                "selector": {"matchLabels": {"app": f"big-{i}"}},
                "template": {
                    "metadata": {"labels": {"app": f"big-{i}"}, "annotations": {"pad": padding}},
                    "spec": {"containers": [{"name": "c", "image": "pause:3.10"}]},
                },
            },
        }

    await asyncio.sleep(2)
    before = memory(pid)["VmRSS"]
    for start in range(0, 300, 10):
        batch = {"apiVersion": "v1", "kind": "List", "items": [sts(i) for i in range(start, start + 10)]}
        await ok(cluster, "create", "-f", "-", input=json.dumps(batch), kubeconfig=as_["edit"])
    await asyncio.sleep(5)  # the informer has them (a watch event each)
    growth = memory(pid)["VmRSS"] - before
    seen = f"RSS +{growth / MIB:.1f} MiB after 300 StatefulSets of 100 KiB (30 MiB of objects)"
    attack_table.add("edit: 300 StatefulSets of 100 KiB labelled with an LWS's name", "bounded", seen)
    print(seen)
    assert growth < 10 * MIB, seen

"""``kubectl lws-gatekeeper why`` as a tenant runs it: a ServiceAccount with ``edit`` and an
LWS editor's role in its namespace and nothing else, its own kubeconfig (a token), the
installed plugin.

The chart's user roles (``templates/rbac/users.yaml``, rendered by helm) are applied as a
release applies them: reading GroupAdmissions aggregated into ``edit``, and the
``pool-reader`` ClusterRole unbound until the test binds it as an admin would. The tenant
sees its own groups and their reasons, is told what its rights leave out (the Pool, other
namespaces' groups) instead of a traceback, and sees the Pool once it may read it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import kr8s.asyncio
import pytest
import yaml

from .attack_support import dev as tenant_dev
from .conftest import Cluster, MakeNodes, MakePool, admitted, eventually, records
from .test_chart import helm, template  # noqa: F401  (helm: the fixture)
from .test_policies import ok, refused, suffix
from .test_tenant_pools import create, plain_lws, tolerate
from .test_why import run_why


@pytest.fixture
async def user_roles(cluster: Cluster, helm: Path) -> AsyncIterator[str]:  # noqa: F811
    """The chart's user ClusterRoles of a release of its own; their name prefix."""
    release = f"lws-gatekeeper-{suffix()}"
    objects = template(helm, release, "lws-gatekeeper-system", "--show-only", "templates/rbac/users.yaml")
    assert sorted(o["metadata"]["name"] for o in objects) == [
        f"{release}-groupadmission-viewer",
        f"{release}-pool-reader",
    ]
    text = yaml.safe_dump_all(objects)
    await ok(cluster, "apply", "-f", "-", input=text)
    try:
        yield release
    finally:
        await ok(cluster, "delete", "-f", "-", "--ignore-not-found", input=text)


async def test_a_tenant_reads_why_its_lws_waits_and_the_pool_once_allowed(
    api: kr8s.asyncio.Api,
    cluster: Cluster,
    namespace: str,
    fake_nodes: MakeNodes,
    make_pool: MakePool,
    user_roles: str,
    tmp_path: Path,
) -> None:
    assert cluster.sandbox is not None, "runs the sandbox's kubectl"
    nodes = await fake_nodes(2, gpus=1)
    pool = await make_pool(nodes, tolerations=tolerate(nodes.id))
    await create(api, namespace, plain_lws("vllm", pool, replicas=2))

    async def one_admitted_one_waits() -> bool:
        recs = await records(api, namespace)
        return len(recs) == 2 and [admitted(recs[i]) for i in range(2)] == [True, False]

    await eventually(one_admitted_one_waits, what="group 0 admitted, group 1 waiting")
    dev = await tenant_dev(cluster, namespace, tmp_path)
    bin_dir = cluster.sandbox.bin_dir

    def tenant(*args: str) -> tuple[int, str, str]:
        res = run_why(dev, bin_dir, *args, "--context=dev")
        assert "Traceback" not in res.stdout + res.stderr, res.stderr
        return res.returncode, res.stdout, res.stderr

    code, out, err = tenant("vllm", "-n", namespace)
    print(out, err)
    assert code == 1, f"a group waits: exit 1, not {code}: {err}"
    lines = out.splitlines()
    assert any(line.startswith("  group 0: admitted (Admitted)") for line in lines), out
    assert any(line.startswith("  group 1: waiting (WaitingForQuota)") for line in lines), out
    assert f"Pool {pool}:" not in out, "the tenant may not read the Pool"
    not_shown = [line for line in lines if line.startswith("not shown: ")]
    assert any(
        line.startswith(f"not shown: pools.lws-gatekeeper.io {pool}: ")
        and 'cannot list resource "pools"' in line
        for line in not_shown
    ), not_shown
    assert any(
        line.startswith(f"not shown: groupadmissions.lws-gatekeeper.io outside namespace {namespace}: ")
        for line in not_shown
    ), not_shown

    # What the aggregated role grants is reading: as the tenant, a record's status and the
    # record itself stay the gatekeeper's to write.
    as_dev = f"--as=system:serviceaccount:{namespace}:dev"
    name = (await records(api, namespace))[1]["metadata"]["name"]
    admit = json.dumps(
        {"status": {"conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted"}]}}
    )
    said = await refused(
        cluster, as_dev, "patch", "groupadmissions", name, "-n", namespace,
        "--subresource=status", "--type=merge", "-p", admit,
    )  # fmt: skip
    assert "forbidden" in said.lower(), said
    said = await refused(cluster, as_dev, "delete", "groupadmissions", name, "-n", namespace)
    assert "forbidden" in said.lower(), said
    assert not admitted((await records(api, namespace))[1]), "group 1 still waits"

    code, out, err = tenant(f"pool/{pool}")
    assert code == 2 and err.startswith("error: not allowed: ") and '"pools"' in err, (code, err)
    code, out, err = tenant("vllm", "-n", "kube-system")
    assert code == 2 and 'cannot list resource "leaderworkersets"' in err, (code, err)

    # An admin lets the tenant read the pools.
    await ok(
        cluster, "create", "clusterrolebinding", f"{user_roles}-dev",
        f"--clusterrole={user_roles}-pool-reader", f"--serviceaccount={namespace}:dev",
    )  # fmt: skip
    try:

        async def pool_shown() -> bool:
            return f"Pool {pool}: quota" in tenant("vllm", "-n", namespace)[1]

        await eventually(pool_shown, what="the Pool in the tenant's answer once pool-reader is bound")
        code, out, err = tenant("vllm", "-n", namespace, "-o", "yaml")
        answer = yaml.safe_load(out)
        assert code == 1 and answer["pool_view"]["kind"] == "Pool", (code, err)
        assert [g["state"] for g in answer["groups"]] == ["admitted", "waiting"]
        code, out, err = tenant(f"pool/{pool}", "-n", namespace, "-o", "json")
        view = json.loads(out)
        assert code == 1 and [w["group"] for w in view["waiting"]] == [1], (code, out, err)
        assert [h["group"] for h in view["admitted"]] == [0]
        assert [n.split(":")[0] for n in view["not_shown"]] == [
            f"groupadmissions.lws-gatekeeper.io outside namespace {namespace}",
            f"leaderworkersets.leaderworkerset.x-k8s.io outside namespace {namespace}",
            "priorityclasses (the queue's order by priority)",
        ], view["not_shown"]
    finally:
        await ok(cluster, "delete", "clusterrolebinding", f"{user_roles}-dev", "--ignore-not-found")

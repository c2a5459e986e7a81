"""Helpers of the attack suite (test_attacks.py and others): tenant identities, a flood of
reviews, memory, the StatefulSet guard turned off."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

from .conftest import Cluster
from .test_policies import ok, user_kubeconfig


async def tenants(cluster: Cluster, namespace: str, where: Path) -> dict[str, Path]:
    """Kubeconfigs of two tenants of ``namespace``: ``edit`` (the built-in role) and ``star``."""
    await ok(cluster, "create", "serviceaccount", "tenant-edit", "-n", namespace)
    await ok(cluster, "create", "serviceaccount", "tenant-star", "-n", namespace)
    await ok(
        cluster,
        "create",
        "rolebinding",
        "tenant-edit",
        "--clusterrole=edit",
        f"--serviceaccount={namespace}:tenant-edit",
        "-n",
        namespace,
    )
    star = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "everything", "namespace": namespace},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
    }
    await ok(cluster, "apply", "-f", "-", input=json.dumps(star))
    await ok(
        cluster,
        "create",
        "rolebinding",
        "tenant-star",
        "--role=everything",
        f"--serviceaccount={namespace}:tenant-star",
        "-n",
        namespace,
    )
    return {
        "edit": await user_kubeconfig(cluster, namespace, "tenant-edit", where),
        "star": await user_kubeconfig(cluster, namespace, "tenant-star", where),
    }


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {k: int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM")}


def reset_peak(pid: int) -> None:
    """Make the process's peak RSS (VmHWM) its current RSS (Linux: clear_refs 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def review(size: int) -> bytes:
    """A well-formed pod CREATE AdmissionReview of ``size`` bytes (an annotation pads it)."""
    shell = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "flood",
            "operation": "CREATE",
            "namespace": "x",
            "object": {"metadata": {"name": "p", "annotations": {"pad": ""}}},
        },
    }
    empty = len(json.dumps(shell).encode())
    shell["request"]["object"]["metadata"]["annotations"]["pad"] = "a" * (size - empty)
    body = json.dumps(shell).encode()
    assert len(body) == size
    return body


RESET = 0
"""The answer ``flood`` records for a connection the server closed before the client read its
answer (a reset while the client was still sending)."""


async def flood(url: str, body: bytes, count: int) -> list[tuple[int, str]]:
    """``count`` concurrent POSTs of ``body`` (no certificate check: an attacker needs none);
    a connection the server cut off counts as ``(RESET, why)``."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    connector = aiohttp.TCPConnector(limit=0, ssl=context)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one() -> tuple[int, str]:
            try:
                async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                    return r.status, (await r.text())[:300]
            except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as err:
                return RESET, f"connection cut off: {err}"

        return list(await asyncio.gather(*(one() for _ in range(count))))


async def dev(cluster: Cluster, namespace: str, where: Path) -> Path:
    """A kubeconfig of ``system:serviceaccount:<namespace>:dev``, a team's usual tenant: the
    built-in ``edit`` role in its namespace and an editor's verbs on LeaderWorkerSets there
    (what the LWS chart's editor role grants)."""
    await ok(cluster, "create", "serviceaccount", "dev", "-n", namespace)
    await ok(
        cluster, "create", "rolebinding", "dev-edit", "--clusterrole=edit",
        f"--serviceaccount={namespace}:dev", "-n", namespace,
    )  # fmt: skip
    editor = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "leaderworkerset-editor", "namespace": namespace},
        "rules": [
            {
                "apiGroups": ["leaderworkerset.x-k8s.io"],
                "resources": ["leaderworkersets", "leaderworkersets/scale"],
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            },
            {
                "apiGroups": ["leaderworkerset.x-k8s.io"],
                "resources": ["leaderworkersets/status"],
                "verbs": ["get"],
            },
        ],
    }
    await ok(cluster, "apply", "-f", "-", input=json.dumps(editor))
    await ok(
        cluster, "create", "rolebinding", "dev-lws", "--role=leaderworkerset-editor",
        f"--serviceaccount={namespace}:dev", "-n", namespace,
    )  # fmt: skip
    return await user_kubeconfig(cluster, namespace, "dev", where)


async def two_teams(cluster: Cluster, serving: str, lab: str, where: Path) -> tuple[Path, Path]:
    """The kubeconfigs of two teams' tenants (``dev``): the serving team's in namespace
    ``serving``, the research team's in ``lab``, under ``where``."""
    (where / "serving").mkdir()
    (where / "lab").mkdir()
    return await dev(cluster, serving, where / "serving"), await dev(cluster, lab, where / "lab")


GUARD = "validatingwebhookconfiguration/lws-gatekeeper"
"""The StatefulSet guard's configuration, as the sandbox registers it."""


@contextlib.asynccontextmanager
async def guard_off(cluster: Cluster) -> AsyncIterator[None]:
    """The StatefulSet guard unregistered for the block (as with ``statefulSetGuard.enabled:
    false``), then registered again as it was: the gatekeeper's own checks must hold alone."""
    live = json.loads(await ok(cluster, "get", GUARD, "-o", "json"))
    for key in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"):
        live["metadata"].pop(key, None)
    await ok(cluster, "delete", GUARD)
    try:
        yield
    finally:
        await ok(cluster, "create", "-f", "-", input=json.dumps(live))

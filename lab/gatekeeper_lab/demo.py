"""The demo: the LWS gang-scheduling issue replayed on the sandbox, step by step.

Why this exists: it is the README's first command and the quickest way to see the
problem this project solves. It starts the sandbox with the scenario's four 1-GPU
nodes, replays the reporter's ``kubectl`` steps and prints, after each one, the pods
as ``kubectl get pods`` shows them and a one-line verdict. ``lws-gatekeeper demo`` (a
development install's command, entry point ``lws_gatekeeper.commands``) runs it, or
another demo with ``--karpenter`` or ``--shared``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import click
import kr8s
import kr8s.asyncio
from kr8s.asyncio.objects import Namespace

from gatekeeper.core.kube.keys import POOL_LABEL
from gatekeeper_lab.sandbox import build as sandbox_build
from gatekeeper_lab.sandbox.cli import dir_option, say
from gatekeeper_lab.sandbox.cluster import Sandbox, SandboxError, default_dir
from gatekeeper_lab.sandbox.replay import StepResult, list_raw, load_scenario, replay

__all__ = ["demo", "run_demo"]

WITHOUT = "without-gatekeeper"
WITH = "with-gatekeeper"


async def _fresh_namespace(api: kr8s.asyncio.Api, name: str) -> None:
    try:
        ns = await Namespace.get(name, api=api)
    except kr8s.NotFoundError:
        ns = None
    if ns is not None:
        await ns.delete()
        with anyio.fail_after(120):
            while await ns.exists():
                await anyio.sleep(0.5)
    await (await Namespace({"metadata": {"name": name}}, api=api)).create()


async def _replay(
    sb: Sandbox,
    api: kr8s.asyncio.Api,
    namespace: str,
    lws: dict[str, Any],
    gpus: int,
    say: Callable[[str], None],
) -> list[StepResult]:
    await _fresh_namespace(api, namespace)

    async def show(step: StepResult) -> None:
        say(f"\n$ {step.command}    # settled in {step.seconds:.1f}s")
        if step.replicas:
            out = sb.kubectl("get", "pods", "-n", namespace, "-o", "wide").stdout
            say("\n".join("    " + line for line in out.rstrip().splitlines()))
            say(f"  verdict: {step.verdict.line(gpus)}")

    return await replay(api, namespace, lws, on_step=show)


async def _demo(sb: Sandbox, say: Callable[[str], None]) -> None:
    scenario = load_scenario()
    api = await kr8s.asyncio.api(kubeconfig=str(sb.kubeconfig))
    have = {n["metadata"]["name"] for n in await list_raw(api, "nodes")}
    sb.create_nodes([n for n in scenario["nodes"] if n["metadata"]["name"] not in have])
    gpus = sum(int(n["status"]["allocatable"].get("nvidia.com/gpu", 0)) for n in scenario["nodes"])
    size = int(scenario["lws"]["spec"]["leaderWorkerTemplate"]["size"])
    setting = (
        f"{len(scenario['nodes'])} nodes, {gpus} GPUs, groups of {size} "
        f"(at most {gpus // size} whole groups fit)"
    )

    # Without: the same LWS, not opted in (no lws-gatekeeper.io/pool label).
    plain = copy.deepcopy(scenario["lws"])
    plain["metadata"].get("labels", {}).pop(POOL_LABEL, None)
    say(f"\n=== 1. The LWS issue replayed WITHOUT the gatekeeper: {setting} ===")
    without = await _replay(sb, api, WITHOUT, plain, gpus, say)
    await _fresh_namespace(api, WITHOUT)  # give the nodes back before the second run

    say("\n=== 2. The same steps WITH the gatekeeper: kubectl apply -f pool.yaml, then lws.yaml ===")
    sb.apply([scenario["pool"]])
    with_gk = await _replay(sb, api, WITH, scenario["lws"], gpus, say)
    out = sb.kubectl("get", "groupadmissions", "-n", WITH).stdout
    say("\n$ kubectl get groupadmissions\n" + "\n".join("    " + line for line in out.rstrip().splitlines()))
    out = sb.kubectl("get", "pools").stdout
    say("\n$ kubectl get pools\n" + "\n".join("    " + line for line in out.rstrip().splitlines()))

    say("\n=== Side by side (after each step) ===")
    say(f"  {'step':40} {'without: whole / stranded GPUs':32} {'with: whole / stranded GPUs / gated pods'}")
    for a, b in zip(without, with_gk, strict=True):
        if not a.replicas:
            continue
        va, vb = a.verdict, b.verdict
        say(
            f"  {a.command:40} {f'{va.whole_groups} / {va.gpus_stranded}':32} "
            f"{vb.whole_groups} / {vb.gpus_stranded} / {vb.gated_pods}"
        )
    say(
        f"\nThe sandbox keeps running: export KUBECONFIG={sb.kubeconfig} PATH={sb.bin_dir}:$PATH; "
        f"kubectl get pods -n {WITH}\n"
        f"Stop it with: lws-gatekeeper sandbox down --dir {sb.dir}"
    )


def run_demo(directory: Path, say: Callable[[str], None] = print) -> None:
    """Start (or reuse) the demo sandbox and replay the issue on it."""
    sb = Sandbox(directory, say=say)
    sb.up(nodes=0)
    anyio.run(_demo, sb, say)


@click.command("demo")
@dir_option
@click.option(
    "--karpenter",
    is_flag=True,
    help="Replay the issue's autoscaled case instead, with the real Karpenter (its own sandbox, "
    "no static node): a NodePool of 4 GPUs, an LWS of size 2 scaled from 1 to 3.",
)
@click.option(
    "--shared",
    is_flag=True,
    help="Replay the issue's shared-reservation case instead: a hub and two member clusters "
    "(their own sandboxes) launching from one reservation of 4 one-GPU machines.",
)
def demo(directory: Path | None, karpenter: bool, shared: bool) -> None:
    """Replay the LWS gang-scheduling issue on the sandbox, step by step."""
    if karpenter and shared:
        raise click.UsageError("--karpenter and --shared are two demos: choose one")
    try:
        if shared:
            from gatekeeper_lab import demo_shared

            demo_shared.run_demo(directory or default_dir("demo-shared"), say=say)
        elif karpenter:
            from gatekeeper_lab import demo_karpenter

            demo_karpenter.run_demo(directory or default_dir("demo-karpenter"), say=say)
        else:
            run_demo(directory or default_dir("demo"), say=say)
    except (SandboxError, sandbox_build.BuildError, TimeoutError) as exc:
        raise click.ClickException(str(exc)) from exc

"""The demo: the LWS gang-scheduling issue replayed on the sandbox, step by step.

Why this exists: it is the README's first command and the quickest way to see the
problem this project solves. It starts the sandbox with the scenario's four 1-GPU
nodes, replays the reporter's ``kubectl`` steps and prints, after each one, the pods
as ``kubectl get pods`` shows them and a one-line verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import kr8s
import kr8s.asyncio
from kr8s.asyncio.objects import Namespace

from gatekeeper.sandbox.cluster import Sandbox
from gatekeeper.sandbox.replay import StepResult, list_raw, load_scenario, replay

__all__ = ["run_demo"]

WITHOUT = "without-gatekeeper"


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


async def _demo(sb: Sandbox, say: Callable[[str], None]) -> None:
    scenario = load_scenario()
    api = await kr8s.asyncio.api(kubeconfig=str(sb.kubeconfig))
    have = {n["metadata"]["name"] for n in await list_raw(api, "nodes")}
    sb.create_nodes([n for n in scenario["nodes"] if n["metadata"]["name"] not in have])
    gpus = sum(int(n["status"]["allocatable"].get("nvidia.com/gpu", 0)) for n in scenario["nodes"])
    size = int(scenario["lws"]["spec"]["leaderWorkerTemplate"]["size"])
    say(
        f"\n=== The LWS issue replayed WITHOUT the gatekeeper: {len(scenario['nodes'])} nodes, "
        f"{gpus} GPUs, groups of {size} (at most {gpus // size} whole groups fit) ==="
    )
    await _fresh_namespace(api, WITHOUT)

    async def show(step: StepResult) -> None:
        say(f"\n$ {step.command}    # settled in {step.seconds:.1f}s")
        if step.replicas:
            out = sb.kubectl("get", "pods", "-n", WITHOUT, "-o", "wide").stdout
            say("\n".join("    " + line for line in out.rstrip().splitlines()))
            say(f"  verdict: {step.verdict.line(gpus)}")

    await replay(api, WITHOUT, scenario["lws"], on_step=show)
    say(
        "\n=== WITH the gatekeeper ===\n"
        "  not shown yet: the gate controller is the next piece of work (DESIGN.md, 'The mechanism')."
    )
    say(
        f"\nThe sandbox keeps running: export KUBECONFIG={sb.kubeconfig}; "
        f"{sb.bin_dir}/kubectl get pods -n {WITHOUT}\n"
        f"Stop it with: lws-gatekeeper sandbox down --dir {sb.dir}"
    )


def run_demo(directory: Path, say: Callable[[str], None] = print) -> None:
    """Start (or reuse) the demo sandbox and replay the issue on it."""
    sb = Sandbox(directory, say=say)
    sb.up(nodes=0)
    anyio.run(_demo, sb, say)

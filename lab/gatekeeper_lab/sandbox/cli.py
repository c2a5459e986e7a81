"""``lws-gatekeeper sandbox ...``: the sandbox cluster and the sandbox hub, from the command line.

Why this exists: the sandbox (``gatekeeper_lab.sandbox.cluster``) and its hub
(``gatekeeper_lab.sandbox.hub``) are what the demo, the tests and a developer trying the
project run; these commands (``up``, ``down``, ``status``, ``build``, ``hub up|down|status``)
are thin wrappers over them. The main command (``gatekeeper.cli``) finds the group
through the entry point ``lws_gatekeeper.commands`` of a development install; the demo
(``gatekeeper_lab.demo``) and the image's commands use ``dir_option`` and ``say``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gatekeeper_lab.sandbox import build as sandbox_build
from gatekeeper_lab.sandbox.cluster import Sandbox, SandboxError, default_dir
from gatekeeper_lab.sandbox.hub import Hub

__all__ = ["dir_option", "sandbox", "say"]


def say(msg: str) -> None:
    click.echo(msg, err=True)


@click.group()
def sandbox() -> None:
    """A real Kubernetes control plane as local processes, with KWOK nodes and LWS."""


dir_option = click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder of the sandbox (default: the cache folder's sandboxes/default).",
)


def _parse_labels(labels: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in labels:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not key=value", param_hint="--label")
        out[key] = value
    return out


@sandbox.command("up")
@dir_option
@click.option("--nodes", default=4, show_default=True, help="Fake GPU nodes to create.")
@click.option("--gpus-per-node", default=1, show_default=True, help="nvidia.com/gpu on each node.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="Label for the fake nodes.")
@click.option("--no-gatekeeper", is_flag=True, help="Do not run the gatekeeper against the sandbox.")
@click.option(
    "--with-kueue",
    is_flag=True,
    help="Also run the real Kueue (its webhooks act in namespaces labelled kueue.x-k8s.io/managed=true).",
)
@click.option(
    "--with-karpenter",
    is_flag=True,
    help="Also run the real Karpenter with its KWOK cloud provider (GPU instance types; "
    "it buys nodes for the NodePools you make).",
)
@click.option(
    "--with-volcano",
    is_flag=True,
    help="Also run Volcano's scheduler (scheduler name volcano) and its CRDs.",
)
@click.option(
    "--with-prometheus",
    is_flag=True,
    help="Also run Prometheus, scraping the gatekeeper's /metrics every second (prints its URL).",
)
@click.option(
    "--with-registry",
    is_flag=True,
    help="Also run an OCI registry (go-containerregistry's, plain HTTP on loopback) for the "
    "image and the chart (prints its address).",
)
@click.option(
    "--lws-gang-scheduling",
    "lws_gang_scheduler",
    type=click.Choice(["volcano", "none"]),
    default=None,
    help="Run the LWS controller with LWS's own gang scheduling (gangSchedulingManagement."
    "schedulerProvider) for every LWS of the cluster; volcano implies --with-volcano, none turns "
    "it off. Not given: a running sandbox keeps what it runs with.",
)
@click.option(
    "--audit",
    is_flag=True,
    help="Have the API server log every write (who, which user agent, when) to logs/audit.log.",
)
@click.option(
    "--hub",
    "hub_kubeconfig",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    help="Join the sandbox hub of this kubeconfig (printed by `sandbox hub up`) as a member.",
)
@click.option("--cluster-name", default="", help="With --hub: this member's name on the hub.")
@click.option(
    "--native-gang",
    is_flag=True,
    help="Start the API server, the scheduler and the controller manager with Kubernetes' native "
    "gang scheduling on (the GenericWorkload gate and the scheduling.k8s.io/v1beta1 API).",
)
def sandbox_up(
    directory: Path | None,
    nodes: int,
    gpus_per_node: int,
    labels: tuple[str, ...],
    no_gatekeeper: bool,
    with_kueue: bool,
    with_karpenter: bool,
    with_volcano: bool,
    with_prometheus: bool,
    with_registry: bool,
    lws_gang_scheduler: str | None,
    audit: bool,
    hub_kubeconfig: Path | None,
    cluster_name: str,
    native_gang: bool,
) -> None:
    """Start the sandbox in the background and print how to reach it.

    On a sandbox that runs it only reports; on one where some components died it starts
    those again and keeps every object; only a sandbox without its data starts afresh.
    """
    sb = Sandbox(directory or default_dir(), say=say)
    try:
        sb.up(
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            labels=_parse_labels(labels),
            gatekeeper=not no_gatekeeper,
            with_kueue=with_kueue,
            with_karpenter=with_karpenter,
            with_volcano=with_volcano,
            with_prometheus=with_prometheus,
            with_registry=with_registry,
            lws_gang_scheduler=lws_gang_scheduler,
            audit=audit,
            hub=hub_kubeconfig,
            cluster_name=cluster_name,
            native_gang=native_gang,
        )
    except (SandboxError, sandbox_build.BuildError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"export KUBECONFIG={sb.kubeconfig}")
    click.echo(f"export PATH={sb.bin_dir}:$PATH")
    if with_prometheus:
        click.echo(f"# Prometheus: {sb.prometheus_url()}")
    if with_registry:
        click.echo(f"# OCI registry: {sb.registry_address()} (plain HTTP)")


@sandbox.command("down")
@dir_option
def sandbox_down(directory: Path | None) -> None:
    """Stop every process the sandbox started."""
    try:
        Sandbox(directory or default_dir(), say=say).down()
    except SandboxError as exc:
        raise click.ClickException(str(exc)) from exc


@sandbox.command("status")
@dir_option
def sandbox_status(directory: Path | None) -> None:
    """Show each component and whether it runs."""
    sb = Sandbox(directory or default_dir(), say=say)
    _report(sb.running(), f"no sandbox in {sb.dir}")


def _report(running: dict[str, bool], nothing: str) -> None:
    """Print each process and whether it runs; exit 0 only when every one does."""
    if not running:
        click.echo(nothing)
        sys.exit(1)
    for name, alive in running.items():
        click.echo(f"{name:26} {'running' if alive else 'STOPPED'}")
    sys.exit(0 if all(running.values()) else 1)


@sandbox.group("hub")
def sandbox_hub() -> None:
    """A hub cluster (etcd and kube-apiserver only) where member sandboxes share Reservations."""


@sandbox_hub.command("up")
@dir_option
@click.option("--no-gatekeeper", is_flag=True, help="Do not run the gatekeeper's hub role.")
def sandbox_hub_up(directory: Path | None, no_gatekeeper: bool) -> None:
    """Start a hub (its CRDs, policies, member RBAC, the hub's gatekeeper); print its kubeconfig."""
    hub = Hub(directory or default_dir("hub"), say=say)
    try:
        hub.up(gatekeeper=not no_gatekeeper)
    except (SandboxError, sandbox_build.BuildError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(str(hub.kubeconfig))


@sandbox_hub.command("down")
@dir_option
def sandbox_hub_down(directory: Path | None) -> None:
    """Stop every process of the hub."""
    Hub(directory or default_dir("hub"), say=say).down()


@sandbox_hub.command("status")
@dir_option
def sandbox_hub_status(directory: Path | None) -> None:
    """Show each process of the hub and whether it runs."""
    hub = Hub(directory or default_dir("hub"), say=say)
    _report(hub.running(), f"no hub in {hub.dir}")


@sandbox.command("build")
@click.argument("components", nargs=-1)
def sandbox_build_cmd(components: tuple[str, ...]) -> None:
    """Build (or find in the cache) the sandbox's components from their pinned Go modules."""
    try:
        built = sandbox_build.build_all(list(components) or None, say=say)
    except sandbox_build.BuildError as exc:
        raise click.ClickException(str(exc)) from exc
    for name, inst in built.items():
        click.echo(f"{name:12} {inst.component.version:10} {inst.root}")

"""The ``lws-gatekeeper`` command line.

Why this exists: one program for everything the project runs: the controller
(``run``, as a member or ``--role hub``), ``render``, ``why`` (why an LWS or a pool waits),
the sandbox cluster (``sandbox up|down|status|build``), the sandbox hub
(``sandbox hub up|down|status``), the container image (``image build|lock``) and the
demo that replays the LWS issue.
Each sub-command is a thin wrapper; the work lives in the modules it calls.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import click

from gatekeeper.render.cli import render_cmd
from gatekeeper.sandbox import build as sandbox_build
from gatekeeper.sandbox.cluster import Sandbox, SandboxError, default_dir
from gatekeeper.sandbox.hub import Hub

__all__ = ["main"]

# kr8s warns about Kubernetes versions newer than those it lists; the APIs we use are stable.
warnings.filterwarnings("ignore", message="Kubernetes version .* is not supported", category=UserWarning)


def _say(msg: str) -> None:
    click.echo(msg, err=True)


@click.group()
@click.version_option(package_name="lws-gatekeeper")
def main() -> None:
    """All-or-nothing admission of LeaderWorkerSet groups into shared GPU pools."""


@main.command("why")
@click.argument("target")
@click.option("-n", "--namespace", default=None, help="The LWS's namespace (default: the context's).")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--kubeconfig", default=None, help="Kubeconfig file (default: $KUBECONFIG or ~/.kube/config).")
def why_cmd(target: str, namespace: str | None, output: str, kubeconfig: str | None) -> None:
    """Why an LWS or a pool waits: TARGET is lws/NAME (or just NAME) or pool/NAME.

    For an LWS: each group's state and the gatekeeper's reason, the pool's usage and who
    holds it, and what must free up for its next group. For a pool: its usage, the groups
    that hold it and those that wait, in the order they are served. Reads only.
    Also installed as the kubectl plugin ``kubectl lws-gatekeeper why``.
    """
    import asyncio
    import json

    from gatekeeper import why
    from gatekeeper.core.explain import lines_for_lws, lines_for_pool

    kind, _, name = target.rpartition("/")
    kind = kind.lower() or "lws"
    if kind not in ("lws", "leaderworkerset", "leaderworkersets", "pool", "pools") or not name:
        raise click.UsageError(f"TARGET is lws/NAME, NAME or pool/NAME, not {target!r}")

    async def answer() -> why.LwsAnswer | why.PoolView:
        if kind.startswith("pool"):
            return await why.why_pool(kubeconfig, name)
        ns = namespace or await why.default_namespace(kubeconfig)
        return await why.why_lws(kubeconfig, ns, name)

    try:
        result = asyncio.run(answer())
    except why.NotFound as exc:
        _say(f"error: {exc}")
        sys.exit(1)
    if output == "json":
        click.echo(json.dumps(why.as_json(result), indent=2))
        return
    lines = lines_for_lws(result) if isinstance(result, why.LwsAnswer) else lines_for_pool(result)
    click.echo("\n".join(lines))


@main.command("run")
@click.option("--kubeconfig", default=None, help="Kubeconfig file (default: in-cluster or $KUBECONFIG).")
@click.option("--webhook-host", default="0.0.0.0", show_default=True)
@click.option("--webhook-port", default=9443, show_default=True)
@click.option(
    "--cert-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder with tls.crt and tls.key for the webhook; without it no webhook is served.",
)
@click.option("--metrics-host", default="0.0.0.0", show_default=True)
@click.option("--metrics-port", default=8080, show_default=True, help="/metrics, /healthz, /readyz; 0: off.")
@click.option("--leader-elect/--no-leader-elect", default=True, show_default=True)
@click.option("--lease-namespace", default="lws-gatekeeper-system", show_default=True, envvar="POD_NAMESPACE")
@click.option("--lease-name", default="lws-gatekeeper", show_default=True)
@click.option("--identity", default="", help="Leader-election identity (default: host name and pid).")
@click.option("--resync-seconds", default=10.0, show_default=True, help="A pass at least this often.")
@click.option(
    "--self-signed-certs-secret",
    default="",
    help="Make and rotate the webhook's own certificates, kept in this Secret of --lease-namespace "
    "and written to --cert-dir (when cert-manager does not provide them).",
)
@click.option(
    "--webhook-config-name",
    default="lws-gatekeeper",
    show_default=True,
    help="MutatingWebhookConfiguration that gets the self-signed CA bundle.",
)
@click.option(
    "--webhook-service-name",
    default="lws-gatekeeper-webhook",
    show_default=True,
    help="Webhook Service (in --lease-namespace) named by the self-signed serving certificate.",
)
@click.option(
    "--backend",
    type=click.Choice(["pools", "kueue", "volcano"]),
    default="pools",
    show_default=True,
    help="pools: the gatekeeper's own Pool objects decide. kueue: the pool label names a Kueue "
    "LocalQueue; one Kueue Workload per group, Kueue's ClusterQueue decides. volcano: the pool "
    "label names a Volcano Queue; one PodGroup per group, Volcano's scheduler decides and places.",
)
@click.option(
    "--node-fit/--no-node-fit",
    default=None,
    help="Run the Kueue AdmissionCheck controller lws-gatekeeper.io/node-fit "
    "(default: on with --backend=kueue, off otherwise; it needs Kueue's CRDs).",
)
@click.option(
    "--never-fit-retry-seconds",
    type=click.IntRange(min=1),
    default=60,
    show_default=True,
    envvar="LWS_GATEKEEPER_NEVER_FIT_RETRY_SECONDS",
    help="kueue backend: a group whose Workload the node-fit check finds can never fit is given "
    "its quota back (the Workload deleted) and tried again after this many seconds, doubled "
    "each time up to 30 minutes. pools backend: the same delay for a group given back because "
    "its pods were not all bound within its Pool's spec.admissionTimeout.",
)
@click.option(
    "--karpenter-instance-types",
    "karpenter_instance_types",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    help="pools backend: the instance types Karpenter can launch, as the JSON file Karpenter's "
    "KWOK provider reads. Turns on reading Karpenter's NodePools and NodeClaims, so that "
    "Pools with spec.nodePools count what those can still launch.",
)
@click.option(
    "--role",
    type=click.Choice(["member", "hub"]),
    default="member",
    show_default=True,
    help="member: the gatekeeper of a cluster (webhook, admission). hub: the decider of a hub "
    "cluster (--kubeconfig is the hub's): grants the ReservationClaims of every member.",
)
@click.option(
    "--hub-kubeconfig",
    default=None,
    help="member: the hub's kubeconfig (this member's own identity there); Pools with "
    "spec.reservation are charged to that hub's Reservations.",
)
@click.option("--cluster-name", default="", help="member: this cluster's name on the hub (a DNS label).")
@click.option("--log-level", default="INFO", show_default=True)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one object per line, for log collectors.",
)
def run_cmd(
    kubeconfig: str | None,
    webhook_host: str,
    webhook_port: int,
    cert_dir: Path | None,
    metrics_host: str,
    metrics_port: int,
    leader_elect: bool,
    lease_namespace: str,
    lease_name: str,
    identity: str,
    resync_seconds: float,
    self_signed_certs_secret: str,
    webhook_config_name: str,
    webhook_service_name: str,
    backend: str,
    node_fit: bool | None,
    never_fit_retry_seconds: int,
    karpenter_instance_types: Path | None,
    role: str,
    hub_kubeconfig: str | None,
    cluster_name: str,
    log_level: str,
    log_format: str,
) -> None:
    """Run the gatekeeper: webhook, metrics and (when leading) the admission loop."""
    from gatekeeper.core.reservation import valid_cluster_name

    if self_signed_certs_secret and cert_dir is None:
        raise click.UsageError("--self-signed-certs-secret needs --cert-dir (where the files are written)")
    if hub_kubeconfig and not valid_cluster_name(cluster_name):
        raise click.UsageError("--hub-kubeconfig needs --cluster-name, a DNS label such as cluster-a")
    if role == "hub" and (hub_kubeconfig or backend != "pools"):
        raise click.UsageError("--role hub takes neither --hub-kubeconfig nor --backend")
    import anyio

    from gatekeeper.controller.app import Options, run
    from gatekeeper.core.provisioning import parse_instance_types

    instance_types = None
    if karpenter_instance_types is not None:
        try:
            instance_types = parse_instance_types(json.loads(karpenter_instance_types.read_text()))
        except (OSError, ValueError) as exc:
            raise click.BadParameter(str(exc), param_hint="--karpenter-instance-types") from exc
    from gatekeeper.controller.logs import setup_logging

    setup_logging(log_level, log_format)
    opts = Options(
        kubeconfig=kubeconfig,
        webhook_host=webhook_host,
        webhook_port=webhook_port,
        cert_dir=cert_dir,
        metrics_host=metrics_host,
        metrics_port=metrics_port,
        leader_elect=leader_elect,
        lease_namespace=lease_namespace,
        lease_name=lease_name,
        identity=identity,
        resync_seconds=resync_seconds,
        self_signed_certs_secret=self_signed_certs_secret,
        webhook_config_name=webhook_config_name,
        webhook_service_name=webhook_service_name,
        backend=backend,
        node_fit=backend == "kueue" if node_fit is None else node_fit,
        never_fit_retry_seconds=never_fit_retry_seconds,
        instance_types=instance_types,
        role=role,
        hub_kubeconfig=hub_kubeconfig,
        cluster_name=cluster_name,
    )
    anyio.run(run, opts)


@main.group()
def sandbox() -> None:
    """A real Kubernetes control plane as local processes, with KWOK nodes and LWS."""


_dir_option = click.option(
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
@_dir_option
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
    audit: bool,
    hub_kubeconfig: Path | None,
    cluster_name: str,
) -> None:
    """Start the sandbox in the background and print how to reach it.

    On a sandbox that runs it only reports; on one where some components died it starts
    those again and keeps every object; only a sandbox without its data starts afresh.
    """
    sb = Sandbox(directory or default_dir(), say=_say)
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
            audit=audit,
            hub=hub_kubeconfig,
            cluster_name=cluster_name,
        )
    except (SandboxError, sandbox_build.BuildError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"export KUBECONFIG={sb.kubeconfig}")
    click.echo(f"export PATH={sb.bin_dir}:$PATH")
    if with_prometheus:
        click.echo(f"# Prometheus: {sb.prometheus_url()}")


@sandbox.command("down")
@_dir_option
def sandbox_down(directory: Path | None) -> None:
    """Stop every process the sandbox started."""
    try:
        Sandbox(directory or default_dir(), say=_say).down()
    except SandboxError as exc:
        raise click.ClickException(str(exc)) from exc


@sandbox.command("status")
@_dir_option
def sandbox_status(directory: Path | None) -> None:
    """Show each component and whether it runs."""
    sb = Sandbox(directory or default_dir(), say=_say)
    running = sb.running()
    if not running:
        click.echo(f"no sandbox in {sb.dir}")
        sys.exit(1)
    for name, alive in running.items():
        click.echo(f"{name:26} {'running' if alive else 'STOPPED'}")
    sys.exit(0 if all(running.values()) else 1)


@sandbox.group("hub")
def sandbox_hub() -> None:
    """A hub cluster (etcd and kube-apiserver only) where member sandboxes share Reservations."""


@sandbox_hub.command("up")
@_dir_option
@click.option("--no-gatekeeper", is_flag=True, help="Do not run the gatekeeper's hub role.")
def sandbox_hub_up(directory: Path | None, no_gatekeeper: bool) -> None:
    """Start a hub (its CRDs, policies, member RBAC, the hub's gatekeeper); print its kubeconfig."""
    hub = Hub(directory or default_dir("hub"), say=_say)
    try:
        hub.up(gatekeeper=not no_gatekeeper)
    except (SandboxError, sandbox_build.BuildError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(str(hub.kubeconfig))


@sandbox_hub.command("down")
@_dir_option
def sandbox_hub_down(directory: Path | None) -> None:
    """Stop every process of the hub."""
    Hub(directory or default_dir("hub"), say=_say).down()


@sandbox_hub.command("status")
@_dir_option
def sandbox_hub_status(directory: Path | None) -> None:
    """Show each process of the hub and whether it runs."""
    hub = Hub(directory or default_dir("hub"), say=_say)
    running = hub.running()
    if not running:
        click.echo(f"no hub in {hub.dir}")
        sys.exit(1)
    for name, alive in running.items():
        click.echo(f"{name:26} {'running' if alive else 'STOPPED'}")
    sys.exit(0 if all(running.values()) else 1)


@sandbox.command("build")
@click.argument("components", nargs=-1)
def sandbox_build_cmd(components: tuple[str, ...]) -> None:
    """Build (or find in the cache) the sandbox's components from their pinned Go modules."""
    try:
        built = sandbox_build.build_all(list(components) or None, say=_say)
    except sandbox_build.BuildError as exc:
        raise click.ClickException(str(exc)) from exc
    for name, inst in built.items():
        click.echo(f"{name:12} {inst.component.version:10} {inst.root}")


@main.command("demo")
@_dir_option
@click.option(
    "--karpenter",
    is_flag=True,
    help="Replay the issue's autoscaled case instead, with the real Karpenter (its own sandbox, "
    "no static node): a NodePool of 4 GPUs, an LWS of size 2 scaled from 1 to 3.",
)
def demo(directory: Path | None, karpenter: bool) -> None:
    """Replay the LWS gang-scheduling issue on the sandbox, step by step."""
    try:
        if karpenter:
            from gatekeeper import demo_karpenter

            demo_karpenter.run_demo(directory or default_dir("demo-karpenter"), say=_say)
        else:
            from gatekeeper.demo import run_demo

            run_demo(directory or default_dir("demo"), say=_say)
    except (SandboxError, sandbox_build.BuildError, TimeoutError) as exc:
        raise click.ClickException(str(exc)) from exc


main.add_command(render_cmd, "render")


@main.group()
def image() -> None:
    """The project's container image: an OCI layout built from pinned Debian packages and wheels."""


@image.command("build")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Folder for the layout and SBOM.")
@click.option("--fresh", is_flag=True, help="Build again even when the cache has this image.")
def image_build(out: Path | None, fresh: bool) -> None:
    """Build the image of this source tree (cached by its inputs) and print where it is."""
    from gatekeeper.image import build as image_builder

    source = Path(__file__).resolve().parents[1]
    if not (source / "pyproject.toml").is_file():
        raise click.ClickException(f"{source} is not a source tree of the project: build from a clone")
    try:
        built = image_builder.build(source, say=_say, fresh=fresh, out=out)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"image      oci:{built.layout}:{built.tag}")
    click.echo(f"digest     {built.digest}")
    click.echo(
        f"size       {built.size / 1e6:.1f} MB compressed, {built.unpacked_size / 1e6:.1f} MB unpacked"
    )
    click.echo(f"sbom       {built.sbom}")
    click.echo(f"seconds    {built.seconds:.1f}{' (cached)' if built.cached else ''}")


@image.command("lock")
def image_lock() -> None:
    """Pin the Debian packages and wheels the registries serve now (debian.lock, requirements.lock)."""
    from gatekeeper.image import build as image_builder

    image_builder.lock(Path(__file__).resolve().parents[1], say=_say)

"""The ``lws-gatekeeper`` command line.

Why this exists: one program for everything the project runs: the controller
(``run``, as a member or ``--role hub``), ``render``, ``why`` (why an LWS or a pool waits),
a hub's Reservations (``hub release``), the gates a removed gatekeeper left (``ungate``).
Each sub-command is a thin wrapper; the work lives
in the modules it calls. A development install adds the sandbox cluster and hub
(``sandbox ...``), the container image (``image build|lock``) and the demos (``demo``)
through the entry points ``lws_gatekeeper.commands``: nothing here imports them, so
``run`` never loads the lab.
"""

from __future__ import annotations

import json
import sys
import warnings
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

import click

from gatekeeper.core.admission.record_cap import DEFAULT_MAX_RECORDS_PER_NAMESPACE
from gatekeeper.core.backends import BACKENDS
from gatekeeper.core.backends.pools.provisioning import InstanceType
from gatekeeper.core.model.pool import DEFAULT_ADMISSION_TIMEOUT
from gatekeeper.core.writes.plan import DEFAULT_EVENTS_PER_NAMESPACE_PER_MINUTE
from gatekeeper.render.cli import render_cmd
from gatekeeper.why_cli import why_cmd

__all__ = ["main", "plugin"]

# kr8s warns about Kubernetes versions newer than those it lists; the APIs we use are stable.
warnings.filterwarnings("ignore", message="Kubernetes version .* is not supported", category=UserWarning)


DEV_COMMANDS = "lws_gatekeeper.commands"
"""Entry-point group of the commands a development install adds (``sandbox``, ``image``,
``demo``): the product neither has nor imports them; they are loaded only when named."""


def say(msg: str) -> None:
    click.echo(msg, err=True)


class _Main(click.Group):
    """The main group, with the development commands found by entry point, loaded on use."""

    def _dev(self) -> dict[str, EntryPoint]:
        return {ep.name: ep for ep in entry_points(group=DEV_COMMANDS)}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._dev()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is not None:
            return found
        ep = self._dev().get(cmd_name)
        if ep is None:
            return None
        command = ep.load()
        if not isinstance(command, click.Command):
            raise click.ClickException(f"entry point {ep.value} ({DEV_COMMANDS}) is not a click command")
        return command


@click.group(cls=_Main)
@click.version_option(package_name="lws-gatekeeper")
def main() -> None:
    """All-or-nothing admission of LeaderWorkerSet groups into shared GPU pools."""


main.add_command(why_cmd)


@click.group()
@click.version_option(package_name="lws-gatekeeper")
def plugin() -> None:
    """kubectl lws-gatekeeper: why an LWS or a pool waits for the gatekeeper."""


plugin.add_command(why_cmd)


def _instance_types(path: Path | None) -> tuple[InstanceType, ...] | None:
    """``--karpenter-instance-types``: the file read, or a usage error saying why not."""
    from gatekeeper.core.backends.pools.provisioning import parse_instance_types

    if path is None:
        return None
    try:
        return parse_instance_types(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        raise click.BadParameter(str(exc), param_hint="--karpenter-instance-types") from exc


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
@click.option(
    "--metrics-secure/--no-metrics-secure",
    default=False,
    show_default=True,
    help="Serve the metrics port over HTTPS (a self-signed certificate made at start) and answer "
    "/metrics only to a bearer token whose user may get the non-resource URL /metrics (a "
    "TokenReview and a SubjectAccessReview); /healthz and /readyz stay open.",
)
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
    type=click.Choice(BACKENDS.names),
    default=BACKENDS.default.name,
    show_default=True,
    help=" ".join(f"{b.name}: {b.summary}" for b in BACKENDS),
)
@click.option(
    "--node-fit/--no-node-fit",
    default=None,
    help="Run the Kueue AdmissionCheck controller lws-gatekeeper.io/node-fit "
    "(default: on with --backend=kueue, off otherwise; it needs Kueue's CRDs).",
)
@click.option(
    "--admission-timeout-seconds",
    type=click.IntRange(min=1, max=86400),
    default=DEFAULT_ADMISSION_TIMEOUT,
    show_default=True,
    envvar="LWS_GATEKEEPER_ADMISSION_TIMEOUT_SECONDS",
    help="every backend but pools: an admitted group whose pods are not all bound this long after its "
    "admission (under startupPolicy LeaderReady, its workers this long after its leader turned "
    "Ready) is given back and tried again later. pools backend: each Pool's "
    "spec.admissionTimeout (default 10m) says instead.",
)
@click.option(
    "--max-records-per-namespace",
    type=click.IntRange(min=1, max=1_000_000),
    default=DEFAULT_MAX_RECORDS_PER_NAMESPACE,
    show_default=True,
    envvar="LWS_GATEKEEPER_MAX_RECORDS_PER_NAMESPACE",
    help="The most GroupAdmission records one namespace may have (every backend). A group past it "
    "gets no record, is not queued and holds nothing; its LeaderWorkerSet gets a Warning Event "
    "(RecordLimitReached), and the group is queued once others go.",
)
@click.option(
    "--max-events-per-namespace-per-minute",
    type=click.IntRange(min=1, max=100_000),
    default=DEFAULT_EVENTS_PER_NAMESPACE_PER_MINUTE,
    show_default=True,
    envvar="LWS_GATEKEEPER_MAX_EVENTS_PER_NAMESPACE_PER_MINUTE",
    help="Events the gatekeeper posts in one namespace within a minute, at most: past it an "
    "Event is not posted (counted in lws_gatekeeper_events_dropped_total); a waiting group's "
    "reason is told once the minute has passed, if it still holds. Records say it all.",
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
    "its pods were not all bound within its Pool's spec.admissionTimeout (other backends: "
    "--admission-timeout-seconds). Every backend: the same "
    "delay for a group given back because one of its own pods asks other than its role was "
    "admitted with (NotAsAdmitted).",
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
    "--closed-pool-exempt-namespaces",
    default="kube-system",
    show_default=True,
    help="pools backend: namespaces (comma-separated; empty: none) whose pods on a closed pool's "
    "nodes (tainted lws-gatekeeper.io/pool) are not held against the pool's quota; pods "
    "elsewhere that tolerate that taint by themselves are. The chart passes "
    "policies.closedPools.exemptNamespaces.",
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
@click.option(
    "--cluster-name",
    default="",
    help="member: this cluster's name on the hub (a DNS label of at most 41 characters); its "
    "claims and heartbeat are in the hub namespace lws-gatekeeper-member-<cluster name>.",
)
@click.option(
    "--hub-heartbeat-seconds",
    type=click.IntRange(5, 3600),
    default=40,
    show_default=True,
    help="member: the heartbeat's duration (renewed four times in it); the hub marks this "
    "member's granted claims Orphaned when it has not changed for that long.",
)
@click.option(
    "--shared-reservation-check",
    is_flag=True,
    help="Also serve Kueue AdmissionChecks whose controllerName is lws-gatekeeper.io/shared-reservation "
    "(their spec.parameters name a Reservation on the hub): a Workload is admitted once the hub granted "
    "its claim. Needs --hub-kubeconfig.",
)
@click.option(
    "--drain-seconds",
    type=click.FloatRange(0, 600),
    default=10.0,
    show_default=True,
    help="On SIGTERM, how long an admission pass in flight may take to finish its writes and "
    "Events before the process stops (keep it below the pod's terminationGracePeriodSeconds).",
)
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
    metrics_secure: bool,
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
    max_records_per_namespace: int,
    max_events_per_namespace_per_minute: int,
    admission_timeout_seconds: int,
    karpenter_instance_types: Path | None,
    closed_pool_exempt_namespaces: str,
    role: str,
    hub_kubeconfig: str | None,
    cluster_name: str,
    hub_heartbeat_seconds: int,
    shared_reservation_check: bool,
    drain_seconds: float,
    log_level: str,
    log_format: str,
) -> None:
    """Run the gatekeeper: webhook, metrics and (when leading) the admission loop."""
    from gatekeeper.core.reservation import valid_cluster_name

    if self_signed_certs_secret and cert_dir is None:
        raise click.UsageError("--self-signed-certs-secret needs --cert-dir (where the files are written)")
    if hub_kubeconfig and not valid_cluster_name(cluster_name):
        raise click.UsageError(
            "--hub-kubeconfig needs --cluster-name, a DNS label of at most 41 characters such as cluster-a"
        )
    if shared_reservation_check and not hub_kubeconfig:
        raise click.UsageError("--shared-reservation-check claims on a hub: it needs --hub-kubeconfig")
    if role == "hub" and (hub_kubeconfig or backend != BACKENDS.default.name):
        raise click.UsageError("--role hub takes neither --hub-kubeconfig nor --backend")
    import anyio

    from gatekeeper.controller.app import Options, run
    from gatekeeper.controller.logs import setup_logging

    instance_types = _instance_types(karpenter_instance_types)

    setup_logging(log_level, log_format)
    opts = Options(
        kubeconfig=kubeconfig,
        webhook_host=webhook_host,
        webhook_port=webhook_port,
        cert_dir=cert_dir,
        metrics_host=metrics_host,
        metrics_port=metrics_port,
        metrics_secure=metrics_secure,
        leader_elect=leader_elect,
        lease_namespace=lease_namespace,
        lease_name=lease_name,
        identity=identity,
        resync_seconds=resync_seconds,
        drain_seconds=drain_seconds,
        self_signed_certs_secret=self_signed_certs_secret,
        webhook_config_name=webhook_config_name,
        webhook_service_name=webhook_service_name,
        backend=backend,
        node_fit=backend == "kueue" if node_fit is None else node_fit,
        never_fit_retry_seconds=never_fit_retry_seconds,
        max_records_per_namespace=max_records_per_namespace,
        max_events_per_namespace_per_minute=max_events_per_namespace_per_minute,
        admission_timeout_seconds=admission_timeout_seconds,
        instance_types=instance_types,
        closed_pool_exempt_namespaces=tuple(n for n in closed_pool_exempt_namespaces.split(",") if n),
        role=role,
        hub_kubeconfig=hub_kubeconfig,
        cluster_name=cluster_name,
        hub_heartbeat_seconds=hub_heartbeat_seconds,
        shared_reservation_check=shared_reservation_check,
    )
    anyio.run(run, opts)


@main.group("hub")
def hub_group() -> None:
    """Operate a hub's shared Reservations (with the hub's kubeconfig)."""


@hub_group.command("release")
@click.option("--cluster", "cluster", required=True, help="The member cluster whose claims are released.")
@click.option(
    "--kubeconfig", default=None, help="The hub's kubeconfig (default: $KUBECONFIG or ~/.kube/config)."
)
@click.option(
    "--force",
    is_flag=True,
    help="Release even Granted claims (the hub still hears the member's heartbeat): only when "
    "you know its machines are gone.",
)
def hub_release_cmd(cluster: str, kubeconfig: str | None, force: bool) -> None:
    """Release every claim of a member cluster gone for good: their room in the Reservations
    goes to the other members' waiting claims on the hub's next pass.

    Refused while the hub still hears the member's heartbeat (any of its claims Granted),
    unless --force: its groups may still run on that room.
    """
    import asyncio

    from gatekeeper.hub_release import release_cluster

    done = asyncio.run(release_cluster(kubeconfig, cluster, force=force))
    if done.refused:
        say(f"error: {done.refused}")
        sys.exit(1)
    click.echo(
        f"released {len(done.released)} claim(s) of cluster {cluster}, {done.held} of them holding room"
        + (f"; {len(done.changed)} changed on the hub meanwhile, left as they are" if done.changed else "")
    )
    for name in done.released:
        click.echo(f"  {name}")


@main.command("ungate")
@click.option("--namespace", "-n", default=None, help="Only this namespace.")
@click.option("--all-namespaces", "-A", is_flag=True, help="Every namespace.")
@click.option("--lease-namespace", default="lws-gatekeeper-system", show_default=True)
@click.option("--lease-name", default="lws-gatekeeper", show_default=True)
@click.option(
    "--force",
    is_flag=True,
    help="Free them even while a gatekeeper renews its Lease: only when you know it is gone.",
)
@click.option("--dry-run", is_flag=True, help="Only list the pods it would free.")
@click.option("--kubeconfig", default=None, help="Default: $KUBECONFIG or ~/.kube/config.")
def ungate_cmd(
    namespace: str | None,
    all_namespaces: bool,
    lease_namespace: str,
    lease_name: str,
    force: bool,
    dry_run: bool,
    kubeconfig: str | None,
) -> None:
    """Free the pods left gated by a gatekeeper that is gone for good (after `helm uninstall`):
    remove the gate lws-gatekeeper.io/admission from every pod that still carries it, and
    nothing else. They are then scheduled as any pod, with no admission.

    Refused while a gatekeeper still renews its Lease, unless --force: it lifts its own gates.
    """
    import asyncio

    from gatekeeper.ungate import free_left_gates

    if bool(namespace) == all_namespaces:
        raise click.UsageError("say where: --namespace NAME or --all-namespaces")
    done = asyncio.run(
        free_left_gates(
            kubeconfig,
            None if all_namespaces else namespace,
            lease_namespace=lease_namespace,
            lease_name=lease_name,
            force=force,
            dry_run=dry_run,
        )
    )
    if done.refused:
        say(f"error: {done.refused}")
        sys.exit(1)
    verb = "would free" if dry_run else "freed"
    click.echo(
        f"{verb} {len(done.freed)} pod(s)"
        + (f"; {len(done.changed)} changed meanwhile, left as they are" if done.changed else "")
    )
    for where in done.freed:
        click.echo(f"  {where}")
    for said in done.denied:
        say(f"refused: {said}")
    if done.denied:
        sys.exit(1)


main.add_command(render_cmd, "render")

"""``lws-gatekeeper run``: the webhook, the metrics endpoint and the admission loop in one process.

Why this exists: one program to deploy (the chart runs it twice). Every replica serves
the webhook (stateless) and ``/metrics``, ``/healthz``, ``/readyz`` on a port of their own
(HTTPS, each scrape's token checked, with ``--metrics-secure``);
only the replica that holds the Lease runs the admission loop. SIGTERM stops it
cleanly: no pass starts, the one in flight finishes its writes and Events (``drain``, for
at most ``--drain-seconds``; a second SIGTERM stops at once), and the Lease is given up so
the other replica takes over at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import anyio
import kr8s.asyncio
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gatekeeper import metrics
from gatekeeper.controller import resources as r
from gatekeeper.controller.backends import PLUGINS
from gatekeeper.controller.caches import Caches
from gatekeeper.controller.certs import SelfSignedCerts
from gatekeeper.controller.checks import CHECKS
from gatekeeper.controller.drain import Drain
from gatekeeper.controller.errors import Conflict
from gatekeeper.controller.hub import HubController
from gatekeeper.controller.hub_link import HubLink, credentials_of
from gatekeeper.controller.kube import Kube
from gatekeeper.controller.leader import LeaderElector
from gatekeeper.controller.loop import Controller, PassLoop
from gatekeeper.controller.metrics_access import MetricsAccess, self_signed_context
from gatekeeper.controller.plugin import Term
from gatekeeper.controller.session import keep_connections
from gatekeeper.core.admission.record_cap import DEFAULT_MAX_RECORDS_PER_NAMESPACE
from gatekeeper.core.backends import BACKENDS
from gatekeeper.core.backends.pools.provisioning import InstanceType
from gatekeeper.core.model.pool import DEFAULT_ADMISSION_TIMEOUT
from gatekeeper.core.writes.plan import DEFAULT_EVENTS_PER_NAMESPACE_PER_MINUTE
from gatekeeper.webhook import WebhookThread
from gatekeeper.webhook.guard import Lookup
from gatekeeper.webhook.pass_through import PassThrough

__all__ = ["Options", "run"]

log = logging.getLogger("gatekeeper")


@dataclass(frozen=True)
class Options:
    """Everything ``run`` needs; the CLI fills it from flags."""

    kubeconfig: str | None = None
    webhook_host: str = "0.0.0.0"
    webhook_port: int = 9443
    cert_dir: Path | None = None
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 8080
    metrics_secure: bool = False
    """Serve ``/metrics`` over HTTPS to a bearer token allowed ``get /metrics`` only
    (``controller.metrics_access``); ``/healthz`` and ``/readyz`` stay open."""
    leader_elect: bool = True
    lease_namespace: str = "lws-gatekeeper-system"
    lease_name: str = "lws-gatekeeper"
    identity: str = ""
    resync_seconds: float = 10.0
    drain_seconds: float = 10.0
    """On SIGTERM: how long the passes in flight may take to finish before the process stops."""
    self_signed_certs_secret: str = ""
    """Make and rotate the webhook's certificates in this Secret (in ``lease_namespace``); "": don't."""
    webhook_config_name: str = "lws-gatekeeper"
    """The MutatingWebhookConfiguration whose CA bundle the self-signed certificates go into."""
    webhook_service_name: str = "lws-gatekeeper-webhook"
    """The webhook Service, whose DNS names the self-signed serving certificate carries."""
    backend: str = BACKENDS.default.name
    """Who admits a group: a name of ``core.backends.BACKENDS``."""
    node_fit: bool = False
    """Also run the controller of Kueue AdmissionChecks ``lws-gatekeeper.io/node-fit``."""
    shared_reservation_check: bool = False
    """Also run the controller of Kueue AdmissionChecks ``lws-gatekeeper.io/shared-reservation``
    (it claims on the hub of ``hub_kubeconfig``)."""
    never_fit_retry_seconds: int = 60
    """First delay before a group is tried again: kueue, a Workload that could never fit made
    again; pools, a group given back after its Pool's ``spec.admissionTimeout``."""
    instance_types: tuple[InstanceType, ...] | None = None
    """pools backend: what Karpenter can launch; None: Karpenter's NodePools are not read."""
    max_records_per_namespace: int = DEFAULT_MAX_RECORDS_PER_NAMESPACE
    """Group records one namespace may have (``core.admission.record_cap``)."""
    max_events_per_namespace_per_minute: int = DEFAULT_EVENTS_PER_NAMESPACE_PER_MINUTE
    """Events posted in one namespace within a minute, at most (``core.writes.plan.Memory``)."""
    admission_timeout_seconds: int = DEFAULT_ADMISSION_TIMEOUT
    """Every backend but pools: how long an admitted group may lack bound pods (pools: each
    Pool says)."""
    closed_pool_exempt_namespaces: tuple[str, ...] = ("kube-system",)
    """pools backend: namespaces whose pods on a closed pool's nodes are not held against its
    quota (``core.admission.intruders``), as the policy lws-gatekeeper-closed-pools exempts them."""
    role: str = "member"
    """``member`` (a cluster's gatekeeper) or ``hub`` (grants the claims of every member)."""
    hub_kubeconfig: str | None = None
    """member: the hub's kubeconfig; None: no hub (Pools with spec.reservation wait)."""
    cluster_name: str = ""
    """member: this cluster's name on the hub."""
    hub_heartbeat_seconds: int = 40
    """member: the heartbeat Lease's duration; the hub marks this member's claims Orphaned
    when it has not changed for that long."""


async def _serve_metrics(opts: Options, kube: Kube) -> web.AppRunner:
    access = MetricsAccess(kube) if opts.metrics_secure else None

    async def metrics(request: web.Request) -> web.Response:
        if access is not None:
            verdict = await access.check(request.headers.get("Authorization"))
            if verdict.status != 200:
                return web.Response(status=verdict.status, text=verdict.reason + "\n")
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        # Ready to serve the webhook at once; the admission loop reports through metrics.
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    tls = self_signed_context([opts.webhook_service_name, socket.gethostname()]) if access else None
    await web.TCPSite(runner, opts.metrics_host, opts.metrics_port, ssl_context=tls).start()
    return runner


def controllers(
    kube: Kube,
    caches: Caches,
    opts: Options,
    hub: HubLink | None = None,
    pass_through: PassThrough | None = None,
) -> list[Controller]:
    """The controllers of one term: the hub's ledger (``--role hub``), or the backend's and
    those of the checks (``controller.checks.CHECKS``) whose option is on."""
    if opts.role == "hub":
        return [HubController(kube, caches)]
    term = Term(
        kube,
        caches,
        hub,
        pass_through,
        retry_seconds=opts.never_fit_retry_seconds,
        instance_types=opts.instance_types,
        exempt_namespaces=opts.closed_pool_exempt_namespaces,
        max_records_per_namespace=opts.max_records_per_namespace,
        admission_timeout=opts.admission_timeout_seconds,
        events_per_minute=opts.max_events_per_namespace_per_minute,
    )
    found: list[Controller] = [PLUGINS[opts.backend].make(term)]
    found.extend(check.make(term) for check in CHECKS.values() if getattr(opts, check.option))
    return found


def _version() -> str:
    try:
        return version("lws-gatekeeper")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def _admission_loop(
    api: kr8s.asyncio.Api,
    opts: Options,
    kube: Kube | None = None,
    hub: Callable[[], Coroutine[Any, Any, Kube]] | None = None,
    pass_through: PassThrough | None = None,
    drain: Drain | None = None,
) -> Callable[[], Coroutine[Any, Any, None]]:
    """What the leader runs, made afresh for each term: new caches (never the last term's,
    which may be days old), one shared by the term's controllers, and one loop each; with a
    hub, new caches of the hub too. The webhook's table of admitted groups is the term's:
    cleared when the term ends."""
    kube = kube or Kube(api)

    async def lead() -> None:
        metrics.leading(True)
        caches = Caches(api, kube.credentials)
        link = (
            HubLink(
                hub,
                opts.cluster_name,
                heartbeat_seconds=opts.hub_heartbeat_seconds,
                holder=opts.identity,
                credentials=credentials_of(opts.hub_kubeconfig) if opts.hub_kubeconfig else None,
            )
            if hub is not None
            else None
        )
        found = controllers(kube, caches, opts, link, pass_through)
        loops = [PassLoop(c, resync=opts.resync_seconds, drain=drain) for c in found]
        try:
            async with anyio.create_task_group() as tg:
                if link is not None:
                    tg.start_soon(link.run)
                tg.start_soon(caches.run)
                for loop in loops:
                    tg.start_soon(loop.run)
                for c in found:
                    for task in getattr(c, "side_tasks", ()):
                        tg.start_soon(task)
        finally:
            metrics.leading(False)
            if pass_through is not None:
                pass_through.clear()

    return lead


_LOOKUP_SECONDS = 5.0
"""How long the StatefulSet guard waits for a StatefulSet to be read (the API server
waits 10 s for the whole review)."""


def _statefulset_lookup(kube: Kube) -> Lookup:
    """The guard's read of a StatefulSet, from the webhook's thread, on this process's one
    client (whose loop is the caller's: the request is handed to it)."""
    loop = asyncio.get_running_loop()

    async def get(namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await kube.get(r.STATEFULSETS, name, namespace)
        except Conflict as exc:
            if exc.code == 404:
                return None
            raise

    async def lookup(namespace: str, name: str) -> dict[str, Any] | None:
        future = asyncio.run_coroutine_threadsafe(get(namespace, name), loop)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), _LOOKUP_SECONDS)
        finally:
            future.cancel()

    return lookup


async def run(opts: Options) -> None:
    """Serve and reconcile until SIGTERM or SIGINT."""
    api = await kr8s.asyncio.api(kubeconfig=opts.kubeconfig)
    await keep_connections(api)
    identity = opts.identity or f"{socket.gethostname()}-{os.getpid()}"
    metrics.build_info(_version(), opts.backend if opts.role == "member" else "", opts.role)
    # One client, one set of credentials, for every part of the process.
    kube = Kube(api, user_agent=f"lws-gatekeeper/{_version()} ({identity})")
    runners: list[web.AppRunner | WebhookThread] = []
    certs: SelfSignedCerts | None = None
    if opts.self_signed_certs_secret:
        if opts.cert_dir is None:
            raise ValueError("self-signed certificates need a --cert-dir to write them to")
        certs = SelfSignedCerts(
            kube,
            namespace=opts.lease_namespace,
            secret=opts.self_signed_certs_secret,
            service=opts.webhook_service_name,
            webhook_config=opts.webhook_config_name,
            cert_dir=opts.cert_dir,
        )
        await certs.ensure_until_done()  # the server below reads the files at start
    elector = LeaderElector(kube, namespace=opts.lease_namespace, name=opts.lease_name, identity=identity)
    # Pods of groups that hold their admission are made ungated, on the leader only, while
    # it may still write (the table is the term's; a replica that cannot renew gates).
    pass_through = PassThrough(elector.may_write if opts.leader_elect else lambda: True)
    if opts.cert_dir is not None:
        # On a loop and thread of its own: a review never waits behind the controller's work.
        runners.append(
            await WebhookThread.start(
                opts.webhook_host,
                opts.webhook_port,
                opts.cert_dir / "tls.crt",
                opts.cert_dir / "tls.key",
                pass_through,
                pod_patch=BACKENDS[opts.backend].pod_patch,
                lookup=_statefulset_lookup(kube),
            )
        )
        log.info("webhook serving on %s:%d (own thread)", opts.webhook_host, opts.webhook_port)
    if opts.metrics_port:
        runners.append(await _serve_metrics(opts, kube))
    drain = Drain()
    try:
        async with anyio.create_task_group() as tg:

            async def drain_then_stop() -> None:
                if not await drain.stop(opts.drain_seconds):
                    log.warning("the pass in flight did not finish within %.0fs; cut off", opts.drain_seconds)
                tg.cancel_scope.cancel()

            async def stop_on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for signum in signals:
                        name = signal.Signals(signum).name
                        if drain.stopping:
                            log.info("received %s again; stopping now", name)
                            tg.cancel_scope.cancel()
                            return
                        log.info("received %s; stopping once the pass in flight is done", name)
                        tg.start_soon(drain_then_stop)

            tg.start_soon(stop_on_signal)
            if certs is not None:
                tg.start_soon(certs.run)
            fence = elector.may_write
            hub: Callable[[], Coroutine[Any, Any, Kube]] | None = None
            if opts.hub_kubeconfig and opts.role == "member":
                hub_kubeconfig = opts.hub_kubeconfig

                async def hub() -> Kube:
                    hub_api = await kr8s.asyncio.api(kubeconfig=hub_kubeconfig)
                    await keep_connections(hub_api)
                    agent = f"lws-gatekeeper/{_version()} ({identity}; {opts.cluster_name})"
                    hub_kube = Kube(hub_api, user_agent=agent)
                    return hub_kube.fenced(fence) if opts.leader_elect else hub_kube

            loop = _admission_loop(
                api, opts, kube.fenced(fence) if opts.leader_elect else kube, hub, pass_through, drain
            )
            if opts.leader_elect:
                tg.start_soon(elector.run, loop)
            else:
                tg.start_soon(loop)
    finally:
        with anyio.CancelScope(shield=True):
            if opts.leader_elect:
                await elector.release()
            for r in runners:
                await r.cleanup()

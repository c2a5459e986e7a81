"""The HTTPS server behind the mutating webhooks: AdmissionReview in, JSON patch out.

Why this exists: the API server only calls webhooks over TLS and expects an
AdmissionReview answer within the configuration's timeout. This module is the thin
I/O around ``gatekeeper.core.model.gating``: it decodes the review, asks the core for the
patch, and answers. It fails closed: a pod or LWS it cannot patch is refused with a
message, because an opted-in pod created without its gate would escape the gatekeeper.
The serving certificate is re-read when its files change on disk (checked at most every
``CERT_CHECK_SECONDS``, at a TLS handshake), so a rotated certificate needs no restart.

Bounded, so that a pod that reaches the port cannot exhaust the server's memory: a body
over ``MAX_BODY_BYTES`` is refused (413) before it is read, or as soon as it grows past
the bound; the bodies held at once (being read, or answered) take their bytes as they
arrive from a budget of ``MAX_CONCURRENT_REVIEWS * MAX_BODY_BYTES``, and at most
``MAX_CONCURRENT_REVIEWS`` reviews are answered at once; past either bound a review is
answered at once with 429 and ``Retry-After: 1`` (the API server's client retries it). And
timed (``connections``): a TLS handshake, a connection's first request and a request's body
each have a deadline, so a client that connects and waits holds no socket for long, and one
that sends a head and no body holds no review slot at all.

Routes: ``POST /mutate-pods``, ``POST /mutate-leaderworkersets``, the guard's
``POST /validate-statefulsets``, ``POST /validate-statefulsets-scale`` and
``POST /validate-pods-resize`` (``guard``), ``GET /healthz``, ``GET /readyz``. Requests are
counted in ``lws_gatekeeper_webhook_requests_total`` (in the default prometheus registry) by
webhook and result, and timed from their arrival to their
answer in ``lws_gatekeeper_webhook_request_duration_seconds`` by webhook (the dashboard's
webhook latency; the API server waits for it on every pod it creates).
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

from aiohttp import web

from gatekeeper.core.kube.keys import POOL_LABEL, SCHEDULING_GATE
from gatekeeper.core.kube.objects import as_map
from gatekeeper.core.model.closed import what_opens
from gatekeeper.core.model.gating import is_opted_in, lws_label_patch, pod_gate_patch
from gatekeeper.core.plugin.backend import PodPatch
from gatekeeper.metrics import WEBHOOK_LATENCY, WEBHOOK_REQUESTS
from gatekeeper.webhook.config import LWS_PATH, PODS_PATH, RESIZE_PATH, SCALE_PATH, STATEFULSETS_PATH
from gatekeeper.webhook.connections import (
    KEEPALIVE_SECONDS,
    READ_SECONDS,
    BodyBudget,
    DeadlineRunner,
    DeadlineSite,
    OverBudget,
    TooLarge,
    close_after,
    read_body,
    request_arrived,
)
from gatekeeper.webhook.guard import Lookup, resize_guard, scale_guard, statefulset_guard, verdict
from gatekeeper.webhook.pass_through import PassThrough
from gatekeeper.webhook.review import BadReview, Patch, Review, answer, parse_review

__all__ = [
    "CERT_CHECK_SECONDS",
    "MAX_BODY_BYTES",
    "MAX_CONCURRENT_REVIEWS",
    "make_app",
    "start_webhook_server",
]

log = logging.getLogger("gatekeeper.webhook")

CERT_CHECK_SECONDS = 5.0
"""How often, at most, the certificate files are checked for a change."""
MAX_BODY_BYTES = 4 * 1024 * 1024
"""The largest AdmissionReview read: an LWS UPDATE holds the old and the new object, each
at most etcd's 1.5 MiB (the API server takes no larger request than 3 MiB)."""
MAX_CONCURRENT_REVIEWS = 8
"""Reviews read and answered at once; more are refused with 429 until one ends."""


# What each webhook refuses when it cannot mutate the object: (kind, what it would add).
_REFUSAL = {
    "pods": ("pod", f"scheduling gate {SCHEDULING_GATE}"),
    "leaderworkersets": ("LeaderWorkerSet", f"label {POOL_LABEL} in its pod templates"),
}


class Refused(Exception):
    """The object is refused as written, for the reason given (not for a failure of ours)."""


def _pod_patch(review: Review, pass_through: PassThrough | None = None) -> Patch:
    """The gate, on a pod being created with the opt-in label; nothing for any other pod.

    A pod of a group that already holds its admission (``pass_through``) is instead made
    as if its gate had been lifted at once: the pool's node selector and tolerations. An
    opted-in pod written with a toleration of closed pools' taint is refused
    (``core.model.closed``): only the gatekeeper gives one, as it lets an admitted group in.
    """
    if review.operation != "CREATE" or not is_opted_in(review.obj):
        return []
    opens = what_opens(as_map(review.obj.get("spec")))
    if opens:
        raise Refused(f"{opens}; remove it from the LeaderWorkerSet's pod template")
    if pass_through is not None:
        ops = pass_through.patch(review.obj, review.namespace)
        if ops is not None:
            return ops
    return pod_gate_patch(review.obj)


def _backend_pod_patch(review: Review, pass_through: PassThrough | None, extra: PodPatch) -> Patch:
    """The gate (or the pass-through), then what the backend adds to an opted-in pod it is
    made with (``core.plugin.backend.Backend.pod_patch``)."""
    gate = _pod_patch(review, pass_through)
    if review.operation != "CREATE" or not is_opted_in(review.obj):
        return gate
    if review.obj.get("spec") is None:
        return gate  # the gate's patch makes the spec; such a pod is no LWS's anyway
    return [*gate, *extra(review.obj)]


def _lws_patch(review: Review) -> Patch:
    """The LWS's opt-in label mirrored into its pod templates, on CREATE and UPDATE."""
    if review.operation not in ("CREATE", "UPDATE"):
        return []
    return lws_label_patch(review.obj)


class _InFlight:
    """How many reviews are being answered, against the bound; and the bytes of the bodies
    held meanwhile (being read, or answered), against theirs."""

    def __init__(self, limit: int, max_body: int) -> None:
        self.limit = limit
        self.count = 0
        self.budget = BodyBudget(limit * max_body)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A metav1.Status body: what the API server shows of a webhook's HTTP error."""
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


Respond = Callable[[Review], Awaitable[dict[str, Any]]]
"""What a webhook answers a decoded review with: the whole AdmissionReview response."""


def _mutating(webhook: str, decide: Callable[[Review], Patch]) -> Respond:
    async def respond(review: Review) -> dict[str, Any]:
        return _decide(webhook, decide, review)

    return respond


def _handler(
    webhook: str, respond: Respond, in_flight: _InFlight, max_body: int
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """An aiohttp handler answering AdmissionReviews with ``respond``, within the bounds."""

    def too_large(size: str) -> web.Response:
        WEBHOOK_REQUESTS.labels(webhook, "too_large").inc()
        message = (
            f"lws-gatekeeper webhook: the AdmissionReview is {size}, "
            f"larger than the {max_body} bytes it reads"
        )
        log.warning("webhook=%s result=too_large error=%r", webhook, message)
        return web.json_response(_status(413, "RequestEntityTooLarge", message), status=413)

    def busy(why: str) -> web.Response:
        WEBHOOK_REQUESTS.labels(webhook, "busy").inc()
        message = f"lws-gatekeeper webhook is busy: {why}; try again"
        log.warning("webhook=%s result=busy %s", webhook, why)
        return web.json_response(
            _status(429, "TooManyRequests", message), status=429, headers={"Retry-After": "1"}
        )

    async def serve(request: web.Request) -> web.Response:
        request_arrived(request)
        if request.content_length is not None and request.content_length > max_body:
            return too_large(f"{request.content_length} bytes")
        try:
            body = await read_body(request, in_flight.budget, max_body)
        except (TooLarge, web.HTTPRequestEntityTooLarge):
            return too_large("longer")
        except OverBudget as exc:
            return busy(f"{exc}, the most it holds at once")
        if body is None:
            log.warning("webhook=%s result=slow_body", webhook)
            WEBHOOK_REQUESTS.labels(webhook, "slow_body").inc()
            message = (
                f"lws-gatekeeper webhook: the AdmissionReview's body did not come within {READ_SECONDS:.0f} s"
            )
            return await close_after(request, web.json_response(_status(408, "Timeout", message), status=408))
        size = len(body)
        try:
            if in_flight.count >= in_flight.limit:
                return busy(f"{in_flight.count} admission reviews in progress, the most it serves at once")
            in_flight.count += 1
            try:
                try:
                    review = parse_review(body)
                except BadReview as exc:
                    WEBHOOK_REQUESTS.labels(webhook, "bad_request").inc()
                    log.warning("webhook=%s result=bad_request error=%r", webhook, str(exc))
                    return web.json_response({"error": str(exc)}, status=400)
                del body
                return web.json_response(await respond(review))
            finally:
                in_flight.count -= 1
        finally:
            in_flight.budget.give(size)

    latency = WEBHOOK_LATENCY.labels(webhook)  # the series exists (empty) before the first review

    async def handle(request: web.Request) -> web.Response:
        start = time.perf_counter()
        try:
            return await serve(request)
        finally:
            latency.observe(time.perf_counter() - start)

    return handle


def _decide(webhook: str, decide: Callable[[Review], Patch], review: Review) -> dict[str, Any]:
    """The AdmissionReview answer, refusing the object when no patch can be made for it."""
    kind, what = _REFUSAL[webhook]
    try:
        patch = decide(review)
    except Refused as exc:
        return verdict(
            webhook, review, f"lws-gatekeeper refuses {kind} {review.where}: {exc}", _counter(webhook)
        )
    except Exception as exc:  # fail closed: the object must not pass unpatched
        code = 400 if isinstance(exc, ValueError) else 500
        message = f"lws-gatekeeper refuses {kind} {review.where}: it cannot be given its {what}: {exc}"
        WEBHOOK_REQUESTS.labels(webhook, "denied").inc()
        log.warning(
            "webhook=%s uid=%s operation=%s object=%s result=denied error=%r",
            webhook,
            review.uid,
            review.operation,
            review.where,
            str(exc),
            exc_info=code == 500,
        )
        return answer(review.uid, denied=message, code=code)
    result = "patched" if patch else "unchanged"
    WEBHOOK_REQUESTS.labels(webhook, result).inc()
    log.log(
        logging.INFO if patch else logging.DEBUG,
        "webhook=%s uid=%s operation=%s object=%s result=%s ops=%s",
        webhook,
        review.uid,
        review.operation,
        review.where,
        result,
        json.dumps(patch, separators=(",", ":")),
    )
    return answer(review.uid, patch)


def _counter(webhook: str) -> Callable[[str], None]:
    return lambda result: WEBHOOK_REQUESTS.labels(webhook, result).inc()


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def make_app(
    *,
    max_body: int = MAX_BODY_BYTES,
    max_concurrent: int = MAX_CONCURRENT_REVIEWS,
    pass_through: PassThrough | None = None,
    pod_patch: PodPatch | None = None,
    lookup: Lookup | None = None,
) -> web.Application:
    """The webhook application (plain HTTP; ``start_webhook_server`` serves it over TLS).

    All webhooks share one bound of ``max_concurrent`` reviews at once. ``pass_through``
    (published by the leader) lets pods of admitted groups be made without the gate.
    ``pod_patch``: what the backend adds to the opted-in pods the pods hook lets be made.
    ``lookup`` reads a StatefulSet for the guard of ``statefulsets/scale`` (``guard``).
    """
    app = web.Application(client_max_size=max_body)
    in_flight = _InFlight(max_concurrent, max_body)
    pods = (
        partial(_pod_patch, pass_through=pass_through)
        if pod_patch is None
        else partial(_backend_pod_patch, pass_through=pass_through, extra=pod_patch)
    )
    routes: list[tuple[str, str, Respond]] = [
        (PODS_PATH, "pods", _mutating("pods", pods)),
        (LWS_PATH, "leaderworkersets", _mutating("leaderworkersets", _lws_patch)),
        (STATEFULSETS_PATH, "statefulsets", statefulset_guard(_counter("statefulsets"))),
        (SCALE_PATH, "statefulsets-scale", scale_guard(lookup, _counter("statefulsets-scale"))),
        (RESIZE_PATH, "pods-resize", resize_guard(_counter("pods-resize"))),
    ]
    for path, webhook, respond in routes:
        app.router.add_post(path, _handler(webhook, respond, in_flight, max_body))
    app.router.add_get("/healthz", _ok)
    app.router.add_get("/readyz", _ok)
    return app


class _ReloadingTLS:
    """A server TLS context whose certificate follows its files on disk.

    The context handed to the server calls back at each handshake (``sni_callback``,
    which OpenSSL runs with or without SNI); at most every ``CERT_CHECK_SECONDS`` the
    callback compares the files' stat with the loaded ones, loads a changed pair into a
    fresh context, and switches the connection to the newest context. A pair that does
    not load (a rotation half written) keeps the previous certificate and is retried.
    """

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self._files = (cert_file, key_file)
        self._stamp = self._stat()
        self.context = self._load()
        self.context.sni_callback = self._on_hello
        self._current = self.context
        self._checked = time.monotonic()

    def _stat(self) -> tuple[tuple[int, int, int], ...]:
        return tuple((s.st_mtime_ns, s.st_size, s.st_ino) for s in map(os.stat, self._files))

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(*self._files)
        return context

    def _on_hello(self, conn: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        self._maybe_reload()
        if self._current is not context:
            conn.context = self._current

    def _maybe_reload(self) -> None:
        if time.monotonic() - self._checked < CERT_CHECK_SECONDS:
            return
        self._checked = time.monotonic()
        try:
            stamp = self._stat()
            if stamp != self._stamp:
                self._current, self._stamp = self._load(), stamp
                log.info("certificate reloaded cert_file=%s", self._files[0])
        except (OSError, ssl.SSLError) as exc:
            log.warning(
                "certificate not reloaded, kept the previous one cert_file=%s error=%r",
                self._files[0],
                str(exc),
            )


async def start_webhook_server(
    host: str,
    port: int,
    cert_file: Path,
    key_file: Path,
    pass_through: PassThrough | None = None,
    *,
    pod_patch: PodPatch | None = None,
    lookup: Lookup | None = None,
) -> web.AppRunner:
    """Serve ``make_app()`` over HTTPS on ``host:port`` (0: any free port); returns the started runner.

    The caller stops it with ``await runner.cleanup()``; ``runner.addresses`` tells the
    bound address.
    """
    tls = _ReloadingTLS(cert_file, key_file)
    runner = DeadlineRunner(
        make_app(pass_through=pass_through, pod_patch=pod_patch, lookup=lookup),
        access_log=None,
        keepalive_timeout=KEEPALIVE_SECONDS,
    )
    await runner.setup()
    try:
        await DeadlineSite(runner, host, port, ssl_context=tls.context).start()
    except BaseException:
        await runner.cleanup()
        raise
    log.info("webhook server started addresses=%s cert_file=%s", runner.addresses, cert_file)
    return runner

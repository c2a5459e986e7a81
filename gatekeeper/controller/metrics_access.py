"""Who may read ``/metrics`` when it is served over HTTPS (``--metrics-secure``).

Why this exists: the metrics say which namespaces wait for which pools and how much each
holds; served in plain HTTP, anyone who reaches the pod's port reads them. With
``--metrics-secure`` each scrape must carry a bearer token: the API server says whose it is
(a TokenReview) and whether that user may ``get`` the non-resource URL ``/metrics`` (a
SubjectAccessReview), as the secure metrics of controller-runtime managers (Kueue's among
them) do; the chart's ``<release>-metrics-reader`` ClusterRole grants the ``get``. The
answers are kept a minute (an allowed token) or ten seconds (a refused one), at most
``REMEMBERED`` tokens, by their SHA-256, so a Prometheus that scrapes every 15 s costs two
reviews a minute, and a flood of made-up tokens costs at most the reviews it forces.

Who calls it: ``controller.app``'s metrics server, on each ``GET /metrics``; ``/healthz``
and ``/readyz`` stay open (the kubelet's probes carry no token). The serving certificate is
made at start, self-signed (``self_signed_context``): a scraper has nothing to verify it
against and skips verification, as Kueue's chart's ServiceMonitor does.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ssl
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gatekeeper.controller import kube as k
from gatekeeper.controller.certs import CertSettings, make_ca, make_serving
from gatekeeper.controller.resources import Resource
from gatekeeper.core.kube.objects import as_map

__all__ = [
    "ALLOWED_SECONDS",
    "DENIED_SECONDS",
    "REMEMBERED",
    "MetricsAccess",
    "Verdict",
    "access_review",
    "bearer",
    "self_signed_context",
    "token_review",
]

TOKEN_REVIEWS = Resource("tokenreviews", "authentication.k8s.io/v1", namespaced=False)
ACCESS_REVIEWS = Resource("subjectaccessreviews", "authorization.k8s.io/v1", namespaced=False)
PATH = "/metrics"
ALLOWED_SECONDS = 60.0
DENIED_SECONDS = 10.0
REMEMBERED = 256
MAX_TOKEN_BYTES = 16 * 1024
"""A longer Authorization header is refused unread (service account tokens are about 1 KiB)."""


@dataclass(frozen=True)
class Verdict:
    """The answer to one scrape: 200, or 401 / 403 / 503 with the reason said to the scraper."""

    status: int
    reason: str = ""


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not header or len(header) > MAX_TOKEN_BYTES:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def token_review(token: str) -> dict[str, Any]:
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}


def access_review(user: Mapping[str, Any]) -> dict[str, Any]:
    """May the user a TokenReview found (``status.user``) get ``/metrics``?"""
    spec: dict[str, Any] = {
        "user": str(user.get("username") or ""),
        "groups": [str(g) for g in user.get("groups") or []],
        "nonResourceAttributes": {"path": PATH, "verb": "get"},
    }
    if user.get("uid"):
        spec["uid"] = str(user["uid"])
    extra = as_map(user.get("extra"))
    if extra:
        spec["extra"] = {str(key): [str(v) for v in values or []] for key, values in extra.items()}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


class MetricsAccess:
    """The verdicts of the scrapes' tokens, asked of the API server and kept a while."""

    def __init__(self, kube: k.Kube, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.clock = clock
        self._known: OrderedDict[str, tuple[float, Verdict]] = OrderedDict()

    async def check(self, header: str | None) -> Verdict:
        token = bearer(header)
        if token is None:
            return Verdict(
                401, "a bearer token is needed: this endpoint serves metrics to a user allowed get /metrics"
            )
        key = hashlib.sha256(token.encode()).hexdigest()
        known = self._known.get(key)
        now = self.clock()
        if known is not None and known[0] > now:
            return known[1]
        try:
            verdict = await self._ask(token)
        except (k.TemporaryError, k.PermanentError, k.Conflict) as exc:
            return Verdict(503, f"the token could not be checked now: {exc}")  # not kept
        keep = ALLOWED_SECONDS if verdict.status == 200 else DENIED_SECONDS
        self._known[key] = (now + keep, verdict)
        self._known.move_to_end(key)
        while len(self._known) > REMEMBERED:
            self._known.popitem(last=False)
        return verdict

    async def _ask(self, token: str) -> Verdict:
        review = await self.kube.create(TOKEN_REVIEWS, {"metadata": {}, **token_review(token)})
        status = as_map(review.get("status"))
        if status.get("authenticated") is not True:
            return Verdict(401, f"the token is not valid: {status.get('error') or 'not authenticated'}")
        user = as_map(status.get("user"))
        answer = await self.kube.create(ACCESS_REVIEWS, {"metadata": {}, **access_review(user)})
        decided = as_map(answer.get("status"))
        if decided.get("allowed") is True:
            return Verdict(200)
        why = decided.get("reason") or decided.get("evaluationError") or "no rule allows it"
        return Verdict(403, f"{user.get('username')!s} may not get {PATH}: {why}")


def self_signed_context(names: Sequence[str], now: dt.datetime | None = None) -> ssl.SSLContext:
    """A server TLS context with a certificate for ``names`` made now, signed by a CA made
    for it and forgotten (nothing can verify it; it only encrypts)."""
    now = now or dt.datetime.now(dt.UTC)
    settings = CertSettings()
    ca, ca_key = make_ca(now, settings)
    cert, key = make_serving(ca, ca_key, list(names), now, settings)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as folder:
        crt, pem = Path(folder) / "tls.crt", Path(folder) / "tls.key"
        crt.write_bytes(cert + ca)
        pem.write_bytes(key)
        pem.chmod(0o600)
        context.load_cert_chain(crt, pem)
    return context

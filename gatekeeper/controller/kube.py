"""The few API calls the controller makes, each counted, each saying whether to retry.

Why this exists: the reconciler's actions come down to a handful of writes (create a
record, write its status, lift a pod's gate, delete a record, write a Pool's status,
post an Event). Keeping them here, over kr8s' ``call_api``, gives one place that
counts requests (the benchmark reports API requests per admitted group) and their
failures (``lws_gatekeeper_api_errors_total``, the dashboard's API errors), and one place that
turns HTTP answers into "done" or one of ``errors``' three answers: already
so or changed (``Conflict``), try again later (``TemporaryError``), or never
(``PermanentError``). The API resources it writes are ``resources``', built from
``core.kube.keys``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
import kr8s.asyncio

from gatekeeper.controller.credentials import Credentials
from gatekeeper.controller.errors import (
    TRANSPORT_ERRORS,
    Conflict,
    NotLeading,
    PermanentError,
    TemporaryError,
    count_failure,
    raise_for_status,
)
from gatekeeper.controller.resources import EVENTS, Resource
from gatekeeper.core.kube.keys import EVENT_REPORTER, EVENT_SOURCE
from gatekeeper.metrics import API_REQUESTS

__all__ = [
    "Conflict",
    "Kube",
    "NotLeading",
    "PermanentError",
    "Resource",
    "TemporaryError",
    "now_rfc3339",
]


def now_rfc3339(micro: bool = False) -> str:
    moment = datetime.now(UTC)
    if micro:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


CALL_TIMEOUT = httpx.Timeout(15.0, connect=5.0)
"""No call waits longer: kr8s sets no timeout of its own, and a request on a black-holed
connection would otherwise hold its pass (or the Lease renewal) for ever."""


def fence_trace(fence: Callable[[], bool], what: str) -> Callable[[str, dict[str, Any]], Awaitable[None]]:
    """An httpcore ``trace`` callback that asks ``fence`` once more right before the request's
    headers, and again before its body, go on the wire; no, and the request is abandoned.

    The check at the top of a call is not enough: between it and the send lie awaits (a
    connection to open, a TLS handshake), and a process paused there (seen: SIGSTOP during
    a burst) sends the write on waking, long past its deadline. (kr8s replaces a call's
    extensions when the kubeconfig names a ``tls-server-name``; then only the first check
    is made.)
    """

    async def trace(event: str, _info: dict[str, Any]) -> None:
        if event.endswith((".send_request_headers.started", ".send_request_body.started")) and not fence():
            raise NotLeading(f"{what}: not sent, this replica is past its renew deadline")

    return trace


class Kube:
    """Thin, counted writes. Reads go through informers, never through here."""

    def __init__(
        self,
        api: kr8s.asyncio.Api,
        credentials: Credentials | None = None,
        *,
        user_agent: str = "",
        fence: Callable[[], bool] | None = None,
    ) -> None:
        self.api = api
        self.credentials = credentials or Credentials(api)
        #: Sent with every call, so an API server's audit log tells the replicas apart
        #: (both use one ServiceAccount): ``lws-gatekeeper/<version> (<identity>)``.
        self.user_agent = user_agent
        #: Asked right before each write is sent; False refuses it (:class:`NotLeading`).
        self.fence = fence

    def fenced(self, fence: Callable[[], bool]) -> Kube:
        """The same client and credentials, every write checked by ``fence`` first: the
        admission loop's writes, fenced by the elector's renew deadline."""
        return Kube(self.api, self.credentials, user_agent=self.user_agent, fence=fence)

    async def close(self) -> None:
        """Close the client's connections (a client replaced by one with rotated credentials)."""
        session = getattr(self.api, "_session", None)
        if session is not None:
            await session.aclose()

    async def _call(
        self,
        verb: str,
        res: Resource,
        url: str,
        *,
        namespace: str | None = None,
        body: object = None,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
        counted_as: str | None = None,
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"timeout": CALL_TIMEOUT}
        if self.fence is not None and verb != "GET":
            # A leader that was paused (SIGSTOP, a VM freeze, a long GC) resumes with writes
            # it decided before: past its renew deadline another replica may lead already.
            if not self.fence():
                raise NotLeading(f"{verb} {res.plural}: not sent, this replica is past its renew deadline")
            kwargs["extensions"] = {"trace": fence_trace(self.fence, f"{verb} {res.plural}")}
        counted = counted_as or verb.lower()
        API_REQUESTS.labels(counted, res.plural).inc()
        headers: dict[str, str] = {"User-Agent": self.user_agent} if self.user_agent else {}
        if params:
            kwargs["params"] = dict(params)
        if body is not None:
            kwargs["content"] = json.dumps(body)
            headers["Content-Type"] = content_type
        if headers:
            kwargs["headers"] = headers
        try:
            async with self.api.call_api(
                verb,
                version=res.version,
                base=res.base,
                namespace=namespace,
                url=url,
                raise_for_status=False,
                **kwargs,
            ) as resp:
                if resp.status_code == 401:
                    await self.credentials.refresh()  # a rotated token; the caller tries again
                raise_for_status(resp)
                return dict(resp.json()) if resp.content else {}
        except NotLeading:
            raise  # not sent: no failure of the API
        except (TemporaryError, PermanentError) as exc:
            count_failure(counted, res.plural, exc)
            raise
        except TRANSPORT_ERRORS as exc:
            count_failure(counted, res.plural, exc)
            raise TemporaryError(f"{verb} {res.plural}: {exc}") from exc

    async def create(self, res: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        ns = obj["metadata"].get("namespace") if res.namespaced else None
        return await self._call("POST", res, res.plural, namespace=ns, body=obj)

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        return await self._call("GET", res, f"{res.plural}/{name}", namespace=namespace)

    async def replace(self, res: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        ns = obj["metadata"].get("namespace") if res.namespaced else None
        return await self._call("PUT", res, f"{res.plural}/{obj['metadata']['name']}", namespace=ns, body=obj)

    async def delete(
        self, res: Resource, name: str, namespace: str | None = None, *, uid: str | None = None
    ) -> None:
        """Delete, if ``uid`` is given only that very object (not one made since under its name:
        StatefulSet pods reuse names). Gone already (404), or another object now (409, the
        precondition): nothing to do. A refusal is raised: an admission policy's (a Conflict,
        decided again next pass) or the gatekeeper's RBAC's (``Forbidden``)."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}} if uid else None
        try:
            await self._call("DELETE", res, f"{res.plural}/{name}", namespace=namespace, body=body)
        except Conflict as exc:
            if exc.code not in (404, 409):
                raise

    async def patch_status(
        self,
        res: Resource,
        name: str,
        namespace: str | None,
        status: Mapping[str, Any],
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """Merge-patch ``status``; with ``resource_version`` it fails (Conflict) if the object changed."""
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        return await self._call(
            "PATCH",
            res,
            f"{res.plural}/{name}/status",
            namespace=namespace,
            body=body,
            content_type="application/merge-patch+json",
        )

    async def merge_patch(
        self, res: Resource, name: str, namespace: str | None, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Merge-patch the object itself (with ``metadata.resourceVersion`` in ``patch`` it
        fails, Conflict, if the object changed)."""
        return await self._call(
            "PATCH",
            res,
            f"{res.plural}/{name}",
            namespace=namespace,
            body=dict(patch),
            content_type="application/merge-patch+json",
        )

    async def apply_status(
        self,
        res: Resource,
        name: str,
        namespace: str | None,
        body: Mapping[str, Any],
        *,
        field_manager: str,
    ) -> dict[str, Any]:
        """Server-side apply ``body`` (a whole object: apiVersion, kind, metadata.name, status)
        to the ``status`` subresource as ``field_manager``, forcing its fields. With
        ``metadata.resourceVersion`` in ``body`` it fails (Conflict) if the object changed."""
        return await self._call(
            "PATCH",
            res,
            f"{res.plural}/{name}/status",
            namespace=namespace,
            body=body,
            content_type="application/apply-patch+yaml",
            params={"fieldManager": field_manager, "force": "true"},
            counted_as="apply",
        )

    async def json_patch(
        self, res: Resource, name: str, namespace: str | None, ops: list[dict[str, Any]]
    ) -> dict[str, Any]:
        return await self._call(
            "PATCH",
            res,
            f"{res.plural}/{name}",
            namespace=namespace,
            body=ops,
            content_type="application/json-patch+json",
        )

    async def event(
        self, about: Mapping[str, Any], *, reason: str, message: str, warning: bool = False
    ) -> None:
        """Post a core/v1 Event about the object ``about`` names (apiVersion, kind, name,
        namespace, uid). Best effort: an event lost is not an error."""
        namespace = str(about.get("namespace") or "default")
        now = now_rfc3339()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{about.get('name')}.", "namespace": namespace},
            "involvedObject": {
                key: about.get(key) for key in ("apiVersion", "kind", "name", "namespace", "uid")
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": EVENT_SOURCE},
            "reportingComponent": EVENT_REPORTER,
            "reportingInstance": EVENT_SOURCE,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        with contextlib.suppress(TemporaryError, PermanentError):  # best effort: an event lost is no error
            await self._call("POST", EVENTS, "events", namespace=namespace, body=body)

"""A member's connection to the hub: its own client, its caches of the hub, its claim writes.

Why this exists: with ``--hub-kubeconfig`` the ``pools`` controller charges Pools with
``spec.reservation`` to Reservations on the hub (``core.backends.pools.hub_member``). The hub is
another API server, reached with this member's own identity there, so it has a client
and informers of its own: the Reservations (their status says who holds what) and this
cluster's claims, in its own namespace there (``lws-gatekeeper-member-<cluster>``: the only
one its RBAC on the hub lets it read or write). They are not among the informers
the member's loop waits for: an unreachable hub must not stop the member's admission
loop (admitted groups and their later pods go on); it only makes groups of reservation
pools wait with ``HubUnreachable``. Made afresh for each term, like the member's caches.

While its term lasts the member renews its heartbeat on the hub, the Lease
``lws-gatekeeper-member-<cluster>`` in that namespace (``core.reservation.heartbeat``):
the hub marks the claims of a member whose heartbeat expired Orphaned. Its writes are
fenced like every other (a replica that may no longer lead does not beat).

A member's credentials on the hub are rotated by rewriting its kubeconfig and the files it
names (a mounted Secret is updated in place): the link looks at them every
``CREDENTIALS_SECONDS`` and, when they changed, connects again with them, so a short-lived
client certificate or token is followed without a restart, and credentials taken away (the
old ones revoked, the new ones refused) take effect at once.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import yaml

from gatekeeper.controller import kube as k
from gatekeeper.controller import resources as r
from gatekeeper.controller.caches import Caches
from gatekeeper.controller.errors import Conflict, NotLeading, PermanentError, TemporaryError
from gatekeeper.controller.informer import Informer
from gatekeeper.controller.loop import Write
from gatekeeper.core.backends.pools.hub_member import ClaimWrites, HubView
from gatekeeper.core.kube.objects import meta
from gatekeeper.core.reservation import (
    CLUSTER_LABEL,
    DEFAULT_LEASE_SECONDS,
    heartbeat_body,
    heartbeat_name,
    member_namespace,
)

__all__ = ["CREDENTIALS_SECONDS", "HubLink", "credentials_of"]

log = logging.getLogger("gatekeeper.hub_link")

WRITE_FAILURE_SECONDS = 30.0
RELIST_SECONDS = 5.0
"""The longest pause between a member's attempts to read the hub again after an error: with
the informers' usual 30 s, a member found the hub back up to 30 s after it returned (60 s
down: its waiting groups admitted 35 s after), two small lists a member being cheap."""


CREDENTIALS_SECONDS = 5.0
"""How often a member looks whether its hub credentials were rotated."""

_FILE_KEYS = ("client-certificate", "client-key", "certificate-authority", "tokenFile")


def credentials_of(kubeconfig: str) -> Callable[[], str]:
    """A digest of ``kubeconfig`` and of the files its users and clusters name (certificates,
    keys, token files): it changes when any of them is rewritten. An unreadable file reads
    as its error, so a file being replaced is looked at again."""
    path = Path(kubeconfig)

    def digest() -> str:
        h = hashlib.sha256()
        try:
            raw = path.read_bytes()
            h.update(raw)
            cfg = yaml.safe_load(raw) or {}
            named = [
                entry.get(part, {}).get(key)
                for part, entries in (
                    ("user", cfg.get("users") or []),
                    ("cluster", cfg.get("clusters") or []),
                )
                for entry in entries
                if isinstance(entry, dict)
                for key in _FILE_KEYS
            ]
            for name in sorted(str(n) for n in named if n):
                h.update((path.parent / name).read_bytes())
        except (OSError, yaml.YAMLError, AttributeError) as exc:
            h.update(f"unreadable: {exc}".encode())
        return h.hexdigest()

    return digest


class HubLink:
    """This member's view of the hub and its writes there, for one term."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[k.Kube]],
        cluster: str,
        *,
        heartbeat_seconds: int = DEFAULT_LEASE_SECONDS,
        holder: str = "",
        credentials: Callable[[], str] | None = None,
    ) -> None:
        self._connect = connect
        self._credentials = credentials
        """A digest of this member's hub credentials (``credentials_of``): followed when set."""
        self.namespace = member_namespace(cluster)
        """This member's namespace on the hub: its claims and its heartbeat Lease."""
        self.heartbeat_seconds = heartbeat_seconds
        self.holder = holder or cluster
        self.kube: k.Kube | None = None
        """The hub's client, once connected (a hub down at start must not stop the member)."""
        self._connect_error = "not connected yet"
        self.cluster = cluster
        self.caches = Caches(None)
        self.reservations = self.caches.informer(r.RESERVATIONS)
        self.claims = self.caches.informer(
            r.CLAIMS, namespace=self.namespace, label_selector=f"{CLUSTER_LABEL}={cluster}"
        )
        for inf in self.informers:
            inf.max_backoff = RELIST_SECONDS
        self.started = time.time()
        self._given_back: set[str] = set()
        """UIDs of claims deleted (or maybe deleted) this term, until the cache shows them gone."""
        self._undeleted: set[str] = set()
        """Those of them whose delete did not say it applied: sent again."""
        self._write_failed: tuple[float, str, float] | None = None
        """(since when, why, last time) claim writes failed for a reason that is not the
        claim's; it counts for WRITE_FAILURE_SECONDS after the last failure, then the
        writes are tried again."""

    @property
    def informers(self) -> list[Informer]:
        return [self.reservations, self.claims]

    def listen(self, poke: Callable[..., None]) -> None:
        """A change on the hub asks the member's loop for a pass."""
        for inf in self.informers:
            inf.listeners.append(poke)

    async def run(self) -> None:
        """Connect (again and again, while the hub cannot be reached), then list and watch."""
        backoff = 1.0
        seen = self._credentials() if self._credentials is not None else ""
        while self.kube is None:
            try:
                self.kube = await self._connect()
            except Exception as exc:  # any failure to reach the hub: the member goes on without it
                self._connect_error = f"cannot connect: {str(exc)[:200] or type(exc).__name__}"
                log.warning("hub: %s; trying again in %.0fs", self._connect_error, backoff)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
                seen = self._credentials() if self._credentials is not None else ""
        self._use(self.kube)
        log.info("hub: connected as member %s", self.cluster)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.caches.run)
            tg.start_soon(self._heartbeat)
            if self._credentials is not None:
                tg.start_soon(self._follow_credentials, seen)

    def _use(self, kube: k.Kube) -> None:
        """Every read and write to the hub from now on with ``kube``'s client."""
        self.kube = kube
        for inf in self.informers:
            inf.api, inf.credentials = kube.api, kube.credentials
        self.caches.api, self.caches.credentials = kube.api, kube.credentials

    async def _follow_credentials(self, seen: str) -> None:
        """Connect again whenever the credentials' files change (rotated, or taken away); the
        watches in flight end with their connection and are made again with the new client."""
        assert self._credentials is not None
        while True:
            await anyio.sleep(CREDENTIALS_SECONDS)
            now = self._credentials()
            if now == seen:
                continue
            try:
                kube = await self._connect()
            except Exception as exc:  # half-written files: looked at again next time
                log.warning("hub: credentials changed but cannot connect with them: %s", str(exc)[:200])
                continue
            seen = now
            old, self.kube = self.kube, kube
            self._use(kube)
            for inf in self.informers:
                inf.restart()
            if old is not None:
                await old.close()
            log.info("hub: credentials changed; connected again as member %s", self.cluster)

    async def _heartbeat(self) -> None:
        """Renew this member's Lease on the hub, four times per its duration."""
        while True:
            try:
                await self.beat()
            except NotLeading:
                pass
            except (TemporaryError, PermanentError) as exc:
                log.warning("hub: cannot renew heartbeat %s: %s", heartbeat_name(self.cluster), exc)
            await anyio.sleep(self.heartbeat_seconds / 4)

    async def beat(self) -> None:
        """One renewal (the Lease is made on the first)."""
        kube = self._client()
        body = heartbeat_body(self.cluster, self.holder, self.heartbeat_seconds, datetime.now(UTC))
        try:
            lease = await kube.get(r.LEASES, body["metadata"]["name"], self.namespace)
        except Conflict:  # not there yet
            await kube.create(r.LEASES, body)
            return
        body["metadata"]["resourceVersion"] = (lease.get("metadata") or {}).get("resourceVersion")
        await kube.replace(r.LEASES, body)

    def view(self) -> HubView:
        """What the member knows of the hub now: reachable only once both caches are listed
        and neither fails (nor the claim writes)."""
        synced = all(inf.synced.is_set() for inf in self.informers)
        failing = [(inf.failing_since, inf.last_error) for inf in self.informers if inf.failing_since]
        if self._write_failed is not None and time.time() - self._write_failed[2] < WRITE_FAILURE_SECONDS:
            failing.append(self._write_failed[:2])
        reachable = synced and not failing
        since, error = self.started, "not read yet"
        if failing:
            since, error = min((f[0] or self.started, f[1]) for f in failing)
        elif self.kube is None:
            error = self._connect_error
        elif not synced:
            error = "its Reservations and claims are not listed yet"
        cached = {str(meta(o).get("uid") or "") for o in self.claims.values()}
        self._given_back &= cached
        self._undeleted &= self._given_back
        return HubView(
            given_back=frozenset(self._given_back),
            undeleted=frozenset(self._undeleted),
            cluster=self.cluster,
            reachable=reachable,
            claims=self.claims.values(),
            reservations={str(meta(o).get("name") or ""): o for o in self.reservations.values()},
            unreachable_since=None if reachable else datetime.fromtimestamp(since, UTC),
            error="" if reachable else error,
        )

    async def execute(self, writes: ClaimWrites, write: Write) -> None:
        """Delete first (a claim given back frees the hub at once), then create."""
        for name, uid in writes.delete:
            await write(self._delete, name, uid)
        for body in writes.create:
            await write(self._create, body)

    def _client(self) -> k.Kube:
        if self.kube is None:  # view() says unreachable until connected: no write is planned
            raise TemporaryError("the hub is not connected yet")
        return self.kube

    async def _delete(self, name: str, uid: str) -> None:
        if uid:
            # Before it is sent: a timeout may still have deleted it, so it is never admitted
            # on; and until an answer says it applied, it is sent again.
            self._given_back.add(uid)
            self._undeleted.add(uid)
        await self._tracked(self._client().delete(r.CLAIMS, name, self.namespace, uid=uid or None))
        self._undeleted.discard(uid)
        log.info("gave claim %s back to the hub", name)

    async def _create(self, body: dict[str, Any]) -> None:
        try:
            await self._tracked(self._client().create(r.CLAIMS, body))
        except Conflict:  # already there: the cache will show it
            return
        log.info("claimed %s on the hub", body["metadata"]["name"])

    async def _tracked(self, call: Any) -> Any:
        try:
            result = await call
        except (Conflict, NotLeading):
            raise
        except TemporaryError as exc:
            now = time.time()
            first = self._write_failed[0] if self._write_failed is not None else now
            self._write_failed = (first, str(exc)[:300], now)
            raise
        self._write_failed = None
        return result

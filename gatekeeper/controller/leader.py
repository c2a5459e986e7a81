"""Leader election on a coordination.k8s.io Lease, so two replicas never admit at once.

Why this exists: the chart runs two replicas for availability. Both serve the webhook
(it is stateless), but only the holder of the Lease runs the admission loop. The
protocol is client-go's: take the Lease when it is free or expired, renew it well
before it expires, and stop leading (cancel the loop) as soon as a renewal fails for
longer than the lease lasts. Every write carries the resourceVersion it read, so two
candidates cannot both believe they won.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any

import anyio

from gatekeeper.controller import kube as k
from gatekeeper.controller import resources as r
from gatekeeper.core.keys import LEASE_API_VERSION

__all__ = ["LeaderElector"]

log = logging.getLogger("gatekeeper.leader")


def _parse(value: object) -> float:
    if isinstance(value, str) and value:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return 0.0


class LeaderElector:
    """Runs ``lead`` while this process holds the Lease ``namespace/name``."""

    def __init__(
        self,
        kube: k.Kube,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: int = 15,
        renew_seconds: float = 5.0,
        retry_seconds: float = 2.0,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.retry_seconds = retry_seconds
        self.leading = False

    def _spec(self, acquire: str | None, transitions: int) -> dict[str, Any]:
        now = k.now_rfc3339(micro=True)
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_seconds,
            "acquireTime": acquire or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when we hold the Lease afterwards."""
        try:
            lease = await self.kube.get(r.LEASES, self.name, self.namespace)
        except k.Conflict:
            body = {
                "apiVersion": LEASE_API_VERSION,
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(None, 0),
            }
            try:
                await self.kube.create(r.LEASES, body)
            except k.Conflict as exc:  # another replica was faster, or the namespace is missing
                log.warning("cannot create the lease %s/%s: %s", self.namespace, self.name, exc)
                return False
            return True
        spec = lease.get("spec", {})
        holder = spec.get("holderIdentity")
        expires = _parse(spec.get("renewTime")) + float(spec.get("leaseDurationSeconds", self.lease_seconds))
        mine = holder == self.identity
        if not mine and holder and time.time() < expires:
            return False
        transitions = int(spec.get("leaseTransitions", 0)) + (0 if mine else 1)
        lease["spec"] = self._spec(spec.get("acquireTime") if mine else None, transitions)
        try:
            await self.kube.replace(r.LEASES, lease)
        except k.Conflict:
            return False
        return True

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Campaign forever; run ``lead`` while leading and cancel it when leadership is lost."""
        while True:
            while not await self._attempt():
                await anyio.sleep(self.retry_seconds)
            log.info("became leader (%s holds %s/%s)", self.identity, self.namespace, self.name)
            self.leading = True
            async with anyio.create_task_group() as tg:
                tg.start_soon(lead)
                last_renew = time.monotonic()
                while True:
                    await anyio.sleep(self.renew_seconds)
                    if await self._attempt():
                        last_renew = time.monotonic()
                    elif time.monotonic() - last_renew > self.lease_seconds - self.renew_seconds:
                        log.warning(
                            "lost the lease %s/%s; stopping the admission loop", self.namespace, self.name
                        )
                        tg.cancel_scope.cancel()
                        break
            self.leading = False

    async def _attempt(self) -> bool:
        try:
            return await self.try_acquire_or_renew()
        except k.TemporaryError as exc:
            log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return False

    async def release(self) -> None:
        """Give the Lease up on a clean shutdown so another replica takes over at once."""
        if not self.leading:
            return
        try:
            lease = await self.kube.get(r.LEASES, self.name, self.namespace)
            if lease.get("spec", {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["leaseDurationSeconds"] = 1
                await self.kube.replace(r.LEASES, lease)
        except (k.TemporaryError, k.PermanentError) as exc:  # best effort
            log.info("could not release the lease: %s", exc)

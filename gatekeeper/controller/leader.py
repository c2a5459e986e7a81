"""Leader election on a coordination.k8s.io Lease, so two replicas never admit at once.

Why this exists: the chart runs two replicas for availability. Both serve the webhook
(it is stateless), but only the holder of the Lease runs the admission loop. The
protocol is client-go's ``tools/leaderelection``, clocks included:

* A challenger never compares the holder's ``renewTime`` with its own wall clock (two
  nodes' clocks differ). It notes when *it* last saw the Lease record change, by its own
  monotonic clock, and takes the Lease only once the record has stood still for
  ``leaseDurationSeconds`` of that clock.
* The leader renews every ``retry_seconds``; each attempt is cut off at the renew deadline,
  so a call that hangs (a black-holed connection) cannot keep it from checking. If it has
  not renewed for ``renew_deadline`` seconds (less than the lease, by its own monotonic
  clock), it stops leading at once: the admission loop is cancelled, writes in flight
  included, before any challenger can see the Lease expire. And each write of the loop
  asks :meth:`LeaderElector.may_write` right before it is sent, so a process that was
  paused past its deadline sends none of the writes it had decided before the pause.
* Every write carries the resourceVersion it read, so two candidates cannot both believe
  they won.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from gatekeeper.controller import kube as k
from gatekeeper.controller import resources as r
from gatekeeper.core.kube.keys import LEASE_API_VERSION

__all__ = ["LeaderElector"]

log = logging.getLogger("gatekeeper.leader")


class LeaderElector:
    """Runs ``lead`` while this process holds the Lease ``namespace/name``."""

    def __init__(
        self,
        kube: k.Kube,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: float = 15.0,
        renew_deadline: float = 10.0,
        retry_seconds: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not retry_seconds < renew_deadline < lease_seconds:
            raise ValueError("leader election needs retry_seconds < renew_deadline < lease_seconds")
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.renew_deadline = renew_deadline
        self.retry_seconds = retry_seconds
        self.clock = clock
        self.leading = False
        self._renewed = float("-inf")
        """When this process last renewed (or took) the Lease, by its monotonic clock."""
        self._observed: tuple[str, float] = ("", float("-inf"))
        """(the Lease record as last seen, when this process saw it change)."""

    def _spec(self, acquire: str | None, transitions: int) -> dict[str, Any]:
        now = k.now_rfc3339(micro=True)
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_seconds),
            "acquireTime": acquire or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def _expired(self, spec: dict[str, Any]) -> bool:
        """Has the record stood still for its lease duration, by this process's own clock?"""
        record = repr(sorted(spec.items()))
        now = self.clock()
        if record != self._observed[0]:
            self._observed = (record, now)
        duration = spec.get("leaseDurationSeconds")
        duration = (
            float(duration) if isinstance(duration, int | float) and duration > 0 else self.lease_seconds
        )
        return now - self._observed[1] >= duration

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
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        mine = holder == self.identity
        if not mine and holder and not self._expired(spec):
            return False
        transitions = int(spec.get("leaseTransitions", 0) or 0) + (0 if mine else 1)
        lease["spec"] = self._spec(spec.get("acquireTime") if mine else None, transitions)
        try:
            await self.kube.replace(r.LEASES, lease)
        except k.Conflict:
            return False
        return True

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Campaign forever; run ``lead`` while leading and cancel it when leadership is lost."""
        while True:
            while not await self._attempt(self.renew_deadline):
                await anyio.sleep(self.retry_seconds)
            self._renewed = renewed = self.clock()
            log.info("became leader (%s holds %s/%s)", self.identity, self.namespace, self.name)
            self.leading = True
            async with anyio.create_task_group() as tg:
                tg.start_soon(lead)
                while True:
                    await anyio.sleep(self.retry_seconds)
                    left = self.renew_deadline - (self.clock() - renewed)
                    if left > 0 and await self._attempt(left):
                        self._renewed = renewed = self.clock()
                    elif self.clock() - renewed >= self.renew_deadline:
                        log.warning(
                            "could not renew the lease %s/%s for %.0fs; stopping the admission loop",
                            self.namespace,
                            self.name,
                            self.clock() - renewed,
                        )
                        tg.cancel_scope.cancel()
                        break
            self.leading = False

    def may_write(self) -> bool:
        """May the admission loop send a write now? Only while this process leads and has
        renewed within the renew deadline by its own monotonic clock: the fence on every
        write of the loop (``Kube.fenced``). The loop itself is cancelled at the deadline,
        but a process paused past it (SIGSTOP, a frozen VM) resumes with writes already
        decided; this check, right before each is sent, refuses them."""
        return self.leading and self.clock() - self._renewed < self.renew_deadline

    async def _attempt(self, within: float) -> bool:
        """One attempt, cut off after ``within`` seconds (a hung call counts as a failure)."""
        with anyio.move_on_after(within):
            try:
                return await self.try_acquire_or_renew()
            except k.TemporaryError as exc:
                log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
                return False
        log.warning("lease %s/%s: no answer within %.1fs", self.namespace, self.name, within)
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
